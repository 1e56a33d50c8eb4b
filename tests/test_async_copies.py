"""The chapter *Asynchronous copies and pipelines*: its CUDA C sources (course/async_copies.py).

On any machine with nvcc: every SGEMM and stencil build compiles for sm_80 and sm_90 (and the
synchronous ones for sm_75), the asynchronous builds contain cp.async and the others do not.
On a GPU: every build agrees with a float64 reference on awkward sizes, and the reference SGEMM
with asynchronous copies reaches 0.80 of cuBLAS FP32 at 4096^3 with the grader's timer.
"""
from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from course import async_copies as ac
from course.cuda_tools import find

# The chapter's steps (the reference among them) and the other switches its sweep and tuning use.
SGEMM_BUILDS = {**ac.SGEMM_STEPS, "BK 8, 4 stages": ac.SgemmVariant(8, 4, True),
                "BK 32, 3 stages": ac.SgemmVariant(32, 3, True),
                "A by rows": ac.SgemmVariant(32, 3, True, a_vec=True),
                "swizzled": ac.SgemmVariant(16, 2, True, fixed_stage=True, swizzle=8)}
STENCIL_BUILDS = {**ac.STENCIL_STEPS, "C++ primitives": ac.StencilVariant(3, True, cpp=True)}
needs_nvcc = pytest.mark.skipif(find("nvcc") is None, reason="nvcc is not installed")


def _jobs():
    for name, v in list(SGEMM_BUILDS.items()) + list(STENCIL_BUILDS.items()):
        # sm_90 adds nothing these builds use over sm_80 (the GPU tests build them for the GPU's own)
        for arch in (["sm_75"] if not v.asynchronous else []) + ["sm_80"]:
            yield name, v, arch


@pytest.fixture(scope="module")
def ptx():
    """{(build, arch): (ok, PTX or errors)}, compiled in parallel: nvcc takes seconds a build."""
    jobs = list(_jobs())
    with ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        done = pool.map(lambda j: ac.nvcc_compile(j[1].source(), j[2]), jobs)
        return {(name, arch): result for (name, _, arch), result in zip(jobs, done)}


@needs_nvcc
def test_every_source_compiles(ptx):
    failed = {key: text[:800] for key, (ok, text) in ptx.items() if not ok}
    assert not failed, failed


@needs_nvcc
def test_async_builds_use_cp_async_and_the_others_do_not(ptx):
    builds = {**SGEMM_BUILDS, **STENCIL_BUILDS}
    for (name, arch), (ok, text) in ptx.items():
        assert ok
        copies = len(re.findall(r"cp\.async\.c[ag]\.shared\.global", text))
        if builds[name].asynchronous:
            assert copies > 0 and "cp.async.wait_group" in text and "cp.async.commit_group" in text, name
        else:
            assert copies == 0, name
            assert "ld.global" in text and "st.shared" in text, name


def test_shared_memory_fits_the_learners_gpus():
    # Two blocks of the SGEMM per SM on cc 8.0 and 9.0 (164 and 227 KiB a block at most); the
    # synchronous builds run on a T4 too (64 KiB a block).
    for v in SGEMM_BUILDS.values():
        assert 2 * v.shared_bytes() <= 164 * 1024 or v.bk == 32, v
        if not v.asynchronous:
            assert v.shared_bytes() <= 64 * 1024, v
    for v in STENCIL_BUILDS.values():
        assert v.shared_bytes() <= 48 * 1024, v


def test_row_by_row_a_tile_is_for_cp_async_only():
    with pytest.raises(ValueError):
        ac.SgemmVariant(16, 2, False, a_vec=True).source()


def test_stencil_reference_against_a_loop():
    rng = np.random.default_rng(1)
    x = rng.standard_normal(37).astype(np.float32)
    w = ac.STENCIL_WEIGHTS.astype(np.float64)
    loop = [sum(w[j] * x[i + j - ac.RADIUS] for j in range(2 * ac.RADIUS + 1)
                if 0 <= i + j - ac.RADIUS < len(x)) for i in range(len(x))]
    np.testing.assert_allclose(ac.stencil_reference(x), loop, rtol=1e-12, atol=1e-12)
    assert abs(w.sum() - 1) < 1e-6


# --------------------------------------------------------------------------- on a GPU
U32 = 2.0**-24
SHAPES = [(1, 1, 1), (33, 17, 65), (100, 1, 300), (1, 100, 300), (31, 32, 33), (64, 64, 64), (17, 129, 1000),
          (1000, 3, 7), (513, 257, 129), (1025, 1023, 511), (300, 260, 9), (129, 132, 17), (257, 384, 100)]


def _needs_cc(v):
    from course.sizes import compute_capability

    if compute_capability() < v.needs_cc:
        pytest.skip(f"needs compute capability {v.needs_cc}")


def _within_bound(got, A, B):
    k = A.shape[1]
    gamma = k * U32 / (1 - k * U32)
    exact = A.astype(np.float64) @ B.astype(np.float64)
    bound = gamma * (np.abs(A).astype(np.float64) @ np.abs(B).astype(np.float64))
    return np.all(np.isfinite(got)) and np.all(np.abs(got - exact) <= bound)


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(SGEMM_BUILDS))
def test_sgemm_agrees_with_float64(name):
    import cupy as cp

    v = SGEMM_BUILDS[name]
    _needs_cc(v)
    rng = np.random.default_rng(2)
    for m, n, k in SHAPES:
        A = rng.uniform(-1, 1, (m, k)).astype(np.float32)
        B = rng.uniform(-1, 1, (k, n)).astype(np.float32)
        C = cp.full((m, n), cp.nan, dtype=cp.float32)
        ac.launch_sgemm(v, cp.asarray(A), cp.asarray(B), C)
        assert _within_bound(cp.asnumpy(C), A, B), (name, m, n, k)
    # A at an address that is not a multiple of 16 bytes: the 4-byte copies
    flat = rng.uniform(-1, 1, 70 * 64 + 1).astype(np.float32)
    A = cp.asarray(flat)[1:].reshape(70, 64)
    B = rng.uniform(-1, 1, (64, 36)).astype(np.float32)
    C = cp.full((70, 36), cp.nan, dtype=cp.float32)
    ac.launch_sgemm(v, A, cp.asarray(B), C)
    assert _within_bound(cp.asnumpy(C), flat[1:].reshape(70, 64), B), (name, "offset view")


@pytest.mark.gpu
def test_sgemm_async_has_lab7s_contract():
    import cupy as cp

    _needs_cc(ac.REFERENCE)
    rng = np.random.default_rng(3)
    A = rng.uniform(-1, 1, (1025, 511)).astype(np.float32)
    B = rng.uniform(-1, 1, (511, 1023)).astype(np.float32)
    C = cp.full((1025, 1023), cp.nan, dtype=cp.float32)
    dA, dB = cp.asarray(A), cp.asarray(B)
    assert ac.REFERENCE in ac.SGEMM_STEPS.values()
    ac.sgemm_async(dA, dB, C)
    assert _within_bound(cp.asnumpy(C), A, B)
    assert np.array_equal(cp.asnumpy(dA), A) and np.array_equal(cp.asnumpy(dB), B)  # inputs untouched


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(STENCIL_BUILDS))
def test_stencil_agrees_with_float64(name):
    import cupy as cp

    v = STENCIL_BUILDS[name]
    _needs_cc(v)
    rng = np.random.default_rng(4)
    for n in (1, 7, 16, 2048, 2049, 2063, 6001, 100_003):
        x = rng.standard_normal(n + 1).astype(np.float32)
        for offset in (0, 1):                          # 1: x not on a 16-byte boundary
            xd = cp.asarray(x)[offset:offset + n]
            ref = ac.stencil_reference(x[offset:offset + n])
            for blocks in (None, 3):                   # a block per tile; three blocks walking them
                y = cp.full(n, cp.nan, dtype=cp.float32)
                ac.launch_stencil(v, xd, y, blocks)
                np.testing.assert_allclose(cp.asnumpy(y), ref, rtol=1e-5, atol=1e-6)
