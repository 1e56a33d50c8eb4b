"""Lab 20: decode_attention. Decode attention at memory speed in Triton: one query per sequence
and head against a paged KV cache, split along the sequence (flash-decoding) so that a batch of
long sequences fills every SM, with the chunks' partial outputs combined by their log-sum-exps.

The contract, the inputs, the bytes and the float64 reference are the paged-attention lab's
(Lab 16): the same pages, block table and grouped query heads, now in Triton and at the bandwidth
the cache allows. A "full" case has every sequence at T tokens (paged_attention.seq_lengths)."""
from __future__ import annotations

from ..spec import TRITON_ONLY, Exercise, Lab, Out, Speed
from . import paged_attention as paged

BLOCK = paged.BLOCK  # tokens per page

# The timed size: 64 sequences that have all reached 4096 tokens, 32 query heads sharing 8
# key/value heads of 128 values (Llama 2 70B's head shapes): 1 GiB of keys and values per call.
TIMED = {"B": 64, "T": 4096, "H": 32, "KV": 8, "D": 128, "full": True}


def cases(sim: bool) -> list[dict]:
    """(B, T, H, KV, D): groups of 1 to 8 query heads, head sizes that are not powers of two,
    lengths at a page's edges, one long sequence (the case split-K is for), many short ones."""
    if sim:  # Triton's interpreter: a few small programs
        shapes = [(1, 1, 1, 1, 1), (6, 33, 2, 1, 3), (3, 40, 4, 2, 8), (2, 20, 4, 1, 128), (1, 70, 8, 1, 16),
                  (7, 17, 1, 1, 5)]
        full = [(2, 48, 4, 2, 16)]
    else:
        shapes = [(1, 1, 1, 1, 1), (6, 33, 2, 1, 3), (3, 40, 4, 2, 8), (2, 20, 4, 1, 128), (1, 70, 8, 1, 16),
                  (7, 17, 1, 1, 5), (1, 32771, 32, 8, 128), (257, 100, 8, 8, 64), (33, 1000, 12, 4, 33),
                  (64, 513, 32, 32, 128), (5, 2049, 40, 5, 128), (1025, 31, 2, 2, 100), (128, 4096, 32, 8, 128)]
        full = [(2, 48, 4, 2, 16), (4, 8192, 64, 8, 128), (64, 4096, 32, 8, 128)]
    out = [{"B": b, "T": t, "H": h, "KV": kv, "D": d} for b, t, h, kv, d in shapes]
    return out + [{"B": b, "T": t, "H": h, "KV": kv, "D": d, "full": True} for b, t, h, kv, d in full]


def _base(q, k_pages, v_pages, block_table, lengths, out):
    from course.decode_attention import decode_attention

    decode_attention(q, k_pages, v_pages, lengths, out, block_table=block_table)


# float32 sums of float16 data against float64: the weights enter the weighted sum of values in
# float16 (tl.dot's inputs), a relative rounding of 2^-11 each, so an output is off by up to
# ~5e-4 of the values' scale. 1e-3 of the largest output plus 1e-3 relative leaves room for that;
# a softmax that skips the maximum overflows (inf or nan) and one that keeps the scores in float16
# misses by far more.
TOLERANCE = {"float32": (1e-3, 1e-3)}

LAB = Lab(
    name="decode_attention",
    title="Lab 20: decode attention at memory speed",
    setup="import math\nimport torch\nimport triton\nimport triton.language as tl\n",
    memory_limit_gb=32.0,  # the timed case's pool (1.25 GiB) with its copies and references
    exercises=(
        Exercise(
            name="paged_decode",
            title="Split-K decode attention through the block table (Triton)",
            backend="triton",
            args=("q", "k_pages", "v_pages", "block_table", "lengths", "out"),
            inputs=paged._attention_inputs,
            outputs={"out": Out(lambda p: (p["B"], p["H"], p["D"]), "float32")},
            reference=paged._attention_ref,
            cases=cases,
            timing_case=TIMED,
            baseline=_base,
            baseline_name="reference kernel (split-K over chunks of the sequence, tiles of 64 tokens, "
                          "log-sum-exp combine)",
            bytes_moved=paged._attention_bytes,
            flops=lambda p: 4 * paged.total_tokens(p) * p["H"] * p["D"],
            points=3,
            # The solution is the reference's design, about 1.0x; full points from 0.8x leave room
            # for noise.
            speed=Speed(3, full_at=0.8, zero_at=0.3),
            forbidden=TRITON_ONLY,
            tolerance=TOLERANCE,
        ),
    ),
)
