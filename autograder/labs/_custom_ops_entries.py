"""The functions of the custom-operator lab's registration exercises (``Exercise.entry``).

This file is sent as source to the learner's runner (the sandbox holds no file of the grader),
followed by one line naming the exercise's ``entry``. Each entry calls the operator the learner
registered the way a model would: eagerly, through autograd, under ``torch.compile`` and inside
an MLP block. It is grader code: the guards judge only the learner code it reaches.

Each exercise judges its own part of the registration, so that a mistake costs the exercise it
belongs to: the operator (its schema and its results, whatever the layout of its inputs), its
gradients (its autograd registration, its backward for any layout of dy, and the backward's own
operators traced with fake tensors), its fake implementation (``torch.compile``). Where
``torch.library.opcheck`` finds a problem, the exercise says it in one sentence: which of
opcheck's tests, which tensor, which property. The values are judged by the grader, outside this
process, against its float64 reference: nothing here knows them.
"""
import os
import re
import types

import torch
import torch.overrides
import torch.testing._internal.optests  # noqa: F401 - what opcheck calls: loaded (and sealed) before learner code
from torch._library.custom_ops import _maybe_get_opdef
from torch.autograd import grad as autograd_grad
from torch.library import opcheck
from torch.utils._python_dispatch import TorchDispatchMode

# The functions that judge the operator are bound here, when the runner builds the entries, before
# any learner cell runs: a cell that replaces torch.library.opcheck or torch.compile afterwards
# does not replace them here.
torch_compile = torch.compile
TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
CUSTOM_OP_MACHINERY = os.path.join(TORCH_DIR, "_library") + os.sep  # where custom_op registers its kernels from

NAMESPACE, NAME = "swiglu", "silu_mul"
QUALNAME = f"{NAMESPACE}::{NAME}"

# The layouts a case hands the operator its tensors in (the same values each time): a model hands an
# operator views with strides of their own, and the gradient of y.sum() is one value expanded. A
# transposed view is dense: an elementwise kernel that reads every tensor flat, in one layout, is
# right for it, and wrong where another tensor has another layout.
LAYOUTS = {
    "transposed": ("a transposed view (column-major, strides (1, rows))", "transposed views"),
    "strided": ("a view of every other column of a tensor twice as wide (strides (2 * cols, 2))",
                "views of every other column of a tensor twice as wide (strides (2 * cols, 2))"),
}


def described(names: tuple, layout: str) -> str:
    """'x a transposed view (...)', 'x and g views of ...': the case's tensors in words."""
    one, many = LAYOUTS[layout]
    return f"{' and '.join(names)} {one if len(names) == 1 else many}"


class OperatorProblem(Exception):
    """What is wrong with the registration, in the learner's terms: the runner shows its text as it is."""


def _traceback(exc) -> str:
    """The exception with the learner's lines only: the runner's, where it built these entries."""
    shown = globals().get("learner_traceback")
    return shown(exc) if shown is not None else f"{type(exc).__name__}: {exc}"


def registered_op():
    """The learner's ``swiglu::silu_mul``, as the dispatcher holds it."""

    try:
        packet = getattr(getattr(torch.ops, NAMESPACE), NAME)
    except (AttributeError, RuntimeError):
        packet = None
    if not isinstance(packet, torch._ops.OpOverloadPacket):
        raise OperatorProblem(f"no operator {QUALNAME} is registered: decorate your function with "
                              f'@torch.library.custom_op("{QUALNAME}", mutates_args=())')
    problem = registration_problem()
    if problem:
        raise OperatorProblem(problem)
    return packet


def learners_function(fn, depth: int = 0) -> bool:
    """Whether ``fn`` is a Python function of the learner's, or torch's own wrapper around one
    (register_kernel keeps a wrapper that picks the kernel; torch._disable_dynamo wraps it again)."""
    if not isinstance(fn, types.FunctionType):
        return False
    if learner_code(fn.__code__):
        return True
    if depth < 4 and fn.__code__.co_filename.startswith(TORCH_DIR):
        inner = vars(fn).get("__wrapped__")
        if inner is None and "fn" in fn.__code__.co_freevars:
            try:
                inner = fn.__closure__[fn.__code__.co_freevars.index("fn")].cell_contents
            except ValueError:  # an empty cell
                inner = None
        return inner is not None and learners_function(inner, depth + 1)
    return False


def registration_problem() -> str:
    """'' if the operator is a torch.library.custom_op whose functions that see real tensors (its
    kernels, its backward and what saves for it, its vmap and dispatch rules) are all the learner's own
    Python; else what is not. Default deny: a kernel given to the dispatcher another way (a Library's
    impl for another dispatch key, a torch.fx GraphModule, a library function) runs with no learner
    frame on the stack, where the guards would take its tensor maths for torch's own."""
    how = f'@torch.library.custom_op("{QUALNAME}", mutates_args=()) on a function of your own'
    opdef = _maybe_get_opdef(QUALNAME)
    if opdef is None:
        return f"{QUALNAME} was not made with torch.library.custom_op: define it with {how}"
    foreign = [line.split(":", 1)[0] for line in torch._C._dispatch_dump(QUALNAME).splitlines()
               if ": registered at " in line and not line.startswith("debug:")
               and not line.split(": registered at ", 1)[1].startswith(CUSTOM_OP_MACHINERY)]
    if foreign:
        return (f"{QUALNAME} has kernels registered outside torch.library.custom_op's own (for "
                f"{', '.join(foreign[:3])}): give the operator its kernel with {how}, and its other "
                "parts with register_kernel, register_autograd and register_fake")
    seen = {"the operator's function": opdef._init_fn, "its backward": opdef._backward_fn,
            "its setup_context": opdef._setup_context_fn, "its vmap rule": opdef._vmap_fn,
            **{f"its kernel for {d}": f for d, f in opdef._backend_fns.items()},
            **{f"its rule for {getattr(t, '__name__', t)}": f for t, f in opdef._torch_dispatch_fns.items()}}
    for what, fn in seen.items():
        if fn is not None and not learners_function(fn):
            return (f"{what} is {type(fn).__name__} {getattr(fn, '__qualname__', '')!s:.60}, not a function "
                    f"of your own: register a Python function that launches your Triton kernel")
    return ""


def same_layout(y, out, what: str) -> None:
    if not isinstance(y, torch.Tensor):
        raise OperatorProblem(f"{what} returned {type(y).__name__}, not a tensor")
    if tuple(y.shape) != tuple(out.shape) or y.dtype != out.dtype or y.device != out.device:
        raise OperatorProblem(f"{what} returned a {y.dtype} tensor of shape {tuple(y.shape)} on {y.device}; "
                              f"expected {out.dtype}, {tuple(out.shape)}, on {out.device}")


def same_values(a, b) -> bool:
    """The learner's own two results, element for element (NaN where NaN)."""
    return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape \
        and a.dtype == b.dtype and bool(torch.isclose(a, b, rtol=0.0, atol=0.0, equal_nan=True).all())


def in_layout(t, layout: str):
    """``t``'s values in another memory layout (see LAYOUTS)."""
    if layout == "transposed":
        return t.t().contiguous().t()
    if layout == "strided":
        wide = torch.zeros((t.shape[0], 2 * t.shape[1]), dtype=t.dtype, device=t.device)
        wide[:, ::2] = t
        return wide[:, ::2]
    return t


# --------------------------------------------------------------------------- opcheck, in sentences
def _chain(exc) -> list:
    seen = []
    while exc is not None and all(exc is not e for e in seen) and len(seen) < 8:
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    return seen


def _raised_by_torch(exc) -> bool:
    """Whether torch's own code raised it (its verdict on the registration), not the learner's code,
    Triton or the grader's walls."""
    tb, last = exc.__traceback__, None
    while tb is not None:
        last, tb = tb, tb.tb_next
    return last is not None and last.tb_frame.f_code.co_filename.startswith(TORCH_DIR)


def _first_line(text: str) -> str:
    text = re.sub(r"<module '[^']*' from '[^']*'>", "torch", str(text))
    line = next((s.strip() for s in text.splitlines() if s.strip()), "")
    return line[:240]


def _arg_name(op, index: int) -> str:
    try:
        return op._schema.arguments[index].name
    except (AttributeError, IndexError, TypeError):
        return f"input {index}"


def explain(test: str, exc, op) -> str:
    """One sentence for one failure of one of opcheck's tests (``test``: its name, or what failed)."""
    name = str(getattr(op, "_name", "") or QUALNAME)
    chain = _chain(exc)
    for e in chain:  # the learner's own code raised: its error, with its lines
        if not _raised_by_torch(e):
            return f"{test} on {name}: {_traceback(e)}"
    text = " ".join(str(e) for e in chain)

    m = re.search(r"no fake impl registered for (?:<CustomOpDef\()?([\w.:]+)", text)
    if m or "no fake impl" in text:
        which = m.group(1) if m else name
        if "::" not in which:  # swiglu.silu_mul.default
            which = "::".join(which.split(".")[:2])
        return (f"{test}: {which} has no fake implementation, so torch cannot trace it: register one with "
                f"register_fake (it returns empty tensors of the outputs' shapes, dtypes and devices)")
    m = re.search(r"mismatched tensor metadata(?: for output\[(\d+)\])?: (Shapes|Dtypes|Devices) (.+?) and (.+?) "
                  r"are not equal", text)
    if m:
        prop = {"Shapes": "shape", "Dtypes": "dtype", "Devices": "device"}[m.group(2)]
        out = f"output {m.group(1)}" if m.group(1) is not None else "its output"
        clean = [v.replace("torch.Size(", "").replace("torch.", "").rstrip(")") if prop == "shape" else
                 v.replace("torch.", "") for v in (m.group(3), m.group(4))]
        if prop == "shape":
            clean = [f"({v.strip('[]')})" for v in clean]
        return (f"{test}: the fake implementation of {name} gives {out} the {prop} {clean[1]}, where the operator "
                f"itself returns {clean[0]}: a fake returns empty tensors exactly like the operator's outputs")
    m = re.search(r"mismatched tensor metadata(?: for output\[(\d+)\])?: Stride mismatch! Strides are (\(.*?\)) and "
                  r"(\(.*?\))", text)
    if m:
        out = f"output {m.group(1)}" if m.group(1) is not None else "its output"
        return (f"{test}: the fake implementation of {name} gives {out} the strides {m.group(3)}, where the operator "
                f"itself returns {m.group(2)}: a fake returns empty tensors laid out like the operator's outputs")
    if "mismatched requires_grad-ness" in text:
        return (f"{test}: {name}'s output requires grad on one of the real and fake paths only: register the backward "
                f"with register_autograd")
    m = re.search(r"Argument (\w+) is not defined as mutable but was mutated", text)
    if m:
        return (f"{test}: {name} wrote into its input '{m.group(1)}', which mutates_args=() declares read-only: "
                f"write the result into a new tensor")
    m = re.search(r"Argument (\w+) is not defined to alias output but was aliasing", text)
    if m:
        return (f"{test}: {name}'s output shares memory with its input '{m.group(1)}': return a new tensor, "
                f"not the input or a view of it")
    if "must not also be an input to this custom operator" in text:
        return (f"{test}: {name} returns one of its inputs, or a view of one: return a new tensor "
                f"(torch.empty_like(x), filled by your kernel)")
    if "Gradients of the operator are different in eager-mode PyTorch vs AOTDispatcher" in text:
        m = re.search(r"failure occurred for item \[(\d+)\]", text)
        arg = _arg_name(op, int(m.group(1))) if m else "an input"
        n = re.search(r"Mismatched elements: ([\d,]+) / ([\d,]+)", text)
        count = f" in {n.group(1)} of {n.group(2)} elements" if n else ""
        return (f"{test}: the gradient for '{arg}' differs{count} between eager mode and torch.compile, where dy is "
                f"the gradient of y.sum(), one value expanded to y's shape (strides 0): a backward must give the "
                f"same gradients for any layout of dy, and run under tracing")
    if "Outputs of the operator are different in eager-mode PyTorch vs AOTDispatcher" in text:
        return f"{test}: {name}'s output differs between eager mode and torch.compile"
    if "no autograd formula" in text or "does not require grad and does not have a grad_fn" in text:
        return (f"{test}: {name} has no backward (torch finds no autograd formula registered for it): register "
                f"one with register_autograd")
    return f"{test} failed on {name}: {_first_line(text) or type(exc).__name__}"


def opcheck_problems(op, args, tests) -> list:
    """opcheck's ``tests`` on ``op`` with ``args`` (copies of them): a sentence per failure."""
    try:
        found = opcheck(op, args, test_utils=tuple(tests), raise_exception=False)
    except Exception as exc:  # noqa: BLE001 - an operator opcheck cannot take
        return [explain("torch.library.opcheck", exc, op)]
    return [f"opcheck's {explain(test, found[test], op)}" for test in tests
            if test in found and not (isinstance(found[test], str) and found[test] == "SUCCESS")]


def problem(problems: list) -> None:
    if problems:
        raise OperatorProblem("; ".join(problems))


def call_op(op, *args):
    """The operator, called as a model calls it; torch's own verdicts on the registration in words,
    the learner's own errors as they are (with their lines)."""
    try:
        return op(*args)
    except Exception as exc:  # noqa: BLE001
        if _raised_by_torch(exc):
            raise OperatorProblem(explain(f"calling {QUALNAME}(x, g)", exc, op.default)) from None
        raise


def _copies(args, grad: bool = False):
    return tuple(a.detach().clone().requires_grad_(grad) if isinstance(a, torch.Tensor) and grad
                 else a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args)


# --------------------------------------------------------------------------- exercise 3: the operator
def entry_forward(namespace):
    """The operator on tensors in the case's layout, its result the same as on contiguous tensors of
    the same values; once, opcheck's test_schema (the operator mutates none of its inputs and
    returns a new tensor). Nothing here needs a fake or a backward: those are exercises 5 and 4."""
    done = []

    def silu_mul_op(x, g, out, layout):
        op = registered_op()
        # a transposed x beside a contiguous g; every other column of wider tensors for both
        views = {"transposed": ("x",), "strided": ("x", "g")}.get(layout, ())
        y = call_op(op, in_layout(x, layout) if "x" in views else x, in_layout(g, layout) if "g" in views else g)
        same_layout(y, out, f"{QUALNAME}(x, g)")
        if views:
            if not same_values(y, call_op(op, x, g)):
                raise OperatorProblem(
                    f"with {described(views, layout)}, {QUALNAME} returns other values than with contiguous tensors "
                    f"of the same values: a kernel that reads its inputs as flat arrays needs x.contiguous() and "
                    f"g.contiguous()")
        elif not done:
            problem(opcheck_problems(op.default, _copies((x, g)), ("test_schema",)))
            done.append(True)
        out.copy_(y)

    return silu_mul_op


# --------------------------------------------------------------------------- exercise 4: its gradients
class _CustomCalls(TorchDispatchMode):
    """The operators (not torch's own) that a backward calls, with their arguments."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if getattr(func, "namespace", "aten") not in ("aten", "prim", "prims") and len(self.calls) < 4 \
                and all(func is not f for f, _ in self.calls):
            self.calls.append((func, _copies(args)))
        return func(*args, **(kwargs or {}))


def gradients(op, x, g, dy, record: list | None = None):
    """(dx, dg) of the operator's output y = op(x, g), for the upstream gradient ``dy``."""
    xr = x.detach().clone().requires_grad_(True)
    gr = g.detach().clone().requires_grad_(True)
    y = call_op(op, xr, gr)
    same_layout(y, dy, f"{QUALNAME}(x, g)")
    if y.grad_fn is None:
        raise OperatorProblem(f"{QUALNAME}'s output has no gradient: register its backward with "
                              f"torch.library.register_autograd (or {NAME}.register_autograd)")
    mode = _CustomCalls() if record is not None else None
    try:
        if mode is not None:
            with mode:
                grads = autograd_grad(y, (xr, gr), dy)
            record += mode.calls
        else:
            grads = autograd_grad(y, (xr, gr), dy)
    except Exception as exc:  # noqa: BLE001
        if _raised_by_torch(exc):
            raise OperatorProblem(explain(f"torch.autograd.grad through {QUALNAME}", exc, op.default)) from None
        raise
    for name, grad, like in (("x", grads[0], x), ("g", grads[1], g)):
        if grad is None:
            raise OperatorProblem(f"your backward returned no gradient for {name} (None): return (dx, dg)")
        same_layout(grad, like, f"your backward's gradient for {name}")
    return grads


def entry_gradients(namespace):
    """Gradients through the operator with dy in the case's layout, the same as with a contiguous dy
    of the same values; once, opcheck's tests of the gradient: the autograd registration, each
    operator the backward calls (its schema and its fake: the backward must trace), and AOT
    autograd's gradients against eager mode's (where the forward's fake, exercise 5's, holds)."""
    done = []

    def silu_mul_op_grad(x, g, dy, dx, dg, layout):
        op = registered_op()
        calls: list = []
        first = layout == "contiguous" and not done
        dxr, dgr = gradients(op, x, g, in_layout(dy, layout), calls if first else None)
        if layout != "contiguous":
            for name, got, want in zip(("dx", "dg"), (dxr, dgr), gradients(op, x, g, dy)):
                if not same_values(got, want):
                    raise OperatorProblem(
                        f"with {described(('dy',), layout)}, your backward returns another {name} than with a "
                        f"contiguous dy of the same values: a kernel that reads dy as a flat array needs "
                        f"dy.contiguous()")
        elif first:
            args = _copies((x, g), grad=True)
            found = opcheck_problems(op.default, args, ("test_autograd_registration",))
            for func, used in calls:
                found += opcheck_problems(func, _copies(used), ("test_schema", "test_faketensor"))
            fake_holds = not opcheck_problems(op.default, _copies((x, g)), ("test_faketensor",))
            if not found and fake_holds:
                found += opcheck_problems(op.default, args, ("test_aot_dispatch_dynamic",))
            problem(found)
            done.append(True)
        dx.copy_(dxr)
        dg.copy_(dgr)

    return silu_mul_op_grad


# --------------------------------------------------------------------------- exercise 5: its fake
def grader_only():
    """The grader's torch function mode set aside: for the grader's own torch calls (the mode
    checks only learner callers, so there it adds nothing but its cost), and for torch.compile,
    which cannot trace it. Learner code called inside runs unguarded: see entry_compiled."""
    from contextlib import nullcontext

    return torch.overrides._pop_mode_temporarily() if torch._C._len_torch_function_stack() else nullcontext()


def entry_compiled(namespace):
    """opcheck's test_faketensor (the fake implementation returns what the operator returns), then
    ``torch.compile(fullgraph=True)`` around a function that calls the operator between two torch
    operations: tracing needs the fake implementation, and a graph break is an error. The compiled
    result must equal the operator's eager result, computed under the grader's guard."""

    def silu_mul_op_compiled(x, g, out):

        op = registered_op()

        def block(x, g):
            return op(x * 1.0, g).to(out.dtype)

        # each call on copies of x and g: an operator that writes into its input (exercise 3's mistake)
        # changes neither the other call's inputs nor the grader's
        eager = call_op(op, *_copies((x, g)))
        same_layout(eager, out, f"{QUALNAME}(x, g)")
        problem(opcheck_problems(op.default, _copies((x, g)), ("test_faketensor",)))
        torch._dynamo.reset()
        # Dynamo cannot trace the grader's own torch function mode: set it aside while compiling
        # and running the compiled block (the eager call above ran under it).
        with grader_only():
            try:
                compiled = torch_compile(block, fullgraph=True, backend="aot_eager", dynamic=False)
                y = compiled(*_copies((x, g)))
            except Exception as exc:  # noqa: BLE001 - the learner's registration failed to trace
                raise OperatorProblem(explain("torch.compile(fullgraph=True) of a function calling the operator", exc,
                                              op.default)) from None
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
