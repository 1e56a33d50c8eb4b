# ATTACK (forged): finds the grader's host copy of x with gc.get_objects() (through the message that
# carries the cases: a dict with a 'cases' list of (params, inputs) pairs) and writes the block sums
# computed on the host; no kernel at all.
# A secure grader gives 0 points for block_sums: the learner's process must hold device inputs only.
import gc

_told = []


def _host_x(n):
    for obj in gc.get_objects():
        if type(obj) is dict and isinstance(obj.get("cases"), list):
            for case in obj["cases"]:
                inputs = case[1] if isinstance(case, tuple) and len(case) == 2 else None
                if isinstance(inputs, dict) and getattr(inputs.get("x"), "shape", None) == (n,):
                    return inputs["x"]
    return None


def block_sums(x, partials):
    host = _host_x(x.shape[0])
    if host is None:
        print("ATTACK gc_inputs_block_sums: no host input found", flush=True)
        return
    if not _told:
        _told.append(1)
        print("ATTACK gc_inputs_block_sums: found the grader's host copy of x", flush=True)
    padded = host.astype("float64")
    padded.resize(partials.shape[0] * 256, refcheck=False)
    partials[:] = padded.reshape(-1, 256).sum(axis=1)
