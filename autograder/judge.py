"""The trusted side of grading one submission.

The parent process starts one judge per submission (``python -m autograder.judge FD``) and
sends it the submission's code and the grading options. The judge:

- makes every input from the run's secret seed, allocates every buffer, fills, guards and
  poisons it, and reads it back itself, then judges it against the lab's float64 reference;
- starts the runners that hold the learner's code, each in a sandbox (``sandbox.py``), one
  per group of exercises that may use the same libraries (a library an exercise forbids as a
  whole, CuPy or torch, is absent from its runner), and a trusted runner for the lab's
  reference kernels, which are timed against the learner's (``timing.py``);
- plays policy exercises' simulations here, asking the runner for one decision at a time.

A runner's process is the learner's: nothing it says is believed beyond "my calls are queued"
and an error text to show. The judge answers the parent with the results, in JSON.

``check()`` in a notebook uses the same judge in-process (``Judge(..., local=...)``), with the
learner's functions called directly.
"""
from __future__ import annotations

import contextlib
import inspect
import json
import os
import re
import socket
import struct
import sys
import time
from dataclasses import dataclass

import numpy as np

from .devmem import Arena
from .host_parallel import one_blas_thread
from .labs import get_lab
from .measure import GUARD, UNCHANGED, _count, compare, describe, guard_fill, guard_pattern, overruns
from .outcome import ExerciseResult, mismatch_reason, runner_stop_reason
from .runproc import IMPORT_BUDGET_S, RunnerProcess, RunnerFailed
from .spec import Exercise, Lab
from .timing import BATCH, SpeedResult, Target, time_batches
from .timing_inputs import POOL, Prefetch


def encode_value(v):
    """A case's non-array input as JSON, tuples marked (the runner turns them back)."""
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, tuple):
        return {"__tuple__": [encode_value(x) for x in v]}
    if isinstance(v, list):
        return [encode_value(x) for x in v]
    if isinstance(v, dict):
        return {str(k): encode_value(x) for k, x in v.items()}
    if isinstance(v, np.ndarray):
        return encode_value(v.tolist())
    return v


# --------------------------------------------------------------------------- what a runner may do
def hidden_libraries(ex: Exercise) -> dict[str, str]:
    """Libraries the exercise forbids as a whole, and that its arrays do not need: absent from
    its runner, so that no route can reach them."""
    deny = set(p for p in ex.forbidden if not p.startswith("!"))
    allow = [p[1:] for p in ex.forbidden if p.startswith("!")]
    out = {}
    # (Triton goes with torch: it works on torch's tensors, and its JITFunction reads any function's closure.)
    for lib, packages in (("cupy", ("cupy", "cupyx", "cupy_backends")),
                          ("torch", ("torch", "torchgen", "functorch", "triton"))):
        if f"{lib}.*" in deny and lib not in libraries(ex) and not any(a.startswith(lib + ".") for a in allow):
            for pkg in packages:
                out[pkg] = f"exercise '{ex.name}' forbids {lib}"
    return out


def rules(ex: Exercise) -> dict:
    """The runtime guard's rules for one exercise (see runner.Guard)."""
    deny = [p for p in ex.forbidden if not p.startswith("!")]
    allow = [p[1:] for p in ex.forbidden if p.startswith("!")]
    methods = [p[2:] for p in deny if p.startswith("*.")]
    host_read = "*.copy_to_host" in deny or (ex.backend == "numba" and "numpy.*" in deny)
    host_write = "*.copy_to_device" in deny or "numba.cuda.to_device" in deny
    extra = []
    if host_read:  # memory a kernel can write and the host can read, and the driver's copies
        extra += ["numba.cuda.mapped_array", "numba.cuda.managed_array", "numba.cuda.mapped",
                  "cuda.bindings.driver.cuMemcpyDtoH*", "cuda.bindings.driver.cuMemcpy",
                  "cuda.bindings.driver.cuMemcpyAsync", "cuda.bindings.driver.cuMemcpy2D*",
                  "cuda.bindings.driver.cuMemcpy3D*", "cuda.bindings.driver.cuMemHostAlloc",
                  "cuda.bindings.driver.cuMemAllocHost*", "cuda.bindings.driver.cuMemAllocManaged",
                  "cuda.bindings.driver.cuMemHostRegister*"]
        if "numba.cuda.to_device" in deny:
            extra += ["numba.cuda.pinned_array", "numba.cuda.pinned"]
    if host_write:
        extra += ["cuda.bindings.driver.cuMemcpyHtoD*"]
    cupy_math = ex.backend == "cupy" and "cupy.*" in deny
    tensor_math = ex.backend == "triton" or (ex.backend == "torch" and "torch.*" in deny)  # torch only holds the data
    if deny and ex.simulate is None:  # as the static check: code that may not build names reaches no reflection
        from .runner import INTROSPECTION_CALLS, REFLECTION

        extra += list(REFLECTION) + list(INTROSPECTION_CALLS)
    return {"deny": deny + extra, "allow": allow, "host_read": host_read, "host_write": host_write,
            "array_math": cupy_math, "tensor_math": tensor_math, "methods": methods}


def libraries(ex: Exercise) -> list[str]:
    return {"cupy": ["cupy"], "torch": ["torch"], "triton": ["torch", "triton"]}.get(ex.backend, [])


def engine_source(lab: Lab) -> str:
    """The public part of a policy lab's engine, as source for the runner's ``engine`` module:
    its constants and helper functions, never its reference policy."""
    if not lab.engine:
        return ""
    import importlib

    module = importlib.import_module(f"autograder.labs.{lab.name}")
    parts = []
    for name in lab.engine:
        obj = getattr(module, name)
        if inspect.isfunction(obj):
            parts.append(inspect.getsource(obj))
        else:
            text = repr(obj)
            if eval(text, {}) != obj:  # noqa: S307 - our own constants
                raise ValueError(f"{lab.name}.{name} cannot be sent to the sandbox as a literal")
            parts.append(f"{name} = {text}")
    return "\n\n".join(parts) + "\n"


# --------------------------------------------------------------------------- runners as targets
class RemoteTarget(Target):
    def __init__(self, proc: RunnerProcess, ex: Exercise, name: str, flags, timeout: float, flags_buf) -> None:
        self.proc, self.ex, self.name, self.timeout = proc, ex, name, timeout
        self.flags = flags
        self.flags_buf = flags_buf
        self.names = list(ex.args) if name != "__null__" else []

    def _msg(self, op: str, sets, **extra) -> dict:
        return {"op": op, "exercise": self.name, "names": self.names, "backend": self.ex.backend,
                "rules": rules(self.ex), "sets": [[_desc(a) for a in args] for args in sets], **extra}

    def warm(self, sets, repeat: int) -> str:
        reply = self.proc.request(self._msg("warm", sets, repeat=repeat), self.timeout)
        return "" if reply.get("ok") else str(reply.get("error", "failed"))[:2000]

    def queue(self, sets, seq: int, gated: bool) -> None:
        fb = self.flags_buf
        flags = {"chunk": fb.chunk_id, "go": fb.offset, "done": fb.offset + 4, "synced": fb.offset + 8}
        self.proc.send(self._msg("batch", sets, seq=seq, flags=flags, gated=gated))
        reply = self.proc.receive(self.timeout)
        if reply.get("queued") != seq:
            raise RunnerFailed("the process running your code answered out of turn")

    def finish(self, seq: int) -> str:
        reply = self.proc.receive(self.timeout)
        if reply.get("finished") != seq:
            raise RunnerFailed("the process running your code answered out of turn")
        return "" if reply.get("ok") else str(reply.get("error", "failed"))[:2000]


def _desc(a) -> dict:
    if hasattr(a, "desc"):
        return a.desc()
    return {"kind": "value", "value": encode_value(a)}


class LocalProcess:
    """check() in a notebook: the 'runner' is this process, calling the learner's function."""

    def __init__(self, arena: Arena, functions: dict, simulator: bool) -> None:
        from . import runner as runner_module

        self.module = runner_module
        self.mem = _LocalMemory(arena)
        self.runner = runner_module.Runner(None, {"mode": "sim" if simulator else "gpu"}, mem=self.mem,
                                           functions=functions)
        if simulator:  # the verdicts of batch grading: races, bounds and opaque arrays here too
            self.runner.sim_memory, self.runner.triton_guard = local_walls()
        self.mapped: set = set()
        self.log = None

    def request(self, msg: dict, timeout: float, fds=()) -> dict:
        op = msg["op"]
        if op == "call":
            return self.runner.call(msg)
        if op == "policy":
            return self.runner.policy(msg)
        if op == "warm":
            return self.runner.warm(msg)
        return {"ok": True}

    def map(self, arena, cid, timeout) -> None:
        pass

    def unmap(self, cids, timeout) -> None:
        pass

    def alive(self) -> bool:
        return True

    def close(self) -> bool:
        return True

    kill = close


_LOCAL_WALLS: list = []


def local_walls() -> tuple:
    """check() in simulator mode: the memory checks batch grading's runner has (sim_memory, and
    triton_guard where Triton is loaded), installed once in the notebook's process. Its own
    kernels, launched with its own arrays, run as before; the arrays check() passes are checked."""
    if not _LOCAL_WALLS:
        import sys

        from . import runner as runner_module
        from .sim_memory import install as memory_install

        memory = runner_module.install_sim_memory(memory_install, allocators=False)
        triton = None
        if "triton" in sys.modules:
            from .triton_guard import install as triton_install

            triton = runner_module.install_triton_guard(triton_install, sandbox=False)
        _LOCAL_WALLS.append((memory, triton))
    return _LOCAL_WALLS[0]


class _LocalMemory:
    def __init__(self, arena: Arena) -> None:
        self.arena = arena

    def host_view(self, cid, offset, shape, dtype):
        return self.arena.chunks[cid].view(offset, shape, dtype) if self.arena.chunks[cid].kind == "host" \
            else self.arena.chunks[cid].view(offset, shape, dtype).get()

    def device_ptr(self, cid, offset):
        return self.arena.chunks[cid].ptr + offset


class LocalTarget(Target):
    local = True

    def __init__(self, proc: LocalProcess, ex: Exercise, name: str, flags, flags_buf) -> None:
        self.proc, self.ex, self.name = proc, ex, name
        self.flags, self.flags_buf = flags, flags_buf
        self.names = list(ex.args) if name != "__null__" else []

    def _msg(self, sets, **extra) -> dict:
        return {"exercise": self.name, "names": self.names, "backend": self.ex.backend, "rules": {},
                "sets": [[_desc(a) for a in args] for args in sets], **extra}

    def warm(self, sets, repeat: int) -> str:
        r = self.proc.runner.warm(self._msg(sets, repeat=repeat))
        return "" if r.get("ok") else r.get("error", "failed")

    def queue(self, sets, seq, gated) -> None:
        fb = self.flags_buf
        flags = {"chunk": fb.chunk_id, "go": fb.offset, "done": fb.offset + 4, "synced": fb.offset + 8}
        self.proc.runner.queue(self._msg(sets, seq=seq, flags=flags, gated=gated))

    def finish(self, seq) -> str:
        return self.proc.runner.finish()


# --------------------------------------------------------------------------- the judge
# A judge that grades submission after submission (``main``) keeps the reference's runner:
# (lab, simulator, profiling) -> (RunnerProcess, its hello read).
KEEP_REFERENCE = [False]
_KEPT_REFERENCE: dict = {}


def close_kept() -> None:
    for proc, _ in _KEPT_REFERENCE.values():
        proc.close()
    _KEPT_REFERENCE.clear()


@dataclass
class Options:
    simulator: bool
    seed: int
    timeout: float
    sanitize: str | None = None
    memory_limit_gb: float = 16.0
    sandboxed: bool = True
    slot: int = 0
    profile: bool = False  # simulator: trace each passing Numba exercise's memory accesses (never scored)


def grader_source(module: str) -> str:
    """The source of one of the grader's own modules (memtrace, sim_warps, triton_compat), for a
    runner to load: the sandbox holds no other file of the grader."""
    from pathlib import Path

    return (Path(__file__).resolve().parent / f"{module}.py").read_text()


class Judge:
    def __init__(self, lab: Lab, opts: Options, *, cells: list[dict] | None = None,
                 static: dict | None = None, local: dict | None = None, on_line=None) -> None:
        self.lab, self.opts = lab, opts
        self.cells = cells or []  # the submission's cells (submission.Cell.as_job), run one by one
        self.static = static or {}
        self.local = local  # {name: function} for check(); None in batch grading
        self.on_line = on_line  # check() prints each case as it is judged
        self.arena = Arena(device=not opts.simulator, exportable=local is None)
        self.gpu = None if opts.simulator else judge_gpu()
        self.runners: dict = {}  # group -> RunnerProcess (or LocalProcess)
        self.load_errors: dict = {}
        self.load_reasons: dict = {}  # group -> REASONS code, where the judge saw why loading failed
        self.cell_errors: dict = {}  # group -> the cells that failed in that group's runner
        self.phases: dict[str, float] = {}  # seconds per part of the grading, for judge.log
        self.reference: RunnerProcess | None = None
        self.reference_ready = False  # its hello was read
        self.traced = None  # the profile the last call's runner sent (run_case with profile)
        self.prefetch = Prefetch([], opts.seed)
        self.notes: list[str] = []
        self.log_tails: list[str] = []
        # Until close(): the float64 references run in blocks on every core, with BLAS on one thread
        # per block (entered here, on the main thread, where OpenBLAS takes the limit).
        self.blas_limit = contextlib.ExitStack()
        self.blas_limit.enter_context(one_blas_thread())

    @contextlib.contextmanager
    def clock(self, phase: str):
        """Add the block's wall time to ``phase`` (where a submission's grading time goes)."""
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.phases[phase] = self.phases.get(phase, 0.0) + time.monotonic() - t0

    # -- runners
    def runner_for(self, ex: Exercise):
        group = tuple(sorted(hidden_libraries(ex)))
        if group in self.load_errors:
            raise LoadFailed(self.load_errors[group], self.load_reasons.get(group, "load_failed"))
        proc = self.runners.get(group)
        if proc is not None and proc.alive():
            return proc
        if self.local is not None:
            proc = LocalProcess(self.arena, self.local, self.opts.simulator)
            self.runners[group] = proc
            return proc
        job = self._runner_job(ex)
        with self.clock("start the runner and load the code"):
            proc = RunnerProcess(job, simulator=self.opts.simulator, sandboxed=self.opts.sandboxed,
                                 slot=self.opts.slot, memory_limit_gb=self.opts.memory_limit_gb,
                                 hidden=hidden_libraries(ex), sanitize=self.opts.sanitize)
            try:
                hello = self._libraries_loaded(proc)
            except RunnerFailed as exc:
                self.load_errors[group] = ("the grader's libraries did not load in the process that runs your code "
                                           f"(not your code's doing; tell your instructor): {exc}")
                self.load_reasons[group] = "grader_failure"
                self._retire(proc)
                raise LoadFailed(self.load_errors[group], self.load_reasons[group]) from None
            try:
                if hello.get("ready") == "libraries":
                    hello = proc.receive(self.opts.timeout)
            except RunnerFailed as exc:
                self.load_errors[group] = "loading your code failed: " + str(exc)
                self.load_reasons[group] = runner_stop_reason(str(exc))
                self._retire(proc)
                raise LoadFailed(self.load_errors[group], self.load_reasons[group]) from None
        if not hello.get("ok"):
            self.load_errors[group] = str(hello.get("error", "your code could not be loaded"))[:4000]
            self._retire(proc)
            raise LoadFailed(self.load_errors[group])
        self.cell_errors[group] = [e for e in hello.get("cell_errors", []) if isinstance(e, dict)]
        self.runners[group] = proc
        return proc

    def _libraries_loaded(self, proc) -> dict:
        """The runner's first message: the libraries imported (torch and Triton take a while on a busy
        machine), within a budget of their own, not the learner's --timeout; or its failure to start."""
        return proc.receive(max(IMPORT_BUDGET_S, self.opts.timeout))

    def _runner_job(self, ex: Exercise) -> dict:
        """What a learner's runner for ``ex``'s group loads: the cells, the libraries, the rules."""
        group = tuple(sorted(hidden_libraries(ex)))
        group_ex = [e for e in self.lab.exercises if tuple(sorted(hidden_libraries(e))) == group]
        patterns = sorted({p for e in group_ex for p in rules(e)["deny"]})
        common = [p for p in patterns if all(p in rules(e)["deny"] for e in group_ex)]
        # what any exercise of the group allows is not refused while the cells load (triton.jit under triton.*)
        allowed = sorted({a for e in group_ex for a in rules(e)["allow"]})
        triton = any(e.backend == "triton" for e in group_ex)
        return {"mode": "sim" if self.opts.simulator else "gpu", "cells": self.cells,
                "setup": self.lab.grading_setup(self.opts.simulator),  # the lab's set-up cell's names too
                "libraries": sorted({lib for e in group_ex for lib in libraries(e)}),
                "patterns": patterns, "load_rules": {"deny": common, "allow": allowed},
                "engine": engine_source(self.lab), "sanitize": bool(self.opts.sanitize),
                "debug_stacks": os.environ.get("GRADER_DEBUG_STACKS"),
                "debug_refusals": os.environ.get("GRADER_DEBUG_REFUSALS"),
                "memtrace": grader_source("memtrace") if self.profiling() and self.opts.simulator else None,
                "triton_compat": grader_source("triton_compat") if self.opts.simulator and triton else None,
                "triton_guard": grader_source("triton_guard") if self.opts.simulator and triton else None,
                "sim_warps": grader_source("sim_warps") if self.opts.simulator else None,
                "sim_memory": grader_source("sim_memory") if self.opts.simulator else None,
                "entries": {e.name: e.entry for e in group_ex if e.entry}}

    def failed_cell(self, ex: Exercise) -> str:
        """Why this exercise's own cell (or a cell that answers no exercise by name) failed, if it did."""
        self.runner_for(ex)
        errors = self.cell_errors.get(tuple(sorted(hidden_libraries(ex))), [])
        own = [str(e.get("error", ""))[:4000] for e in errors if e.get("exercise") in (ex.name, None)]
        return "\n".join(own)

    def start_reference(self) -> None:
        """Start the trusted runner of the lab's reference kernels; its hello is read on first use,
        so it loads while the learner's runner does. A judge that grades many submissions keeps
        one for all of them (its kernels compiled once)."""
        key = (self.lab.name, self.opts.simulator, self.profiling())
        kept = _KEPT_REFERENCE.pop(key, None) if self.reference is None else None
        if kept is not None:
            if kept[0].alive() and not kept[0].pending():
                self.reference, self.reference_ready = kept
                return
            kept[0].close()  # dead, or an answer nobody read: out of step with its judge
        if self.reference is None or not self.reference.alive():
            job = {"mode": "sim" if self.opts.simulator else "gpu", "trusted": self.lab.name,
                   "debug_stacks": os.environ.get("GRADER_DEBUG_STACKS"),
                   "memtrace": grader_source("memtrace") if self.profiling() and self.opts.simulator else None}
            self.reference = RunnerProcess(job, simulator=self.opts.simulator, sandboxed=False, trusted=True,
                                           memory_limit_gb=max(self.opts.memory_limit_gb, 32.0))
            self.reference_ready = False

    def reference_runner(self) -> RunnerProcess:
        self.start_reference()
        if not self.reference_ready:
            with self.clock("start the reference"):
                hello = self.reference.receive(max(self.opts.timeout, 120.0))
            if not hello.get("ok"):
                raise RuntimeError(f"the reference could not be loaded: {hello.get('error')}")
            self.reference_ready = True
        return self.reference

    def _retire(self, proc) -> None:
        if proc is None:
            return
        gone = proc.close()
        if proc.log is not None:  # after close(), which waits for the pipe's last output to be read
            self.log_tails.append(proc.log.text())
        if not gone:
            self.notes.append("a process of this submission did not end when killed")

    def drop(self, ex: Exercise) -> None:
        group = tuple(sorted(hidden_libraries(ex)))
        self._retire(self.runners.pop(group, None))

    def close(self) -> None:
        for proc in list(self.runners.values()):
            self._retire(proc)
        self.runners.clear()
        if self.reference is not None:
            key = (self.lab.name, self.opts.simulator, self.profiling())
            if KEEP_REFERENCE[0] and self.reference.alive() and self.local is None:
                old = _KEPT_REFERENCE.pop(key, None)
                if old is not None:
                    old[0].close()
                _KEPT_REFERENCE[key] = (self.reference, self.reference_ready)
            else:
                self.reference.close()
        self.prefetch.close()
        self.arena.free_all()
        self.blas_limit.close()

    # -- grading
    def profiling(self) -> bool:
        """--profile: traced in the simulator (memtrace), or measured by Nsight Compute on a GPU."""
        return self.opts.profile and self.local is None

    def timed(self, names: list[str] | None) -> list[tuple[int, Exercise]]:
        """The exercises this grading may time: (index, exercise), in order."""
        if self.opts.simulator or self.opts.sanitize:
            return []
        return [(i, ex) for i, ex in enumerate(self.lab.exercises)
                if (names is None or ex.name in names) and ex.speed is not None and ex.timing_case is not None
                and ex.simulate is None]

    def grade(self, names: list[str] | None = None) -> list[ExerciseResult]:
        results = []
        timed = self.timed(names)
        if timed and self.local is None:
            # Batch grading: the reference loads and the timing inputs are drawn while the
            # learner's runner starts and its correctness cases run (check() keeps the host
            # memory of a learner's machine for one pool at a time).
            self.start_reference()
            self.prefetch = Prefetch(timed, self.opts.seed)
        for index, ex in enumerate(self.lab.exercises):
            if names is not None and ex.name not in names:
                continue
            self.prefetch.starting(index)
            res = ExerciseResult(ex.name, ex.title, ex.points, ex.speed.points if ex.speed else 0.0)
            results.append(res)
            try:
                self.grade_one(index, ex, res)
            except LoadFailed as exc:
                res.explain(exc.reason, str(exc))
            except RunnerFailed as exc:
                res.explain(runner_stop_reason(str(exc)), str(exc))
                self.drop(ex)
            except Exception as exc:  # noqa: BLE001 - a grader bug costs this exercise, not the rest
                import traceback

                traceback.print_exc()  # to judge.log
                res.correctness = res.speed = 0.0
                res.passed = False
                res.explain("grader_failure", f"the grader failed on this exercise: {type(exc).__name__}: {exc}"[:2000])
                self.drop(ex)
        return results

    def grade_one(self, index: int, ex: Exercise, res: ExerciseResult) -> None:
        if ex.gpu_only and self.opts.simulator:
            res.explain("needs_gpu", "needs a GPU: not graded in simulator mode")
            return
        if self.gpu is not None and ex.too_old(self.gpu.cc):
            res.explain("needs_newer_gpu", f"{ex.too_old(self.gpu.cc)}: not graded on this GPU")
            return
        if self.static.get(ex.name):
            res.explain("static_check", self.static[ex.name])
            return
        if self.local is None:
            failed = self.failed_cell(ex)
            if failed:
                res.explain("cell_failed", failed)
                return
        proc = self.runner_for(ex)
        rng = np.random.default_rng([self.opts.seed, index])
        cases = [(dict(p), ex.inputs(p, rng)) for p in ex.cases(self.opts.simulator)]
        if ex.simulate is not None:
            self.simulate_policy(ex, proc, cases, res)
            if not res.passed and not proc.alive():
                self.drop(ex)
            return
        sanitize_mark = proc.log.mark() if proc.log is not None else 0
        for params, inputs in cases:
            try:
                with self.clock(f"{ex.name}: correctness cases"):
                    outputs, after, faults = self.run_case(proc, ex, params, inputs)
            except CaseFailed as exc:
                res.explain("call_failed", f"{exc} on case {describe(params)}")
                res.cases.append(f"FAIL {describe(params)}: {exc}")
                if self.opts.sanitize and proc.log is not None:  # memcheck stops the kernel: say what it saw
                    time.sleep(0.5)  # its report is still on its way through the pipe
                    found = sanitizer_findings(proc.log.lines_since(sanitize_mark))
                    if found:
                        res.explain("sanitizer", f"compute-sanitizer ({self.opts.sanitize}) found errors:\n" + "\n".join(found))
                self.drop(ex)  # a CUDA error can leave the context unusable
                return
            c = compare(ex, params, inputs, outputs, after, faults)
            err = "" if c.max_abs_err is None else f" (max abs err {c.max_abs_err:.2g})"
            line = f"{'pass' if c.passed else 'FAIL'} {describe(params)}{err}" + (f": {c.message}" if c.message else "")
            res.cases.append(line)
            if not c.passed and not res.reason:  # the first failing case's, from the judge's own checks
                res.reason = "out_of_bounds" if self.overran else "not_freed" if faults else mismatch_reason(c.message)
            if self.on_line is not None:
                self.on_line(c)
        if self.opts.sanitize and proc.log is not None:
            found = sanitizer_findings(proc.log.lines_since(sanitize_mark))
            if found:
                res.explain("sanitizer", f"compute-sanitizer ({self.opts.sanitize}) found errors:\n" + "\n".join(found))
                self.drop(ex)
                return
        n_ok = sum(line.startswith("pass") for line in res.cases)
        res.passed = n_ok == len(cases)
        res.correctness = ex.points if res.passed else 0.0
        res.message = f"all {len(cases)} cases correct" if res.passed else f"{n_ok} of {len(cases)} cases correct"
        res.reason = "" if res.passed else res.reason or "wrong_values"
        if res.passed and self.profiling() and self.opts.simulator and ex.backend == "numba":
            with self.clock(f"{ex.name}: profile"):
                res.profile = self.profile(ex, proc, index)
        if res.passed and ex.speed is not None and not self.opts.simulator and not self.opts.sanitize:
            with self.clock(f"{ex.name}: timing"):
                speed = self.time(ex, proc, index)
            score_speed(ex, speed, res)
        if res.passed and self.profiling() and not self.opts.simulator:  # after timing: it shares the GPU
            with self.clock(f"{ex.name}: profile (Nsight Compute)"):
                res.profile = self.nsight_profile(ex, index)

    # -- one correctness case
    def run_case(self, proc, ex: Exercise, params, inputs, profile: bool = False):
        """Copy the case's inputs into guarded buffers of the judge's, poison the outputs, have
        the runner call the function, and read everything back here.

        Returns (outputs, inputs_after, faults) as host arrays; faults are out-of-bounds writes
        (seen in the guard elements), and the runner's reports of leaks and pinned memory."""
        guards = 0 if self.opts.sanitize else GUARD
        on_host = tuple(ex.host_args) + tuple(ex.pinned_args)
        arrays = {}
        for name, v in inputs.items():
            if isinstance(v, np.ndarray):
                arrays[name] = v
        for name, out in ex.outputs.items():
            dtype = np.dtype(out.dtype)
            if out.init is not None:
                arrays[name] = np.array(inputs[out.init], dtype=dtype)
            else:
                arrays[name] = np.full(out.shape(params), guard_fill(dtype), dtype=dtype)
        dev_names = [n for n in arrays if n not in on_host]
        host_names = [n for n in arrays if n in on_host]
        dev_layout = [((arrays[n].size + 2 * guards,), arrays[n].dtype) for n in dev_names]
        bufs, cids = {}, []
        if dev_layout:
            cid, got = self.arena.alloc(dev_layout, "device")
            cids.append(cid)
            for n, b in zip(dev_names, got):
                bufs[n] = b
        for n in host_names:
            where = "pinned" if n in ex.pinned_args else "host"
            cid, (b,) = self.arena.alloc([(arrays[n].shape, arrays[n].dtype)], where)
            cids.append(cid)
            bufs[n] = b
        try:
            patterns = {}
            for n in dev_names:
                flat = np.empty(arrays[n].size + 2 * guards, dtype=arrays[n].dtype)
                if guards:
                    pat = guard_pattern(arrays[n].dtype)
                    flat.view(pat.dtype)[:] = pat
                    patterns[n] = pat
                flat[guards:guards + arrays[n].size] = arrays[n].ravel()
                _put(bufs[n].view, flat)
            for n in host_names:
                bufs[n].view[...] = arrays[n]
            pristine = self.pristine_copies(bufs, [n for n in dev_names if n in inputs and n not in ex.outputs])
            for cid in cids:
                proc.map(self.arena, cid, self.opts.timeout)
            args = []
            for a in ex.args:
                if a in bufs:
                    b = bufs[a]
                    d = b.desc(a)
                    # a poisoned output: read before written is a fault in the simulator
                    d["fresh"] = a in ex.outputs and ex.outputs[a].init is None
                    if a in dev_names:  # the view the learner gets: inside the guards
                        d["offset"] = b.offset + guards * np.dtype(b.dtype).itemsize
                        d["shape"] = list(arrays[a].shape)
                    args.append(d)
                else:
                    args.append({"kind": "value", "value": encode_value(inputs.get(a))})
            if self.gpu is not None:
                self.gpu.cp.cuda.Device().synchronize()
            reply = proc.request({"op": "call", "exercise": ex.name, "names": list(ex.args), "backend": ex.backend,
                                  "rules": rules(ex), "args": args, "check_leaks": ex.check_leaks,
                                  "profile": profile}, self.opts.timeout)
            if not reply.get("ok"):
                raise CaseFailed(str(reply.get("error", "failed"))[:4000])
            self.traced = reply.get("profile")  # with profile: what the runner's trace saw
            faults = [str(f)[:500] for f in (reply.get("faults") or [])][:5]
            outputs, after = {}, {}
            self.overran = False  # the judge's own guard check, apart from the faults the runner reports
            for n in dev_names:
                if n in pristine and not self.changed_on_device(bufs[n].view, pristine[n]):
                    after[n] = UNCHANGED  # compared on the GPU: no need to read it back
                    continue
                flat = _get(bufs[n].view)
                body = flat[guards:guards + arrays[n].size].reshape(arrays[n].shape)
                if guards:
                    before_n, after_n = overruns(flat, patterns[n], guards)
                    where = " and ".join(f"{_count(k, 'element')} {side} of '{n}'" for k, side in
                                         ((after_n, "past the end"), (before_n, "before the start")) if k)
                    if where:
                        self.overran = True
                        faults.insert(0, f"wrote to {where}: an out-of-bounds write (check your bounds)")
                if n in ex.outputs:
                    outputs[n] = body
                if n in inputs:
                    after[n] = body
            for n in host_names:
                after[n] = np.array(bufs[n].view)
            return outputs, after, faults
        finally:
            proc.unmap(cids, self.opts.timeout) if proc.alive() else None
            for cid in cids:
                self.arena.free(cid)

    def profile(self, ex: Exercise, proc, index: int) -> dict:
        """The learner's function and the reference on the largest case, their memory accesses
        traced in their runners (``memtrace``): shown with the result, never part of the grade. What
        the learner's runner reports is checked for form only (it is the learner's process)."""
        from .memtrace import checked_profile, side_by_side, worse_than

        params = ex.largest_case(True)
        inputs = ex.inputs(params, np.random.default_rng([self.opts.seed, index, 2]))
        try:
            self.traced = None
            self.run_case(proc, ex, params, inputs, profile=True)
            yours = checked_profile(self.traced)
            reference = None
            if ex.baseline is not None:
                self.traced = None
                self.run_case(self.reference_runner(), ex, params, inputs, profile=True)
                reference = checked_profile(self.traced)
        except (CaseFailed, RunnerFailed) as exc:
            return {"error": f"could not trace it: {exc}"[:500]}
        if yours is None:
            return {"error": "could not trace it: no profile came back"}
        return {"case": dict(params), "yours": yours, "reference": reference,
                "findings": worse_than(yours, reference),
                "text": side_by_side(describe(params), yours, reference)}

    def nsight_profile(self, ex: Exercise, index: int, report: str | None = None) -> dict:
        """The learner's function and the reference at the timing size, each in a fresh runner
        started by Nsight Compute (the learner's in its sandbox), side by side: shown with the
        result, never part of the grade. ``report``: keep the learner's .ncu-rep there (check())."""
        from . import nsight

        ncu = nsight.ncu_path()
        if ncu is None:
            return {"error": "Nsight Compute (ncu) is not installed on this machine: it comes with the CUDA toolkit"}
        params = ex.timing_case if ex.timing_case is not None else ex.largest_case(False)
        inputs = ex.inputs(params, np.random.default_rng([self.opts.seed, index, 3]))
        try:
            yours = self._under_ncu(ex, params, inputs, ncu, trusted=False, report=report)
            reference = self._under_ncu(ex, params, inputs, ncu, trusted=True) if ex.baseline is not None else []
        except nsight.ProfileError as exc:
            return {"error": f"could not profile it: {exc}"[:600]}
        if not yours:
            return {"error": "could not profile it: no kernel of yours was launched in the profiled call"}
        mine, ref = _main_kernel(yours), _main_kernel(reference)
        columns = {"yours": mine} if ref is None else {"yours": mine, "reference": ref}
        launches = "your one kernel" if len(yours) == 1 else f"the longest of your {len(yours)} kernel launches"
        text = f"Nsight Compute on {describe(params)}: {launches} ({mine.name})\n" + nsight.table(columns)
        return {"tool": "nsight", "case": dict(params), "yours": nsight.checked(yours),
                "reference": nsight.checked(reference), "findings": nsight.diagnose(mine, ref), "text": text,
                **({"report": report + ".ncu-rep"} if report else {})}

    def _under_ncu(self, ex: Exercise, params, inputs, ncu: str, *, trusted: bool, report: str | None = None):
        """One call of the learner's function (or the reference) in a runner that Nsight Compute
        starts; its kernels, parsed from what ncu prints when the runner exits."""
        from . import nsight

        wrap = nsight.command(ncu, report=report)
        if trusted:
            job = {"mode": "gpu", "trusted": self.lab.name, "debug_stacks": None, "memtrace": None}
        else:
            job = dict(self._runner_job(ex), memtrace=None)
        proc = RunnerProcess(job, simulator=False, sandboxed=self.opts.sandboxed and not trusted, trusted=trusted,
                             slot=self.opts.slot, memory_limit_gb=max(self.opts.memory_limit_gb, 32.0 if trusted else 0),
                             hidden=None if trusted else hidden_libraries(ex), wrap=wrap,
                             wrap_dirs=nsight.install_dirs(ncu))
        try:
            hello = proc.hello(max(self.opts.timeout, 120.0))
            if not hello.get("ok"):
                raise nsight.ProfileError(str(hello.get("error", "the code could not be loaded"))[:300])
            self.run_case(proc, ex, params, inputs, profile="nsight")
        except (CaseFailed, RunnerFailed) as exc:
            proc.close()
            said = "\n".join(ln for ln in proc.log.text().splitlines()[-8:] if ln.strip())
            raise nsight.ProfileError(f"{exc}"[:300] + (f"\n{said}"[:800] if said else "")) from None
        finally:
            proc.close()  # ncu prints its table once the runner has exited
        text = "\n".join(proc.log.lines_since(0))
        if report:
            import subprocess

            try:
                text = subprocess.run(nsight.import_command(report + ".ncu-rep", ncu), capture_output=True,
                                      text=True, timeout=300).stdout
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise nsight.ProfileError(f"could not read the report back: {exc}") from None
        kernels = nsight.parse(text)
        if not kernels and nsight.problem_in(text):
            raise nsight.ProfileError(nsight.problem_in(text))
        return kernels

    def pristine_copies(self, bufs, names) -> dict:
        """On a GPU, a device copy of each input the call must not change, where memory allows:
        comparing on the device saves reading large inputs back (most of a case's time at the
        timing size). Elsewhere, or without room, inputs are read back and compared on the host."""
        if self.gpu is None or not names:
            return {}
        cp = self.gpu.cp
        need = sum(bufs[n].view.nbytes for n in names)
        if int(cp.cuda.runtime.memGetInfo()[0]) < 2 * need + (256 << 20):
            return {}
        return {n: bufs[n].view.copy() for n in names}

    def changed_on_device(self, view, pristine) -> bool:
        """Whether any byte of ``view`` (guards included) differs from its copy from before the call."""
        cp = self.gpu.cp
        word = cp.uint32 if view.nbytes % 4 == 0 else cp.uint8
        return bool((view.view(word) != pristine.view(word)).any())

    # -- speed
    def time(self, ex: Exercise, proc, index: int) -> SpeedResult:
        params = ex.timing_case
        if params is None:
            return SpeedResult(False, "this exercise is graded on correctness only")
        with self.clock(f"{ex.name}: timing inputs (drawn ahead)"):
            drawn = self.prefetch.take(ex, index)
        pool_host = drawn.sets
        # The timing size first, on inputs built to make approximations fail.
        try:
            with self.clock(f"{ex.name}: the check at the timing size"):
                outputs, after, faults = self.run_case(proc, ex, params, pool_host[0])
        except CaseFailed as exc:
            self.drop(ex)
            return SpeedResult(False, f"not timed: at the timing size ({describe(params)}) your function failed: {exc}")
        c = compare(ex, params, pool_host[0], outputs, after, faults, ref64=drawn.ref64)
        if not c.passed:
            return SpeedResult(False, f"not timed: wrong at the timing size ({describe(params)}): {c.message}")
        on_host = tuple(ex.host_args) + tuple(ex.pinned_args)
        names = [n for n, v in pool_host[0].items() if isinstance(v, np.ndarray)]
        cids = []

        def alloc(name_shapes, where="device"):
            cid, bufs = self.arena.alloc([(s, d) for _, s, d in name_shapes], where)
            cids.append(cid)
            return {n: b for (n, _, _), b in zip(name_shapes, bufs)}

        flag_cids: list[int] = []
        try:
            dev_in = [(n, pool_host[0][n].shape, pool_host[0][n].dtype) for n in names if n not in on_host]
            host_in = [(n, pool_host[0][n].shape, pool_host[0][n].dtype) for n in names if n in on_host]
            outs = [(n, o.shape(params), np.dtype(o.dtype)) for n, o in ex.outputs.items()]

            def input_set():
                d = alloc(dev_in) if dev_in else {}
                for n, shape, dt in host_in:
                    d.update(alloc([(n, shape, dt)], "pinned" if n in ex.pinned_args else "host"))
                return d

            calls = self.calls_per_batch(ex, params, pool_host[0], outs)
            pool = []
            for j in range(POOL):
                d = input_set()
                for n in names:
                    _put(d[n].view, pool_host[j][n]) if n not in on_host else d[n].view.__setitem__(..., pool_host[j][n])
                pool.append(d)
            sets = {"pool": pool, "inputs": [input_set() for _ in range(calls)],
                    "sub": [alloc(outs) for _ in range(calls)], "base": [alloc(outs) for _ in range(calls)]}
            flag_bufs = [self.arena.alloc([((16,), "uint32")])[1][0] for _ in range(3)]
            flag_cids = [b.chunk_id for b in flag_bufs]
            cids += flag_cids
            for b in flag_bufs:
                b.view.fill(0)
            self.gpu.cp.cuda.Device().synchronize()
            shared = [b.chunk_id for d in sets["inputs"] for b in d.values()]
            sub_cids = set(shared) | {b.chunk_id for d in sets["sub"] for b in d.values()} | {flag_bufs[0].chunk_id}
            if self.local is not None:
                lp = proc
                flags = [tuple(fb.view.data.ptr + 4 * k for k in range(3)) for fb in flag_bufs]
                sub = LocalTarget(lp, ex, ex.name, flags[0], flag_bufs[0])
                base = LocalTarget(lp, ex, "__baseline__", flags[1], flag_bufs[1]) if ex.baseline else None
                null = None
                lp.runner.functions["__baseline__"] = ex.baseline
            else:
                ref = self.reference_runner()
                base_cids = set(shared) | {b.chunk_id for d in sets["base"] for b in d.values()} | \
                    {flag_bufs[1].chunk_id, flag_bufs[2].chunk_id}
                for cid in sorted(sub_cids):
                    proc.map(self.arena, cid, self.opts.timeout)
                for cid in sorted(base_cids):
                    ref.map(self.arena, cid, self.opts.timeout)
                flags = [tuple(fb.view.data.ptr + 4 * k for k in range(3)) for fb in flag_bufs]
                sub = RemoteTarget(proc, ex, ex.name, flags[0], self.opts.timeout, flag_bufs[0])
                base = RemoteTarget(ref, ex, ex.name, flags[1], self.opts.timeout, flag_bufs[1]) if ex.baseline else None
                null = RemoteTarget(ref, ex, "__null__", flags[2], self.opts.timeout, flag_bufs[2])
            with self.clock(f"{ex.name}: timed batches"):
                return time_batches(self.gpu, ex, params, pool_host, sets, sub, base, null, np.random.default_rng())
        finally:
            self.release_flags(flag_cids)
            for p in ([proc] + ([self.reference] if self.reference is not None else [])):
                if p is not None and p.alive():
                    try:
                        p.unmap(cids, self.opts.timeout)
                    except RunnerFailed:
                        pass
            for cid in cids:
                self.arena.free(cid)

    def release_flags(self, cids) -> None:
        """Before the timing buffers go: raise every flag, so the judge's stream waits on nothing
        (a runner that died mid-batch leaves it waiting), and let it drain."""
        if self.gpu is None:
            return
        for cid in cids:
            c = self.arena.chunks.get(cid)
            if c is not None:
                with self.gpu.side:
                    c.view(0, (16,), "uint32").fill(0x7FFFFFFF)
        self.gpu.side.synchronize()
        self.gpu.stream.synchronize()

    def calls_per_batch(self, ex: Exercise, params, host_inputs: dict, outs) -> int:
        """Calls per timed batch, each on its own buffers: at least BATCH, more for short calls
        (estimated from the bytes they move at this GPU's copy bandwidth), so that a batch takes
        about TARGET_BATCH_S and the switch between processes is a small part of it."""
        from .timing import MAX_CALLS, SETS_BUDGET, TARGET_BATCH_S

        if ex.bytes_moved is None or ex.launch_cost_counts:
            return BATCH
        set_bytes = sum(v.nbytes for v in host_inputs.values() if isinstance(v, np.ndarray)) + \
            2 * sum(int(np.prod(shape)) * np.dtype(dt).itemsize for _, shape, dt in outs)
        estimate = ex.bytes_moved(params) / (self.gpu.copy_bandwidth() * 1e9)
        want = int(np.ceil(TARGET_BATCH_S / max(estimate, 1e-7)))
        # On a small GPU (16 GB) the sets must leave room for the reference's and the learner's
        # own memory (in check(), private copies of every set too): a share of what is free now.
        free = int(self.gpu.cp.cuda.runtime.memGetInfo()[0])
        fit = int(min(SETS_BUDGET, free // 4) // max(set_bytes, 1))
        if fit < BATCH:
            return max(fit, 1)
        return int(np.clip(min(want, fit), BATCH, MAX_CALLS))

    # -- policies
    def simulate_policy(self, ex: Exercise, proc, cases, res: ExerciseResult) -> None:
        """The simulation runs here, on inputs only the judge has seen; each decision is one call
        of the learner's function in the runner, which sees only that call's arguments."""
        deadline = time.monotonic() + self.opts.timeout

        def policy(*args):
            left = deadline - time.monotonic()
            if left <= 0:
                raise RunnerFailed(f"the simulation did not finish within {self.opts.timeout:.0f} s (a slow policy?)")
            try:
                reply = proc.request({"op": "policy", "exercise": ex.name, "names": list(ex.args), "rules": rules(ex),
                                      "args": [encode_value(a) for a in args]}, left)
            except RunnerFailed:
                if time.monotonic() >= deadline:  # the whole simulation's limit, not this call's remainder
                    raise RunnerFailed(f"the simulation did not finish within {self.opts.timeout:.0f} s "
                                       "(a slow policy?)") from None
                raise
            if not reply.get("ok"):
                raise PolicyFailed(str(reply.get("error", "failed"))[:2000])
            value = reply.get("value")
            if isinstance(value, bool) or not (isinstance(value, int) or
                                               (isinstance(value, list) and all(isinstance(k, int) and not isinstance(k, bool) for k in value))):
                raise PolicyFailed(f"{ex.name} must return an int or a list of ints")
            return value

        records = []
        for params, inputs in cases:
            try:
                records.append(ex.simulate(policy, params, inputs))
            except PolicyFailed as exc:
                res.explain("call_failed", f"{exc} on case {describe(params)}")
                return
            except (TypeError, ValueError, IndexError) as exc:  # the simulator refused an answer
                res.explain("invalid_answer", f"{ex.name}({', '.join(ex.args)}) answered something the engine cannot run: "
                                              f"{exc} (case {describe(params)})")
                return
        verdict = ex.assess(cases, records)
        res.cases = list(verdict.lines)
        res.passed = verdict.passed
        res.correctness = ex.points if res.passed else 0.0
        res.explain("" if res.passed else "below_bar", verdict.message)
        if res.passed and ex.speed is not None:
            res.timing = {"measured": False, "ratio": verdict.ratio, "summary": verdict.summary}
            res.speed = ex.speed.score(verdict.ratio)


_GPU = None


def judge_gpu():
    """The judge's CUDA objects, built once per process (check() calls this many times)."""
    global _GPU
    if _GPU is None:
        from .timing import JudgeGPU

        _GPU = JudgeGPU()
    return _GPU


class LoadFailed(Exception):
    def __init__(self, message: str, reason: str = "load_failed") -> None:
        super().__init__(message)
        self.reason = reason  # a REASONS code: the runner's own answer only ever says "load_failed"


class CaseFailed(Exception):
    pass


class PolicyFailed(Exception):
    pass


# Flags that mean the timing cannot be trusted: no speed points.
INTEGRITY = ("outputs of the timed calls were wrong",)


def score_speed(ex: Exercise, speed: SpeedResult, res: ExerciseResult) -> None:
    res.timing = speed.as_dict()
    res.flags += speed.flags
    if not speed.measured:
        res.flags.append(speed.message or "speed not measured")
        return
    if any(key in f for f in res.flags for key in INTEGRITY):
        res.speed = 0.0
        return
    res.speed = ex.speed.score(speed.ratio)


def _put(view, host: np.ndarray) -> None:
    if isinstance(view, np.ndarray):
        view[...] = host.reshape(view.shape)
    else:
        view.set(np.ascontiguousarray(host.reshape(view.shape)))


def _get(view) -> np.ndarray:
    return np.array(view) if isinstance(view, np.ndarray) else view.get()


def _main_kernel(kernels):
    """The launch a profile table shows: the longest (a learner's function may launch several)."""
    return max(kernels, key=lambda k: k.duration_us) if kernels else None


# compute-sanitizer's reports of real faults (API return codes are switched off).
SANITIZER_LINE = re.compile(r"^=+ +(Invalid |Error: Race|Race reported|Uninitialized |Barrier error|Misaligned |"
                            r"Out-of-range|Malloc/Free|Warning: .*hazard)")


def sanitizer_findings(lines: list[str], limit: int = 4) -> list[str]:
    return [line.strip() for line in lines if SANITIZER_LINE.match(line)][:limit]


# --------------------------------------------------------------------------- the process
def _debug_stacks(judge_ref: list, every: float) -> None:
    """GRADER_DEBUG_STACKS=seconds: the judge's stacks and its runners' printed output, to its
    log (judge.log), every so often: for finding where grading is stuck."""
    import faulthandler
    import threading

    faulthandler.dump_traceback_later(every, repeat=True)

    def runners():
        while True:
            time.sleep(every)
            j = judge_ref[0] if judge_ref else None
            for proc in list(getattr(j, "runners", {}).values()) + [getattr(j, "reference", None)]:
                if proc is not None and getattr(proc, "log", None) is not None:
                    print(f"--- runner {proc.proc.pid} output:\n{proc.log.text()[-3000:]}", file=sys.stderr, flush=True)

    threading.Thread(target=runners, daemon=True).start()


def main(fd: int) -> None:
    """Grade the jobs sent on ``fd``, one after another, until the grader closes it. Each job's
    output goes to its own log; the reference's runner and the timing inputs are kept between
    jobs (a batch grades many submissions with one seed)."""
    judge_ref: list = []
    if os.environ.get("GRADER_DEBUG_STACKS"):
        _debug_stacks(judge_ref, float(os.environ["GRADER_DEBUG_STACKS"]))
    sock = socket.socket(fileno=fd)
    from . import timing_inputs

    timing_inputs.keep()
    KEEP_REFERENCE[0] = True
    try:
        while True:
            try:
                job = _recv(sock)
            except (EOFError, OSError):
                return
            _log_to(job.get("log"))
            judge_ref.clear()
            _send(sock, grade_job(job, judge_ref))
    finally:
        close_kept()


def _log_to(path) -> None:
    """This job's judge.log: the judge's own prints and tracebacks go there."""
    if not path:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def grade_job(job: dict, judge_ref: list) -> dict:
    lab = get_lab(job["lab"])
    if job.get("tmp"):  # the judge's temporary files for this submission
        import tempfile

        tempfile.tempdir = os.environ["TMPDIR"] = str(job["tmp"])
    opts = Options(simulator=job["simulator"], seed=int(job["seed"]), timeout=float(job["timeout"]),
                   sanitize=job.get("sanitize"), memory_limit_gb=float(job["memory_limit_gb"]),
                   sandboxed=bool(job["sandboxed"]), slot=int(job.get("slot", 0)),
                   profile=bool(job.get("profile")))
    judge = Judge(lab, opts, cells=job["cells"], static=job.get("static", {}))
    judge_ref.append(judge)
    profile = None
    if os.environ.get("GRADER_PROFILE"):  # a file for cProfile's statistics of this judge
        import cProfile

        profile = cProfile.Profile()
        profile.enable()
    started = time.monotonic()
    try:
        results = judge.grade(job.get("exercises"))
    finally:
        judge.close()
        if profile is not None:
            profile.disable()
            profile.dump_stats(os.environ["GRADER_PROFILE"])
    phases = ", ".join(f"{k} {v:.1f} s" for k, v in judge.phases.items())
    print(f"graded in {time.monotonic() - started:.1f} s: {phases}", file=sys.stderr, flush=True)
    tail = "\n".join(t for t in judge.log_tails if t)[-4000:]
    return {"exercises": [r.as_dict() for r in results], "log_tail": tail, "notes": judge.notes}


def _send(sock, obj) -> None:
    data = json.dumps(obj, default=_jsonable).encode()
    sock.sendall(struct.pack("<Q", len(data)) + data)


def _jsonable(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, float) and o != o:
        return None
    return str(o)


def _recv(sock):
    def exact(n):
        buf = bytearray()
        while len(buf) < n:
            chunk = sock.recv(min(n - len(buf), 1 << 20))
            if not chunk:
                raise EOFError
            buf += chunk
        return bytes(buf)

    (n,) = struct.unpack("<Q", exact(8))
    return json.loads(exact(n))


if __name__ == "__main__":
    main(int(sys.argv[1]))
