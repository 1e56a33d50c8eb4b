# ATTACK (forged): no registration at all: a plain Python object is put where the dispatcher's
# operator would be found, torch.ops.swiglu.silu_mul, so that the grader's calls reach it. Its
# body even uses a real Triton kernel: the marks are for the registration, which is missing.
# A secure grader gives 0 points for silu_mul_op.
import types

import torch
import triton
import triton.language as tl


@triton.jit
def _gate(x_ptr, g_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    g = tl.load(g_ptr + offs, mask=mask).to(tl.float32)
    tl.store(out_ptr + offs, (x * tl.sigmoid(x) * g).to(out_ptr.dtype.element_ty), mask=mask)


def fake_op(x, g):
    out = torch.empty_like(x)
    _gate[(triton.cdiv(x.numel(), 1024),)](x, g, out, x.numel(), BLOCK=1024)
    return out


torch.ops.swiglu = types.SimpleNamespace(silu_mul=fake_op)
