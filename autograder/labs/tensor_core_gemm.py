"""Lab 21: Tensor Core GEMM. A matrix product on the Tensor Cores in CUDA C through CuPy: first
with the WMMA API, then with ``mma.sync`` through inline PTX, its tiles fed by ``cp.async``
double buffering. GPU-only: CuPy needs a GPU, and the instructions need compute capability 7.0
(WMMA) and 8.0 (``mma.sync.m16n8k16`` and ``cp.async``).

Contract of both exercises: A (M x K) and B (K x N) float16, row-major; C (M x N) float32 = A @ B
with float32 sums. K and N are multiples of 8 (a 16-byte copy of 8 elements then never straddles
a row's end); M is free. NumPy, and so the grader, has no bfloat16: the chapter measures the same
kernel on bfloat16 against cuBLAS.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..host_parallel import matmul64
from ..spec import Exercise, Lab, Out, Speed, standard_normal
from .matmul import CUPY_KERNEL_ONLY

# Every library product refused: CUPY_KERNEL_ONLY already refuses cupy's maths (matmul, dot,
# einsum, tensordot, cupy.cublas, cupyx, ...), NumPy, torch, the @ operator and array methods
# such as .dot; cuBLAS through ctypes, cffi or cupy_backends is refused here as well.
TC_KERNEL_ONLY = CUPY_KERNEL_ONLY + ("cupy_backends.*", "ctypes.*", "cffi.*", "*.cublas*", "*.matmul",
                                      "*.einsum", "*.tensordot", "*.inner", "*.outer", "*.kron")

# float32 outputs of sums of products of float16 values: the products are exact in float32, so
# the only error is the float32 accumulation: at most 6.3e-6 of the largest |C| on the cases below
# for every kernel of course/tensor_cores.py (measured on an H200). A sum kept in float16 (a WMMA
# accumulator of type half, tests/submissions/tensor_core_gemm_gpu/half_accumulator.py) was off by
# 2.4e-4 to 5e-3 of it on the same cases, already at K = 8; a tile of K dropped, by far more.
# (1e-4, 1e-4) sits between the two.
TC_TOLERANCE = {"float32": (1e-4, 1e-4)}
ALIGN = 8


def gemm_cases(simulator: bool) -> list[dict]:
    """(m, n, k), n and k multiples of 8: a single row, a single copy wide, sizes that no tile
    (64 or 128) divides in m or n, k that is not a multiple of the k-tiles (32, 64), a long k."""
    shapes = [(1, 8, 8), (33, 24, 40), (64, 64, 64), (100, 136, 1000), (129, 8, 264), (1, 1032, 72),
              (1025, 1000, 512), (257, 2056, 96), (300, 520, 4104), (2049, 1032, 1160)]
    return [{"m": m, "n": n, "k": k} for m, n, k in shapes]


def _inputs(p, rng):
    """Standard normal float16 A and B: zero mean, so the check looks at every product's sign,
    and far from float16's limits at any k."""
    return {"A": standard_normal(rng, (p["m"], p["k"])).astype(np.float16),
            "B": standard_normal(rng, (p["k"], p["n"])).astype(np.float16)}


def _reference(A, B):
    return {"C": matmul64(A.astype(np.float64), B.astype(np.float64))}


# --------------------------------------------------------------------------- baselines
@lru_cache(maxsize=None)
def _kernels():
    """The reference kernels (course/tensor_cores.py), imported in the reference runner on first use."""
    from course import tensor_cores

    return tensor_cores


def _base_wmma(A, B, C):
    _kernels().wmma_gemm(A, B, C)


def _base_mma(A, B, C):
    _kernels().mma_gemm(A, B, C)  # LAB_CONFIG: 128 x 128 tiles, 4 warps, BK 32, 2 stages


GEMM = dict(
    backend="cupy",
    args=("A", "B", "C"),
    inputs=_inputs,
    outputs={"C": Out(lambda p: (p["m"], p["n"]))},
    reference=_reference,
    cases=gemm_cases,
    # 4096^3: 137 GFLOP, 96 MiB of inputs (beyond the L2); limited by the Tensor Cores.
    timing_case={"m": 4096, "n": 4096, "k": 4096},
    flops=lambda p: 2 * p["m"] * p["n"] * p["k"],
    forbidden=TC_KERNEL_ONLY,
    gpu_only=True,
    tolerance=TC_TOLERANCE,
)

LAB = Lab(
    name="tensor_core_gemm",
    title="Lab 21: Tensor Core GEMM",
    setup="import math\nimport numpy as np\n",
    timeout_s=180.0,  # NVRTC compiles each kernel once per process; 4096^3 is timed many times
    exercises=(
        Exercise(
            name="wmma_gemm",
            title="GEMM with WMMA fragments, float16 in, float32 sums (CUDA C, compute capability 7.0)",
            baseline=_base_wmma,
            baseline_name="reference WMMA kernel (64 x 64 tiles, 4 warps of 2 x 2 fragments, BK 32)",
            points=2,
            # The reference is the chapter's WMMA kernel (the lab's solution). One warp per 16 x 16
            # fragment of C reloads A and B four times as often from shared memory, and a kernel
            # that loads fragments straight from global memory has no reuse through shared memory.
            speed=Speed(1, full_at=0.8, zero_at=0.3),
            **GEMM,
        ),
        Exercise(
            name="mma_gemm",
            title="GEMM with mma.sync, ldmatrix and cp.async double buffering (CUDA C, compute capability 8.0)",
            baseline=_base_mma,
            baseline_name="reference mma.sync kernel (128 x 128 tiles, 4 warps, BK 32, 2 cp.async stages)",
            points=3,
            # The reference is the chapter's kernel at the lab's tile (LAB_CONFIG). At 4096^3 on an
            # H200, the lab's solution (the same design without grouped block order and without
            # double-buffered fragments) stays above full_at; the same kernel without padding
            # (ldmatrix bank conflicts) falls to about half the reference's speed, partial marks;
            # the WMMA kernel of exercise 1 lands near zero_at.
            speed=Speed(2, full_at=0.8, zero_at=0.3),
            **GEMM,
        ),
    ),
)
