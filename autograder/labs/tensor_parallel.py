"""Lab 15: tensor_parallel. The layers of course.llm split over K simulated ranks on one
device: a column-parallel and a row-parallel linear layer, the SwiGLU feed-forward block
(gate and up by columns, down by rows) and causal grouped-query attention (query heads and
their key/value heads by rank, the output projection by rows). Every exercise writes what
each rank holds before the all-reduce, so the split itself is graded. Torch tensors, float32.
"""
from __future__ import annotations

import math

import numpy as np

from ..spec import Exercise, Lab, Out, Speed, standard_normal, uniform

# No real collectives: the ranks are simulated, and their sum is what an all-reduce would do.
NO_COLLECTIVES = ("torch.distributed.*",)


# --------------------------------------------------------------------------- data
def weight(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """An nn.Linear weight (out_features, in_features) drawn as course.llm draws them: normal
    with standard deviation 1/sqrt(fan-in), so activations stay of order one."""
    w = standard_normal(rng, (rows, cols))
    w *= np.float32(1.0 / math.sqrt(cols))
    return w


def normal(rng: np.random.Generator, shape) -> np.ndarray:
    return standard_normal(rng, shape)


# --------------------------------------------------------------------------- cases
def linear_cases(dim_split: str):
    """(B tokens, Din, Dout, K ranks); the dimension named by dim_split is divisible by K,
    the other one is not (awkward)."""
    def cases(sim: bool) -> list[dict]:
        # (B, split dimension, other dimension, K)
        shapes = [(1, 1, 1, 1), (3, 6, 5, 2), (7, 12, 33, 4), (5, 27, 31, 3), (33, 96, 129, 3),
                  (64, 256, 100, 4)]
        if not sim:
            shapes += [(1025, 4096, 1000, 2), (4097, 1536, 769, 3), (1, 11008, 4096, 4)]
        out = []
        for b, split, other, k in shapes:
            din, dout = (other, split) if dim_split == "out" else (split, other)
            out.append({"B": b, "Din": din, "Dout": dout, "K": k})
        return out
    return cases


def mlp_cases(sim: bool) -> list[dict]:
    """(B tokens, D model width, F hidden width divisible by K, K)."""
    shapes = [(1, 1, 1, 1), (3, 8, 6, 2), (5, 33, 12, 4), (9, 31, 27, 3), (17, 64, 176, 4),
              (40, 256, 704, 2)]  # the last: llm.TINY's widths
    if not sim:
        shapes += [(1025, 1024, 2816, 4), (300, 768, 2049 * 3, 3), (512, 4096, 11008, 2)]
    return [{"B": b, "D": d, "F": f, "K": k} for b, d, f, k in shapes]


def attention_cases(sim: bool) -> list[dict]:
    """(B, S, D, H query heads, KVH key/value heads, K): H and KVH divisible by K, head sizes
    from 4 to 128, groups of 1 to 4 query heads per key/value head, one token to 2049."""
    shapes = [(1, 1, 4, 1, 1, 1), (2, 5, 16, 4, 2, 2), (3, 7, 24, 6, 3, 3), (2, 33, 64, 8, 4, 4),
              (1, 17, 48, 4, 4, 2), (2, 64, 128, 8, 2, 2), (1, 40, 256, 8, 4, 4)]
    if not sim:
        shapes += [(2, 257, 1024, 16, 4, 4), (1, 1000, 768, 12, 6, 3), (4, 129, 4096, 32, 8, 2),
                   (1, 2049, 4096, 32, 32, 4)]
    return [{"B": b, "S": s, "D": d, "H": h, "KVH": kvh, "K": k} for b, s, d, h, kvh, k in shapes]


# The timed size: one attention layer of Llama 2 7B (llm.LLAMA2_7B: d_model 4096, 32 heads,
# no grouping) at TP = 2, on a prefill of 2 prompts of 2048 tokens. The four weights take
# 256 MiB in float32, the output (K, B, S, D) 128 MiB: far beyond the 60 MiB L2.
TIMED_ATTENTION = {"B": 2, "S": 2048, "D": 4096, "H": 32, "KVH": 32, "K": 2}


# --------------------------------------------------------------------------- inputs
def _linear_inputs(p, rng):
    # x with a random offset and scale (spec.uniform), so sums of many same-signed products
    # are tested too, not only the near-zero sums of centred data.
    return {"x": uniform(rng, (p["B"], p["Din"])), "w": weight(rng, p["Dout"], p["Din"]), "K": p["K"]}


def _mlp_inputs(p, rng):
    return {"x": uniform(rng, (p["B"], p["D"])), "w_gate": weight(rng, p["F"], p["D"]),
            "w_up": weight(rng, p["F"], p["D"]), "w_down": weight(rng, p["D"], p["F"]), "K": p["K"]}


def _attention_inputs(p, rng):
    d, kv = p["D"], p["KVH"] * (p["D"] // p["H"])
    # Centred x and 1/sqrt(fan-in) weights: queries and keys of order one, scores q.k/sqrt(hd)
    # of order one, so the softmax is neither flat nor one-hot.
    wq, wk = weight(rng, d, d), weight(rng, kv, d)
    return {"x": normal(rng, (p["B"], p["S"], d)), "wq": wq, "wk": wk, "wv": weight(rng, kv, d),
            "wo": weight(rng, d, d), "n_heads": p["H"], "n_kv_heads": p["KVH"], "K": p["K"]}


# --------------------------------------------------------------------------- references (host, float64)
def _column_ref(x, w, K):
    n = w.shape[0] // K
    return {"out": np.stack([x @ w[r * n:(r + 1) * n].T for r in range(K)])}


def _row_ref(x, w, K):
    n = w.shape[1] // K
    return {"out": np.stack([x[:, r * n:(r + 1) * n] @ w[:, r * n:(r + 1) * n].T for r in range(K)])}


def _silu(z):
    return z / (1.0 + np.exp(-z))


def _mlp_ref(x, w_gate, w_up, w_down, K):
    n = w_gate.shape[0] // K
    parts = []
    for r in range(K):
        rows = slice(r * n, (r + 1) * n)
        h = _silu(x @ w_gate[rows].T) * (x @ w_up[rows].T)
        parts.append(h @ w_down[:, rows].T)
    return {"out": np.stack(parts)}


def _attention_ref(x, wq, wk, wv, wo, n_heads, n_kv_heads, K):
    b_len, s_len, d = x.shape
    hd = d // n_heads
    group = n_heads // n_kv_heads
    hq, hkv = n_heads // K, n_kv_heads // K
    causal = np.tril(np.ones((s_len, s_len), dtype=bool))
    out = np.empty((K, b_len, s_len, d))
    for r in range(K):
        q_cols = slice(r * hq * hd, (r + 1) * hq * hd)
        kv_rows = slice(r * hkv * hd, (r + 1) * hkv * hd)
        for b in range(b_len):  # one sequence at a time: a (S, S) score matrix per head
            q = (x[b] @ wq[q_cols].T).reshape(s_len, hq, hd)
            k = (x[b] @ wk[kv_rows].T).reshape(s_len, hkv, hd)
            v = (x[b] @ wv[kv_rows].T).reshape(s_len, hkv, hd)
            a = np.empty((s_len, hq, hd))
            for h in range(hq):
                j = h // group  # this rank's key/value head for its query head h
                scores = q[:, h] @ k[:, j].T / math.sqrt(hd)
                scores = np.where(causal, scores, -np.inf)
                scores -= scores.max(axis=1, keepdims=True)
                e = np.exp(scores)
                a[:, h] = (e / e.sum(axis=1, keepdims=True)) @ v[:, j]
            out[r, b] = a.reshape(s_len, hq * hd) @ wo[:, q_cols].T
    return {"out": out}


# --------------------------------------------------------------------------- baseline (torch, on the device)
def _base_attention(x, wq, wk, wv, wo, n_heads, n_kv_heads, out):
    """One rank after another, as a straightforward answer would: slices of the weights
    (views), three projections, scaled_dot_product_attention with the causal flag (a fused
    kernel: no S x S matrix in memory), and the rank's slice of the output projection."""
    import torch
    import torch.nn.functional as F

    K = out.shape[0]
    b_len, s_len, d = x.shape
    hd = d // n_heads
    hq, hkv = n_heads // K, n_kv_heads // K
    for r in range(K):
        q_cols = slice(r * hq * hd, (r + 1) * hq * hd)
        kv_rows = slice(r * hkv * hd, (r + 1) * hkv * hd)
        q = (x @ wq[q_cols].T).view(b_len, s_len, hq, hd).transpose(1, 2)
        k = (x @ wk[kv_rows].T).view(b_len, s_len, hkv, hd).transpose(1, 2)
        v = (x @ wv[kv_rows].T).view(b_len, s_len, hkv, hd).transpose(1, 2)
        if hq > hkv:
            k = k.repeat_interleave(hq // hkv, dim=1)
            v = v.repeat_interleave(hq // hkv, dim=1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        torch.matmul(a.transpose(1, 2).reshape(b_len, s_len, hq * hd), wo[:, q_cols].T, out=out[r])


def _attention_flops(p):
    t, d, h = p["B"] * p["S"], p["D"], p["H"]
    kv = p["KVH"] * (d // h)
    projections = 2 * t * d * (2 * d + 2 * kv)
    scores = 2 * 2 * p["B"] * h * (d // h) * p["S"] * (p["S"] + 1) // 2  # Q.K and P.V, causal half
    return projections + scores


# Tolerances, as (rtol, atol), atol relative to the case's largest |value|. Measured with
# float32 torch on the CPU against the float64 reference (20 seeds of every simulator case,
# 2 of every GPU case): the worst error of any element was 1.1e-6 of the case's largest
# value, under 1/10 of these (linear layers and the feed-forward block: sums of up to 11,008
# products; attention: the softmax of scores of order one). A TF32 or bfloat16 product
# (10 or 8 bits of mantissa) misses them by far.
LINEAR_TOLERANCE = {"float32": (2e-5, 2e-5)}
ATTENTION_TOLERANCE = {"float32": (2e-5, 2e-5)}


def _k_shape(last: str):
    return lambda p: (p["K"], p["B"], p[last])


# --------------------------------------------------------------------------- the lab
LAB = Lab(
    name="tensor_parallel",
    title="Lab 15: tensor parallelism",
    setup="import math\nimport numpy as np\nimport torch\nimport torch.nn.functional as F\n",
    memory_limit_gb=24.0,  # the timed case's float64 reference and a CUDA context
    exercises=(
        Exercise(
            name="column_parallel",
            title="A column-parallel linear layer: each rank's slice of the outputs (torch)",
            backend="torch",
            args=("x", "w", "out"),
            inputs=_linear_inputs,
            outputs={"out": Out(lambda p: (p["K"], p["B"], p["Dout"] // p["K"]))},
            reference=lambda x, w, K, **_: _column_ref(x, w, K),
            cases=linear_cases("out"),
            points=1,
            forbidden=NO_COLLECTIVES,
            tolerance=LINEAR_TOLERANCE,
        ),
        Exercise(
            name="row_parallel",
            title="A row-parallel linear layer: each rank's partial sum (torch)",
            backend="torch",
            args=("x", "w", "out"),
            inputs=_linear_inputs,
            outputs={"out": Out(_k_shape("Dout"))},
            reference=lambda x, w, K, **_: _row_ref(x, w, K),
            cases=linear_cases("in"),
            points=1,
            forbidden=NO_COLLECTIVES,
            tolerance=LINEAR_TOLERANCE,
        ),
        Exercise(
            name="tp_mlp",
            title="The SwiGLU feed-forward block, split over K ranks (torch)",
            backend="torch",
            args=("x", "w_gate", "w_up", "w_down", "out"),
            inputs=_mlp_inputs,
            outputs={"out": Out(_k_shape("D"))},
            reference=lambda x, w_gate, w_up, w_down, K, **_: _mlp_ref(x, w_gate, w_up, w_down, K),
            cases=mlp_cases,
            points=2,
            forbidden=NO_COLLECTIVES,
            tolerance=LINEAR_TOLERANCE,
        ),
        Exercise(
            name="tp_attention",
            title="Causal grouped-query attention, split over K ranks by heads (torch)",
            backend="torch",
            args=("x", "wq", "wk", "wv", "wo", "n_heads", "n_kv_heads", "out"),
            inputs=_attention_inputs,
            outputs={"out": Out(lambda p: (p["K"], p["B"], p["S"], p["D"]))},
            reference=lambda x, wq, wk, wv, wo, n_heads, n_kv_heads, K, **_: _attention_ref(
                x, wq, wk, wv, wo, n_heads, n_kv_heads, K),
            cases=attention_cases,
            timing_case=TIMED_ATTENTION,
            baseline=_base_attention,
            baseline_name="reference (one rank after another, fused causal attention)",
            flops=_attention_flops,
            points=2,
            speed=Speed(2, full_at=0.8, zero_at=0.3),
            forbidden=NO_COLLECTIVES,
            tolerance=ATTENTION_TOLERANCE,
            # Between timed calls the grader scales inputs by 2**s (|s| <= 3). Scaling x, wq or
            # wk would scale the scores by up to 4096x, and so sharp a softmax turns the last-bit
            # differences of two correct float32 answers into misses beyond the check's
            # tolerance (measured on the CPU: 5x over it). The output is linear in wv and wo.
            scaled_inputs=("wv", "wo"),
        ),
    ),
)
