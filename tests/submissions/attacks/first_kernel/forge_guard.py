# ATTACK (forged): replaces autograder.measure.ForbiddenGuard (the run-time check of forbidden calls)
# with a no-op, then copies to the host, adds with NumPy and copies back, from a helper hidden in a
# class (so the static check does not read it; hidden_class.py is the same without the patch).
# A secure grader gives 0 points for vector_add: its checks must not live where the learner's code
# can replace them.
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


class _Helper:
    @staticmethod
    def add(a, b, out):
        out.copy_to_device(a.copy_to_host() + b.copy_to_host())


def vector_add(a, b, out):
    _Helper.add(a, b, out)
