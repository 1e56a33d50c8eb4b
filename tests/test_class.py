"""A class's worth of first_kernel submissions, written as learners write them: partial credit
where an answer is right, whatever the other cells hold; messages that name the cell and line.

The notebooks are made from the lab's own solution, so they follow it when it changes. Graded in
simulator mode (correctness only): vector_add and saxpy, 2 points each.
"""
from __future__ import annotations

import codecs
import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.submission import answer_of
from test_autograder import autograder, gradebook

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = ROOT / "labs" / "first_kernel" / "solutions" / "first_kernel.ipynb"
RELEASE = ROOT / "labs" / "first_kernel" / "first_kernel.ipynb"
EXERCISES = ("vector_add", "saxpy")


def answer_source(nb: dict, exercise: str) -> str:
    return "".join(next(c for c in nb["cells"] if answer_of(c) == exercise)["source"])


def with_answer(nb: dict, exercise: str, source: str) -> dict:
    nb = copy.deepcopy(nb)
    for cell in nb["cells"]:
        if answer_of(cell) == exercise:
            cell["source"] = source
    return nb


def as_py(nb: dict, marker: str | None = "# %%") -> str:
    """The answer cells as a .py file, as Jupyter's "Save as Python" gives it (with cell markers)."""
    parts = ["from numba import cuda\nimport numpy as np\n"]
    parts += ["".join(c["source"]) for c in nb["cells"] if answer_of(c)]
    return "\n\n".join(f"{marker}\n{p}" if marker else p for p in parts) + "\n"


SAXPY_BROKEN = "def saxpy(alpha, x, y, out)\n    pass\n"  # the colon forgotten: line 1 of its cell
# A helper in vector_add's cell, used by saxpy's; vector_add's cell then breaks on its last line.
HELPER = "def blocks_for(n, threads=256):\n    return (n + threads - 1) // threads\n\n\n"


def make_class(folder: Path) -> dict[str, dict]:
    """Write the class; return what each submission must score and say."""
    sol = json.loads(SOLUTION.read_text())
    release = json.loads(RELEASE.read_text())
    va, sx = answer_source(sol, "vector_add"), answer_source(sol, "saxpy")
    cases: dict[str, tuple[object, dict]] = {
        "solution.ipynb": (sol, {"vector_add": 2, "saxpy": 2}),
        "release.ipynb": (release, {"vector_add": 0, "saxpy": 0, "_says": {"vector_add": "NotImplementedError"}}),
        # A syntax error in one cell costs that exercise only, and the message names cell and line.
        "saxpy_syntax_error.ipynb": (with_answer(sol, "saxpy", SAXPY_BROKEN), {
            "vector_add": 2, "saxpy": 0,
            "_says": {"saxpy": "the answer cell for saxpy: SyntaxError at line 1"}}),
        # The stretch exercise half written: the others keep their points.
        "stretch_half_written.ipynb": (with_answer(sol, "vector_add_cupy", "def vector_add_cupy(a, b, out):\n    for\n"),
                                       {"vector_add": 2, "saxpy": 2}),
        # check() left in an answer cell, with the checker made there too: ignored, noted.
        "check_left_in.ipynb": (with_answer(sol, "vector_add", "from autograder import checker\n"
                                            "check = checker('first_kernel')\n" + va + "\n\ncheck(vector_add)\n"),
                                {"vector_add": 2, "saxpy": 2, "_notes": "check(vector_add)"}),
        # A cell that fails when run (after defining its function) costs its exercise, with the line.
        "runtime_error.ipynb": (with_answer(sol, "saxpy", sx + "\nprint(threads_per_block)\n"), {
            "vector_add": 2, "saxpy": 0,
            "_says": {"saxpy": "NameError: name 'threads_per_block' is not defined"}}),
        # A helper defined in a cell that does not compile: the exercise that uses it fails too, and
        # its message names the cell to fix.
        "helper_in_broken_cell.ipynb": (
            with_answer(with_answer(sol, "vector_add", HELPER + va + "\n\nvector_add(\n"), "saxpy",
                        sx.replace("blocks = min(1024, (out.size + threads - 1) // threads)",
                                   "blocks = min(1024, blocks_for(out.size))")),
            {"vector_add": 0, "saxpy": 0,
             "_says": {"vector_add": "the answer cell for vector_add: SyntaxError",
                       "saxpy": "blocks_for is defined in the answer cell for vector_add, which failed"}}),
        # .py files: a UTF-8 byte-order mark (Windows editors write one) ...
        "bom.py": (codecs.BOM_UTF8 + as_py(sol, None).encode(), {"vector_add": 2, "saxpy": 2}),
        # ... and Jupyter's "Save as Python" with one broken cell: split at its cell markers.
        "cells.py": (as_py(with_answer(sol, "saxpy", SAXPY_BROKEN)), {
            "vector_add": 2, "saxpy": 0, "_says": {"saxpy": "cells.py (cell 3, from line"}}),
    }
    expected = {}
    for name, (content, want) in cases.items():
        path = folder / name
        if isinstance(content, dict):
            path.write_text(json.dumps(content))
        else:
            path.write_bytes(content if isinstance(content, bytes) else content.encode())
        expected[Path(name).stem] = want
    # The graded name must not hide the original file.
    return expected


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("class")
    expected = make_class(folder)
    out = tmp_path_factory.mktemp("out")
    args = ["grade", "--lab", "first_kernel", "--simulator", "--seed", "7", "--out", str(out)]
    args += [a for e in EXERCISES for a in ("--exercise", e)]
    autograder(*args, str(folder))
    return out, expected


def messages(out: Path, sub: str) -> dict[str, str]:
    result = json.loads((out / sub / "results.json").read_text())
    said: dict[str, str] = {}
    for t in result["tests"]:
        ex = t.get("extra_data", {}).get("exercise")
        said[ex] = said.get(ex, "") + t.get("output", "")
    return {**said, "_result": result.get("output", "")}


@pytest.mark.parametrize("sub", ["solution", "release", "saxpy_syntax_error", "stretch_half_written", "check_left_in",
                                 "runtime_error", "helper_in_broken_cell", "bom", "cells"])
def test_the_class_grades_with_partial_credit(graded, sub):
    out, expected = graded
    want, row = expected[sub], gradebook(out)[sub]
    for ex in EXERCISES:
        assert float(row[ex]) == want[ex], (sub, ex, row, messages(out, sub).get(ex))
    said = messages(out, sub)
    for ex, words in want.get("_says", {}).items():
        assert words in said[ex], (sub, ex, said[ex])
    if "_notes" in want:
        assert want["_notes"] in said["_result"], said["_result"]


# --------------------------------------------------------------------------- an instructor's night
def grade(out: Path, *items, check=True, extra=()) -> subprocess.CompletedProcess:
    return autograder("grade", "--lab", "first_kernel", "--simulator", "--seed", "7", "--exercise", "vector_add",
                      "--out", str(out), *extra, *map(str, items), check=check)


def record(out: Path) -> dict:
    return json.loads((out / ".autograder.json").read_text())["submissions"]


BANK = ROOT / "tests" / "submissions" / "first_kernel"


def test_sections_keep_their_names_and_a_fixed_resubmission_is_regraded(tmp_path):
    subs, out = tmp_path / "subs", tmp_path / "out"
    for section, file in (("sec1", "correct.py"), ("sec2", "wrong_index.py")):
        (subs / section).mkdir(parents=True)
        (subs / section / "mallory.py").write_bytes((BANK / file).read_bytes())
    (subs / "sec1" / ".ipynb_checkpoints").mkdir()
    (subs / "sec1" / ".ipynb_checkpoints" / "mallory-checkpoint.py").write_text("x = 1\n")
    r = grade(out, subs)
    assert "mallory-checkpoint.py: hidden" in r.stderr  # skipped, and said
    assert {n: v["source"] for n, v in record(out).items()} == {"sec1__mallory": "sec1/mallory.py",
                                                                "sec2__mallory": "sec2/mallory.py"}
    assert [gradebook(out)[n]["vector_add"] for n in ("sec1__mallory", "sec2__mallory")] == ["2", "0"]
    # sec2's mallory fixes her kernel and resubmits under the same name: regraded, sec1 is not.
    (subs / "sec2" / "mallory.py").write_bytes((BANK / "correct.py").read_bytes())
    r = grade(out, subs)
    assert "skipping 1 already graded" in r.stderr
    assert gradebook(out)["sec2__mallory"]["vector_add"] == "2"
    # A section added later is graded, not matched to another section's result.
    (subs / "sec3").mkdir()
    (subs / "sec3" / "mallory.py").write_bytes((BANK / "off_by_one.py").read_bytes())
    grade(out, subs)
    assert gradebook(out)["sec3__mallory"]["vector_add"] == "0" and len(gradebook(out)) == 3


def test_an_exercise_graded_alone_then_the_rest(tmp_path):
    out = tmp_path / "out"
    grade(out, BANK / "correct.py")
    assert record(out)["correct"]["exercises"] == ["vector_add"]
    r = autograder("grade", "--lab", "first_kernel", "--simulator", "--seed", "7", "--exercise", "saxpy",
                   "--out", str(out), str(BANK / "correct.py"))
    assert "skipping" not in r.stderr  # saxpy was never graded: not "already graded"
    row = gradebook(out)["correct"]
    assert (row["vector_add"], row["saxpy"]) == ("2", "2"), row  # vector_add's result is kept
    assert record(out)["correct"]["exercises"] == ["saxpy", "vector_add"]


def test_a_second_grader_on_the_same_folder_is_refused(tmp_path):
    import fcntl

    out = tmp_path / "out"
    out.mkdir()
    with open(out / ".autograder.lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write("pid 1 on grader-1")
        held.flush()
        r = grade(out, BANK / "correct.py", check=False)
    assert r.returncode != 0 and "another autograder (pid 1 on grader-1) is grading into" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not (out / "correct").exists()


@pytest.mark.parametrize("problem", ["out_is_a_file", "full_disk"])
def test_an_output_folder_that_cannot_take_results_is_said_before_grading(tmp_path, problem, monkeypatch):
    from autograder import batch

    if problem == "out_is_a_file":
        (tmp_path / "file").write_text("")
        r = grade(tmp_path / "file" / "out", BANK / "correct.py", check=False)
        assert r.returncode != 0 and "cannot write to the output folder" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
    else:
        monkeypatch.setattr(batch.shutil, "disk_usage", lambda p: type("U", (), {"free": 10 << 20})())
        with pytest.raises(batch.OutputProblem, match="has 10 MiB free"):
            with batch.output_folder(tmp_path / "out", 200):
                pass


def _descendants(pid: int) -> set[int]:
    """Every process below ``pid``, from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            found.add(c)
            todo.append(c)
    return found


def _alive(pids: set[int]) -> set[int]:
    alive = set()
    for p in pids:
        try:
            state = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.add(p)
    return alive


def test_kill_9_then_resume_gives_the_uninterrupted_gradebook(tmp_path):
    import os
    import signal
    import time

    subs = tmp_path / "subs"
    subs.mkdir()
    for f in ("correct.py", "infinite_loop.py", "wrong_index.py", "off_by_one.py", "partial_write.py"):
        (subs / f).write_bytes((BANK / f).read_bytes())
    whole = tmp_path / "whole"
    grade(whole, subs, extra=("--timeout", "5"))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "autograder", "grade", "--lab", "first_kernel", "--simulator", "--seed", "7",
           "--exercise", "vector_add", "--timeout", "5", "--out", str(out), str(subs)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (out / ".autograder.json").exists():
        time.sleep(0.2)
    time.sleep(1.0)  # into the next submission (an endless loop): its judge and runner are running
    below = _descendants(proc.pid)
    assert below, "the grader had no judge running when it was killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 3  # at once: not when the submission's timeout runs out
    while _alive(below) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(below), f"processes left running after the grader was killed: {_alive(below)}"
    grade(out, subs, extra=("--timeout", "5"))  # resume
    assert gradebook(out) == gradebook(whole)
    assert not list(out.rglob(".tmp*")), "temporary folders left behind"


def test_a_report_of_a_folder_that_was_never_graded_says_so(tmp_path):
    r = autograder("report", "--lab", "first_kernel", str(tmp_path / "nowhere"), check=False)
    assert r.returncode != 0 and "is not a folder `autograder grade` wrote" in r.stderr and "Traceback" not in r.stderr
