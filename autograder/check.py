"""``check()`` for learners: the grader's own cases and timing, run in the notebook."""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import numpy as np

from . import measure
from .labs import get_lab
from .submission import forbidden_uses


@dataclass
class CheckResult:
    exercise: str
    passed: bool
    cases: list = field(default_factory=list)
    speed: measure.SpeedResult | None = None
    points: float = 0.0
    max_points: float = 0.0

    def __repr__(self) -> str:
        ok = sum(c.passed for c in self.cases)
        text = f"<{self.exercise}: {ok}/{len(self.cases)} cases passed, {self.points:g}/{self.max_points:g} points"
        if self.speed is not None and self.speed.ratio is not None:
            text += f", {self.speed.ratio:.2f}x the reference"
        return text + ">"


def checker(lab_name: str):
    """Return ``check(fn)`` for one lab: ``check = checker("first_kernel"); check(vector_add)``."""
    lab = get_lab(lab_name)

    def check(fn, exercise: str | None = None, speed: bool = True) -> CheckResult:
        ex = lab.exercise(exercise or fn.__name__)
        dev = measure.device()
        result = CheckResult(ex.name, False, max_points=ex.max_points)
        if ex.gpu_only and dev.simulator:
            print(f"{ex.name}: needs a GPU (the simulator cannot run it); not checked here.")
            return result
        try:
            source = inspect.getsource(fn)
        except (OSError, TypeError):
            source = ""
        for use in forbidden_uses(source, ex.name, ex.forbidden):
            print(f"warning: {use} is forbidden in this exercise; the grader gives 0 for it")
        rng = np.random.default_rng()
        if ex.simulate is not None:
            return _check_policy(ex, fn, rng, dev.simulator, result)
        print(f"{ex.title}: {ex.name}({', '.join(ex.args)})")
        print(f"  {'case':<28} {'result':<6} {'max abs err':>11}  note")
        for params in ex.cases(dev.simulator):
            inputs = ex.inputs(params, rng)
            guard = measure.ForbiddenGuard(ex.forbidden)
            label = measure.describe(params)
            try:
                outputs, after, faults = measure.run_case(ex, fn, params, inputs, guard)
            except NotImplementedError:
                print(f"  {label:<28} {'FAIL':<6} {'':>11}  not implemented yet")
                result.cases.append(measure.CaseResult(dict(params), False, None, "not implemented"))
                return result
            except Exception as exc:
                print(f"  {label:<28} {'FAIL':<6} {'':>11}  raised {type(exc).__name__}: {exc}")
                result.cases.append(measure.CaseResult(dict(params), False, None, str(exc)))
                raise
            if guard.used:
                res = measure.CaseResult(dict(params), False, None,
                                         "called forbidden " + ", ".join(sorted(set(guard.used))))
            else:
                res = measure.compare(ex, params, inputs, outputs, after, faults)
            result.cases.append(res)
            err = "" if res.max_abs_err is None else f"{res.max_abs_err:.2g}"
            print(f"  {label:<28} {'pass' if res.passed else 'FAIL':<6} {err:>11}  {res.message}")
        result.passed = all(c.passed for c in result.cases)
        result.points = ex.points if result.passed else 0.0
        if not result.passed:
            print(f"Correctness: {sum(c.passed for c in result.cases)}/{len(result.cases)} cases. "
                  "Fix the failing cases first; speed is measured once all pass.")
            return result
        print(f"Correctness: all {len(result.cases)} cases pass ({ex.points:g} point{'s' * (ex.points != 1)}).")
        if not (speed and ex.speed):
            return result
        s = measure.time_exercise(ex, fn)
        result.speed = s
        if not s.measured:
            print(f"Speed: {s.message}.")
            return result
        line = f"Speed: median {s.median_s * 1e6:.1f} us"
        if s.gbps is not None:
            line += f", {s.gbps:.0f} GB/s = {s.pct_of_copy:.0f}% of this GPU's copy bandwidth ({s.copy_gbps:.0f} GB/s)"
        if s.gflops is not None:
            line += f", {s.gflops:.0f} GFLOP/s"
        print(line)
        if s.ratio is not None:
            pts = ex.speed.score(s.ratio)
            result.points += pts
            print(f"       {s.ratio:.2f}x the speed of the {ex.baseline_name} ({s.baseline_median_s * 1e6:.1f} us): "
                  f"{pts:g}/{ex.speed.points:g} speed points (full at {ex.speed.full_at:g}x)")
        for flag in s.flags:
            print(f"  flag: {flag}")
        return result

    return check


def _check_policy(ex, fn, rng, simulator: bool, result: CheckResult) -> CheckResult:
    """A policy exercise: simulate every case, then judge the records as the grader does."""
    print(f"{ex.title}: {ex.name}({', '.join(ex.args)})")
    cases = [(dict(p), ex.inputs(p, rng)) for p in ex.cases(simulator)]
    try:
        records = [ex.simulate(fn, params, inputs) for params, inputs in cases]
    except NotImplementedError:
        print("  not implemented yet")
        return result
    verdict = ex.assess(cases, records)
    failing = [line for line in verdict.lines if not line.startswith("pass")]
    for line in failing[:5]:  # dozens of cases: show what to fix, not every pass
        print("  " + line)
    if len(failing) > 5:
        print(f"  ... and {len(failing) - 5} more")
    print(("Correctness: " if verdict.passed else "") + verdict.message)
    result.cases = [measure.CaseResult(p, line.startswith("pass"), None, line)
                    for (p, _), line in zip(cases, verdict.lines)]
    result.passed = verdict.passed
    if not verdict.passed:
        return result
    result.points = ex.points
    if ex.speed is not None:
        pts = ex.speed.score(verdict.ratio)
        result.points += pts
        print(f"{verdict.summary}: {pts:g}/{ex.speed.points:g} speed points (full at {ex.speed.full_at:g}x)")
    return result
