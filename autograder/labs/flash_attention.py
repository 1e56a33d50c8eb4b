"""Lab 19: FlashAttention. The forward pass of attention over float16 queries, keys and values
of shape (batch, heads, tokens, head_dim), in Triton, without the score matrix in memory:
without a mask, then causal. Timed against the course's FlashAttention-2 kernel
(course/flash_attention.py) at a prefill shape."""
from __future__ import annotations

import math

import numpy as np

from ..host_parallel import parallel_map
from ..spec import TRITON_ONLY, Exercise, Lab, Out, Speed, standard_normal

HEAD_DIMS = (16, 32, 64, 128)  # the contract's head sizes: powers of two, as tl.dot's tiles need
# The timed prefill: 4 sequences of 4,096 tokens, 32 heads of 128. Its scores would take
# 4 * 32 * 4096**2 * 4 bytes = 8.6 GB in float32 per call: a kernel that writes them is slow.
TIMED = {"B": 4, "H": 32, "N": 4096, "D": 128}
BIG_OFFSET = 300.0  # natural-log units: exp(+-300) overflows (underflows) float32 far beyond its range


# --------------------------------------------------------------------------- inputs
def cases(simulator: bool) -> list[dict]:
    """(batch, heads, tokens, head_dim): one token, lengths that are no multiple of any block,
    every head size, a batch and heads at once. Triton's interpreter runs a kernel's every
    program in NumPy, so the simulator gets short sequences."""
    if simulator:
        shapes = [(1, 1, 1, 16), (1, 2, 37, 32), (2, 1, 70, 64), (1, 1, 130, 128), (1, 2, 200, 16)]
    else:
        shapes = [(1, 1, 1, 16), (2, 3, 37, 32), (1, 4, 1000, 64), (1, 1, 127, 128), (2, 2, 4097, 128),
                  (3, 1, 2048, 16), (1, 8, 513, 64), (1, 2, 16384, 64)]
    return [{"B": b, "H": h, "N": n, "D": d} for b, h, n, d in shapes]


def attention_inputs(p, rng):
    """q, k, v in float16. Dimension 0 of the keys is a ramp from 16 to 24 along the sequence, the
    same in every head; dimension 0 of each query is a large number of either sign. So each query's
    scores carry an offset of up to +-BIG_OFFSET (a softmax that does not subtract the maximum gives
    inf or 0 / 0), and a rise along the keys of up to half that (the running maximum changes again
    and again, and the running sums must be rescaled each time). How large varies from row to row
    (log-uniform), so most rows have soft attention over many keys and a few are sharp. The values
    carry an offset per head, so that no output is near zero."""
    b, h, n, d = p["B"], p["H"], p["N"], p["D"]
    shape = (b, h, n, d)
    q = standard_normal(rng, shape)
    q *= rng.uniform(0.5, 2.0, (b, h, 1, 1)).astype(np.float32)  # how sharp the ordinary scores are
    k = standard_normal(rng, shape)
    v = standard_normal(rng, shape)
    v += (rng.choice((-1.0, 1.0), (b, h, 1, 1)) * rng.uniform(1.0, 4.0, (b, h, 1, 1))).astype(np.float32)
    k[..., 0] = 16.0 + 8.0 * np.arange(n, dtype=np.float32) / max(n - 1, 1)
    # query dimension 0: the offset q0 * 16 / sqrt(d), in natural-log units, up to BIG_OFFSET
    offset = 10.0 ** rng.uniform(-2.0, math.log10(BIG_OFFSET), (b, h, n)) * rng.choice((-1.0, 1.0), (b, h, n))
    offset[0, 0, 0] = rng.choice((-1.0, 1.0)) * rng.uniform(100.0, BIG_OFFSET)  # one row breaks exp at least
    q[..., 0] = (offset * math.sqrt(d) / 16.0).astype(np.float32)
    return {"q": q.astype(np.float16), "k": k.astype(np.float16), "v": v.astype(np.float16)}


# --------------------------------------------------------------------------- reference (float64)
ROWS_PER_STEP = 1024  # queries per step of the reference: a step's scores stay at 8 * 1024 * N bytes


def attention64(q, k, v, causal: bool) -> np.ndarray:
    """softmax(q k^T / sqrt(d)) v in float64 (causal: key j <= query i), a block of query rows
    at a time, the blocks on every core."""
    b, h, n, d = q.shape
    out = np.empty(q.shape, dtype=np.float64)
    scale = 1.0 / math.sqrt(d)

    def step(job):
        bi, hi, r0 = job
        r1 = min(r0 + ROWS_PER_STEP, n)
        keys = r1 if causal else n  # past the block's last query nothing is kept
        s = q[bi, hi, r0:r1] @ k[bi, hi, :keys].T
        s *= scale
        if causal:
            s[np.arange(r0, r1)[:, None] < np.arange(keys)[None, :]] = -np.inf
        s -= s.max(axis=1, keepdims=True)
        np.exp(s, out=s)
        out[bi, hi, r0:r1] = (s @ v[bi, hi, :keys]) / s.sum(axis=1, keepdims=True)

    parallel_map(step, [(bi, hi, r0) for bi in range(b) for hi in range(h) for r0 in range(0, n, ROWS_PER_STEP)])
    return out


# --------------------------------------------------------------------------- baseline and cost
def _baseline(causal: bool):
    def run(q, k, v, out):
        from course.flash_attention import attention  # Triton: loaded in the reference runner only

        attention(q, k, v, causal=causal, out=out)
    run.__name__ = "reference_causal" if causal else "reference"
    return run


def flops(causal: bool):
    """2 N^2 d for q k^T and 2 N^2 d for p v, per head; causal keeps half the scores, so counts half
    (the diagonal's blocks are a vanishing share at the timing size)."""
    def count(p):
        full = 4 * p["B"] * p["H"] * p["N"] ** 2 * p["D"]
        return full // 2 if causal else full
    return count


def _shape(p):
    return (p["B"], p["H"], p["N"], p["D"])


# float16 out, like q, k and v and like the layer's output a model passes on. The errors, relative to
# the largest |output| of a case: the probabilities enter the tensor cores' p @ v as float16 (a relative
# rounding of up to 2^-11 = 4.9e-4 each), the values reach |offset| + 4.5 standard deviations, up to
# about 5.5x the largest output when the offset is 1, and the output is rounded to float16 (2^-11
# relative). Correct kernels land at a few 1e-4 (measured: the reference, Triton's interpreter, every
# case); 2e-3 of the largest output plus 2e-3 relative leaves that room, while a key left out of a row of
# 37, a missing rescale or a wrong mask is off by 1e-2 or more and a missing maximum gives NaN.
TOLERANCE = {"float16": (2e-3, 2e-3)}


def _exercise(name: str, title: str, causal: bool, points: float, speed_points: float) -> Exercise:
    return Exercise(
        name=name,
        title=title,
        backend="triton",
        args=("q", "k", "v", "out"),
        inputs=attention_inputs,
        outputs={"out": Out(_shape, dtype="float16")},
        reference=lambda q, k, v: {"out": attention64(q, k, v, causal)},
        cases=cases,
        timing_case=TIMED,
        baseline=_baseline(causal),
        baseline_name="course's FlashAttention-2 forward in Triton (course/flash_attention.py)",
        flops=flops(causal),
        points=points,
        # The reference scores 1.0x. FlashAttention without tl.dot (products summed in registers, off the
        # tensor cores) or a kernel that writes the 8.6 GB of scores is several times slower: no speed
        # points. Causal attention that computes the blocks above the diagonal and masks them does twice
        # the work, about 0.5x: part of the points.
        speed=Speed(speed_points, full_at=0.8, zero_at=0.3),
        forbidden=TRITON_ONLY,
        tolerance=TOLERANCE,
        # Between timed calls only the values change (a gain and a jitter per element): scaled queries
        # or keys would sharpen the softmax up to 2x, and two correct float16 answers would differ by
        # more than the check allows. The output is linear in v, so no call can replay another's.
        scaled_inputs=("v",),
    )


LAB = Lab(
    name="flash_attention",
    title="Lab 19: FlashAttention",
    setup="import math\nimport torch\nimport triton\nimport triton.language as tl\n",
    exercises=(
        _exercise("flash_attention", "FlashAttention's forward pass, every query against every key (Triton)",
                  causal=False, points=3, speed_points=2),
        _exercise("flash_attention_causal", "Causal FlashAttention: each query against the keys up to its own (Triton)",
                  causal=True, points=2, speed_points=3),
    ),
    timeout_s=180.0,
)
