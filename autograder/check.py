"""``check()`` for learners: the grader's own cases, judge and timing, run in the notebook.

The same judge as batch grading (``judge.py``), in this process: it owns the buffers, poisons
and reads them, and times with its own events; the learner's function is called directly.
Nothing is sandboxed here: it is the learner's own machine and code.
"""
from __future__ import annotations

import contextlib
import inspect
import sys
import warnings
import textwrap
from dataclasses import dataclass, field

import numpy as np

from .judge import CaseFailed, Judge, Options
from .labs import get_lab
from .measure import CaseResult, compare, describe
from .submission import forbidden_uses, static_problems
from .timing import SpeedResult


@dataclass
class CheckResult:
    exercise: str
    passed: bool
    cases: list = field(default_factory=list)
    speed: SpeedResult | None = None
    points: float = 0.0
    max_points: float = 0.0
    profile: dict | None = None  # with profile=True: the figures of the learner's run and the reference's

    def __repr__(self) -> str:
        ok = sum(c.passed for c in self.cases)
        text = f"<{self.exercise}: {ok}/{len(self.cases)} cases passed, {self.points:g}/{self.max_points:g} points"
        if self.speed is not None and self.speed.ratio is not None:
            text += f", {self.speed.ratio:.2f}x the reference"
        return text + ">"


def simulator_mode() -> bool:
    from numba import config

    return bool(config.ENABLE_CUDASIM)


def _compute_capability() -> tuple[int, int]:
    from .judge import judge_gpu

    return judge_gpu().cc


def local_judge(lab, functions: dict) -> Judge:
    """A judge in this process, calling ``functions`` directly."""
    opts = Options(simulator=simulator_mode(), seed=int(np.random.default_rng().integers(2**62)),
                   timeout=3600.0, sandboxed=False)
    return Judge(lab, opts, local=functions)


def time_exercise(ex, fn) -> SpeedResult:
    """Time ``fn`` against the exercise's reference, as check() and the grader do (in-process)."""
    from .spec import Lab

    judge = local_judge(Lab(name="timing", title=ex.title, exercises=(ex,)), {ex.name: fn})
    try:
        proc = judge.runner_for(ex)
        return judge.time(ex, proc, 0)
    finally:
        judge.close()


def checker(lab_name: str):
    """Return ``check(fn)`` for one lab: ``check = checker("first_kernel"); check(vector_add)``."""
    lab = get_lab(lab_name)
    if simulator_mode():  # the notebook's own launches too: a barrier not every thread reaches fails at once
        from .runner import strict_barriers

        strict_barriers()

    def check(fn=None, exercise: str | None = None, speed: bool = True, profile: bool = False) -> CheckResult:
        """Grade ``fn`` on the grader's cases, then time it (on a GPU). With ``profile=True``, once
        every case passes, also show how its kernels use memory next to the reference's. An
        exercise answered by a registration (an operator) takes no function:
        ``check(exercise="silu_mul_op")`` grades what the notebook registered."""
        if fn is None:
            if exercise is None:
                raise TypeError("check() needs your function, or exercise='name' for an exercise without one")
            ex = lab.exercise(exercise)
            if not ex.entry:
                raise TypeError(f"{ex.name} is answered by a function: pass it, as check({ex.name})")
            from .runner import entry_function

            fn = entry_function(ex.entry, ex.name, sys._getframe(1).f_globals)  # the notebook's namespace
        # The cases launch tiny grids on purpose (one element, one row): Numba's warning that a
        # small grid leaves the GPU idle would only bury the table.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*Grid size .* under-utilization")
            return _check(fn, exercise, speed, profile)

    def _check(fn, exercise: str | None = None, speed: bool = True, profile: bool = False) -> CheckResult:
        ex = lab.exercise(exercise or fn.__name__)
        simulator = simulator_mode()
        result = CheckResult(ex.name, False, max_points=ex.max_points)
        if ex.gpu_only and simulator:
            print(f"{ex.name}: needs a GPU (the simulator cannot run it); not checked here.")
            return result
        if not simulator and ex.too_old(_compute_capability()):
            print(f"{ex.name}: {ex.too_old(_compute_capability())}; not checked here.")
            return result
        try:
            source = inspect.getsource(fn)
        except (OSError, TypeError):
            source = ""
        setup = lab.grading_setup(simulator)  # the set-up cell's imports: the function uses them unimported
        for use in forbidden_uses(source, ex.name, ex.forbidden, setup):
            print(f"warning: {use} is forbidden in this exercise; the grader gives 0 for it")
        for use in static_problems(source, ex.forbidden, policy=ex.simulate is not None, setup=setup):
            print(f"warning: {use} is not allowed in graded code for this exercise; the grader gives 0 for it")
        rng = np.random.default_rng()
        if ex.simulate is not None:
            return _check_policy(ex, fn, rng, simulator, result)
        print(f"{ex.title}: {ex.name}({', '.join(ex.args)})")
        print(f"  {'case':<28} {'result':<6} {'max abs err':>11}  note")
        judge = local_judge(lab, {ex.name: fn})
        try:
            proc = judge.runner_for(ex)
            for params in ex.cases(simulator):
                inputs = ex.inputs(params, rng)
                label = describe(params)
                try:
                    outputs, after, faults = judge.run_case(proc, ex, params, inputs)
                except CaseFailed as exc:
                    text = str(exc)
                    if "NotImplementedError" in text:
                        print(f"  {label:<28} {'FAIL':<6} {'':>11}  not implemented yet")
                        result.cases.append(CaseResult(dict(params), False, None, "not implemented"))
                        return result
                    _print_case(label, "FAIL", "", text)
                    result.cases.append(CaseResult(dict(params), False, None, text))
                    judge.drop(ex)  # a fresh start for the next case
                    proc = judge.runner_for(ex)
                    continue
                res = compare(ex, params, inputs, outputs, after, faults)
                result.cases.append(res)
                err = "" if res.max_abs_err is None else f"{res.max_abs_err:.2g}"
                _print_case(label, "pass" if res.passed else "FAIL", err, res.message)
            result.passed = all(c.passed for c in result.cases)
            result.points = ex.points if result.passed else 0.0
            if not result.passed:
                print(f"Correctness: {sum(c.passed for c in result.cases)}/{len(result.cases)} cases. "
                      "Fix the failing cases first; speed is measured once all pass.")
                return result
            print(f"Correctness: all {len(result.cases)} cases pass ({ex.points:g} point{'s' * (ex.points != 1)}).")
            if profile and simulator:
                result.profile = _profile(lab, ex, judge, proc, rng, simulator)
            if not (speed and ex.speed):
                if profile and not simulator:
                    result.profile = _nsight(lab, ex, fn)
                return result
            if simulator:
                print("Speed: not measured: the CUDA simulator does not time kernels." if ex.backend not in ("torch", "triton")
                      else "Speed: not measured: no GPU (simulator mode).")
                return result
            s = judge.time(ex, proc, 0)
        finally:
            judge.close()
        result.speed = s
        if profile:  # after timing, in processes of its own: the profiler replays each kernel
            result.profile = _nsight(lab, ex, fn)
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
            pts = 0.0 if any("outputs of the timed calls were wrong" in f for f in s.flags) else ex.speed.score(s.ratio)
            result.points += pts
            print(f"       {s.ratio:.2f}x the speed of the {ex.baseline_name} ({s.baseline_median_s * 1e6:.1f} us): "
                  f"{pts:g}/{ex.speed.points:g} speed points (full at {ex.speed.full_at:g}x)")
        for flag in s.flags:
            print(f"  flag: {flag}")
        return result

    return check


WIDTH = 88  # columns: a printout this wide fits the page


def _profile(lab, ex, judge, proc, rng, simulator: bool) -> dict | None:
    """check(profile=True): the learner's function and the lab's reference on the largest case,
    their memory accesses traced in the simulator (``memtrace``), side by side."""
    if ex.backend != "numba":
        print("Profile: the simulator traces Numba kernels only.")
        return None
    from .memtrace import profile_of, side_by_side, trace, warp_window, worse_than, worst_access

    params = ex.largest_case(True)
    inputs = ex.inputs(params, rng)
    with trace() as mine, _listening(proc, mine):
        judge.run_case(proc, ex, params, inputs)
    ref = None
    if ex.baseline is not None:
        ref_judge = local_judge(lab, {ex.name: ex.baseline})
        try:
            ref_proc = ref_judge.runner_for(ex)
            with trace() as ref, _listening(ref_proc, ref):
                ref_judge.run_case(ref_proc, ex, params, inputs)
        finally:
            ref_judge.close()
    yours, reference = profile_of(mine.report()), (profile_of(ref.report()) if ref is not None else None)
    print(side_by_side(describe(params), yours, reference))
    findings = worse_than(yours, reference)
    out = {"case": dict(params), "yours": yours["summary"], "findings": findings,
           "reference": reference["summary"] if reference is not None else None}
    worst = worst_access(findings)
    if worst is not None:  # the access to fix, drawn: which element each thread of the first warp touched
        array, kind, kernel = worst
        try:
            touch = mine.touch_map(array, launch=mine.launch_of(kernel), kind=kind)
        except (KeyError, ValueError, IndexError):
            return out
        touch = _the_learners_view(touch, ex, params, inputs, array)
        lanes, others, origin = warp_window(touch)
        out["warp_map"] = {"array": array, "kind": kind, "kernel": kernel, "origin": origin,
                           "lanes": lanes.tolist()}
        _draw_warp_map(lanes, others, origin, f"warp 0's {kind}s of `{array}` in `{kernel}`: the lane that "
                                              "touched each element (grey: other threads)")
    return out


@contextlib.contextmanager
def _listening(proc, tracer):
    """The tracer hears the kernel arrays' accesses (the simulator's arrays are the grader's own)."""
    memory = getattr(getattr(proc, "runner", None), "sim_memory", None)
    if memory is not None:
        memory.tap(tracer.tap)
    try:
        yield
    finally:
        if memory is not None:
            memory.tap(None)


def _the_learners_view(touch, ex, params, inputs, array: str):
    """The learner's array as the case shapes it: the trace maps the memory the kernel was given,
    flat (the judge's buffers are one-dimensional; the learner gets a view of the case's shape)."""
    if array in inputs and isinstance(inputs[array], np.ndarray):
        shape = inputs[array].shape
    elif array in ex.outputs:
        shape = tuple(ex.outputs[array].shape(params))
    else:
        return touch
    return touch.reshape(shape) if touch.size == int(np.prod(shape)) else touch


def _draw_warp_map(lanes, others, origin, title: str) -> None:
    """In a notebook, the figure; elsewhere (a script, the grader) nothing."""
    try:
        from IPython import get_ipython

        if get_ipython() is None:
            return
        import matplotlib.pyplot as plt

        from course.plots_tools import warp_access_map
    except ImportError:
        return
    warp_access_map(lanes, others, origin, title)
    plt.show()


REPORTS = "profiles"  # where check(profile=True) keeps Nsight Compute's report files, beside the notebook


def _nsight(lab, ex, fn) -> dict | None:
    """check(profile=True) on a GPU: the function (sent as source, with what it uses) and the
    reference, each run once at the timing size under Nsight Compute, side by side."""
    import os

    from .nsight import ncu_path
    from .shipping import source_of

    if ncu_path() is None:
        print("Profile: Nsight Compute (ncu) is not installed here; it comes with the CUDA toolkit.")
        return None
    try:
        code = source_of(fn)
    except TypeError as exc:
        print(f"Profile: {exc}")
        return None
    if fn.__name__ != ex.name:
        code += f"\n{ex.name} = {fn.__name__}\n"
    cells = [{"code": code, "filename": "<your function>", "exercise": ex.name, "defines": [ex.name]}]
    opts = Options(simulator=False, seed=int(np.random.default_rng().integers(2**62)), timeout=600.0,
                   sandboxed=False, profile=True)
    os.makedirs(REPORTS, exist_ok=True)
    report = os.path.abspath(os.path.join(REPORTS, ex.name))  # the runner works in a folder of its own
    judge = Judge(lab, opts, cells=cells)
    try:
        prof = judge.nsight_profile(ex, 0, report=report)
    finally:
        judge.close()
    if prof.get("error"):
        print(f"Profile: {prof['error']}")
        return prof
    lines = [prof["text"]]
    if prof["findings"]:
        lines.append("What to look at:")
        lines += [textwrap.fill(f, WIDTH, initial_indent="  - ", subsequent_indent="    ") for f in prof["findings"]]
    else:
        lines.append("Nothing in these counters is worse than the reference's.")
    lines.append(f"The full report: {os.path.join(REPORTS, ex.name)}.ncu-rep (open it in Nsight Compute's "
                 "user interface).")
    print("\n".join(lines))
    return prof


def _print_case(label: str, status: str, err: str, note: str) -> None:
    """One row of check()'s table. A note too long for the row goes under it, wrapped; the lines
    after its first (where in the learner's code it failed) are indented a little more."""
    row = f"  {label:<28} {status:<6} {err:>11}"
    lines = note.strip().splitlines() or [""]
    if len(lines) == 1 and len(row) + 2 + len(lines[0]) <= WIDTH:
        print(f"{row}  {lines[0]}".rstrip())
        return
    print(row.rstrip())
    for i, line in enumerate(lines):
        first, later = ("    ", "    ") if i == 0 else ("      ", "        ")
        print(textwrap.fill(line.strip(), WIDTH, initial_indent=first, subsequent_indent=later,
                            break_long_words=False, break_on_hyphens=False))


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
    result.cases = [CaseResult(p, line.startswith("pass"), None, line)
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
