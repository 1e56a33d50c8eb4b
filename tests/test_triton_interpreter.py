"""Simulator mode runs Triton kernels in Triton's interpreter: course.setup() switches it on."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_fresh(code: str, **env) -> subprocess.CompletedProcess:
    """``code`` in a new Python in simulator mode, TRITON_INTERPRET unset unless given."""
    base = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    base.update(NUMBA_ENABLE_CUDASIM="1", PYTHONPATH=path, **env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=base, cwd=ROOT, timeout=300)


def test_setup_switches_the_interpreter_on_in_simulator_mode():
    r = run_fresh("""
        import os, course
        assert "TRITON_INTERPRET" not in os.environ
        print(course.setup(verbose=False), os.environ.get("TRITON_INTERPRET"))
    """)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["simulator", "1"]


LOOP_KERNEL = """
    import course
    MODE = course.setup(verbose=False, extras={extras})
    import torch, triton, triton.language as tl

    @triton.jit
    def row_sums(x_ptr, out_ptr, cols, BLOCK: tl.constexpr):
        # a loop over a runtime length, as a matrix product loops over K
        row = tl.program_id(0)
        acc = tl.zeros((BLOCK,), dtype=tl.float32)
        for c0 in range(0, cols, BLOCK):
            offs = c0 + tl.arange(0, BLOCK)
            acc += tl.load(x_ptr + row * cols + offs, mask=offs < cols, other=0.0)
        tl.store(out_ptr + row, tl.sum(acc, axis=0))

    x = torch.arange(3 * 70, dtype=torch.float32).reshape(3, 70)
    out = torch.empty(3)
    row_sums[(3,)](x, out, 70, BLOCK=16)   # CPU tensors: only the interpreter accepts them
    assert torch.equal(out, x.sum(dim=1)), (out, x.sum(dim=1))
    print("ok")
"""


def test_a_kernel_that_loops_over_a_runtime_length_runs_in_the_interpreter():
    pytest.importorskip("triton")
    r = run_fresh(LOOP_KERNEL.format(extras='["triton"]'))
    assert r.returncode == 0 and r.stdout.split() == ["ok"], r.stderr[-2000:]


def test_the_scalar_mend_is_what_makes_the_loop_run_on_numpy_2_4():
    pytest.importorskip("triton")
    import numpy as np

    if tuple(int(p) for p in np.__version__.split(".")[:2]) < (2, 4):
        pytest.skip("NumPy before 2.4 still converts one-element arrays to int")
    r = run_fresh(LOOP_KERNEL.format(extras="[]"))   # no "triton" extra: setup leaves the interpreter as it is
    if r.returncode == 0:
        pytest.skip("this Triton's interpreter has the upstream fix: the mend is no longer needed")
    assert "only 0-dimensional arrays" in r.stderr, r.stderr[-2000:]
