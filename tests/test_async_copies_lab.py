"""Lab 22 (async_copies): the stencil of chapter 23 fed by a cp.async pipeline.

Without a GPU: the solution's CUDA C compiles with nvcc for compute capability 8.0 and 9.0 and its PTX
holds the pipeline's instructions; the spec, its float64 reference, forbidden names, mistakes bank and
attacks hang together; the release keeps no solution code; the lab is listed under chapter 23 and in
the solutions part, and the labs' titles are numbered in course order.
On a GPU of compute capability 8.0 or newer: in one run of the grader, the solution scores full marks
with speed, the release nothing, and each mistake of the bank no more than its expected grade.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from autograder.labs import get_lab, lab_names
from autograder.labs.async_copies import WEIGHTS
from autograder.measure import compare
from autograder.release import dumps, student_notebook, student_path
from autograder.submission import forbidden_uses, static_problems
from course import async_copies as ac
from course.cuda_tools import find

ROOT = Path(__file__).resolve().parents[1]
SOLUTION = ROOT / "labs" / "async_copies" / "solutions" / "async_copies.ipynb"
RELEASE = student_path(SOLUTION)
BANK = ROOT / "tests" / "submissions" / "async_copies_gpu"
ATTACKS = ROOT / "tests" / "submissions" / "attacks"
LAB = get_lab("async_copies")
EX = LAB.exercise("stencil_pipeline")
needs_nvcc = pytest.mark.skipif(find("nvcc") is None, reason="nvcc is not installed")


def _answer_cell(path: Path = SOLUTION) -> str:
    cells = json.loads(path.read_text())["cells"]
    return next("".join(c["source"]) for c in cells if c.get("metadata", {}).get("autograder"))


def _solution_cuda() -> str:
    """The CUDA C of the solution: the cp.async helpers, then the kernel's raw string."""
    code = _answer_cell()
    helpers = re.search(r'CP_ASYNC = r"""(.*?)"""', code, re.S).group(1)
    kernel = re.search(r'source = CP_ASYNC \+ r"""(.*?)"""', code, re.S).group(1)
    return helpers + kernel


def _expected_bank() -> dict:
    return {k: v for k, v in json.loads((BANK / "expected.json").read_text()).items() if not k.startswith("_")}


# --------------------------------------------------------------------------- CUDA C, without a GPU
@needs_nvcc
def test_the_solutions_cuda_compiles_for_ampere_and_hopper():
    source = _solution_cuda()
    with ThreadPoolExecutor(2) as pool:
        results = dict(zip(("sm_80", "sm_90"), pool.map(lambda arch: ac.nvcc_compile(source, arch), ("sm_80", "sm_90"))))
    for arch, (ok, text) in results.items():
        assert ok, (arch, text[:2000])
        assert re.search(r"cp\.async\.cg\.shared\.global", text) and "cp.async.commit_group" in text, arch
        assert "cp.async.wait_group 1" in text, arch  # 3 stages: at most one group left in flight
        assert "ld.global" not in text, arch  # x reaches shared memory by cp.async alone


# --------------------------------------------------------------------------- the lab's spec
def test_the_lab_is_registered_and_needs_ampere():
    assert "async_copies" in lab_names()
    assert LAB.title.startswith("Lab 22: ")
    assert EX.gpu_only and EX.backend == "cupy" and tuple(EX.min_cc) == ac.ASYNC_CC == (8, 0)
    assert EX.too_old((7, 5)) and "8.0" in EX.too_old((7, 5)) and not EX.too_old((8, 0))
    assert EX.speed is not None and EX.baseline is not None
    assert 4 * EX.timing_case["n"] >= 256 * 2**20  # memory-bound: far more than any L2 cache
    np.testing.assert_array_equal(WEIGHTS, ac.STENCIL_WEIGHTS)  # the chapter's weights


def test_the_cases_catch_edges_halos_and_tails():
    sizes = [p["n"] for p in EX.cases(False)]
    tile = ac.STENCIL_TILE
    assert min(sizes) == 1 and any(n < ac.RADIUS for n in sizes)  # smaller than the halo
    assert tile in sizes and tile + 1 in sizes  # one tile exactly, and a last tile of one value
    assert any(n % 4 for n in sizes if n > tile)  # tails no 16-byte copy fits
    assert max(sizes) > 2 * 132 * tile  # more tiles than a grid of two blocks per SM covers


def test_the_reference_is_the_chapters():
    rng = np.random.default_rng(22)
    for params in EX.cases(False)[:10]:
        inputs = EX.inputs(params, rng)
        ref = EX.reference(**inputs)
        np.testing.assert_allclose(ref["y"], ac.stencil_reference(inputs["x"]), rtol=1e-12, atol=1e-12)
        assert compare(EX, params, inputs, ref, inputs).passed, params


def test_a_stencil_one_place_off_fails():
    params = {"n": 5000}
    inputs = EX.inputs(params, np.random.default_rng(3))
    y = EX.reference(**inputs)["y"]
    assert not compare(EX, params, inputs, {"y": np.roll(y, 1)}, inputs).passed
    wrong_tail = y.copy()
    wrong_tail[-1] -= 0.2 * inputs["x"][-1] / 425 * 65  # the last value of x counted as zero in one output
    assert not compare(EX, params, inputs, {"y": wrong_tail}, inputs).passed


def test_the_solution_uses_nothing_forbidden():
    code = _answer_cell()
    assert not forbidden_uses(code, EX.name, EX.forbidden)
    assert not static_problems(code, EX.forbidden)


def test_the_release_is_regenerated_and_keeps_no_solution_code():
    assert RELEASE.read_text() == dumps(student_notebook(json.loads(SOLUTION.read_text()), "async_copies"))
    answer = _answer_cell(RELEASE)
    assert 'raise NotImplementedError("write your answer here")' in answer
    for solved in ("stencil_pipeline(const float", "cp_async_commit();", "_kernel = cp.RawKernel", "shared_mem="):
        assert solved not in answer, solved
    assert "CP_ASYNC = r" in answer  # the tools stay


def test_the_bank_of_mistakes():
    expected = _expected_bank()
    assert {p.stem for p in BANK.glob("*.py")} == set(expected)
    for sub, grades in expected.items():
        assert set(grades) == {EX.name}
        used = forbidden_uses((BANK / f"{sub}.py").read_text(), EX.name, EX.forbidden)
        if sub.startswith("library_"):  # library calls: the static check alone must refuse them
            assert used and grades[EX.name] == 0, sub
        else:  # honest kernels with a bug: nothing forbidden, the cases must catch them
            assert not used, (sub, used)


def test_the_attacks_are_listed_for_a_gpu():
    entries = {k.split("/", 1)[1]: v for k, v in json.loads((ATTACKS / "expected.json").read_text()).items()
               if k.startswith("async_copies/")}
    assert {p.stem for p in (ATTACKS / "async_copies").glob("*.py")} == set(entries)
    for name, entry in entries.items():
        assert entry["modes"] == ["gpu"] and entry["exercise"] == EX.name, name
        assert entry["max_points"] == (EX.points if entry["class"] == "speed" else 0), name


# --------------------------------------------------------------------------- the course's order
def _toc_files() -> list[str]:
    import yaml

    def files(entries):
        for e in entries or []:
            if "file" in e:
                yield e["file"]
            yield from files(e.get("sections"))

    return [f for part in yaml.safe_load((ROOT / "_toc.yml").read_text())["parts"] for f in files(part["chapters"])]


def test_the_lab_is_listed_under_its_chapter_and_in_the_solutions():
    toc = _toc_files()
    page = "labs/async_copies/async_copies"
    assert toc.index(page) == toc.index("chapters/23_async_copies") + 1
    assert "labs/async_copies/solutions/async_copies" in toc
    chapter = (ROOT / "chapters" / "23_async_copies.ipynb").read_text()
    assert "](../labs/async_copies/async_copies.ipynb)" in chapter and "Lab 22: asynchronous copies" in chapter


def test_lab_titles_are_numbered_in_course_order():
    """Lab 0 to the last, in the order the book lists the labs, in the specs and the notebooks."""
    toc = _toc_files()
    order = [f.split("/")[1] for f in toc if re.fullmatch(r"labs/(\w+)/\1", f)]
    assert sorted(order) == lab_names()
    for number, lab in enumerate(order):
        assert get_lab(lab).title.startswith(f"Lab {number}: "), (lab, get_lab(lab).title)
        first = json.loads((ROOT / "labs" / lab / "solutions" / f"{lab}.ipynb").read_text())["cells"][0]
        assert "".join(first["source"]).startswith(f"# Lab {number}: "), lab


# --------------------------------------------------------------------------- on a GPU
def _cc() -> tuple[int, int]:
    import cupy as cp

    cc = int(cp.cuda.Device().compute_capability)
    return cc // 10, cc % 10


@pytest.mark.gpu
def test_gpu_solution_full_release_zero_and_the_mistakes_bank(tmp_path):
    if _cc() < ac.ASYNC_CC:
        pytest.skip("cp.async needs compute capability 8.0")
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "solution.ipynb").write_bytes(SOLUTION.read_bytes())
    (subs / "release.ipynb").write_bytes(RELEASE.read_bytes())
    expected = _expected_bank()
    for sub in expected:
        (subs / f"{sub}.py").write_bytes((BANK / f"{sub}.py").read_bytes())
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "autograder", "grade", "--lab", "async_copies", "--out", str(out),
                        "--timeout", "120", str(subs)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr

    def score(sub: str, part: str | None = None) -> float:
        tests = json.loads((out / sub / "results.json").read_text())["tests"]
        return sum(t["score"] for t in tests if part is None or t["extra_data"]["part"] == part)

    assert score("solution", "correctness") == EX.points
    assert score("solution") >= EX.points + 0.8 * EX.speed.points
    assert score("release") == 0
    for sub, grades in expected.items():
        assert score(sub) <= grades[EX.name], (sub, score(sub))
