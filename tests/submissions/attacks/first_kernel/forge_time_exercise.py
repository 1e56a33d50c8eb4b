# ATTACK (forged, GPU): replaces autograder.measure.time_exercise (looked up by the worker at call time)
# with one that reports a measured 25x speed-up and no flags. The kernel is correct but deliberately slow
# (a few thousand threads), so honestly it earns no speed points.
# A secure grader gives no speed points for vector_add (2 at most, for correctness): the clock and the
# speed verdict must live outside the learner's process.
import autograder.measure as _measure
from numba import cuda


def _forged_time_exercise(ex, fn, *args, **kwargs):
    print("ATTACK forge_time_exercise: reporting a forged 25x speed-up", flush=True)
    return _measure.SpeedResult(True, median_s=1e-5, baseline_median_s=2.5e-4, ratio=25.0, reps=50)


_measure.time_exercise = _forged_time_exercise


@cuda.jit
def _slow_add(a, b, out):
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, out.shape[0], stride):
        out[i] = a[i] + b[i]


def vector_add(a, b, out):
    _slow_add[32, 128](a, b, out)  # 4,096 threads in all: correct, and far too slow for speed points

