"""Notebook outputs on the site are real and fresh; GPU-only kernels still compile on CPU."""
from __future__ import annotations

import ast
import copy
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from course.device import gpu_present
from course.notebooks import SMALL_GPU_BYTES, STAMP_KEY, code_hash, executed_notebooks, run, staleness

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = executed_notebooks(ROOT)


def test_there_are_notebooks():
    assert any("chapters" in p.parts for p in NOTEBOOKS) and any("labs" in p.parts for p in NOTEBOOKS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_outputs_are_fresh_and_from_a_gpu(path):
    problems = staleness(path)
    assert not problems, "\n".join(problems)


@pytest.mark.notebook
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_runs_top_to_bottom(path):
    """Run All in a fresh kernel, as a learner does: no cell skipped from outside, no error.

    Without a GPU this is simulator mode, where %%gpu cells skip themselves; with one, each GPU
    has only 15 GB free, as on the smallest GPU the course supports.
    """
    nb, _facts = run(path, timeout=1800, memory_cap=SMALL_GPU_BYTES if gpu_present() else None)
    errors = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"
              and any(o.get("output_type") == "error" for o in c.get("outputs", []))]
    assert not errors, f"cells {errors} stored an error"


def _stamped(tmp_path, nb) -> Path:
    nb = copy.deepcopy(nb)
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            cell["execution_count"] = i + 1
    nb["metadata"][STAMP_KEY] = {"gpu": "NVIDIA H200", "code_sha256": code_hash(nb), "memory_cap_bytes": SMALL_GPU_BYTES}
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(nb))
    return path


@pytest.mark.parametrize("path", NOTEBOOKS[:1], ids=lambda p: p.name)
def test_freshness_fails_when_code_is_edited_without_rerun(path, tmp_path):
    nb = json.loads(path.read_text())
    fresh = path if not staleness(path) else _stamped(tmp_path, nb)
    assert staleness(fresh) == []
    edited = json.loads(fresh.read_text())
    cell = next(c for c in edited["cells"] if c["cell_type"] == "code")
    cell["source"] = "".join(cell["source"]) + "\nx = 1  # an edit after the GPU run"
    (tmp_path / "edited.ipynb").write_text(json.dumps(edited))
    assert any("changed after" in p for p in staleness(tmp_path / "edited.ipynb"))
    unstamped = json.loads(fresh.read_text())
    del unstamped["metadata"][STAMP_KEY]
    (tmp_path / "bare.ipynb").write_text(json.dumps(unstamped))
    assert any("never executed on a GPU" in p for p in staleness(tmp_path / "bare.ipynb"))
    uncapped = json.loads(fresh.read_text())
    uncapped["metadata"][STAMP_KEY]["memory_cap_bytes"] = 141 * 10**9
    (tmp_path / "big.ipynb").write_text(json.dumps(uncapped))
    assert any("more than 15 GB free" in p for p in staleness(tmp_path / "big.ipynb"))


# --------------------------------------------------------------------------- PTX on CPU
def _is_cuda_jit(dec: ast.expr) -> bool:
    target = dec.func if isinstance(dec, ast.Call) else dec
    return isinstance(target, ast.Attribute) and target.attr == "jit" and ast.unparse(target.value).endswith("cuda")


def _is_device_function(dec: ast.expr) -> bool:
    """@cuda.jit(device=True): compiled with the kernels that call it, needs no signature of its own."""
    return isinstance(dec, ast.Call) and any(
        k.arg == "device" and isinstance(k.value, ast.Constant) and k.value.value is True for k in dec.keywords)


def gpu_kernels(path: Path):
    """(kernel defs from gpu-tagged cells, all cuda.jit defs and constants of the notebook)."""
    nb = json.loads(path.read_text())
    prelude, wanted = [], []
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        src = "\n".join(l for l in "".join(cell["source"]).splitlines() if not l.lstrip().startswith(("%", "!")))
        tree = ast.parse(src)
        gpu = "gpu" in cell.get("metadata", {}).get("tags", [])
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and any(_is_cuda_jit(d) for d in node.decorator_list):
                # from the first decorator to the end of the body
                prelude.append("\n".join(src.splitlines()[node.decorator_list[0].lineno - 1:node.end_lineno]))
                if gpu and not any(_is_device_function(d) for d in node.decorator_list):
                    wanted.append(node.name)
            elif isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) and t.id.isupper() for t in node.targets):
                try:
                    ast.literal_eval(node.value)
                    prelude.append(ast.get_source_segment(src, node))
                except ValueError:
                    pass
    return prelude, wanted


COMPILER = textwrap.dedent('''
    import json, math, sys
    import numpy as np
    import numba
    from numba import cuda, float32, float64, int32, int64, uint32
    from types import SimpleNamespace
    import numba.cuda.dispatcher as dispatcher
    # Device functions ask the current GPU for its compute capability; there is none here.
    dispatcher.get_current_device = lambda: SimpleNamespace(compute_capability=(9, 0))
    real_jit = cuda.jit
    report = {}
    def jit(*args, **kw):
        sig = args[0] if args and isinstance(args[0], str) else kw.get("signature")
        kw.pop("signature", None)
        def deco(fn):
            if sig and not kw.get("device"):
                cuda.compile_ptx(fn, sig, cc=(9, 0))
                report[fn.__name__] = "ok"
            elif not kw.get("device"):
                report[fn.__name__] = "no signature"
            return real_jit(**kw)(fn)  # lazy: building it eagerly would need a driver
        return deco(args[0]) if args and callable(args[0]) else deco
    cuda.jit = jit
    exec(sys.stdin.read(), {"cuda": cuda, "math": math, "np": np, "numba": numba, "float32": float32,
                            "float64": float64, "int32": int32, "int64": int64, "uint32": uint32})
    print(json.dumps(report))
''')


def compile_gpu_kernels(path: Path):
    """Compile a notebook's GPU-only kernels to PTX for sm_90 in a process without the simulator."""
    prelude, wanted = gpu_kernels(path)
    env = {k: v for k, v in __import__("os").environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    r = subprocess.run([sys.executable, "-c", COMPILER], input="\n\n".join(prelude), capture_output=True,
                       text=True, env=env, timeout=600)
    report = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else {}
    return wanted, r, report


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_gpu_only_kernels_compile_to_ptx(path):
    if not gpu_kernels(path)[1]:
        pytest.skip("no kernels in GPU-only cells")
    wanted, r, report = compile_gpu_kernels(path)
    assert r.returncode == 0, r.stderr[-3000:]
    for name in wanted:
        assert report.get(name) == "ok", (f"{name} (a kernel in a gpu-tagged cell) needs a signature in its "
                                          f"decorator, e.g. @cuda.jit('void(float32[:])'), so CI can compile it")


def _notebook_with_gpu_cell(tmp_path, body: str) -> Path:
    nb = {"cells": [{"cell_type": "code", "metadata": {}, "source": "TPB = 256", "outputs": [],
                     "execution_count": None},
                    {"cell_type": "code", "metadata": {"tags": ["gpu"]}, "source": body, "outputs": [],
                     "execution_count": None}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "k.ipynb"
    path.write_text(json.dumps(nb))
    return path


def test_ptx_check_compiles_kernels_that_call_device_functions(tmp_path):
    path = tmp_path / "d.ipynb"
    path.write_text(json.dumps({"cells": [
        {"cell_type": "code", "metadata": {"tags": ["gpu"]}, "outputs": [], "execution_count": None,
         "source": "@cuda.jit(device=True)\ndef square(v):\n    return v * v\n"},  # in a gpu cell too
        {"cell_type": "code", "metadata": {"tags": ["gpu"]}, "outputs": [], "execution_count": None,
         "source": "@cuda.jit('void(float32[:])')\ndef squares(x):\n    i = cuda.grid(1)\n"
                   "    if i < x.size:\n        x[i] = square(x[i])\n"}],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    wanted, r, report = compile_gpu_kernels(path)
    assert wanted == ["squares"]  # a device function needs no signature of its own
    assert r.returncode == 0 and report == {"squares": "ok"}, r.stderr[-2000:]


def test_ptx_check_compiles_warp_shuffles_and_catches_errors(tmp_path):
    good = ("@cuda.jit('void(float32[:], float32[:])')\ndef warp_sum(x, out):\n    i = cuda.grid(1)\n"
            "    v = x[i]\n    for d in (16, 8, 4, 2, 1):\n        v += cuda.shfl_down_sync(0xffffffff, v, d)\n"
            "    if i % 32 == 0:\n        out[i // 32] = v\n")
    wanted, r, report = compile_gpu_kernels(_notebook_with_gpu_cell(tmp_path, good))
    assert r.returncode == 0 and report == {"warp_sum": "ok"}, r.stderr[-2000:]
    bad = good.replace("out[i // 32] = v", "out[i // 32] = undefined_name + v")
    _, r, _ = compile_gpu_kernels(_notebook_with_gpu_cell(tmp_path, bad))
    assert r.returncode != 0 and "undefined_name" in r.stderr
