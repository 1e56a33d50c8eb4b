"""Grade one submission: spawn a worker, feed it cases, judge its answers here.

The parent process never imports or executes learner code. Correctness is judged
in the parent against references it computes from inputs only it has seen, drawn
from a secret seed. A crash, hang, flood of output or runaway memory use costs the
exercise that caused it, never the batch: the worker is killed and a fresh one
takes the next exercise.
"""
from __future__ import annotations

import os
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import wire
from .measure import compare, describe
from .spec import Exercise, Lab
from .submission import forbidden_uses, load

OUTPUT_LIMIT = 2 << 20  # bytes of printing before the worker is stopped
SIGNALS = {signal.SIGSEGV: "segmentation fault", signal.SIGABRT: "abort", signal.SIGKILL: "killed",
           signal.SIGBUS: "bus error", signal.SIGFPE: "floating-point exception"}
# Flags that mean the timing cannot be trusted: no speed points.
INTEGRITY = ("replaced", "tampered", "wrong on fresh inputs", "outputs of the timed calls were wrong")


class WorkerFailed(Exception):
    """The worker died, hung, printed too much or used too much memory."""


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

    @property
    def score(self) -> float:
        return round(self.correctness + self.speed, 2)


@dataclass
class SubmissionResult:
    submission: str
    lab: str
    mode: str
    exercises: list[ExerciseResult]
    seconds: float
    problem: str = ""
    log_tail: str = ""

    @property
    def score(self) -> float:
        return round(sum(e.score for e in self.exercises), 2)

    @property
    def max_score(self) -> float:
        return round(sum(e.max_correctness + e.max_speed for e in self.exercises), 2)


class Worker:
    def __init__(self, lab: Lab, code: str, filename: str, *, simulator: bool, gpu: str | None,
                 log_path: Path, sanitize: str | None = None, memory_limit_gb: float | None = None) -> None:
        self.lab = lab
        self.memory_limit_gb = memory_limit_gb or lab.memory_limit_gb
        self.log_path = log_path
        parent, child = socket.socketpair()
        self.sock = parent
        env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOGRADER_")}
        env["NUMBA_ENABLE_CUDASIM"] = "1" if simulator else "0"
        env["PYTHONUNBUFFERED"] = "1"
        env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parent.parent)]
                                            + [p for p in [os.environ.get("PYTHONPATH")] if p])
        if gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpu
        cmd = [sys.executable, "-m", "autograder.worker", str(child.fileno())]
        if sanitize:
            cmd = ["compute-sanitizer", "--tool", sanitize, "--print-limit", "20", "--report-api-errors", "no"] + cmd
        self.log = open(log_path, "ab")
        self.cwd = tempfile.TemporaryDirectory(prefix="autograder-")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log,
                                     pass_fds=[child.fileno()], env=env, cwd=self.cwd.name,
                                     start_new_session=True)
        child.close()
        wire.send_trusted(self.sock, {"lab": lab.name, "code": code, "filename": filename,
                                      "sanitize": bool(sanitize)})

    def _rss_gb(self) -> float:
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) / 2**20
        except OSError:
            pass
        return 0.0

    def receive(self, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            ready, _, _ = select.select([self.sock], [], [], 0.1)
            if ready:
                self.sock.settimeout(max(1.0, deadline - time.monotonic()))
                try:
                    return wire.recv(self.sock)
                except EOFError:
                    raise WorkerFailed(self._death()) from None
                except (socket.timeout, ValueError) as exc:
                    self.kill()
                    raise WorkerFailed(f"the grader could not read the answer: {exc}") from None
            if self.proc.poll() is not None:
                raise WorkerFailed(self._death())
            if self.log_path.stat().st_size > OUTPUT_LIMIT:
                self.kill()
                raise WorkerFailed(f"your code printed more than {OUTPUT_LIMIT >> 20} MB; stopped")
            if self._rss_gb() > self.memory_limit_gb:
                self.kill()
                raise WorkerFailed(f"your code used more than {self.memory_limit_gb:g} GB of host memory; stopped")
            if time.monotonic() > deadline:
                self.kill()
                raise WorkerFailed(f"did not finish within {timeout:.0f} s (an endless loop, "
                                   "a kernel that never ends, or a grid far too large?)")

    def request(self, msg: dict, timeout: float) -> dict:
        try:
            wire.send_trusted(self.sock, msg)
        except OSError:
            raise WorkerFailed(self._death()) from None
        return self.receive(timeout)

    def _death(self) -> str:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
            return "the grading process stopped answering"
        if code < 0:
            name = SIGNALS.get(-code, f"signal {-code}")
            return f"the process running your code crashed ({name})"
        return f"the process running your code exited unexpectedly (exit code {code})"

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                wire.send_trusted(self.sock, {"op": "done"})
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()
        self.sock.close()
        self.log.close()
        self.cwd.cleanup()


# compute-sanitizer's reports of real faults (API return codes are switched off).
SANITIZER_LINE = re.compile(r"^=+ +(Invalid |Error: Race|Race reported|Uninitialized |Barrier error|Misaligned |"
                            r"Out-of-range|Malloc/Free|Warning: .*hazard)")


def sanitizer_findings(log_path: Path, start: int, limit: int = 4) -> list[str]:
    """The first lines compute-sanitizer wrote after ``start`` that report a problem."""
    with open(log_path, "rb") as f:
        f.seek(start)
        text = f.read(1 << 20).decode("utf-8", "replace")
    return [line.strip() for line in text.splitlines() if SANITIZER_LINE.match(line)][:limit]


def make_cases(ex: Exercise, index: int, seed: int, simulator: bool):
    """The correctness cases of one exercise, with inputs drawn from the run's secret seed."""
    rng = np.random.default_rng([seed, index])
    return [(dict(p), ex.inputs(p, rng)) for p in ex.cases(simulator)]


def grade_submission(lab: Lab, path: Path, *, seed: int, simulator: bool, gpu: str | None = None,
                     work_dir: Path, sanitize: str | None = None, timeout: float | None = None,
                     exercises: list[str] | None = None, memory_limit_gb: float | None = None) -> SubmissionResult:
    started = time.monotonic()
    timeout = timeout or lab.timeout_s
    work_dir.mkdir(parents=True, exist_ok=True)
    log_path = work_dir / "output.log"
    log_path.write_bytes(b"")
    src = load(path)
    results = [ExerciseResult(e.name, e.title, e.points, e.speed.points if e.speed else 0.0)
               for e in lab.exercises if exercises is None or e.name in exercises]
    mode = "simulator" if simulator else "gpu"
    if src.problem:
        for r in results:
            r.message = src.problem
        return SubmissionResult(path.name, lab.name, mode, results, time.monotonic() - started, src.problem)

    worker: Worker | None = None
    load_error = ""
    loading = False
    try:
        for index, res in enumerate(results):
            ex = lab.exercise(res.name)
            if load_error:
                res.message = load_error
                continue
            if ex.gpu_only and simulator:
                res.message = "needs a GPU: not graded in simulator mode"
                continue
            used = forbidden_uses(src.code, ex.name, ex.forbidden)
            if used:
                res.message = "uses calls this exercise forbids: " + ", ".join(used)
                continue
            try:
                if worker is None:
                    loading = True
                    worker = Worker(lab, src.code, src.filename, simulator=simulator, gpu=gpu,
                                    log_path=log_path, sanitize=sanitize, memory_limit_gb=memory_limit_gb)
                    hello = worker.receive(timeout)
                    loading = False
                    if not hello.get("ok"):
                        load_error = hello.get("error", "your code could not be loaded")
                        res.message = load_error
                        continue
                cases = make_cases(ex, index, seed, simulator)
                if ex.simulate is not None:
                    simulate_policy(ex, worker, cases, timeout, res)
                    if not res.passed and worker.proc.poll() is not None:
                        worker.close()
                        worker = None
                    continue
                log_start = log_path.stat().st_size
                reply = worker.request({"op": "run", "exercise": ex.name, "cases": cases}, timeout)
                found = sanitizer_findings(log_path, log_start) if sanitize else []
                if found:
                    res.message = f"compute-sanitizer ({sanitize}) found errors:\n" + "\n".join(found)
                    worker.close()
                    worker = None
                    continue
                if not reply.get("ok"):
                    where = f" on case {describe(reply['params'])}" if reply.get("params") else ""
                    res.message = reply.get("error", "failed") + where
                    worker.close()  # a CUDA error can leave the context unusable
                    worker = None
                    continue
                judge(ex, cases, reply["results"], res)
                if res.passed and ex.speed is not None and not simulator and not sanitize:
                    timed = worker.request({"op": "time", "exercise": ex.name}, timeout)
                    score_speed(ex, timed, res)
            except WorkerFailed as exc:
                res.message = str(exc)
                if worker is not None:
                    worker.kill()
                    worker.close()
                worker = None
                if loading:  # the code never finished loading: the same would happen again
                    load_error = "loading your code failed: " + res.message
                    res.message = load_error
    finally:
        if worker is not None:
            worker.close()
    tail = log_path.read_bytes()[-4000:].decode("utf-8", "replace")
    return SubmissionResult(path.name, lab.name, mode, results, time.monotonic() - started, log_tail=tail)


def judge(ex: Exercise, cases, answers, res: ExerciseResult) -> None:
    all_ok = True
    for (params, inputs), ans in zip(cases, answers):
        c = compare(ex, params, inputs, ans["outputs"], ans["inputs_after"], ans.get("faults", ()))
        err = "" if c.max_abs_err is None else f" (max abs err {c.max_abs_err:.2g})"
        res.cases.append(f"{'pass' if c.passed else 'FAIL'} {describe(params)}{err}"
                         + (f": {c.message}" if c.message else ""))
        all_ok &= c.passed
    res.passed = all_ok and len(answers) == len(cases)
    res.correctness = ex.points if res.passed else 0.0
    n_ok = sum(line.startswith("pass") for line in res.cases)
    res.message = (f"all {len(cases)} cases correct" if res.passed
                   else f"{n_ok} of {len(cases)} cases correct")


class PolicyFailed(Exception):
    """The learner's policy raised, returned something unusable, or used a forbidden call."""


def simulate_policy(ex: Exercise, worker: Worker, cases, timeout: float, res: ExerciseResult) -> None:
    """A policy exercise: the simulation runs here, in the parent, on inputs only it has
    seen; each decision is one call of the learner's function in the worker, which sees only
    that call's arguments. Then the records are judged here."""
    deadline = time.monotonic() + timeout

    def policy(*args):
        left = deadline - time.monotonic()
        if left <= 0:
            raise WorkerFailed(f"the simulation did not finish within {timeout:.0f} s (a slow policy?)")
        reply = worker.request({"op": "call", "exercise": ex.name, "args": args}, left)
        if not reply.get("ok"):
            raise PolicyFailed(reply.get("error", "failed"))
        return reply["value"]

    records = []
    for params, inputs in cases:
        try:
            records.append(ex.simulate(policy, params, inputs))
        except PolicyFailed as exc:
            res.message = f"{exc} on case {describe(params)}"
            return
        except (TypeError, ValueError, IndexError) as exc:  # the simulator refused an answer
            res.message = f"{ex.name}({', '.join(ex.args)}) answered something the engine cannot run: {exc} " \
                          f"(case {describe(params)})"
            return
    verdict = ex.assess(cases, records)
    res.cases = list(verdict.lines)
    res.passed = verdict.passed
    res.correctness = ex.points if res.passed else 0.0
    res.message = verdict.message
    if res.passed and ex.speed is not None:
        res.timing = {"measured": False, "ratio": verdict.ratio, "summary": verdict.summary}
        res.speed = ex.speed.score(verdict.ratio)


def score_speed(ex: Exercise, timed: dict, res: ExerciseResult) -> None:
    if not timed.get("ok"):
        res.flags.append(timed.get("error", "timing failed"))
        return
    speed = timed["speed"]
    res.timing = speed
    res.flags += speed.get("flags", [])
    if not speed.get("measured"):
        res.flags.append(speed.get("message", "speed not measured"))
        return
    if any(key in f for f in res.flags for key in INTEGRITY):
        res.speed = 0.0
        return
    res.speed = ex.speed.score(speed.get("ratio"))
