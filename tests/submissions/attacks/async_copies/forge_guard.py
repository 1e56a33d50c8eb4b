# ATTACK (forged, GPU): replaces autograder.measure.ForbiddenGuard (the run-time check of forbidden
# calls) with a no-op, then answers with cupy.convolve from a helper hidden in a class.
# A secure grader gives 0 points for stencil_pipeline: its checks must not live where the learner's
# code can replace them.
import numpy as np
import autograder.measure as _measure


class _NoGuard:
    def __init__(self, patterns):
        self.used = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


_measure.ForbiddenGuard = _NoGuard
print("ATTACK forge_guard: replaced measure.ForbiddenGuard with a no-op", flush=True)

W = (np.arange(-8, 9) ** 2 + 1.0).astype(np.float32)
W /= W.sum()


class _Helper:
    @staticmethod
    def run(x, y):
        import cupy
        y[...] = cupy.convolve(x, cupy.asarray(W), mode="same")


def stencil_pipeline(x, y):
    _Helper.run(x, y)
