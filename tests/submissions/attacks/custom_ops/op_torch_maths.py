# ATTACK (library): the operator is registered properly (schema, fake, backward), but its body is
# eager PyTorch maths instead of a Triton kernel: registration marks for no kernel.
# A secure grader gives 0 points for silu_mul_op.
import torch


@torch.library.custom_op("swiglu::silu_mul", mutates_args=())
def silu_mul_registered(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.silu(x) * g


@silu_mul_registered.register_fake
def _(x, g):
    return torch.empty_like(x)


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _backward(ctx, dy):
    x, g = ctx.saved_tensors
    s = torch.sigmoid(x)
    return dy * g * s * (1 + x * (1 - s)), dy * x * s


silu_mul_registered.register_autograd(_backward, setup_context=_setup_context)
