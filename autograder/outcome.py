"""What grading one submission produces: a result per exercise, and the submission's."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field


@dataclass
class ExerciseResult:
    name: str
    title: str
    max_correctness: float
    max_speed: float
    correctness: float = 0.0
    speed: float = 0.0
    passed: bool = False
    message: str = ""
    cases: list[str] = field(default_factory=list)
    timing: dict | None = None
    flags: list[str] = field(default_factory=list)
    profile: dict | None = None  # --profile: how its kernels and the reference's use memory (never scored)
    reason: str = ""  # why correctness was lost, a REASONS code the grader chose: never read from a message

    def explain(self, reason: str, message: str) -> None:
        """Why correctness was not given: a REASONS code, and the message the learner reads."""
        self.reason, self.message = reason, message

    @property
    def score(self) -> float:
        return round(self.correctness + self.speed, 2)

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def checked(cls, d: dict, expected: "ExerciseResult") -> "ExerciseResult":
        """A result the judge sent back, checked against what it may contain: the points stay
        within the exercise's maximum, texts are texts. Anything else is a grader failure."""
        if not isinstance(d, dict) or d.get("name") != expected.name:
            raise ValueError("result for the wrong exercise")
        out = ExerciseResult(expected.name, expected.title, expected.max_correctness, expected.max_speed)
        out.correctness = _points(d.get("correctness"), expected.max_correctness)
        out.speed = _points(d.get("speed"), expected.max_speed)
        out.passed = bool(d.get("passed")) and out.correctness == expected.max_correctness
        out.message = str(d.get("message", ""))[:4000]
        out.reason = checked_reason(d.get("reason"), out.passed)
        out.cases = [str(c)[:500] for c in (d.get("cases") or [])][:200]
        out.flags = [str(f)[:1000] for f in (d.get("flags") or [])][:20]
        timing = d.get("timing")
        out.timing = timing if isinstance(timing, dict) else None
        out.profile = _profile(d.get("profile"))
        return out


# Why an exercise lost its correctness points: code -> the label reports show. The grader sets the
# code where it decides the outcome (the judge, the parent's static checks, the batch), from what it
# saw itself. It is never read from a message: a message can carry the learner's own exception text,
# and the learner must not choose between "needs a GPU" and "your code failed".
REASONS = {
    # the grader's side: not the learner's doing
    "needs_gpu": "needs a GPU",
    "needs_newer_gpu": "needs a newer GPU",
    "not_graded": "not graded",
    "grader_failure": "grader failure",
    # the parent's own reading of the file
    "no_usable_file": "no usable file",
    "syntax_error": "syntax error",
    "forbidden_call": "forbidden call",
    "forbidden_construct": "forbidden construct",
    "static_check": "refused by the static check",
    "missing_function": "missing function",
    "wrong_signature": "wrong signature",
    # what the learner's process did, as the judge saw it
    "load_failed": "code failed to load",
    "cell_failed": "a cell failed",
    "call_failed": "call failed",  # the runner answered that the call failed: an exception, a forbidden call
    "time_limit": "time limit",
    "memory_limit": "memory limit",
    "too_much_output": "too much output",
    "process_failed": "process crashed or stopped",
    # the judge's own comparison of the outputs
    "out_of_bounds": "out-of-bounds write",
    "not_freed": "memory not freed",  # faults the runner reports: leaked device memory, page-locked arrays
    "input_modified": "input modified",
    "never_written": "elements never written",
    "wrong_values": "wrong values",
    "sanitizer": "compute-sanitizer errors",
    "invalid_answer": "answer the engine refused",
    "below_bar": "below the bar",
    "other": "other",
}
PENDING_REASONS = ("needs_gpu",)  # not lost: the course's GPU run grades these


def checked_reason(code, passed: bool) -> str:
    """A reason code as recorded: one of REASONS, "" for a pass, "other" for anything else."""
    if passed:
        return ""
    return code if isinstance(code, str) and code in REASONS else "other"


def runner_stop_reason(message: str) -> str:
    """The reason for a RunnerFailed: the judge's and runproc's own words only (the runner process
    never writes them), so their fixed phrases tell which limit stopped it."""
    for phrase, code in (("did not finish within", "time_limit"), ("GB of host memory", "memory_limit"),
                         ("printed more than", "too_much_output")):
        if phrase in message:
            return code
    return "process_failed"


def mismatch_reason(message: str) -> str:
    """The reason for a case measure.compare failed without faults: its message holds only the lab's
    names and numbers, in fixed phrases."""
    if "was modified by the call" in message:
        return "input_modified"
    if "never set" in message or "(never written)" in message:
        return "never_written"
    return "wrong_values"


def _profile(d) -> dict | None:
    """A profile as the judge composed it, its parts checked (see memtrace.checked_profile)."""
    from .memtrace import checked_profile

    if not isinstance(d, dict):
        return None
    if d.get("error"):
        return {"error": str(d["error"])[:500]}
    case = d.get("case") if isinstance(d.get("case"), dict) else {}
    if d.get("tool") == "nsight":  # measured on a GPU: lists of kernels (nsight.Kernel.as_dict)
        from .nsight import checked_dicts

        return {"tool": "nsight",
                "case": {str(k)[:40]: v for k, v in list(case.items())[:8] if isinstance(v, int) and not isinstance(v, bool)},
                "yours": checked_dicts(d.get("yours")), "reference": checked_dicts(d.get("reference")),
                "findings": [str(f)[:600] for f in (d.get("findings") or []) if isinstance(f, str)][:12],
                "text": str(d.get("text", ""))[:6000], **({"report": str(d["report"])[:500]} if d.get("report") else {})}
    return {"case": {str(k)[:40]: v for k, v in list(case.items())[:8] if isinstance(v, int) and not isinstance(v, bool)},
            "yours": checked_profile(d.get("yours")), "reference": checked_profile(d.get("reference")),
            "findings": [str(f)[:600] for f in (d.get("findings") or []) if isinstance(f, str)][:12],
            "text": str(d.get("text", ""))[:6000]}


def _points(value, maximum: float) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return 0.0
    if not math.isfinite(v):
        return 0.0
    return round(min(max(v, 0.0), maximum), 2)


@dataclass
class SubmissionResult:
    submission: str
    lab: str
    mode: str
    exercises: list[ExerciseResult]
    seconds: float
    problem: str = ""
    log_tail: str = ""
    notes: list[str] = field(default_factory=list)  # how it was graded (e.g. without a sandbox)

    @property
    def score(self) -> float:
        return round(sum(e.score for e in self.exercises), 2)

    @property
    def max_score(self) -> float:
        return round(sum(e.max_correctness + e.max_speed for e in self.exercises), 2)
