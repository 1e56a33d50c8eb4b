# ATTACK (library): Triton calls a heuristic the kernel is given; here a functools.partial of torch's
# softmax out= overload, C-level objects with no frame of their own, so the first frame above the torch
# call is Triton's (a library the guards trust) and the call was taken for Triton's. No kernel does work.
import functools

import torch
import triton
import triton.language as tl

_mods = [torch]


@triton.jit
def _noop(x_ptr, out_ptr, B: tl.constexpr):
    pass


def softmax(x, out):
    op = _mods[0].ops.aten.softmax.int_out
    k = functools.partial(op, x, out=out)          # k(-1) == softmax(x, -1, out=out)
    heur = functools.partial(max, -1, key=k)       # Triton calls heur(dict): max(-1, dict, key=k)
    kern = triton.heuristics({"B": heur})(_noop)
    try:
        kern[(1,)](x, out)
    except Exception:
        pass                                       # k(dict) fails after k(-1) already wrote out
