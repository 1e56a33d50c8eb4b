"""Lab 16: paged_attention. A KV cache kept in pages (blocks) of BLOCK tokens, each sequence's
pages named in order by its row of a block table: write one new token per sequence through
the table, decode attention (one query per sequence, grouped key/value heads) read straight
from the pages, and the page copies that copy-on-write asks for."""
from __future__ import annotations

import math

import numpy as np

from . import _decode_numba as decode_numba
from ..spec import NO_HOST_MATH, Exercise, Lab, Out, Speed, standard_normal

BLOCK = 16     # tokens per page (vLLM's default block size)


def blocks_for(tokens: int) -> int:
    return -(-tokens // BLOCK)


# --------------------------------------------------------------------------- data
def half(rng: np.random.Generator, shape, offset=None, scale=None) -> np.ndarray:
    """float16 data with a random offset and scale, made in float32 (large pools stay fast)."""
    offset = rng.uniform(-4.0, 4.0) if offset is None else offset
    scale = 10.0 ** rng.uniform(-1.0, 1.5) if scale is None else scale
    x = standard_normal(rng, shape)
    x *= scale
    x += offset
    return x.astype(np.float16)


def seq_lengths(p) -> np.ndarray:
    """The case's lengths (at least 1), sorted: the awkward ones around a page's edge
    (1, BLOCK - 1, BLOCK, BLOCK + 1, 2 BLOCK + 1) that fit under T, then T itself, the rest
    spread evenly from 1 to T; every sequence at T where the case says "full". A fixed
    multiset, so the bytes a case moves follow from p."""
    b, t = p["B"], p["T"]
    if b == 1 or p.get("full"):
        return np.full(b, t, dtype=np.int64)
    awkward = [n for n in (1, BLOCK - 1, BLOCK, BLOCK + 1, 2 * BLOCK + 1) if n < t][: b - 1] + [t]
    rest = b - len(awkward)
    spread = 1 + np.arange(rest, dtype=np.int64) * (t - 1) // max(rest, 1)
    return np.sort(np.concatenate([np.array(awkward, dtype=np.int64), spread]))


def total_tokens(p) -> int:
    return int(seq_lengths(p).sum())


def table_width(p) -> int:
    """Columns of the block table: enough for T tokens, plus one column of -1 that a kernel
    must never follow."""
    return blocks_for(p["T"]) + 1


def num_blocks(p) -> int:
    """The pool: every sequence's pages plus a quarter more free ones (and one spare)."""
    used = int(sum(blocks_for(int(n)) for n in seq_lengths(p)))
    return used + used // 4 + 1


def table_inputs(p, rng):
    """lengths (int32, shuffled order) and block_table (int32, -1 past each sequence's last
    page): every page used once, drawn at random from the whole pool."""
    lengths = rng.permutation(seq_lengths(p)).astype(np.int32)
    pages = rng.permutation(num_blocks(p)).astype(np.int32)
    table = np.full((p["B"], table_width(p)), -1, dtype=np.int32)
    used = 0
    for b, n in enumerate(lengths):
        k = blocks_for(int(n))
        table[b, :k] = pages[used:used + k]
        used += k
    return lengths, table


def pages_shape(p):
    return (num_blocks(p), BLOCK, p["KV"], p["D"])


# --------------------------------------------------------------------------- cases
def append_cases(sim: bool) -> list[dict]:
    """(B sequences, T longest length, KV heads, D): one value; lengths at a page's edges."""
    if sim:
        shapes = [(1, 1, 1, 1), (6, 33, 3, 5), (9, 17, 2, 33), (40, 20, 1, 2), (3, 48, 8, 128)]
    else:
        shapes = [(1, 1, 1, 1), (6, 33, 3, 5), (9, 17, 2, 33), (40, 20, 1, 2), (3, 48, 8, 128),
                  (1025, 100, 8, 128), (4097, 40, 1, 3), (33, 4096, 32, 128), (1, 2049, 8, 64),
                  (257, 17, 5, 100)]
    return [{"B": b, "T": t, "KV": kv, "D": d} for b, t, kv, d in shapes]


def attention_cases(sim: bool) -> list[dict]:
    """(B, T, H query heads, KV heads, D): groups of 1 to 8 heads, D odd or small, a page's
    edges, one sequence, many."""
    if sim:  # the simulator runs ~10^4 threads per second: few blocks of 128 threads
        shapes = [(1, 1, 1, 1, 1), (6, 33, 2, 1, 3), (3, 40, 4, 2, 8), (2, 20, 4, 1, 128),
                  (1, 70, 8, 1, 16), (7, 17, 1, 1, 5)]
    else:
        shapes = [(1, 1, 1, 1, 1), (6, 33, 2, 1, 3), (3, 40, 4, 2, 8), (2, 20, 4, 1, 128),
                  (1, 70, 8, 1, 16), (7, 17, 1, 1, 5), (1, 4099, 32, 8, 128), (257, 100, 8, 8, 64),
                  (33, 1000, 12, 4, 33), (64, 513, 32, 32, 128), (5, 2049, 40, 5, 128),
                  (1025, 31, 2, 2, 100)]
    return [{"B": b, "T": t, "H": h, "KV": kv, "D": d} for b, t, h, kv, d in shapes]


def copy_cases(sim: bool) -> list[dict]:
    """(N copies, KV, D): one copy of one value, pages whose size is odd, many copies."""
    if sim:
        shapes = [(1, 1, 1), (3, 3, 5), (17, 2, 8), (2, 8, 128)]
    else:
        shapes = [(1, 1, 1), (3, 3, 5), (17, 2, 8), (2, 8, 128), (1025, 8, 128), (4097, 1, 3),
                  (100, 32, 128), (31, 5, 33)]
    return [{"N": n, "KV": kv, "D": d} for n, kv, d in shapes]


# The timed size: 128 sequences of 1 to 4096 tokens (about 262,000 in all), 32 query heads
# sharing 8 key/value heads of 128 values (grouped-query attention with Llama 2 70B's head
# shapes, llm.LLAMA2_70B): one layer's keys and values are 4 KiB per token, 1 GiB in all.
TIMED = {"B": 128, "T": 4096, "H": 32, "KV": 8, "D": 128}


# --------------------------------------------------------------------------- inputs
def _append_inputs(p, rng):
    lengths, table = table_inputs(p, rng)
    shape = (p["B"], p["KV"], p["D"])
    return {"k_new": half(rng, shape), "v_new": half(rng, shape), "block_table": table,
            "positions": (lengths - 1).astype(np.int32),  # the new token is the last one
            "k_pages_in": half(rng, pages_shape(p)), "v_pages_in": half(rng, pages_shape(p))}


def _attention_inputs(p, rng):
    """Queries and keys with offsets of one sign: scores average sqrt(D) * mq * mk, 89 to 139
    when D = 128, so a softmax that does not subtract the maximum overflows float32's exp (at
    88.7) and fails. Softmax does not change when every score moves by the same amount."""
    lengths, table = table_inputs(p, rng)
    mq, mk = rng.choice([-1.0, 1.0]) * rng.uniform(2.8, 3.5, size=2)
    sq, sk = rng.uniform(0.5, 2.0, size=2)
    return {"q": half(rng, (p["B"], p["H"], p["D"]), offset=mq, scale=sq),
            "k_pages": half(rng, pages_shape(p), offset=mk, scale=sk),
            "v_pages": half(rng, pages_shape(p)),
            "block_table": table, "lengths": lengths}


def _copy_pool(p):
    return (2 * p["N"] + 3, BLOCK, p["KV"], p["D"])


def _copy_inputs(p, rng):
    """N distinct destinations, none of them a source (fresh pages, as copy-on-write takes);
    sources may repeat (two sequences forked from one can both write)."""
    pool = rng.permutation(_copy_pool(p)[0]).astype(np.int32)
    dst = pool[:p["N"]]
    sources = pool[p["N"]:]
    src = sources[rng.integers(0, min(len(sources), max(p["N"] // 2, 1)), size=p["N"])].astype(np.int32)
    return {"src_blocks": src, "dst_blocks": dst.copy(),
            "k_pages_in": half(rng, _copy_pool(p)), "v_pages_in": half(rng, _copy_pool(p))}


# --------------------------------------------------------------------------- references (host)
def _append_ref(k_new, v_new, block_table, positions, k_pages_in, v_pages_in):
    k, v = k_pages_in.copy(), v_pages_in.copy()
    for b, pos in enumerate(positions):
        page = block_table[b, pos // BLOCK]
        k[page, pos % BLOCK] = k_new[b]
        v[page, pos % BLOCK] = v_new[b]
    return {"k_pages": k, "v_pages": v}


def dense_attention(q, keys, values):
    """float64 attention of one query per head over n tokens: q (H, D), keys and values
    (n, KV, D), the H heads in KV groups of H / KV consecutive heads."""
    h, d = q.shape
    kv = keys.shape[1]
    qg = q.astype(np.float64).reshape(kv, h // kv, d)
    s = np.einsum("kgd,tkd->kgt", qg, keys.astype(np.float64)) / math.sqrt(d)
    s -= s.max(axis=-1, keepdims=True)
    w = np.exp(s)
    w /= w.sum(axis=-1, keepdims=True)
    return np.einsum("kgt,tkd->kgd", w, values.astype(np.float64)).reshape(h, d)


def _attention_ref(q, k_pages, v_pages, block_table, lengths):
    out = np.zeros(q.shape)
    for b, n in enumerate(lengths):
        pages = block_table[b, :blocks_for(int(n))]
        keys = k_pages[pages].reshape((-1,) + k_pages.shape[2:])[:n]
        values = v_pages[pages].reshape((-1,) + v_pages.shape[2:])[:n]
        out[b] = dense_attention(q[b], keys, values)
    return {"out": out}


def _copy_ref(src_blocks, dst_blocks, k_pages_in, v_pages_in):
    k, v = k_pages_in.copy(), v_pages_in.copy()
    k[dst_blocks] = k_pages_in[src_blocks]
    v[dst_blocks] = v_pages_in[src_blocks]
    return {"k_pages": k, "v_pages": v}


# --------------------------------------------------------------------------- baseline
def _base_attention(q, k_pages, v_pages, block_table, lengths, out):
    decode_numba.paged_decode(q, k_pages, v_pages, block_table, lengths, out)


def _attention_bytes(p):
    return (total_tokens(p) * 2 * 2 * p["KV"] * p["D"]   # keys and values of the real tokens
            + p["B"] * p["H"] * p["D"] * (2 + 4)           # queries read, outputs written
            + 4 * p["B"] * (table_width(p) + 1))           # the table and the lengths


# float32 sums and exps of float16 data, against float64. Scores reach about 150 (see
# _attention_inputs), so float32's rounding of a score (~1e-5) moves a weight by ~1e-5 of
# itself: about 10x under this tolerance in the simulator's cases, while an accumulator kept
# in float16 misses it by ~10x.
ATTENTION_TOLERANCE = {"float32": (2e-4, 2e-4)}


# --------------------------------------------------------------------------- the lab
LAB = Lab(
    name="paged_attention",
    title="Lab 16: paged attention",
    setup="import math\nimport numpy as np\nfrom numba import cuda, float32\n",
    memory_limit_gb=32.0,  # the timed case's pool (1 GiB) with its copies and references
    exercises=(
        Exercise(
            name="paged_append",
            title="Write each sequence's new token into its page (Numba)",
            backend="numba",
            args=("k_new", "v_new", "block_table", "positions", "k_pages", "v_pages"),
            inputs=_append_inputs,
            outputs={"k_pages": Out(pages_shape, "float16", init="k_pages_in"),
                     "v_pages": Out(pages_shape, "float16", init="v_pages_in")},
            reference=_append_ref,
            cases=append_cases,
            points=2,
            forbidden=NO_HOST_MATH,
        ),
        Exercise(
            name="paged_attention",
            title="Decode attention through the block table (Numba)",
            backend="numba",
            args=("q", "k_pages", "v_pages", "block_table", "lengths", "out"),
            inputs=_attention_inputs,
            outputs={"out": Out(lambda p: (p["B"], p["H"], p["D"]), "float32")},
            reference=_attention_ref,
            cases=attention_cases,
            timing_case=TIMED,
            baseline=_base_attention,
            baseline_name=decode_numba.design("one KV head of one sequence"),
            bytes_moved=_attention_bytes,
            flops=lambda p: 4 * total_tokens(p) * p["H"] * p["D"],
            points=3,
            # The solution is the reference's design, so about 1.0x; full points from 0.75x
            # leave room for noise between the two timings.
            speed=Speed(3, full_at=0.75, zero_at=0.3),
            forbidden=NO_HOST_MATH,
            tolerance=ATTENTION_TOLERANCE,
        ),
        Exercise(
            name="copy_blocks",
            title="Copy pages for copy-on-write (Numba)",
            backend="numba",
            args=("src_blocks", "dst_blocks", "k_pages", "v_pages"),
            inputs=_copy_inputs,
            outputs={"k_pages": Out(_copy_pool, "float16", init="k_pages_in"),
                     "v_pages": Out(_copy_pool, "float16", init="v_pages_in")},
            reference=_copy_ref,
            cases=copy_cases,
            points=1,
            forbidden=NO_HOST_MATH,
        ),
    ),
)
