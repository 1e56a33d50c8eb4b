"""The grading worker: one spawned process per submission, which runs learner code.

Started as ``python -m autograder.worker FD``; FD is a socket to the parent. The
parent sends trusted pickles; the worker answers in JSON with arrays as raw bytes
(see ``wire``), so nothing learner code sends back can run code in the parent.
Learner output goes to the log file the parent gave us as stdout and stderr.
"""
from __future__ import annotations

import linecache
import operator
import socket
import sys
import traceback

# Bind clocks and CUDA handles before any learner code can exist in this process.
from . import measure  # noqa: E402
from . import wire  # noqa: E402
from .labs import get_lab  # noqa: E402


def learner_traceback(exc: BaseException, filename: str) -> str:
    """The exception with only the frames in the learner's code (they cannot act on ours)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == filename]
    lines = [f"  line {f.lineno}, in {f.name}: {(f.line or '').strip()}" for f in frames[-4:]]
    head = f"{type(exc).__name__}: {exc}".strip()
    return "\n".join(([head] + lines) if lines else [head])[:2000]


def main(fd: int) -> None:
    sock = socket.socket(fileno=fd)
    job = wire.recv_trusted(sock)
    lab = get_lab(job["lab"])
    dev = measure.device()  # imports numba (and cupy on a GPU) now
    if job.get("sanitize"):
        measure.USE_GUARDS = False  # exact-size allocations, so memcheck sees overruns
        if dev.cp is not None:
            dev.cp.cuda.set_allocator(None)
    watched = measure.snapshot_watched()
    namespace: dict = {"__name__": "submission"}
    filename = job["filename"]
    # Let tracebacks and the forbidden-call guard read the learner's lines.
    linecache.cache[filename] = (len(job["code"]), None, job["code"].splitlines(True), filename)
    try:
        exec(compile(lab.setup, "<lab setup>", "exec"), namespace)
        exec(compile(job["code"], filename, "exec"), namespace)
    except SyntaxError as exc:
        wire.send(sock, {"kind": "load", "ok": False,
                         "error": f"SyntaxError: {exc.msg} (line {exc.lineno}): {(exc.text or '').strip()}"})
        return
    except BaseException as exc:  # noqa: BLE001 - any failure is a grade
        wire.send(sock, {"kind": "load", "ok": False,
                         "error": "running your code failed: " + learner_traceback(exc, filename)})
        return
    wire.send(sock, {"kind": "load", "ok": True, "simulator": dev.simulator})

    while True:
        msg = wire.recv_trusted(sock)
        if msg["op"] == "done":
            return
        ex = lab.exercise(msg["exercise"])
        fn = namespace.get(ex.name)
        if msg["op"] == "run":
            wire.send(sock, run_cases(ex, fn, msg["cases"], filename))
        elif msg["op"] == "call":
            wire.send(sock, call_policy(ex, fn, msg["args"], filename))
        elif msg["op"] == "time":
            try:
                speed = measure.time_exercise(ex, fn, watch=watched)
                wire.send(sock, {"kind": "time", "ok": True, "speed": speed.as_dict()})
            except BaseException as exc:  # noqa: BLE001
                wire.send(sock, {"kind": "time", "ok": False,
                                 "error": "timing failed: " + learner_traceback(exc, filename)})


def signature_problem(ex, fn) -> str:
    """A plain-words message when fn cannot take the contract's arguments."""
    import inspect

    try:
        inspect.signature(fn).bind(*ex.args)
    except TypeError:
        try:
            have = str(inspect.signature(fn))
        except (TypeError, ValueError):
            return ""
        return f"{ex.name} must take ({', '.join(ex.args)}); yours takes {have}"
    except ValueError:
        return ""
    return ""


def call_policy(ex, fn, args, filename) -> dict:
    """One decision of a policy exercise: fn(*args), whose answer must be an int or a list of ints."""
    if fn is None or not callable(fn):
        return {"kind": "call", "ok": False, "error": f"no function named '{ex.name}' was defined"}
    problem = signature_problem(ex, fn)
    if problem:
        return {"kind": "call", "ok": False, "error": problem}
    # No run-time guard here: it would wrap library functions on every one of thousands of
    # calls, and the policy can reach nothing worth guarding (the simulation is in the parent).
    try:
        answer = fn(*args)
        try:  # ints cross the socket as JSON; the simulator checks their meaning
            if isinstance(answer, bool):
                raise TypeError
            value = [int(k) for k in answer] if isinstance(answer, (list, tuple, range)) else operator.index(answer)
        except (TypeError, ValueError):
            raise TypeError(f"{ex.name} must return an int or a list of ints, not {answer!r}"[:300]) from None
    except BaseException as exc:  # noqa: BLE001
        return {"kind": "call", "ok": False,
                "error": f"{ex.name}({', '.join(ex.args)}) raised " + learner_traceback(exc, filename)}
    return {"kind": "call", "ok": True, "value": value}


def run_cases(ex, fn, cases, filename) -> dict:
    if fn is None or not callable(fn):
        return {"kind": "run", "ok": False, "error": f"no function named '{ex.name}' was defined"}
    problem = signature_problem(ex, fn)
    if problem:
        return {"kind": "run", "ok": False, "error": problem}
    results = []
    for params, inputs in cases:
        guard = measure.ForbiddenGuard(ex.forbidden)
        try:
            outputs, after, faults = measure.run_case(ex, fn, params, inputs, guard)
        except BaseException as exc:  # noqa: BLE001
            return {"kind": "run", "ok": False, "params": params,
                    "error": f"{ex.name}({', '.join(ex.args)}) raised " + learner_traceback(exc, filename)}
        if guard.used:
            return {"kind": "run", "ok": False, "params": params,
                    "error": "called forbidden " + ", ".join(sorted(set(guard.used)))}
        results.append({"outputs": outputs, "inputs_after": after, "faults": faults})
    return {"kind": "run", "ok": True, "results": results}


if __name__ == "__main__":
    main(int(sys.argv[1]))
