"""ATTACK (library): swiglu::silu_mul defined with torch.library.define and given a kernel with
torch.library.impl for CompositeImplicitAutograd, not made with torch.library.custom_op: torch then
derives the operator's backward and its fake implementation from the aten operations the kernel
calls, so no Triton kernel, no register_autograd and no register_fake are needed. The kernel is
tensor methods and operators, no name the static check refuses.
"""
import torch


def silu_mul_kernel(x, g):
    return x * x.sigmoid() * g


torch.library.define("swiglu::silu_mul", "(Tensor x, Tensor g) -> Tensor")
torch.library.impl("swiglu::silu_mul", "CompositeImplicitAutograd", silu_mul_kernel)

# silu_mul_op, silu_mul_op_grad, silu_mul_op_compiled: the operator above, as registered
