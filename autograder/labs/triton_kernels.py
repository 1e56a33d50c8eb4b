"""Lab 18: Triton kernels. A fused row softmax, a matrix product with tl.dot and autotuning, and
the same product with a bias and GELU fused into its epilogue, each a Triton kernel that gets
torch tensors (Triton's interpreter runs them on the CPU in simulator mode)."""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from ..host_parallel import matmul64
from ..spec import TRITON_ONLY, Exercise, Lab, Out, Speed, standard_normal
from .softmax import PROB_TOL, logits, softmax64


# --------------------------------------------------------------------------- inputs
def softmax_shapes(simulator: bool) -> list[dict]:
    """(rows, cols): one column, odd widths, a thousand rows of 3, and rows wider than the timed
    4,096 columns. The interpreter's cost is per program (row) and per operation, not per value,
    so it gets a row of 5,000 too, but few rows."""
    if simulator:
        shapes = [(1, 1), (3, 7), (4, 33), (2, 1000), (3, 5000)]
    else:
        shapes = [(1, 1), (31, 33), (1000, 3), (3, 1025), (33, 1024), (1023, 31), (7, 5000), (2, 16384)]
    return [{"rows": r, "cols": c} for r, c in shapes]


def product_shapes(simulator: bool) -> list[dict]:
    """(m, n, k): one element, K = 1, sizes that no tile divides, and a K of 130, where a sum
    kept in float16 already fails. The interpreter multiplies tiles with NumPy, one program after
    another: small sizes only. On a GPU each new size is autotuned again (every configuration
    compiled and timed), so it gets few small ones and three larger ones."""
    if simulator:
        shapes = [(1, 1, 1), (33, 17, 1), (70, 50, 45), (64, 96, 128), (100, 70, 130)]
    else:
        shapes = [(1, 1, 1), (33, 17, 1), (100, 70, 130), (127, 129, 65), (1000, 257, 1031), (2048, 2048, 2048)]
    return [{"m": m, "n": n, "k": k} for m, n, k in shapes]


def _softmax_inputs(p, rng):
    return {"x": logits(rng, p["rows"], p["cols"])}  # offsets of up to +-300: exp(x) overflows


def _product_inputs(p, rng):
    """float16 a (m, k) and b (k, n), standard normal a and b scaled by 2 / sqrt(k): the entries
    of a @ b have a standard deviation of 2 whatever k is, far from float16's limit of 65,504,
    and spread over the curved part of GELU."""
    m, n, k = p["m"], p["n"], p["k"]
    b = standard_normal(rng, (k, n))
    b *= np.float32(2.0 / math.sqrt(k))
    return {"a": standard_normal(rng, (m, k)).astype(np.float16), "b": b.astype(np.float16)}


def _bias_gelu_inputs(p, rng):
    return {**_product_inputs(p, rng), "bias": standard_normal(rng, (p["n"],)).astype(np.float16)}


# --------------------------------------------------------------------------- references (float64)
def gelu_tanh64(z):
    """GELU in its tanh form (Hendrycks and Gimpel, 2016, arXiv:1606.08415)."""
    return 0.5 * z * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (z + 0.044715 * z**3)))


# --------------------------------------------------------------------------- baselines
@lru_cache(maxsize=None)
def _triton_kernels():
    """The reference kernels (course/triton_kernels.py), imported in the reference runner on
    first use: importing Triton is not for the grader's parent process."""
    from course import triton_kernels

    return triton_kernels


def _base(name):
    def run(*args):
        getattr(_triton_kernels(), name)(*args)
    run.__name__ = f"reference_{name}"
    return run


# --------------------------------------------------------------------------- the lab
def _matrix(p):
    return (p["rows"], p["cols"])


def _product(p):
    return (p["m"], p["n"])


# float16 outputs. Rounding c to float16 is off by up to 2^-11 (4.9e-4) of |c|; 1e-3 relative is
# that with room for float32 sums in any order, whose error is far smaller. 1e-4 of the largest
# |c| covers entries near zero. A sum kept in float16 between tiles of K exceeds the tolerance
# from about K = 130 on, by more as K grows; a dropped tile of K or a wrong element by far more.
PRODUCT_TOL = {"float16": (1e-3, 1e-4)}
PRODUCT_SPEED = Speed(2, full_at=0.8, zero_at=0.3)

LAB = Lab(
    name="triton_kernels",
    title="Lab 18: Triton kernels",
    setup="import math\nimport numpy as np\nimport torch\nimport triton\nimport triton.language as tl\n",
    # The first call at each size compiles and times every configuration of an autotuned kernel.
    timeout_s=300.0,
    exercises=(
        Exercise(
            name="softmax",
            title="Fused row softmax: one read, one write (Triton)",
            backend="triton",
            args=("x", "out"),
            inputs=_softmax_inputs,
            outputs={"out": Out(_matrix)},
            reference=lambda x: {"out": softmax64(x)},
            cases=softmax_shapes,
            # 32,768 rows of 4,096: 512 MiB read and 512 MiB written, far beyond any L2.
            timing_case={"rows": 32768, "cols": 4096},
            baseline=_base("softmax"),
            baseline_name="reference Triton kernel (a program per row, the row in one block)",
            bytes_moved=lambda p: 8 * p["rows"] * p["cols"],
            flops=lambda p: 5 * p["rows"] * p["cols"],
            points=2,
            # The reference is the chapter's kernel; a softmax that reads each row three times
            # (max, sum, output) moves twice the bytes: about 0.5x by the traffic model.
            speed=Speed(2, full_at=0.8, zero_at=0.3),
            forbidden=TRITON_ONLY,
            tolerance=PROB_TOL,
        ),
        Exercise(
            name="matmul",
            title="Matrix product in float16 with tl.dot, float32 sums, autotuned (Triton)",
            backend="triton",
            args=("a", "b", "c"),
            inputs=_product_inputs,
            outputs={"c": Out(_product, dtype="float16")},
            reference=lambda a, b: {"c": matmul64(a, b)},
            cases=product_shapes,
            timing_case={"m": 4096, "n": 4096, "k": 4096},  # 137 GFLOP: limited by the tensor cores
            baseline=_base("matmul"),
            baseline_name="reference Triton kernel (tl.dot, grouped order, autotuned over 8 configurations)",
            flops=lambda p: 2 * p["m"] * p["n"] * p["k"],
            points=2,
            # The reference is the chapter's autotuned kernel. Small tiles (32 x 32) reuse each
            # load a quarter as often as 128 x 128 ones: by that count they run out of memory
            # bandwidth long before the tensor cores are busy.
            speed=PRODUCT_SPEED,
            forbidden=TRITON_ONLY,
            tolerance=PRODUCT_TOL,
        ),
        Exercise(
            name="matmul_bias_gelu",
            title="gelu(a @ b + bias), GELU in its tanh form, fused into the product's epilogue (Triton)",
            backend="triton",
            args=("a", "b", "bias", "c"),
            inputs=_bias_gelu_inputs,
            outputs={"c": Out(_product, dtype="float16")},
            reference=lambda a, b, bias: {"c": gelu_tanh64(matmul64(a, b) + bias)},
            cases=product_shapes,
            # A transformer MLP's first layer: 8,192 tokens of 1,024 values, four times wider out.
            # c (64 MiB) is most of the product's traffic, so a second pass over it shows.
            timing_case={"m": 8192, "n": 4096, "k": 1024},
            baseline=_base("matmul_bias_gelu"),
            baseline_name="reference Triton kernel (the autotuned product, bias and GELU in its epilogue)",
            flops=lambda p: 2 * p["m"] * p["n"] * p["k"],  # the epilogue's few operations per entry are not counted
            points=2,
            # An epilogue in a kernel of its own reads c and writes it again: 128 MiB more than the
            # fused kernel's 88 MiB. At an H100's copy bandwidth and the product's tensor-core rate
            # that is an estimated 0.7x, which earns part of the points.
            speed=Speed(2, full_at=0.85, zero_at=0.45),
            forbidden=TRITON_ONLY,
            # GELU's slope lies between -0.13 and 1.13: it does not magnify the product's error.
            tolerance=PRODUCT_TOL,
        ),
    ),
)
