# ATTACK (forged): uses inspect.stack() to reach the worker's list of cases (the grader's host inputs)
# and writes alpha * x + y, computed on the host, into out; no kernel at all.
# A secure grader gives 0 points for saxpy: the learner's process must hold device inputs only.
import inspect

_told = []


def saxpy(alpha, x, y, out):
    n = out.shape[0]
    for info in inspect.stack():
        cases = info.frame.f_locals.get("cases")
        if not isinstance(cases, list):
            continue
        for params, inputs in cases:
            if isinstance(inputs, dict) and "x" in inputs and inputs["x"].shape == (n,) \
                    and inputs["alpha"] == alpha:
                if not _told:
                    _told.append(1)
                    print(f"ATTACK inspect_stack_saxpy: found the grader's cases in {info.function}()", flush=True)
                out[:] = inputs["alpha"] * inputs["x"].astype("float64") + inputs["y"]
                return
    print("ATTACK inspect_stack_saxpy: no cases found", flush=True)
