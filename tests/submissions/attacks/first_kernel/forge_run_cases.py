# ATTACK (forged): the worker runs as __main__; this replaces its run_cases with one that answers
# every case with the lab's own float64 reference, computed from the grader's inputs that arrive in
# the worker's message. vector_add itself is never called and does nothing.
# A secure grader gives 0 points for vector_add: the process that runs learner code must never hold
# the cases' host inputs nor the reference, and the judge must read the outputs the kernel wrote.
import sys

import numpy as np


def _reference_reply(ex, cases):
    results = []
    for params, inputs in cases:
        as64 = {k: (v.astype(np.float64) if isinstance(v, np.ndarray) and v.dtype.kind == "f" else v)
                for k, v in inputs.items()}
        ref = ex.reference(**as64)
        results.append({"outputs": {n: np.asarray(ref[n]).astype(o.dtype) for n, o in ex.outputs.items()},
                        "inputs_after": {k: v for k, v in inputs.items() if isinstance(v, np.ndarray)},
                        "faults": []})
    print(f"ATTACK forge_run_cases: answered {len(results)} cases of {ex.name} from the grader's own "
          "inputs, without running any kernel", flush=True)
    return {"kind": "run", "ok": True, "results": results}


def _forged_run_cases(ex, fn, cases, filename):
    return _reference_reply(ex, cases)


for _name in ("__main__", "autograder.worker"):
    _mod = sys.modules.get(_name)
    if _mod is not None and hasattr(_mod, "run_cases"):
        _mod.run_cases = _forged_run_cases


def vector_add(a, b, out):
    pass  # never called: the forged run_cases answers instead


def saxpy(alpha, x, y, out):
    pass
