# ATTACK: as prerun_hook_softmax.py - pre-run hooks of two do-nothing Triton kernels are partials of
# aten's silu.out and mul.out, called by Triton's GridExecutor with the launch's arguments.
import functools

import torch
import triton
import triton.language as tl

_mods = [torch]
_k = []


@triton.jit
def _noop1(a, out):
    pass


@triton.jit
def _noop2(a, b, out):
    pass


def silu_mul(x, g, out):
    if not _k:
        aten = _mods[0].ops.aten
        _noop1.add_pre_run_hook(functools.partial(aten.silu.out))
        _noop2.add_pre_run_hook(functools.partial(aten.mul.out))
        _k.extend([_noop1, _noop2])
    _k[0][(1,)](x, out=out)
    _k[1][(1,)](out, g, out=out)
