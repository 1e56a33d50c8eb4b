# ATTACK (library): the host copies hide in a class's method, which the static check never reads.
# (Today's run-time guard does catch it: the method's line names the copies. forge_guard.py is this
# attack plus a patched guard.)
# A secure grader gives 0 points for saxpy.
class _Math:
    def saxpy(self, alpha, x, y, out):
        out.copy_to_device((alpha * x.copy_to_host().astype("float64") + y.copy_to_host()).astype("float32"))


def saxpy(alpha, x, y, out):
    _Math().saxpy(alpha, x, y, out)
