"""Lab 24: a custom PyTorch operator. The SwiGLU gate silu(x) * g as a Triton kernel pair
(forward and backward), registered with torch.library as ``swiglu::silu_mul`` with a fake
implementation and a backward, then used where a model uses it: eagerly, through autograd,
under torch.compile, and inside an MLP block, where its speed is graded.

The last four exercises are answered by the registration, not by a function: the grader's own
functions (``_custom_ops_entries.py``) call ``torch.ops.swiglu.silu_mul`` in the learner's runner.
Triton's interpreter runs everything on the CPU in simulator mode, torch.compile included.
"""
from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..host_parallel import matmul64
from ..spec import TRITON_ONLY, Exercise, Lab, Out, Speed, standard_normal

ENTRIES = Path(__file__).with_name("_custom_ops_entries.py")

# The operator's own code may register it and build it: torch.library's decorators, and
# contiguous copies of its inputs (a gradient arrives in any layout). The work is still the
# Triton kernels': torch's maths stays refused to learner code.
OP_RULES = TRITON_ONLY + ("!torch.library.*", "!torch.Tensor", "!torch.Tensor.contiguous")

# The block's two products and its output are float16 with float32 sums over up to 5,632
# terms of order one: a few float16 roundings of values of order ten.
MLP_TOL = {"float16": (2e-2, 2e-2)}


# --------------------------------------------------------------------------- inputs
def gate_shapes(simulator: bool) -> list[dict]:
    """(rows, cols): one element, odd widths, a single long row. The kernels may see the tensors
    as flat arrays; an odd element count leaves a partial last block."""
    if simulator:
        shapes = [(1, 1), (3, 7), (33, 65)]
    else:
        shapes = [(1, 1), (31, 33), (1000, 3), (3, 1025), (1, 100_003), (4097, 1031)]
    return [{"rows": r, "cols": c} for r, c in shapes]


def op_cases(simulator: bool) -> list[dict]:
    """The operator (exercise 3) and its gradients (exercise 4), each case in a layout, the same values
    each time (a model hands an operator views): "transposed" hands x as a transposed view beside a
    contiguous g (exercise 4: dy, beside contiguous x and g), "strided" x and g (exercise 4: dy) as
    views of every other column of a wider tensor, "contiguous" contiguous tensors. The views come
    first; opcheck's tests run once, in the first contiguous case (in the interpreter each costs
    seconds)."""
    if simulator:
        cases = [(33, 3, "transposed"), (5, 17, "strided"), (3, 33, "contiguous"), (1, 1, "contiguous")]
    else:
        cases = [(257, 31, "transposed"), (31, 1031, "strided"), (31, 33, "contiguous"), (1, 1, "contiguous"),
                 (257, 1031, "contiguous")]
    return [{"rows": r, "cols": c, "layout": layout} for r, c, layout in cases]


def compiled_shapes(simulator: bool) -> list[dict]:
    """The fake implementation and torch.compile (exercise 5): a compilation per case."""
    shapes = [(1, 1), (3, 33), (5, 17)] if simulator else [(1, 1), (31, 33), (257, 1031)]
    return [{"rows": r, "cols": c} for r, c in shapes]


def mlp_shapes(simulator: bool) -> list[dict]:
    if simulator:
        shapes = [(5, 32, 48)]
    else:
        shapes = [(1, 8, 16), (33, 64, 176), (300, 256, 704)]
    return [{"tokens": t, "d": d, "hidden": h} for t, d, h in shapes]


def _gate_inputs(p, rng):
    """float16 x spanning silu's curved part and both tails (standard deviation 3); g standard normal."""
    shape = (p["rows"], p["cols"])
    return {"x": (3.0 * standard_normal(rng, shape)).astype(np.float16),
            "g": standard_normal(rng, shape).astype(np.float16)}


def _backward_inputs(p, rng):
    return {**_gate_inputs(p, rng), "dy": standard_normal(rng, (p["rows"], p["cols"])).astype(np.float16)}


def _op_inputs(p, rng):
    """The gate's inputs, and the layout the grader hands them to the operator in (see op_cases)."""
    return {**_gate_inputs(p, rng), "layout": p["layout"]}


def _op_backward_inputs(p, rng):
    return {**_backward_inputs(p, rng), "layout": p["layout"]}


def _mlp_inputs(p, rng):
    """Weights scaled by 1 / sqrt(fan-in): every product has entries of order one."""
    t, d, h = p["tokens"], p["d"], p["hidden"]

    def w(rows, cols):
        return (standard_normal(rng, (rows, cols)) / np.float32(math.sqrt(rows))).astype(np.float16)

    return {"x": standard_normal(rng, (t, d)).astype(np.float16), "w_gate": w(d, h), "w_up": w(d, h),
            "w_down": w(h, d)}


def _gate_shape(p):
    return (p["rows"], p["cols"])


# --------------------------------------------------------------------------- references (float64)
def silu64(x):
    x = np.asarray(x, dtype=np.float64)
    return x / (1.0 + np.exp(-x))


def silu_mul64(x, g):
    return silu64(x) * np.asarray(g, dtype=np.float64)


def silu_mul_grads64(x, g, dy):
    x, g, dy = (np.asarray(a, dtype=np.float64) for a in (x, g, dy))
    s = 1.0 / (1.0 + np.exp(-x))
    return {"dx": dy * g * s * (1.0 + x * (1.0 - s)), "dg": dy * x * s}


def swiglu_mlp64(x, w_gate, w_up, w_down):
    """The block as the GPU computes it: float16 products (float32 sums), a float16 gate."""
    a = matmul64(x, w_gate).astype(np.float16)
    b = matmul64(x, w_up).astype(np.float16)
    h = silu_mul64(a, b).astype(np.float16)
    return {"out": matmul64(h, w_down)}


# --------------------------------------------------------------------------- baselines
@lru_cache(maxsize=None)
def _kernels():
    """The chapter's Triton kernels (course/custom_ops.py), imported in the reference runner."""
    from course import custom_ops

    return custom_ops


def _grid(n):
    k = _kernels()
    return (max(1, -(-n // k.BLOCK)),)


def _base_silu_mul(x, g, out):
    k = _kernels()
    k.swiglu_fwd_kernel[_grid(x.numel())](x, g, out, x.numel(), BLOCK=k.BLOCK)


def _base_silu_mul_backward(x, g, dy, dx, dg):
    k = _kernels()
    k.swiglu_bwd_kernel[_grid(x.numel())](x, g, dy, dx, dg, x.numel(), BLOCK=k.BLOCK)


def _base_swiglu_mlp(x, w_gate, w_up, w_down, out):
    import torch

    a, b = torch.matmul(x, w_gate), torch.matmul(x, w_up)
    h = torch.empty_like(a)
    _base_silu_mul(a, b, h)
    torch.matmul(h, w_down, out=out)


def _entry(name: str) -> str:
    """The source an entry exercise sends: the entries module and the line that picks one. Read as
    text: importing it would import torch wherever the lab's spec is read (the command line, the judge)."""
    return ENTRIES.read_text() + f"\nentry = {name}\n"


GATE = dict(backend="triton", cases=gate_shapes, tolerance={})
OP = dict(backend="triton", tolerance={}, forbidden=OP_RULES)
# 4,096 x 8,192 float16 values: 64 MiB per tensor, beyond any L2.
GATE_TIMING = {"rows": 4096, "cols": 8192}

LAB = Lab(
    name="custom_ops",
    title="Lab 24: A custom PyTorch operator",
    setup="import math\nimport numpy as np\nimport torch\nimport triton\nimport triton.language as tl\n",
    timeout_s=300.0,  # torch.compile and opcheck take seconds per case
    exercises=(
        Exercise(
            name="silu_mul",
            title="The SwiGLU gate silu(x) * g, one pass over memory (Triton)",
            args=("x", "g", "out"),
            inputs=_gate_inputs,
            outputs={"out": Out(_gate_shape, dtype="float16")},
            reference=lambda x, g: {"out": silu_mul64(x, g)},
            timing_case=GATE_TIMING,
            baseline=_base_silu_mul,
            baseline_name="reference Triton kernel (one program per 1,024 elements)",
            bytes_moved=lambda p: 3 * 2 * p["rows"] * p["cols"],
            points=2,
            # Eager PyTorch's silu then product reads and writes an extra tensor: 5 passes for 3.
            speed=Speed(1, full_at=0.8, zero_at=0.4),
            forbidden=TRITON_ONLY,
            **GATE,
        ),
        Exercise(
            name="silu_mul_backward",
            title="Its backward: dx and dg from dy in one pass (Triton)",
            args=("x", "g", "dy", "dx", "dg"),
            inputs=_backward_inputs,
            outputs={"dx": Out(_gate_shape, dtype="float16"), "dg": Out(_gate_shape, dtype="float16")},
            reference=silu_mul_grads64,
            timing_case=GATE_TIMING,
            baseline=_base_silu_mul_backward,
            baseline_name="reference Triton kernel (one program per 1,024 elements)",
            bytes_moved=lambda p: 5 * 2 * p["rows"] * p["cols"],
            points=2,
            speed=Speed(1, full_at=0.8, zero_at=0.4),
            forbidden=TRITON_ONLY,
            **GATE,
        ),
        Exercise(
            name="silu_mul_op",
            title="torch.ops.swiglu.silu_mul: registered, any layout of its inputs, opcheck's test_schema",
            args=("x", "g", "out", "layout"),
            inputs=_op_inputs,
            outputs={"out": Out(_gate_shape, dtype="float16")},
            reference=lambda x, g, layout: {"out": silu_mul64(x, g)},
            cases=op_cases,
            points=2,
            entry=_entry("entry_forward"),
            **OP,
        ),
        Exercise(
            name="silu_mul_op_grad",
            title="Gradients through the operator (register_autograd): any layout of dy, opcheck's tests of "
                  "the gradient",
            args=("x", "g", "dy", "dx", "dg", "layout"),
            inputs=_op_backward_inputs,
            outputs={"dx": Out(_gate_shape, dtype="float16"), "dg": Out(_gate_shape, dtype="float16")},
            reference=lambda x, g, dy, layout: silu_mul_grads64(x, g, dy),
            cases=op_cases,
            points=2,
            entry=_entry("entry_gradients"),
            **OP,
        ),
        Exercise(
            name="silu_mul_op_compiled",
            title="The operator under torch.compile(fullgraph=True) (register_fake): opcheck's test_faketensor",
            args=("x", "g", "out"),
            inputs=_gate_inputs,
            outputs={"out": Out(_gate_shape, dtype="float16")},
            reference=lambda x, g: {"out": silu_mul64(x, g)},
            cases=compiled_shapes,
            points=1,
            entry=_entry("entry_compiled"),
            **OP,
        ),
        Exercise(
            name="swiglu_mlp",
            title="The operator inside a SwiGLU MLP block: the block's speed",
            backend="triton",
            args=("x", "w_gate", "w_up", "w_down", "out"),
            inputs=_mlp_inputs,
            outputs={"out": Out(lambda p: (p["tokens"], p["d"]), dtype="float16")},
            reference=swiglu_mlp64,
            cases=mlp_shapes,
            # 2,048 tokens through a block of width 2,048 (hidden 5,632, as Llama's ratio): 3
            # products of 2 x 2048 x 2048 x 5632 flops, a gate over 2,048 x 5,632 float16 values.
            timing_case={"tokens": 2048, "d": 2048, "hidden": 5632},
            baseline=_base_swiglu_mlp,
            baseline_name="block with the reference gate kernel",
            flops=lambda p: 6 * p["tokens"] * p["d"] * p["hidden"],
            points=1,
            # The products take most of the block's time: a gate twice as slow as the reference
            # costs the block about 10%, and three eager PyTorch kernels about as much.
            speed=Speed(2, full_at=0.97, zero_at=0.85),
            forbidden=OP_RULES,
            tolerance=MLP_TOL,
            entry=_entry("entry_mlp"),
        ),
    ),
)
