"""Lab 24 (custom_ops): honest mistakes in the registration (tests/submissions/custom_ops) cost the
exercise they belong to, and the feedback says each in a sentence: which of opcheck's tests, which
tensor, which property; never a pointer to a stack trace the learner cannot see. Graded through the
command line in simulator mode, as an instructor would run it, on the registration exercises."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parent.parent
BANK = ROOT / "tests" / "submissions" / "custom_ops"
EXPECTED = {k: v for k, v in json.loads((BANK / "expected.json").read_text()).items() if not k.startswith("_")}
RELEASE = ROOT / "labs" / "custom_ops" / "custom_ops.ipynb"
EXERCISES = ("silu_mul_op", "silu_mul_op_grad", "silu_mul_op_compiled")
# What feedback must never say: a stack trace the learner has no way to scroll to, the grader's own frames.
NEVER = ("scroll up", "stack trace", "<grader", "opcheck_once")

sys.path.insert(0, str(ROOT / "tests"))
from test_autograder import autograder  # noqa: E402


def _feedback(res: dict, exercise: str) -> str:
    from autograder.results import md_unescape

    return md_unescape("\n".join(str(t.get("output", "")) for t in res["tests"]
                                  if t["extra_data"]["exercise"] == exercise))


def _score(res: dict, exercise: str) -> float:
    return sum(float(t["score"]) for t in res["tests"] if t["extra_data"]["exercise"] == exercise)


def test_each_mistake_costs_its_own_exercise_and_is_named(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    for name in EXPECTED:
        if name == "release":
            shutil.copy(RELEASE, subs / "release.ipynb")
        else:
            shutil.copy(BANK / f"{name}.py", subs / f"{name}.py")
    out = tmp_path / "out"
    autograder("grade", "--lab", "custom_ops", "--out", out, "--simulator",
               *(a for e in EXERCISES for a in ("--exercise", e)), subs)
    problems = []
    for name, want in EXPECTED.items():
        res = json.loads((out / name / "results.json").read_text())
        for exercise, points in want["scores"].items():
            if _score(res, exercise) != points:
                problems.append(f"{name}: {exercise} scored {_score(res, exercise)}, expected {points}: "
                                f"{_feedback(res, exercise)[:400]!r}")
        for exercise, words in want.get("words", {}).items():
            said = _feedback(res, exercise)
            problems += [f"{name}: {exercise}'s feedback lacks {w!r}: {said[:600]!r}" for w in words if w not in said]
        for exercise in EXERCISES:
            said = _feedback(res, exercise)
            problems += [f"{name}: {exercise}'s feedback says {w!r}: {said[:600]!r}" for w in NEVER if w in said]
    assert not problems, "\n".join(problems)
