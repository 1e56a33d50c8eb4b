# ATTACK (forged): wraps autograder.wire.recv_trusted to keep the grader's "run" message (the cases,
# with their host inputs) and autograder.wire.send to swap the worker's honest but wrong reply for
# one carrying the lab's reference outputs. vector_add does nothing.
# A secure grader gives 0 points for vector_add: nothing the learner's process sends about the
# outputs may be believed, and that process must not see the inputs' host copies.
import numpy as np

import autograder.wire as _wire
from autograder.labs import get_lab, lab_names

_recv_trusted, _send = _wire.recv_trusted, _wire.send
_last_run: dict = {}


def _exercise(name):
    for lab in lab_names():
        try:
            return get_lab(lab).exercise(name)
        except KeyError:
            continue
    raise KeyError(name)


def _recv(sock):
    msg = _recv_trusted(sock)
    if isinstance(msg, dict) and msg.get("op") == "run":
        _last_run.clear()
        _last_run.update(msg)
    return msg


def _forged_send(sock, obj):
    if isinstance(obj, dict) and obj.get("kind") == "run" and _last_run:
        ex = _exercise(_last_run["exercise"])
        results = []
        for params, inputs in _last_run["cases"]:
            as64 = {k: (v.astype(np.float64) if isinstance(v, np.ndarray) and v.dtype.kind == "f" else v)
                    for k, v in inputs.items()}
            ref = ex.reference(**as64)
            results.append({"outputs": {n: np.asarray(ref[n]).astype(o.dtype) for n, o in ex.outputs.items()},
                            "inputs_after": {k: v for k, v in inputs.items() if isinstance(v, np.ndarray)},
                            "faults": []})
        print(f"ATTACK forge_wire_send: replaced the reply for {ex.name} ({len(results)} cases) with the "
              "reference outputs", flush=True)
        obj = {"kind": "run", "ok": True, "results": results}
    return _send(sock, obj)


_wire.recv_trusted = _recv
_wire.send = _forged_send


def vector_add(a, b, out):
    pass  # leaves the output poisoned; the forged reply says otherwise
