"""The Tensor Core kernels (course/tensor_cores.py), the lab tensor_core_gemm and its hostile answers.

On the CPU: every CUDA C source of the chapter, the lab's solutions and the hostile answers compiles
with nvcc for the architectures it claims (sm_75 for what runs on a T4, sm_80 and sm_90 for all),
and the mma.sync GEMM is refused for sm_75 (cp.async needs 8.0); the tile table and its choice of
tile; the fragment layout; the lab's cases, tolerance and forbidden names. On a GPU: every kernel
against float64 on sizes that no tile divides, and the hostile answers graded by the command line.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from autograder.labs import get_lab
from autograder.measure import compare
from autograder.submission import forbidden_uses, load, static_problems
from course import tensor_cores as tc
from course.cuda_tools import find

ROOT = Path(__file__).resolve().parents[1]
SOLUTION = ROOT / "labs" / "tensor_core_gemm" / "solutions" / "tensor_core_gemm.ipynb"
BANK = ROOT / "tests" / "submissions" / "tensor_core_gemm_gpu"
EXPECTED = {k: v for k, v in json.loads((BANK / "expected.json").read_text()).items() if not k.startswith("_")}
LAB = get_lab("tensor_core_gemm")
ALL_CONFIGS = {**{f"step {k}": c for k, c in tc.STEP_CONFIGS.items()},
               **{f"table {k}": c for k, c in tc.CONFIGS.items()}}

needs_nvcc = pytest.mark.skipif(find("nvcc") is None, reason="nvcc is not installed")


def _solution_sources() -> dict[str, str]:
    """The CUDA C of the lab's solution notebook: the answer cells' raw strings, by exercise."""
    nb = json.loads(SOLUTION.read_text())
    found: dict[str, str] = {}
    for cell in nb["cells"]:
        answer = cell.get("metadata", {}).get("autograder", {}).get("answer")
        if answer:
            for text in re.findall(r'r"""(.*?)"""', "".join(cell["source"]), flags=re.S):
                found[answer] = found.get(answer, "") + text
    return found


def _bank_source(name: str) -> str:
    return "".join(re.findall(r'r"""(.*?)"""', (BANK / f"{name}.py").read_text(), flags=re.S))


# --------------------------------------------------------------------------- compiling (CPU)
SOURCES = {
    "mma_tile": (tc.MMA_TILE_SOURCE + tc.MMA_TILE_INSTANTIATIONS, ("sm_80", "sm_90")),
    "wmma_gemm": (tc.WMMA_SOURCE, ("sm_75", "sm_80", "sm_90")),
    "wmma_api_tile": (tc.WMMA_API_SOURCE, ("sm_75", "sm_80", "sm_90")),
    # sm_80 only: the GPU tests build every config for the GPU they run on
    "tc_gemm, every config and type": (tc.gemm_source_for(list(ALL_CONFIGS.values()) + [tc.LAB_CONFIG]),
                                       ("sm_80",)),
}


@needs_nvcc
@pytest.mark.parametrize("name, arch", [(n, a) for n, (_, archs) in SOURCES.items() for a in archs])
def test_course_sources_compile(name, arch):
    ok, report = tc.nvcc_compile(SOURCES[name][0], arch)
    assert ok, report[-3000:]


@needs_nvcc
def test_mma_gemm_is_refused_below_compute_capability_8():
    ok, report = tc.nvcc_compile(tc.gemm_source_for([tc.LAB_CONFIG], (("float16", "float32"),)), "sm_75")
    assert not ok and ("cp.async" in report or "sm_80" in report), report[-2000:]


@needs_nvcc
@pytest.mark.parametrize("exercise, archs", [("wmma_gemm", ("sm_75", "sm_90")), ("mma_gemm", ("sm_80", "sm_90"))])
def test_solution_kernels_compile(exercise, archs):
    source = _solution_sources()[exercise]
    assert "__global__" in source
    for arch in archs:
        ok, report = tc.nvcc_compile(source, arch)
        assert ok, f"{exercise} for {arch}:\n{report[-3000:]}"


@needs_nvcc
@pytest.mark.parametrize("name", sorted(n for n in EXPECTED if _bank_source(n)))
def test_hostile_kernels_compile(name):
    ok, report = tc.nvcc_compile(_bank_source(name), "sm_80")
    assert ok, report[-3000:]  # an attack that does not compile would prove nothing about the grader


# --------------------------------------------------------------------------- tiles and fragments (CPU)
@pytest.mark.parametrize("label", sorted(ALL_CONFIGS) + ["lab"])
def test_config_tiles_divide_evenly(label):
    c = ALL_CONFIGS.get(label, tc.LAB_CONFIG)
    assert c.bm % c.wm == 0 and c.bn % c.wn == 0 and c.wm % 16 == 0 and c.wn % 16 == 0 and c.bk % 16 == 0
    assert (c.bm * c.bk // 8) % c.threads == 0 and (c.bk * c.bn // 8) % c.threads == 0  # 16-byte copies per thread
    assert c.stages >= 2
    assert c.shared_bytes == 2 * c.stages * (c.bm * (c.bk + c.pad) + c.bk * (c.bn + c.pad))


@pytest.mark.parametrize("limit, expected", [
    (227 * 1024, tc.CONFIGS["large"]),     # H100, H200: the 128 x 256 tile fits
    (163 * 1024, tc.CONFIGS["large"]),     # A100: 144 KiB fits 163
    (99 * 1024, tc.CONFIGS["medium"]),     # L4 and other 8.6 / 8.9 GPUs: 96 KiB fits 99
    (64 * 1024, tc.LAB_CONFIG),            # nothing in the table fits: the 37 KiB double buffer
])
def test_pick_config_takes_the_first_that_fits(limit, expected):
    assert tc.pick_config(limit) == expected
    assert expected.shared_bytes <= limit


def test_the_large_tile_needs_about_150_kib_and_the_lab_tile_no_opt_in():
    assert 140 * 1024 < tc.CONFIGS["large"].shared_bytes < 160 * 1024
    assert tc.LAB_CONFIG.shared_bytes <= 48 * 1024


def test_fragment_owners_follow_the_ptx_layout():
    own = tc.fragment_owners()
    assert own["A"].shape == (16, 16) and own["B"].shape == (16, 8) and own["C"].shape == (16, 8)
    for name, per_lane in (("A", 8), ("B", 4), ("C", 4)):
        assert (np.bincount(own[name].ravel(), minlength=32) == per_lane).all(), name
    # lane 5: group 1, place 1
    assert {tuple(x) for x in np.argwhere(own["C"] == 5)} == {(1, 2), (1, 3), (9, 2), (9, 3)}
    assert {tuple(x) for x in np.argwhere(own["B"] == 5)} == {(2, 1), (3, 1), (10, 1), (11, 1)}
    assert {tuple(x) for x in np.argwhere(own["A"] == 5)} == {(1, 2), (1, 3), (9, 2), (9, 3), (1, 10), (1, 11),
                                                              (9, 10), (9, 11)}


def test_config_names_are_the_template_arguments():
    c = tc.CONFIGS["large"]
    assert c.name("bfloat16", "float32") == "tc_gemm<__nv_bfloat16, float, 128, 256, 64, 64, 64, 3, 0, true>"
    assert tc.LAB_CONFIG.name("float16") == "tc_gemm<__half, float, 128, 128, 32, 64, 64, 2, 8>"  # SWIZZLE defaults to false
    assert c.threads == 256 and tc.CONFIGS["medium"].threads == 128
    assert tc.nvrtc_options(90) == ("-std=c++17", "--gpu-architecture=sm_90")


def test_gemm_torch_refuses_what_it_cannot_do():
    torch = pytest.importorskip("torch")
    a = torch.zeros(4, 16, dtype=torch.float32)
    with pytest.raises(TypeError):
        tc.gemm_torch(a, torch.zeros(16, 8), torch.zeros(4, 8), tc.LAB_CONFIG)   # float32 inputs
    with pytest.raises(ValueError, match="multiples of 8"):                        # K = 12
        tc.gemm_torch(torch.zeros(4, 12, dtype=torch.bfloat16), torch.zeros(12, 8, dtype=torch.bfloat16),
                      torch.zeros(4, 8), tc.LAB_CONFIG)
    with pytest.raises(ValueError, match="shapes"):
        tc.gemm_torch(torch.zeros(4, 16, dtype=torch.bfloat16), torch.zeros(16, 8, dtype=torch.bfloat16),
                      torch.zeros(4, 16), tc.LAB_CONFIG)


# --------------------------------------------------------------------------- the lab (CPU)
def test_lab_cases_keep_the_contract_and_miss_the_tiles():
    for ex in LAB.exercises:
        cases = ex.cases(False)
        assert all(p["n"] % 8 == 0 and p["k"] % 8 == 0 for p in cases)
        assert any(p["m"] % 64 and p["n"] % 64 for p in cases)          # neither a WMMA tile ...
        assert any(p["m"] % 128 and p["n"] % 128 for p in cases)        # ... nor an mma.sync tile divides
        assert any(p["k"] % 64 for p in cases) and max(p["k"] for p in cases) > 4096
        assert ex.timing_case == {"m": 4096, "n": 4096, "k": 4096} and ex.gpu_only and ex.backend == "cupy"


def _half_accumulated(A, B, chunk=16):
    """A @ B with the sum kept in float16 after every `chunk` products (a WMMA half accumulator)."""
    acc = np.zeros((A.shape[0], B.shape[1]), dtype=np.float16)
    for k0 in range(0, A.shape[1], chunk):
        part = A[:, k0:k0 + chunk].astype(np.float32) @ B[k0:k0 + chunk].astype(np.float32)
        acc = (acc.astype(np.float32) + part).astype(np.float16)
    return acc.astype(np.float32)


@pytest.mark.parametrize("p", [{"m": 33, "n": 24, "k": 40}, {"m": 100, "n": 136, "k": 1000},
                               {"m": 64, "n": 64, "k": 64}])
def test_tolerance_passes_float32_sums_and_fails_float16_sums(p):
    ex = LAB.exercise("mma_gemm")
    inputs = ex.inputs(p, np.random.default_rng(3))
    A, B = inputs["A"], inputs["B"]
    fp32 = (A.astype(np.float32) @ B.astype(np.float32)).astype(np.float32)
    assert compare(ex, p, inputs, {"C": fp32}, inputs).passed
    assert not compare(ex, p, inputs, {"C": _half_accumulated(A, B)}, inputs).passed


def test_solution_answers_use_nothing_forbidden():
    src = load(SOLUTION, [e.name for e in LAB.exercises])
    for ex in LAB.exercises:
        assert ex.name in src.answers
        assert not forbidden_uses(src.code, ex.name, ex.forbidden), ex.name
        assert not static_problems(src.code, ex.forbidden), ex.name


@pytest.mark.parametrize("name", ["cupy_matmul", "cublas_gemmex"])
def test_library_products_are_refused(name):
    ex = LAB.exercise(EXPECTED[name]["exercise"])
    src = load(BANK / f"{name}.py", [e.name for e in LAB.exercises])
    assert forbidden_uses(src.code, ex.name, ex.forbidden) or static_problems(src.code, ex.forbidden)


# --------------------------------------------------------------------------- on a GPU
AWKWARD = [(1, 8, 8), (33, 24, 40), (100, 136, 1000), (129, 8, 264), (1025, 1000, 512), (300, 520, 4104)]


def _check_cupy(gemm, dtype=np.float16):
    import cupy as cp

    rng = np.random.default_rng(7)
    for M, N, K in AWKWARD:
        A = rng.standard_normal((M, K)).astype(dtype)
        B = rng.standard_normal((K, N)).astype(dtype)
        C = cp.full((M, N), cp.nan, dtype=cp.float32)
        gemm(cp.asarray(A), cp.asarray(B), C)
        exact = A.astype(np.float64) @ B.astype(np.float64)
        err = np.abs(C.get() - exact).max() / np.abs(exact).max()
        assert err < 2e-5, f"{M} x {N} x {K}: {err:.1e}"   # NaN (an element never written) fails too


@pytest.mark.gpu
def test_mma_tile_matches_float64_and_the_layout():
    import cupy as cp

    rng = np.random.default_rng(0)
    A = rng.standard_normal((16, 16)).astype(np.float16)
    B = rng.standard_normal((16, 8)).astype(np.float16)
    D = cp.full((16, 8), cp.nan, dtype=cp.float32)
    owner = cp.full((16, 8), -1, dtype=cp.int32)
    tc.mma_tile(cp.asarray(A), cp.asarray(B), D, owner)
    assert np.abs(D.get() - A.astype(np.float64) @ B.astype(np.float64)).max() < 1e-5
    assert np.array_equal(owner.get(), tc.fragment_owners()["C"])


@pytest.mark.gpu
def test_wmma_gemm_matches_float64():
    _check_cupy(tc.wmma_gemm)


@pytest.mark.gpu
@pytest.mark.parametrize("label", sorted(ALL_CONFIGS) + ["lab"])
def test_mma_gemm_matches_float64(label):
    config = ALL_CONFIGS.get(label, tc.LAB_CONFIG)
    if not tc.fits(config, tc.device_limits()["max_shared_bytes"]):
        pytest.skip(f"{config.label} needs more shared memory than this GPU has")
    _check_cupy(lambda A, B, C: tc.mma_gemm(A, B, C, config))


@pytest.mark.gpu
@pytest.mark.parametrize("out", ["float32", "bfloat16"])
def test_gemm_torch_bfloat16_matches_float64(out):
    import torch

    for M, N, K in AWKWARD:
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
        c = torch.full((M, N), float("nan"), device="cuda", dtype=getattr(torch, out))
        tc.gemm_torch(a, b, c)
        exact = a.double() @ b.double()
        err = ((c.double() - exact).abs().max() / exact.abs().max()).item()
        assert err < (2e-5 if out == "float32" else 8e-3), (M, N, K, err)  # bfloat16 output: 2^-8 of |C|


def _grade(tmp_path: Path, exercise: str, names: list[str]) -> dict[str, float]:
    r = subprocess.run([sys.executable, "-m", "autograder", "grade", "--lab", "tensor_core_gemm",
                        "--exercise", exercise, "--out", str(tmp_path), "--timeout", "600",
                        *[str(BANK / f"{n}.py") for n in names]], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    scores = {}
    for n in names:
        tests = json.loads((tmp_path / n / "results.json").read_text())["tests"]
        scores[n] = sum(t["score"] for t in tests if (t.get("extra_data") or {}).get("exercise") == exercise)
    return scores


@pytest.mark.gpu
@pytest.mark.parametrize("exercise", sorted({v["exercise"] for v in EXPECTED.values()}))
def test_hostile_answers_get_their_expected_grades(tmp_path, exercise):
    names = sorted(n for n, v in EXPECTED.items() if v["exercise"] == exercise)
    scores = _grade(tmp_path, exercise, names)
    for n in names:
        exp = EXPECTED[n]
        assert exp.get("min_points", 0) <= scores[n] <= exp["max_points"], f"{n}: {scores[n]} (expected {exp})"
