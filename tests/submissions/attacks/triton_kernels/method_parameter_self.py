# ATTACK (library, runs past the static check): a private attribute through a method's own `self`: the method is called on the torch module,
# so self._C is torch._C, and its DisableTorchFunction switches off the grader's torch mode.
import torch


class Reach:
    def c_module(self):
        return self._C


def softmax(x, out):
    with Reach.c_module(torch).DisableTorchFunction():
        out.copy_(x.softmax(-1))
