# ATTACK (forged): searches gc.get_objects() for the grader's message that carries the cases (a dict with a
# 'cases' list of (params, inputs) pairs: the dicts of arrays themselves are not tracked by the collector)
# and writes the sum of this call's host inputs into out; no kernel at all.
# A secure grader gives 0 points for vector_add: the learner's process must hold device inputs only.
import gc

_told = []


def _host_inputs(n):
    for obj in gc.get_objects():
        if type(obj) is dict and isinstance(obj.get("cases"), list):
            for case in obj["cases"]:
                inputs = case[1] if isinstance(case, tuple) and len(case) == 2 else None
                if isinstance(inputs, dict) and "a" in inputs and getattr(inputs["a"], "shape", None) == (n,):
                    return inputs
    return None


def vector_add(a, b, out):
    host = _host_inputs(out.shape[0])
    if host is None:
        print("ATTACK gc_inputs: no host inputs found", flush=True)
        return
    if not _told:
        _told.append(1)
        print("ATTACK gc_inputs: found the grader's host inputs with gc.get_objects()", flush=True)
    out[:] = host["a"] + host["b"]
