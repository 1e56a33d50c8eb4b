"""Every lab, found automatically: release is reproducible, the solution grades full
and the student release grades zero."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from autograder.labs import get_lab, lab_names
from autograder.release import (RELATIVE_LINK, SOLUTIONS_PART, dumps, release_note, solution_link,
                                student_notebook, student_path)
from autograder.submission import answer_of, strip_magics
from course.notebooks import student_notebooks

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from test_autograder import GPU_MODE, autograder, gradebook  # noqa: E402

LABS = lab_names()


def solution(lab: str) -> Path:
    return ROOT / "labs" / lab / "solutions" / f"{lab}.ipynb"


def test_every_lab_folder_has_a_spec_and_back():
    folders = sorted(p.name for p in (ROOT / "labs").iterdir() if p.is_dir())
    assert folders == LABS


@pytest.mark.parametrize("lab", LABS)
def test_student_release_is_regenerated_exactly(lab):
    src = solution(lab)
    want = dumps(student_notebook(json.loads(src.read_text()), lab))
    have = student_path(src).read_text()
    assert have == want, f"{student_path(src)} differs from its release: run `autograder release`"


def test_solutions_have_the_last_part_of_the_site_and_each_release_links_to_its_own():
    """So "Next" from a lab leads to the next chapter, and a solution is opened on purpose."""
    import yaml

    def files(entries):
        for e in entries or []:
            if "file" in e:
                yield e["file"]
            yield from files(e.get("sections"))

    parts = {p["caption"]: list(files(p["chapters"])) for p in yaml.safe_load((ROOT / "_toc.yml").read_text())["parts"]}
    assert list(parts)[-1] == SOLUTIONS_PART, f"the last part of _toc.yml is not {SOLUTIONS_PART!r}"
    elsewhere = [f for caption, fs in parts.items() if caption != SOLUTIONS_PART for f in fs if "/solutions/" in f]
    assert not elsewhere, f"solutions outside {SOLUTIONS_PART!r}: {elsewhere}"
    for lab in LABS:
        assert f"labs/{lab}/solutions/{lab}" in parts[SOLUTIONS_PART], f"{lab}'s solution is not in the site"
        assert f"]({solution_link(lab)})" in release_note(lab)
        assert student_path(solution(lab)).parent / solution_link(lab) == solution(lab)


@pytest.mark.parametrize("lab", LABS)
def test_the_release_links_resolve_from_its_own_folder(lab):
    """The release sits one folder above the solution, so its relative links are rewritten."""
    nb = student_notebook(json.loads(solution(lab).read_text()), lab)
    folder = student_path(solution(lab)).parent
    targets = [m["target"] for c in nb["cells"] if c["cell_type"] == "markdown" for m in RELATIVE_LINK.finditer(c["source"])]
    assert solution_link(lab) in targets
    missing = [t for t in targets if not (folder / t).exists()]
    assert not missing, f"links in {student_path(solution(lab))} that lead nowhere: {missing}"


@pytest.mark.parametrize("lab", LABS)
def test_every_exercise_has_one_marked_answer_cell(lab):
    """An exercise answered by a registration (Exercise.entry) may have no cell of its own (the
    grader calls the registered operator), but then the notebook checks it by name."""
    nb = json.loads(solution(lab).read_text())
    answers = [answer_of(c) for c in nb["cells"] if answer_of(c)]
    assert len(answers) == len(set(answers)), answers
    exercises = get_lab(lab).exercises
    assert set(answers) <= {e.name for e in exercises}, answers
    code = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    for ex in exercises:
        if ex.entry and ex.name not in answers:
            assert f'check(exercise="{ex.name}")' in code, ex.name
        else:
            assert ex.name in answers, ex.name
    for cell in nb["cells"]:
        if answer_of(cell):
            assert "### BEGIN SOLUTION" in "".join(cell["source"])


@pytest.mark.parametrize("path", student_notebooks(), ids=lambda p: p.name)
def test_student_cells_compile(path):
    for i, cell in enumerate(json.loads(path.read_text())["cells"]):
        if cell["cell_type"] == "code":
            compile(strip_magics("".join(cell["source"])), f"{path.name} cell {i}", "exec")


def _grade_both(lab: str, tmp_path: Path) -> Path:
    """The solution and the release graded in one run, as a class is (one judge for both)."""
    mode = [] if GPU_MODE else ["--simulator"]
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "solution.ipynb").write_bytes(solution(lab).read_bytes())
    (subs / "release.ipynb").write_bytes(student_path(solution(lab)).read_bytes())
    autograder("grade", "--lab", lab, "--out", str(tmp_path / "out"), *mode, str(subs))
    return tmp_path / "out"


def _feedback(out: Path, name: str, exercise: str) -> str:
    tests = json.loads((out / name / "results.json").read_text())["tests"]
    return "\n".join(t["output"] for t in tests if t["extra_data"]["exercise"] == exercise)[:3000]


def _correctness(out: Path, name: str) -> dict[str, float]:
    tests = json.loads((out / name / "results.json").read_text())["tests"]
    return {t["extra_data"]["exercise"]: t["score"] for t in tests if t["extra_data"]["part"] == "correctness"}


@pytest.mark.parametrize("lab", LABS)
def test_solution_full_correctness_and_student_zero(lab, tmp_path):
    out = _grade_both(lab, tmp_path)
    book = gradebook(out)
    assert sorted(book) == ["release", "solution"], book
    student, solved = book["release"], _correctness(out, "solution")
    for ex in get_lab(lab).exercises:
        if GPU_MODE or not ex.gpu_only:
            assert solved[ex.name] == ex.points, (ex.name, solved, _feedback(out, "solution", ex.name))
        assert float(student[ex.name]) == 0, (ex.name, student)


@pytest.mark.gpu
@pytest.mark.parametrize("lab", LABS)
def test_solution_full_marks_with_speed(lab, tmp_path):
    """Speed points too; run with the other GPU tests, alone, so timings are undisturbed."""
    solution_row = gradebook(_grade_both(lab, tmp_path))["solution"]
    assert float(solution_row["total"]) == get_lab(lab).max_points, solution_row
