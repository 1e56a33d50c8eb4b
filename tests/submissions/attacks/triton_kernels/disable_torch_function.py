# ATTACK (library, runs past the static check): torch does the softmax, with torch function handling
# switched off around it. The lab's setup imports torch; an alias named `self` makes `self._C` pass the
# static check (private attributes are allowed on self), and torch._C.DisableTorchFunction turns off
# every torch function mode, the grader's RefuseTensorMath included, so the tensor methods run unseen.
# A secure grader gives 0 points for softmax.
def softmax(x, out):
    self = torch  # noqa: F821 - the lab's setup imports torch
    with self._C.DisableTorchFunction():
        out.copy_(x.softmax(-1))
