# ATTACK (forged): walks the call stack with sys._getframe to the grader's frame that holds its host
# copy of the inputs (run_case's host_inputs) and writes their sum into out; no kernel at all.
# A secure grader gives 0 points for vector_add: the learner's process must hold device inputs only.
import sys

_told = []


def _grader_inputs(n):
    f = sys._getframe(2)
    while f is not None:
        for key, value in list(f.f_locals.items()):
            if isinstance(value, dict) and "a" in value and "b" in value \
                    and type(value["a"]).__name__ == "ndarray" and value["a"].shape == (n,):
                return f"{f.f_code.co_name}.{key}", value
        f = f.f_back
    return None, None


def vector_add(a, b, out):
    where, host = _grader_inputs(out.shape[0])
    if host is None:
        print("ATTACK frame_walk_inputs: no host inputs on the stack", flush=True)
        return
    if not _told:
        _told.append(1)
        print(f"ATTACK frame_walk_inputs: read the grader's host inputs from {where}", flush=True)
    out[:] = host["a"] + host["b"]
