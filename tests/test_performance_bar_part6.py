"""Part VI's performance bar, measured on one GPU in one run with the grader's own timer
(``autograder.check.time_exercise``: the L2 cache flushed before each sample, calls queued behind
a hold kernel, the two functions timed interleaved in one process, and the outputs of the timed
calls checked).

- The reference bf16 Tensor Core GEMM (CUDA C: mma.sync, ldmatrix, cp.async; no library call)
  reaches 50% of cuBLAS bf16 (cublasGemmEx: bf16 in, float32 out, float32 sums) at
  4096 x 4096 x 4096.
- The FP32 SGEMM with asynchronous copies (chapter 23) reaches 0.80 of cuBLAS FP32 at 4096^3; the
  share of Lab 7's Numba register-tiled SGEMM is printed.
- The cluster histogram (Lab 23's reference: 65,536 bins over a cluster of 8) is timed against
  global atomics on crowded and on spread values, and the cluster row sums against row sums
  combined with global atomics; the ratios are printed.

Run with ``pytest -m gpu -s tests/test_performance_bar_part6.py`` to see the figures.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from autograder.check import time_exercise
from autograder.host_parallel import matmul64
from autograder.labs import get_lab
from autograder.spec import Exercise, Out, standard_normal

MMA_VS_CUBLAS = 0.50
SGEMM_VS_CUBLAS = 0.80
SIZE = 4096


def _compute_capability() -> tuple[int, int]:
    import cupy as cp

    cc = cp.cuda.Device().compute_capability
    return int(cc[:-1]), int(cc[-1])


# --------------------------------------------------------------------------- bf16 GEMM
def _bf16_exact_inputs(p, rng):
    """float16 a and b whose values are also exact in bfloat16 (multiples of 1/64 within +-4:
    8 significant bits), so both GEMMs read exactly the host's values."""
    def draw(shape):
        z = np.clip(np.round(standard_normal(rng, shape) * 64.0), -255, 255) / 64.0
        return z.astype(np.float16)

    return {"a": draw((p["m"], p["k"])), "b": draw((p["k"], p["n"]))}


_BF16: dict = {}


def _bf16(t):
    """The bfloat16 copy of a timing buffer, made once: both sides then time the product alone
    (the inputs are not refreshed between timed calls: ``scaled_inputs=()``)."""
    import torch

    key = (t.data_ptr(), tuple(t.shape))
    if key not in _BF16:
        _BF16[key] = t.to(torch.bfloat16)
    return _BF16[key]


def course_mma(a, b, c):
    from course import tensor_cores

    tensor_cores.gemm_torch(_bf16(a), _bf16(b), c)


def cublas_bf16(a, b, c):
    """cublasGemmEx with bf16 inputs, a float32 result and float32 sums. cuBLAS is column-major:
    the row-major product C = A B is computed as C^T = B^T A^T."""
    import cupy as cp
    import torch
    from cupy_backends.cuda.libs import cublas

    A, B = _bf16(a), _bf16(b)
    m, k = A.shape
    n = B.shape[1]
    handle = cp.cuda.device.get_cublas_handle()
    cublas.setStream(handle, torch.cuda.current_stream().cuda_stream)
    one, zero = np.array(1.0, np.float32), np.array(0.0, np.float32)
    R_16BF, R_32F, COMPUTE_32F = 14, 0, 68  # cudaDataType and cublasComputeType_t values
    cublas.gemmEx(handle, cublas.CUBLAS_OP_N, cublas.CUBLAS_OP_N, n, m, k, one.ctypes.data,
                  B.data_ptr(), R_16BF, n, A.data_ptr(), R_16BF, k, zero.ctypes.data,
                  c.data_ptr(), R_32F, n, COMPUTE_32F, -1)  # -1: CUBLAS_GEMM_DEFAULT


@pytest.mark.gpu
def test_bf16_mma_gemm_against_cublas():
    if _compute_capability() < (8, 0):
        pytest.skip("bf16 mma.sync needs compute capability 8.0")
    ex = Exercise(
        name="bf16_gemm", title="bf16 GEMM, float32 out", backend="torch", args=("a", "b", "c"),
        inputs=_bf16_exact_inputs, outputs={"c": Out(lambda p: (p["m"], p["n"]))},
        reference=lambda a, b: {"c": matmul64(a, b)},
        cases=lambda simulator: [{"m": 64, "n": 64, "k": 64}],
        timing_case={"m": SIZE, "n": SIZE, "k": SIZE}, baseline=cublas_bf16, baseline_name="cuBLAS bf16",
        flops=lambda p: 2 * p["m"] * p["n"] * p["k"], scaled_inputs=(),
        tolerance={"float32": (1e-4, 1e-3)})  # the same bf16 products, summed in another order
    r = time_exercise(ex, course_mma)
    from course import tensor_cores

    print(f"\nmma.sync bf16 GEMM ({tensor_cores.pick_config().name()}): {r.ratio:.3f} of cuBLAS bf16 "
          f"({r.median_s * 1e6:.0f} against {r.baseline_median_s * 1e6:.0f} us; "
          f"{2 * SIZE**3 / r.median_s / 1e12:.0f} TFLOP/s)")
    assert r.measured and not r.flags, r
    assert r.ratio >= MMA_VS_CUBLAS


# --------------------------------------------------------------------------- FP32 SGEMM
def cublas_sgemm(A, B, C):
    import cupy as cp

    cp.matmul(cp.asarray(A), cp.asarray(B), out=cp.asarray(C))  # FP32 SGEMM: CuPy leaves TF32 off


@pytest.mark.gpu
def test_async_sgemm_against_cublas_fp32():
    """Lab 7's CuPy SGEMM exercise, with cuBLAS as the function timed against the chapter's kernel."""
    if _compute_capability() < (8, 0):
        pytest.skip("cp.async needs compute capability 8.0")
    from course import async_copies

    lab = get_lab("matmul")
    ex = dataclasses.replace(lab.exercise("sgemm_cupy"), baseline=async_copies.sgemm_async)
    r = time_exercise(ex, cublas_sgemm)
    numba = time_exercise(lab.exercise("sgemm_regtile"), cublas_sgemm)
    share = 1 / r.ratio
    print(f"\nsgemm_async: {share:.3f} of cuBLAS FP32 ({r.baseline_median_s * 1e6:.0f} against "
          f"{r.median_s * 1e6:.0f} us); Lab 7's Numba register tiles: {1 / numba.ratio:.3f}")
    assert r.measured and not r.flags, r
    assert share >= SGEMM_VS_CUBLAS


# --------------------------------------------------------------------------- clusters
@pytest.mark.gpu
def test_cluster_histogram_and_row_sums_against_global_atomics():
    if _compute_capability() < (9, 0):
        pytest.skip("thread-block clusters need compute capability 9.0")
    from course import clusters

    lab = get_lab("clusters")
    hist = lab.exercise("cluster_histogram")
    crowded = time_exercise(hist, clusters.histogram_global)
    spread = time_exercise(dataclasses.replace(hist, timing_case={**hist.timing_case, "skew": 0}),
                           clusters.histogram_global)
    rows = time_exercise(lab.exercise("cluster_row_sums"), clusters.row_sums_atomic)
    for r in (crowded, spread, rows):
        assert r.measured and not r.flags, r
    print(f"\ncluster histogram (8 blocks, 65,536 bins) against global atomics: "
          f"{1 / crowded.ratio:.2f}x as fast on crowded values ({crowded.baseline_median_s * 1e6:.0f} against "
          f"{crowded.median_s * 1e6:.0f} us), {1 / spread.ratio:.2f}x on spread values "
          f"({spread.baseline_median_s * 1e6:.0f} against {spread.median_s * 1e6:.0f} us)")
    print(f"cluster row sums (8 blocks per row) against global atomics: {1 / rows.ratio:.2f}x "
          f"({rows.baseline_median_s * 1e6:.0f} against {rows.median_s * 1e6:.0f} us)")
    # Where adds meet on a few bins, the cluster must beat the L2 cache's queue of atomics:
    # Lab 23 grades the histogram there.
    assert 1 / crowded.ratio > 1.5


def test_bf16_inputs_are_exact_in_both_types():
    """CPU: the GEMM bar's inputs are the same numbers in float16 and bfloat16."""
    import torch

    x = _bf16_exact_inputs({"m": 300, "n": 2, "k": 200}, np.random.default_rng(0))["a"]
    t = torch.from_numpy(x)
    assert torch.equal(t.to(torch.bfloat16).to(torch.float32), t.to(torch.float32))
    assert np.abs(x).max() <= 4 and math.isfinite(float(np.abs(x).max()))

