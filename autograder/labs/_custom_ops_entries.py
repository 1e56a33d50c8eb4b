"""The functions of the custom-operator lab's registration exercises (``Exercise.entry``).

This file is sent as source to the learner's runner (the sandbox holds no file of the grader),
followed by one line naming the exercise's ``entry``. Each entry calls the operator the learner
registered the way a model would: eagerly, through autograd, under ``torch.compile`` and inside
an MLP block. It is grader code: the guards judge only the learner code it reaches.
"""
import torch
import torch.overrides
import torch.testing._internal.optests  # noqa: F401 - what opcheck calls: loaded (and sealed) before learner code
from torch.autograd import grad as autograd_grad
from torch.library import opcheck

# The functions that judge the operator are bound here, when the runner builds the entries, before
# any learner cell runs: a cell that replaces torch.library.opcheck or torch.compile afterwards
# does not replace them here.
torch_compile = torch.compile

NAMESPACE, NAME = "swiglu", "silu_mul"
QUALNAME = f"{NAMESPACE}::{NAME}"


class OperatorProblem(Exception):
    """What is wrong with the registration, in the learner's terms."""


def registered_op():
    """The learner's ``swiglu::silu_mul``, as the dispatcher holds it."""

    try:
        packet = getattr(getattr(torch.ops, NAMESPACE), NAME)
    except (AttributeError, RuntimeError):
        packet = None
    if not isinstance(packet, torch._ops.OpOverloadPacket):
        raise OperatorProblem(f"no operator {QUALNAME} is registered: decorate your function with "
                              f'@torch.library.custom_op("{QUALNAME}", mutates_args=())')
    return packet


def same_layout(y, out, what: str) -> None:
    if tuple(y.shape) != tuple(out.shape) or y.dtype != out.dtype or y.device != out.device:
        raise OperatorProblem(f"{what} returned a {y.dtype} tensor of shape {tuple(y.shape)} on {y.device}; "
                              f"expected {out.dtype}, {tuple(out.shape)}, on {out.device}")


_OPCHECKED: set = set()


def opcheck_once(op, x, g) -> None:
    """torch.library.opcheck on a small slice, once per dtype: the schema, the fake (meta)
    implementation, the autograd registration and AOT dispatch all agree with the real kernel."""

    if x.dtype in _OPCHECKED:
        return
    rows = min(x.shape[0], 4) if x.dim() else 1
    xs = x[:rows].detach().clone().requires_grad_(True)
    gs = g[:rows].detach().clone().requires_grad_(True)
    try:
        opcheck(op.default, (xs, gs))
    except Exception as exc:  # noqa: BLE001 - opcheck's finding is the learner's
        text = str(exc).strip().splitlines()
        raise OperatorProblem(f"torch.library.opcheck failed: {text[0] if text else type(exc).__name__}"
                              [:600]) from None
    _OPCHECKED.add(x.dtype)


def entry_forward(namespace):
    def silu_mul_op(x, g, out):
        op = registered_op()
        opcheck_once(op, x, g)
        y = op(x, g)
        same_layout(y, out, f"{QUALNAME}(x, g)")
        out.copy_(y)

    return silu_mul_op


def entry_gradients(namespace):
    def silu_mul_op_grad(x, g, dy, dx, dg):

        op = registered_op()
        xr = x.detach().clone().requires_grad_(True)
        gr = g.detach().clone().requires_grad_(True)
        y = op(xr, gr)
        same_layout(y, dy, f"{QUALNAME}(x, g)")
        if y.grad_fn is None:
            raise OperatorProblem(f"{QUALNAME}'s output has no gradient: register its backward with "
                                  f"torch.library.register_autograd (or {NAME}.register_autograd)")
        dxr, dgr = autograd_grad(y, (xr, gr), dy)
        dx.copy_(dxr)
        dg.copy_(dgr)

    return silu_mul_op_grad


def grader_only():
    """The grader's torch function mode set aside: for the grader's own torch calls (the mode
    checks only learner callers, so there it adds nothing but its cost), and for torch.compile,
    which cannot trace it. Learner code called inside runs unguarded: see entry_compiled."""
    from contextlib import nullcontext


    return torch.overrides._pop_mode_temporarily() if torch._C._len_torch_function_stack() else nullcontext()


def entry_compiled(namespace):
    """``torch.compile(fullgraph=True)`` around a function that calls the operator between two
    torch operations: tracing needs the fake implementation, and a graph break is an error. The
    compiled result must equal the operator's eager result, computed under the grader's guard."""

    def silu_mul_op_compiled(x, g, out):

        op = registered_op()

        def block(x, g):
            return op(x * 1.0, g).to(out.dtype)

        eager = op(x, g)
        same_layout(eager, out, f"{QUALNAME}(x, g)")
        torch._dynamo.reset()
        # Dynamo cannot trace the grader's own torch function mode: set it aside while compiling
        # and running the compiled block (the eager call above ran under it).
        with grader_only():
            try:
                compiled = torch_compile(block, fullgraph=True, backend="aot_eager", dynamic=False)
                y = compiled(x, g)
            except Exception as exc:  # noqa: BLE001 - the learner's registration failed to trace
                text = str(exc).strip().splitlines()
                raise OperatorProblem("torch.compile(fullgraph=True) could not trace your operator "
                                      "(does it have a fake implementation, @silu_mul.register_fake?): "
                                      + (text[0] if text else type(exc).__name__)[:500]) from None
        same_layout(y, out, "the compiled block")
        if not torch.equal(y, eager):
            raise OperatorProblem("the compiled block's result differs from the operator's eager result: "
                                  "under torch.compile the operator must run the same kernel")
        out.copy_(y)

    return silu_mul_op_compiled


def entry_mlp(namespace):
    """A SwiGLU MLP block, down(silu(x @ w_gate) * (x @ w_up)), with the learner's operator as
    its gate: the speed of the operator where it is used."""

    def swiglu_mlp(x, w_gate, w_up, w_down, out):

        op = registered_op()
        with grader_only():
            a, b = torch.matmul(x, w_gate), torch.matmul(x, w_up)
        h = op(a, b)
        with grader_only():
            same_layout(h, a, f"{QUALNAME} inside the block")
            torch.matmul(h, w_down, out=out)

    return swiglu_mlp
