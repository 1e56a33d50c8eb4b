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
        out.cases = [str(c)[:500] for c in (d.get("cases") or [])][:200]
        out.flags = [str(f)[:1000] for f in (d.get("flags") or [])][:20]
        timing = d.get("timing")
        out.timing = timing if isinstance(timing, dict) else None
        out.profile = _profile(d.get("profile"))
        return out


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
