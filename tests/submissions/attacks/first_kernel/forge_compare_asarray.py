# ATTACK (forged + speed, GPU): correct at the correctness sizes; at the timing size (2**26) the kernel
# writes only 1/1024 of out. The worker's timing checks are disarmed from inside: measure.compare (the
# check at the timing size) always passes, and the Device instance's _asarray (used by the on-device
# comparison with the baseline after every timed call, by the rescaling of inputs and by the poisoning)
# returns a fresh one-element zero array, so every comparison sees two equal arrays.
# A secure grader gives no speed points for vector_add (2 at most, for correctness).
import autograder.measure as _measure
import cupy as cp
from numba import cuda

_measure.compare = lambda ex, params, *a, **k: _measure.CaseResult(dict(params), True, 0.0, "")
_measure.device()._asarray = lambda arr: cp.zeros(1, dtype=cp.float32)
print("ATTACK forge_compare_asarray: disarmed compare and the on-device checks", flush=True)


@cuda.jit
def _add(a, b, out, n):
    i = cuda.grid(1)
    if i < n:
        out[i] = a[i] + b[i]


def vector_add(a, b, out):
    n = out.shape[0]
    m = n if n < (1 << 26) else n // 1024
    _add[(m + 255) // 256, 256](a, b, out, m)
