"""Grade one submission: read it, check it statically, and have a judge process grade it.

The parent never imports or runs learner code. It starts one judge per submission
(``judge.py``: trusted, it owns the inputs, outputs and clock), which starts the sandboxed
runners. What comes back is checked before use: a judge that crashes, hangs or answers
nonsense costs the submission its grade with a plain message, never the batch.
"""
from __future__ import annotations

import ast
import json
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

from . import sandbox
from .outcome import ExerciseResult, SubmissionResult
from .runproc import IMPORT_BUDGET_S, die_with_parent
from .spec import Exercise, Lab
from .submission import Source, load_and_check_bounded

ROOT = Path(__file__).resolve().parent.parent
MAX_JUDGE_REPLY = 16 << 20  # bytes: results and messages, never data
NO_SANDBOX_NOTE = "graded WITHOUT a sandbox (--no-sandbox): the submission ran with the grader's rights"


class JudgeFailed(Exception):
    pass


def grade_submission(lab: Lab, path: Path, *, seed: int, simulator: bool, gpu: str | None = None,
                     work_dir: Path, sanitize: str | None = None, timeout: float | None = None,
                     exercises: list[str] | None = None, memory_limit_gb: float | None = None,
                     sandboxed: bool = True, slot: int = 0, profile: bool = False,
                     session: JudgeSession | None = None) -> SubmissionResult:
    started = time.monotonic()
    timeout = timeout or lab.timeout_s
    memory_limit_gb = memory_limit_gb or lab.memory_limit_gb
    work_dir.mkdir(parents=True, exist_ok=True)
    wanted = [e for e in lab.exercises if exercises is None or e.name in exercises]
    # Read and checked in a process of its own, with its own time and memory limits: a file too
    # large or too deeply nested for the checks costs its own grade, not the grader's.
    checked = load_and_check_bounded(path, [e.name for e in lab.exercises],
                                     {e.name: (e.forbidden, e.simulate is not None) for e in wanted},
                                     setup=lab.grading_setup(simulator))
    src = checked.source
    results = [ExerciseResult(e.name, e.title, e.points, e.speed.points if e.speed else 0.0) for e in wanted]
    mode = "simulator" if simulator else "gpu"
    notes = [] if sandboxed else [NO_SANDBOX_NOTE]
    if src.problem:
        for r in results:
            r.explain("no_usable_file", src.problem)
        return SubmissionResult(path.name, lab.name, mode, results, time.monotonic() - started, src.problem,
                                notes=notes)
    static = {name: message for name, (_, message) in checked.static.items()}
    static_reasons = {name: reason for name, (reason, _) in checked.static.items()}
    notes += src.notes  # malformed cells left out
    if src.ignored:
        notes.append("left out for grading, as lines only for the notebook: " + "; ".join(src.ignored)[:250])
    job = {"lab": lab.name, "cells": [c.as_job() for c in src.cells], "static": static, "seed": seed,
           "simulator": simulator, "sanitize": sanitize, "timeout": timeout, "memory_limit_gb": memory_limit_gb,
           "exercises": [e.name for e in wanted], "sandboxed": sandboxed, "slot": slot, "profile": profile}
    # Each exercise may take its timeout for the cases and again for timing; plus starting up.
    # (and each group of exercises may start a runner, whose libraries have a budget of their own)
    deadline = 120.0 + 2 * IMPORT_BUDGET_S + len(wanted) * (3 * timeout + 60.0)
    tail = ""
    scratch = None
    try:
        if session is not None:
            reply = session.grade(job, deadline=deadline, log=work_dir / "judge.log")
        else:
            # The judge's temporary files live here, not in /tmp: what a killed run leaves is
            # removed when the submission is graded again.
            scratch = work_dir / ".tmp"
            shutil.rmtree(scratch, ignore_errors=True)
            scratch.mkdir()
            reply = run_judge(job, gpu=gpu, simulator=simulator, deadline=deadline, log=work_dir / "judge.log",
                              tmp=scratch)
        by_name = {d.get("name"): d for d in reply.get("exercises", []) if isinstance(d, dict)}
        for i, r in enumerate(results):
            if r.name in by_name:
                results[i] = ExerciseResult.checked(by_name[r.name], r)
            else:
                r.explain("not_graded", "not graded (the grader stopped before this exercise)")
        for r, ex in zip(results, wanted):
            r.reason = reason_from_source(r, ex, src, static_reasons)
        tail = str(reply.get("log_tail", ""))[-4000:]
        notes += [str(n)[:300] for n in reply.get("notes", [])][:5]
    except JudgeFailed as exc:
        for r in results:
            r.correctness = r.speed = 0.0
            r.passed = False
            r.explain("grader_failure", f"the grader failed on this submission: {exc}")
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    return SubmissionResult(path.name, lab.name, mode, results, time.monotonic() - started, log_tail=tail,
                            notes=notes)


def reason_from_source(res: ExerciseResult, ex: Exercise, src: Source, static_reasons: dict[str, str]) -> str:
    """The judge's reason for a failure, made precise where the parent's own reading of the file tells
    more: which static check refused it, a cell that does not parse, a function that is missing or
    cannot take the exercise's arguments (the runner's word for these is not trusted)."""
    if res.passed or res.reason in ("needs_gpu", "needs_newer_gpu", "grader_failure", "not_graded"):
        return res.reason
    if ex.name in static_reasons:
        return static_reasons[ex.name]
    if res.reason == "cell_failed" and (ex.name in src.unparsed or None in src.unparsed):
        return "syntax_error"
    if res.reason in ("call_failed", "cell_failed"):
        return call_problem(src.code, ex.name, len(ex.args)) or res.reason
    return res.reason


def call_problem(code: str, name: str, n_args: int) -> str:
    """"missing_function" where nothing at the top level binds ``name``, "wrong_signature" where its
    last binding is a plain def that cannot take ``n_args`` arguments, else ""."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError):
        return ""
    binding = next((node for node in reversed(tree.body) if name in _bound_names(node)), None)
    if binding is None:
        return "missing_function"
    if not isinstance(binding, (ast.FunctionDef, ast.AsyncFunctionDef)) or binding.decorator_list:
        return ""
    a = binding.args
    positional = len(a.posonlyargs) + len(a.args)
    required = positional - len(a.defaults)
    takes = required <= n_args and (a.vararg is not None or n_args <= positional)
    return "" if takes and all(d is not None for d in a.kw_defaults) else "wrong_signature"


def _bound_names(node: ast.stmt) -> list[str]:
    """The names a top-level statement binds: a def or class, an import, an assignment's targets."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in node.names]
    targets = getattr(node, "targets", None) or [getattr(node, "target", None)]
    return [n.id for t in targets if t is not None for n in ast.walk(t)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]


class JudgeSession:
    """One judge process that grades submission after submission for one worker (one GPU): it
    keeps the reference's runner, with its kernels compiled, and the timing inputs of the run's
    seed. A judge that fails, hangs or answers nonsense is killed with its runners, and the next
    submission gets a fresh one. ``tmp``: its temporary files (not /tmp: a killed run's are
    removed by the next run)."""

    def __init__(self, *, gpu: str | None, simulator: bool, tmp: Path | None = None) -> None:
        self.gpu, self.simulator, self.tmp = gpu, simulator, tmp
        self.proc: subprocess.Popen | None = None
        self.sock: socket.socket | None = None

    def _start(self, log: Path) -> None:
        parent, child = socket.socketpair()
        env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOGRADER_") or k == "AUTOGRADER_BWRAP"}
        env.update(sandbox.verdict_env())  # the walls this grader found: the judges of --workers N do not probe
        env.update(NUMBA_ENABLE_CUDASIM="1" if self.simulator else "0", PYTHONUNBUFFERED="1",
                   # every kernel of the judge loaded at once: loading one later, while its stream
                   # waits on a runner, would wait for the device
                   CUDA_MODULE_LOADING="EAGER")
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
        if self.gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = self.gpu
        if self.tmp is not None:
            Path(self.tmp).mkdir(parents=True, exist_ok=True)
            env["TMPDIR"] = str(Path(self.tmp).absolute())  # the judge's cwd is ROOT, not ours
        with open(log, "ab") as out:
            # The judge dies with the grader (its runners die with it in turn): killing the grader
            # leaves nothing running.
            self.proc = subprocess.Popen([sys.executable, "-m", "autograder.judge", str(child.fileno())],
                                         stdin=subprocess.DEVNULL, stdout=out, stderr=out, pass_fds=[child.fileno()],
                                         env=env, cwd=str(ROOT), start_new_session=True, preexec_fn=die_with_parent)
        child.close()
        self.sock = parent

    def grade(self, job: dict, *, deadline: float, log: Path) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            self.close()
            self._start(log)
        try:
            data = json.dumps(dict(job, log=str(Path(log).absolute()))).encode()  # opened in ROOT
            self.sock.sendall(struct.pack("<Q", len(data)) + data)
            end = time.monotonic() + deadline
            head = _read(self.sock, 8, end, self.proc)
            (n,) = struct.unpack("<Q", head)
            if n > MAX_JUDGE_REPLY:
                raise JudgeFailed("its answer was too large")
            reply = json.loads(_read(self.sock, n, end, self.proc))
            if not isinstance(reply, dict):
                raise JudgeFailed("its answer was not understood")
            return reply
        except (OSError, ValueError) as exc:
            self.close()
            raise JudgeFailed(f"{type(exc).__name__}: {exc}"[:300]) from None
        except JudgeFailed:
            self.close()
            raise

    def close(self) -> None:
        """End the judge: it closes the runners it kept and exits; killed if it does not."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.proc is not None:
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
            if self.proc.poll() is None:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait()
            self.proc = None


def run_judge(job: dict, *, gpu: str | None, simulator: bool, deadline: float, log: Path,
              tmp: Path | None = None) -> dict:
    """One submission in a judge of its own."""
    session = JudgeSession(gpu=gpu, simulator=simulator, tmp=tmp)
    try:
        return session.grade(job, deadline=deadline, log=log)
    finally:
        session.close()


def _read(sock: socket.socket, n: int, end: float, proc: subprocess.Popen) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        left = end - time.monotonic()
        if left <= 0:
            raise JudgeFailed("it did not finish in time")
        ready, _, _ = select.select([sock], [], [], min(left, 1.0))
        if not ready:
            if proc.poll() is not None:
                raise JudgeFailed(f"it exited ({proc.returncode}) before answering; see judge.log")
            continue
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise JudgeFailed(f"it exited ({proc.wait()}) before answering; see judge.log")
        buf += chunk
    return bytes(buf)
