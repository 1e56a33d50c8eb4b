"""A class's worth of first_kernel submissions, written as learners write them: partial credit
where an answer is right, whatever the other cells hold; messages that name the cell and line.

The notebooks are made from the lab's own solution, so they follow it when it changes. Graded in
simulator mode (correctness only): vector_add and saxpy, 2 points each.
"""
from __future__ import annotations

import codecs
import copy
import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.submission import answer_of

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = ROOT / "labs" / "first_kernel" / "solutions" / "first_kernel.ipynb"
RELEASE = ROOT / "labs" / "first_kernel" / "first_kernel.ipynb"
EXERCISES = ("vector_add", "saxpy")


def autograder(*args, check=True) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "autograder", *args], capture_output=True, text=True, cwd=ROOT)
    if check and r.returncode != 0:
        raise AssertionError(f"autograder {' '.join(args)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r


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


def book(out: Path) -> dict[str, dict]:
    with open(out / "grades.csv", newline="") as f:
        return {row["submission"]: row for row in csv.DictReader(f)}


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
    want, row = expected[sub], book(out)[sub]
    for ex in EXERCISES:
        assert float(row[ex]) == want[ex], (sub, ex, row, messages(out, sub).get(ex))
    said = messages(out, sub)
    for ex, words in want.get("_says", {}).items():
        assert words in said[ex], (sub, ex, said[ex])
    if "_notes" in want:
        assert want["_notes"] in said["_result"], said["_result"]
