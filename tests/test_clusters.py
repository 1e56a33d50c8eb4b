"""Chapter 24 (thread-block clusters) and its lab `clusters`.

Without a GPU: every CUDA C source of course/clusters.py and of the lab's solution compiles for
compute capability 9.0 (nvcc) and not for 8.0; NVRTC's PTX holds the cluster instructions; the
lab's spec, references, forbidden names and hostile submissions hang together; the notebooks are
unexecuted with unique ids and run their kernels only in guarded %%gpu cells.
On a GPU of compute capability 9.0: the kernels are right on awkward sizes, the solution scores
full marks, and each hostile submission no more than its expected grade. Below 9.0: the chapter
and the lab's checks skip with one line, no traceback.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from autograder.labs import get_lab, lab_names
from autograder.measure import compare
from autograder.submission import forbidden_uses, static_problems
from course import clusters

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = ROOT / "chapters" / "24_clusters.ipynb"
SOLUTION = ROOT / "labs" / "clusters" / "solutions" / "clusters.ipynb"
BANK = ROOT / "tests" / "submissions" / "clusters_gpu"
GPU = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") in ("", "0")  # the root conftest decides
LAB = get_lab("clusters")
needs_nvcc = pytest.mark.skipif(not clusters.nvcc_available(), reason="nvcc is not installed")


def _cells(path: Path, kind: str = "code") -> list[dict]:
    return [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == kind]


def _source(cell: dict) -> str:
    return "".join(cell["source"])


def _answer_cells() -> dict[str, str]:
    return {c["metadata"]["autograder"]["answer"]: _source(c) for c in _cells(SOLUTION)
            if c.get("metadata", {}).get("autograder")}


def _solution_cuda_sources() -> list[str]:
    """The CUDA C of the solution's answers: the cluster helper, then each kernel's raw string."""
    cells = _answer_cells()
    api = re.search(r'CLUSTER_API = r"""(.*?)"""', cells["cluster_histogram"], re.S).group(1)
    kernels = [re.search(r'source = CLUSTER_API \+ r"""(.*?)"""', code, re.S).group(1) for code in cells.values()]
    return [api + k for k in kernels]


# --------------------------------------------------------------------------- CUDA C, without a GPU
@needs_nvcc
@pytest.mark.parametrize("name", sorted(clusters.SOURCES))
@pytest.mark.parametrize("cluster", [1, 16])  # no cluster, and the largest (non-portable) one
def test_course_sources_compile_for_hopper(name, cluster):
    ok, log = clusters.compile_check(clusters.SOURCES[name], cluster, "sm_90")
    assert ok, log


@needs_nvcc
@pytest.mark.parametrize("name", sorted(clusters.SOURCES))
def test_course_sources_do_not_compile_below_hopper(name):
    ok, log = clusters.compile_check(clusters.SOURCES[name], 4, "sm_80")
    assert not ok and "cluster" in log.lower(), log


@needs_nvcc
def test_the_solutions_cuda_compiles_for_hopper():
    sources = _solution_cuda_sources()
    assert len(sources) == len(LAB.exercises)
    for src in sources:
        ok, log = clusters.compile_check(src, 8, "sm_90")
        assert ok, log


@pytest.mark.parametrize("name, kernel", [("ranks", "cluster_ranks"), ("histogram", "hist_cluster"),
                                          ("row_sums", "row_sums_cluster")])
def test_nvrtc_puts_the_cluster_size_and_the_cluster_instructions_in_the_ptx(name, kernel):
    pytest.importorskip("cuda.bindings.nvrtc")
    lines = clusters.cluster_lines(clusters.ptx(clusters.SOURCES[name], 4), kernel)
    text = "\n".join(lines)
    for needed in (".reqnctapercluster 4, 1, 1", "barrier.cluster.arrive", "barrier.cluster.wait", "mapa"):
        assert needed in text, text


def test_nvrtc_refuses_the_cluster_api_below_hopper():
    pytest.importorskip("cuda.bindings.nvrtc")
    with pytest.raises(RuntimeError, match="__cluster"):
        clusters.ptx(clusters.RANKS_SOURCE, 4, arch="compute_80")


# --------------------------------------------------------------------------- the lab's spec
def test_the_lab_is_registered_and_needs_hopper():
    assert "clusters" in lab_names()
    for ex in LAB.exercises:
        assert ex.gpu_only and ex.backend == "cupy" and tuple(ex.min_cc) == (9, 0)
        assert ex.too_old((8, 9)) and "9.0" in ex.too_old((8, 9)) and not ex.too_old((9, 0))
        assert ex.speed is not None and ex.baseline is not None and ex.timing_case is not None
    hist = LAB.exercise("cluster_histogram")
    assert dict(hist.renew_inputs) == {"x": "nbins"}  # integer inputs: timed calls get renewed values
    assert hist.timing_case["nbins"] * 4 > 227 * 1024  # more bins than one block's shared memory holds


@pytest.mark.parametrize("name", [e.name for e in LAB.exercises])
def test_the_references_pass_their_own_cases(name):
    ex = LAB.exercise(name)
    rng = np.random.default_rng(24)
    for params in ex.cases(False):
        inputs = ex.inputs(params, rng)
        assert compare(ex, params, inputs, ex.reference(**inputs), inputs).passed, params


def test_a_histogram_that_misses_one_value_fails():
    ex = LAB.exercise("cluster_histogram")
    params = {"n": 100_003, "nbins": 65536, "skew": 0}
    inputs = ex.inputs(params, np.random.default_rng(1))
    bins = ex.reference(**inputs)["bins"].copy()
    bins[inputs["x"][-1]] -= 1
    assert not compare(ex, params, inputs, {"bins": bins}, inputs).passed


def test_sampled_row_sums_fail_on_the_timing_inputs():
    """The attack sampled_row_sums.py sums every other value and doubles: its answers must be
    wrong on the timing inputs (here on fewer rows of the timed length)."""
    ex = LAB.exercise("cluster_row_sums")
    params = {"rows": 4, "cols": ex.timing_case["cols"]}
    x = ex.timing_inputs(params, np.random.default_rng(2))["x"]
    sampled = 2 * x[:, ::2].astype(np.float64).sum(axis=1)
    assert compare(ex, params, {"x": x}, {"out": x.astype(np.float64).sum(axis=1)}, {"x": x}).passed
    assert not compare(ex, params, {"x": x}, {"out": sampled}, {"x": x}).passed


def test_the_solution_uses_nothing_forbidden():
    for name, code in _answer_cells().items():
        ex = LAB.exercise(name)
        assert not forbidden_uses(code, name, ex.forbidden), name
        assert not static_problems(code, ex.forbidden), name


def test_the_bank_of_hostile_submissions():
    expected = {k: v for k, v in json.loads((BANK / "expected.json").read_text()).items() if not k.startswith("_")}
    assert {p.stem for p in BANK.glob("*.py")} == set(expected)
    names = {e.name for e in LAB.exercises}
    for sub, grades in expected.items():
        code = (BANK / f"{sub}.py").read_text()
        assert set(grades) <= names
        for exercise in grades:
            used = forbidden_uses(code, exercise, LAB.exercise(exercise).forbidden)
            if grades[exercise] == 0:  # library calls: the static check alone must refuse them
                assert used, (sub, exercise)
            else:  # speed attacks: nothing forbidden, so the timing loop must defeat them
                assert not used, (sub, exercise, used)


# --------------------------------------------------------------------------- the notebooks
def test_the_chapter_runs_kernels_only_in_guarded_gpu_cells():
    for cell in _cells(CHAPTER):
        src = _source(cell)
        launches = any(f"clusters.{fn}(" in src for fn in ("cluster_ranks", "histogram_global", "histogram_block",
                                                            "histogram_cluster", "row_sums_cluster", "time_histograms",
                                                            "time_row_sums"))
        if launches:
            assert src.startswith("%%gpu ") and "\nif HOPPER:" in src, src[:200]


def test_the_chapter_prose_quotes_no_measured_number():
    """Every measured figure is printed by a cell: the prose names no GB/s, microseconds or speed-up."""
    for cell in _cells(CHAPTER, "markdown"):
        text = _source(cell)
        assert not re.search(r"\d\s*(GB/s|µs|us\b|ms\b|x faster|× faster)", text), text[:200]


# --------------------------------------------------------------------------- on a GPU
def _cc() -> tuple[int, int]:
    import cupy as cp

    cc = int(cp.cuda.Device().compute_capability)
    return cc // 10, cc % 10


def _solution_functions() -> dict:
    ns = {"np": np, "math": __import__("math")}
    for code in _answer_cells().values():
        exec(compile(code, str(SOLUTION), "exec"), ns)
    return ns


@pytest.mark.gpu
def test_gpu_below_hopper_the_chapter_and_the_lab_skip_cleanly(capsys):
    if _cc() >= clusters.NEEDS:
        pytest.skip("this GPU has clusters")
    assert not clusters.supported()
    from autograder import checker

    fns = _solution_functions()
    result = checker("clusters")(fns["cluster_histogram"])
    out = capsys.readouterr().out
    assert result.points == 0 and "9.0" in out and "Traceback" not in out, out
    from course.notebooks import run

    nb, _ = run(CHAPTER)
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "needs compute capability 9.0" in printed and "Traceback" not in printed
    assert printed.count("needs compute capability 9.0") == 1


hopper = pytest.mark.skipif(not GPU or not clusters.supported(), reason="needs a GPU of compute capability 9.0")


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("size", [1, 2, 4, 8, 16])
def test_gpu_ranks_and_neighbours(size):
    rank_of, read = clusters.cluster_ranks(32, size)
    b = np.arange(32)
    nxt = (b % size + 1) % size
    assert np.array_equal(rank_of, b % size)
    assert np.array_equal(read, 100 * (b - b % size + nxt) + nxt)


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("n, nbins", [(1, 1), (31, 7), (1025, 4099), (33, 65536), (100_003, 65536),
                                      (2_000_003, 3), (1_000_003, 40_961)])
def test_gpu_histograms_right_on_awkward_sizes(n, nbins):
    import cupy as cp

    values = np.random.default_rng(n).integers(0, nbins, size=n, dtype=np.int32)
    want = np.bincount(values, minlength=nbins)
    x = cp.asarray(values)
    runs = {"global": clusters.histogram_global}
    if clusters.histogram_fits(nbins, 1):
        runs["block"] = clusters.histogram_block
    for c in (2, 4, 8, 16):
        if clusters.histogram_fits(nbins, c):
            runs[f"cluster {c}"] = lambda x, b, c=c: clusters.histogram_cluster(x, b, c)
    for name, run in runs.items():
        bins = cp.full(nbins, -1, cp.int32)
        run(x, bins)
        assert np.array_equal(cp.asnumpy(bins), want), name


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("rows, cols", [(1, 1), (1, 33), (3, 1025), (33, 31), (7, 100_003), (4099, 3)])
def test_gpu_row_sums_right_on_awkward_shapes(rows, cols):
    import cupy as cp

    xs = clusters.row_matrix(rows, cols, seed=cols)
    want = xs.astype(np.float64).sum(axis=1)
    x = cp.asarray(xs)
    for name, run in {**{f"cluster {c}": (lambda o, c=c: clusters.row_sums_cluster(x, o, c)) for c in (1, 2, 8, 16)},
                      "atomic": lambda o: clusters.row_sums_atomic(x, o, 8)}.items():
        out = cp.full(rows, np.nan, cp.float32)
        run(out)
        assert np.abs(cp.asnumpy(out) - want).max() <= 1e-4 * np.abs(want).max(), name


@pytest.mark.gpu
@hopper
def test_gpu_cluster_row_sums_are_the_same_on_every_run():
    import cupy as cp

    x = cp.asarray(clusters.row_matrix(16, 1 << 18, seed=3))
    out = cp.empty(16, cp.float32)
    seen = set()
    for _ in range(10):
        clusters.row_sums_cluster(x, out, 8)
        seen.add(cp.asnumpy(out).tobytes())
    assert len(seen) == 1


@pytest.mark.gpu
@hopper
def test_gpu_reduction_and_histogram_timings_against_global_atomics():
    r = clusters.reduction_vs_global_atomics(rows=64, cols=1 << 20)
    h = clusters.histogram_vs_global_atomics(n=1 << 24)
    assert all(v > 0 for v in (r["cluster"], r["global_atomics"], h["cluster"], h["global_atomics"]))


@pytest.mark.gpu
@hopper
def test_gpu_the_solution_scores_full_marks():
    from autograder import checker

    check = checker("clusters")
    fns = _solution_functions()
    for ex in LAB.exercises:
        result = check(fns[ex.name])
        assert result.passed and result.points >= ex.points + 0.8 * ex.speed.points, (ex.name, result)


@pytest.mark.gpu
@hopper
def test_gpu_hostile_submissions_score_no_more_than_expected(tmp_path):
    expected = {k: v for k, v in json.loads((BANK / "expected.json").read_text()).items() if not k.startswith("_")}
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "autograder", "grade", "--lab", "clusters", "--out", str(out),
                        "--timeout", "120", *[str(BANK / f"{s}.py") for s in expected]],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    for sub, grades in expected.items():
        tests = json.loads((out / sub / "results.json").read_text())["tests"]
        for exercise, most in grades.items():
            got = sum(t["score"] for t in tests if t["name"].split(":")[0] == exercise)
            assert got <= most, (sub, exercise, got, most, [t for t in tests if t["name"].startswith(exercise)])
