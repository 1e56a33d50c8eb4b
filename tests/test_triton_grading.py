"""Triton answers graded like Numba and CuPy ones: the learner's function gets torch tensors over
the judge's buffers and launches Triton kernels; in simulator mode they run in Triton's
interpreter (TRITON_INTERPRET=1), inside the sandboxed runner."""
from __future__ import annotations

import os
import textwrap

import numpy as np
import pytest

from autograder.judge import Judge, Options
from autograder.spec import TRITON_ONLY, Exercise, Lab, Out

triton = pytest.importorskip("triton", reason="Triton is not installed (the `triton` extra)")

GPU_MODE = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") in ("", "0")  # the root conftest decides
pytestmark = pytest.mark.skipif(GPU_MODE, reason="the interpreter's path: simulator mode")


def _inputs(p, rng):
    return {"x": rng.standard_normal(p["n"], dtype=np.float32), "y": rng.standard_normal(p["n"], dtype=np.float32)}


LAB = Lab(
    name="triton_add", title="Triton vector add",
    setup="import torch\nimport triton\nimport triton.language as tl\n",
    exercises=(Exercise(
        name="add", title="x + y in Triton", backend="triton", args=("x", "y", "out"), inputs=_inputs,
        outputs={"out": Out(lambda p: (p["n"],))},
        reference=lambda x, y: {"out": x.astype(np.float64) + y},
        cases=lambda simulator: [{"n": 1}, {"n": 1000}, {"n": 4099}],
        forbidden=TRITON_ONLY,
        points=2.0),),
)

KERNEL = """
@triton.jit
def add_kernel(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    keep = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=keep) + tl.load(y + offs, mask=keep), mask=keep)
"""

ANSWERS = {
    "right": KERNEL + "\ndef add(x, y, out):\n    add_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, out, x.numel(), BLOCK=1024)\n",
    # a loop whose bound is a kernel argument: Triton's interpreter needs triton_compat with NumPy 2.4
    "looped": """
@triton.jit
def add_loop(x, y, out, n, BLOCK: tl.constexpr):
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        keep = offs < n
        tl.store(out + offs, tl.load(x + offs, mask=keep) + tl.load(y + offs, mask=keep), mask=keep)


def add(x, y, out):
    add_loop[(1,)](x, y, out, x.numel(), BLOCK=256)
""",
    # the grid covers one block only: the elements past the first 1024 are never written
    "one_block": KERNEL + "\ndef add(x, y, out):\n    add_kernel[(1,)](x, y, out, x.numel(), BLOCK=1024)\n",
}

# torch doing the work instead of a Triton kernel: each is refused, whatever route it takes.
CHEATS = {
    "a method and an operator": "def add(x, y, out):\n    out.copy_(x + y)\n",
    "a torch function": "def add(x, y, out):\n    torch.add(x, y, out=out)\n",
    "an element-wise assignment": "def add(x, y, out):\n    out[:] = x.add(y)\n",
    "through NumPy": "def add(x, y, out):\n    out.numpy()[:] = x.numpy() + y.numpy()\n",
    "a helper module's function": "import operator\ndef add(x, y, out):\n    out[:] = operator.add(x, y)\n",
}


def _grade(code: str):
    cells = [{"code": textwrap.dedent(code), "filename": "the answer cell for add", "exercise": "add",
              "defines": ["add"]}]
    judge = Judge(LAB, Options(simulator=True, seed=5, timeout=120.0), cells=cells)
    try:
        (result,) = judge.grade()
    finally:
        judge.close()
    return result


@pytest.mark.parametrize("answer", ["right", "looped"])
def test_a_triton_kernel_runs_in_the_interpreter_in_the_sandbox(answer):
    res = _grade(ANSWERS[answer])
    assert res.passed and res.correctness == 2.0, res.message


def test_a_triton_kernel_that_leaves_elements_unwritten_fails():
    res = _grade(ANSWERS["one_block"])
    assert not res.passed and res.correctness == 0 and "2 of 3 cases correct" in res.message, res.message


@pytest.mark.parametrize("how", list(CHEATS))
def test_torch_doing_the_work_is_refused(how):
    res = _grade(CHEATS[how])
    assert not res.passed and res.correctness == 0 and "forbids" in res.message, res.message
