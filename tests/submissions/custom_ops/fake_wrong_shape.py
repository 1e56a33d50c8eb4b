# MISTAKE (honest): The operator's fake returns the transposed shape. Costs the fake's exercise only.
import math
import numpy as np
import torch
import triton
import triton.language as tl

# %%
SILU_BLOCK = 1024


@triton.jit
def silu_mul_kernel(x_ptr, g_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    g = tl.load(g_ptr + offs, mask=mask).to(tl.float32)
    tl.store(out_ptr + offs, (x * tl.sigmoid(x) * g).to(out_ptr.dtype.element_ty), mask=mask)


def silu_mul(x, g, out):
    n = x.numel()
    if n:
        silu_mul_kernel[(triton.cdiv(n, SILU_BLOCK),)](x, g, out, n, BLOCK=SILU_BLOCK)

# %%
@triton.jit
def silu_mul_backward_kernel(x_ptr, g_ptr, dy_ptr, dx_ptr, dg_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    g = tl.load(g_ptr + offs, mask=mask).to(tl.float32)
    dy = tl.load(dy_ptr + offs, mask=mask).to(tl.float32)
    s = tl.sigmoid(x)
    tl.store(dg_ptr + offs, (dy * x * s).to(dg_ptr.dtype.element_ty), mask=mask)
    tl.store(dx_ptr + offs, (dy * g * s * (1 + x * (1 - s))).to(dx_ptr.dtype.element_ty), mask=mask)


def silu_mul_backward(x, g, dy, dx, dg):
    n = x.numel()
    if n:
        silu_mul_backward_kernel[(triton.cdiv(n, SILU_BLOCK),)](x, g, dy, dx, dg, n, BLOCK=SILU_BLOCK)

# %%
@torch.library.custom_op("swiglu::silu_mul", mutates_args=())
def silu_mul_op(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    x, g = x.contiguous(), g.contiguous()
    out = torch.empty_like(x)
    silu_mul(x, g, out)
    return out

# %%
@torch.library.custom_op("swiglu::silu_mul_backward", mutates_args=())
def silu_mul_backward_op(x: torch.Tensor, g: torch.Tensor, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x, g, dy = x.contiguous(), g.contiguous(), dy.contiguous()
    dx, dg = torch.empty_like(x), torch.empty_like(g)
    silu_mul_backward(x, g, dy, dx, dg)
    return dx, dg


@silu_mul_backward_op.register_fake
def _(x, g, dy):
    return torch.empty_like(x), torch.empty_like(g)


def silu_mul_setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def silu_mul_op_backward(ctx, dy):
    x, g = ctx.saved_tensors
    return silu_mul_backward_op(x, g, dy)


silu_mul_op.register_autograd(silu_mul_op_backward, setup_context=silu_mul_setup_context)

# %%
@silu_mul_op.register_fake
def _(x, g):
    return x.new_empty((x.shape[1], x.shape[0]))
