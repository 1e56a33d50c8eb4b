"""Notebook outputs on the site are real and fresh; GPU-only kernels still compile on CPU."""
from __future__ import annotations

import ast
import copy
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from course.device import gpu_present
from course.notebooks import (SMALL_GPU_BYTES, STAMP_KEY, code_hash, executed_notebooks, run, staleness,
                              student_notebooks)

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = executed_notebooks(ROOT)


def test_there_are_notebooks():
    assert any("chapters" in p.parts for p in NOTEBOOKS) and any("labs" in p.parts for p in NOTEBOOKS)


def named(paths):
    return [pytest.param(p, id=str(p.relative_to(ROOT))) for p in paths]


def test_every_cell_has_a_unique_id():
    """nbformat 4.5 asks for cell ids (a missing one is a warning now, an error in later versions):
    the site's notebooks and the student releases carry them."""
    for path in NOTEBOOKS + student_notebooks(ROOT):
        ids = [c.get("id") for c in json.loads(path.read_text(encoding="utf-8"))["cells"]]
        assert None not in ids, f"{path.relative_to(ROOT)}: cell {ids.index(None)} has no id"
        assert len(set(ids)) == len(ids), f"{path.relative_to(ROOT)}: two cells share an id"


@pytest.mark.parametrize("path", named(NOTEBOOKS))
def test_outputs_are_fresh_and_from_a_gpu(path):
    problems = staleness(path)
    assert not problems, "\n".join(problems)


# What a stored output must not show a reader: the build machine's paths, warnings, stray tracebacks.
MACHINE_PATH = re.compile(r"(/home/|/root/|/opt/|/tmp/|/usr/(local/)?lib/|site-packages|dist-packages|/work/)")
WARNING = re.compile(r"\b\w*Warning\b|^\s*warn(ings)?\.", re.M)


def output_text(output) -> str:
    if output.get("output_type") == "stream":
        return "".join(output.get("text", ""))
    if output.get("output_type") == "error":
        return "\n".join(output.get("traceback", []))
    data = output.get("data", {})
    return "".join(data.get("text/plain", "")) + "".join(data.get("text/html", ""))


def unreadable_outputs(nb: dict) -> list[str]:
    """Each stored output a reader should not see, as 'cell N: why'."""
    found = []
    for i, cell in enumerate(nb["cells"]):
        for out in cell.get("outputs", []) if cell["cell_type"] == "code" else []:
            text = output_text(out)
            if out.get("output_type") == "error":
                found.append(f"cell {i}: a traceback ({out.get('ename')})")
            elif out.get("name") == "stderr" or WARNING.search(text):
                found.append(f"cell {i}: a warning or stderr: {text.strip()[:120]!r}")
            if MACHINE_PATH.search(text):
                found.append(f"cell {i}: a machine path: {MACHINE_PATH.search(text)[0]!r}")
    return found


@pytest.mark.parametrize("path", named(NOTEBOOKS + student_notebooks(ROOT)))  # releases keep early outputs
def test_stored_outputs_show_no_paths_warnings_or_tracebacks(path):
    problems = unreadable_outputs(json.loads(path.read_text()))
    assert not problems, "\n".join(problems)


def test_unreadable_outputs_are_found():
    def cell(*outputs):
        return {"cell_type": "code", "outputs": list(outputs)}
    nb = {"cells": [
        cell({"output_type": "stream", "name": "stdout", "text": "GPU: H200, 141 GB\n"}),
        cell({"output_type": "stream", "name": "stderr", "text": "/opt/venv/lib/python3.12/site-packages/numba/x.py:1: "
                                                                 "NumbaPerformanceWarning: Grid size 1"}),
        cell({"output_type": "error", "ename": "ValueError", "evalue": "x", "traceback": ["ValueError: x"]}),
        cell({"output_type": "execute_result", "data": {"text/plain": "PosixPath('/home/me/course')"}}),
        cell({"output_type": "stream", "name": "stdout", "text": "course/x.py:3: FutureWarning: old\n"}),
    ]}
    found = unreadable_outputs(nb)
    assert not any(f.startswith("cell 0") for f in found)
    assert {f.split(":")[0] for f in found} == {"cell 1", "cell 2", "cell 3", "cell 4"}, found


# In simulator mode the run records each kernel launch's argument types, so every kernel the
# notebook launched can then be compiled for real GPUs, which the simulator never does.
RECORD_LAUNCHES = textwrap.dedent('''
    import numba as _numba
    from numba.cuda.simulator import kernel as _sim
    _launches, _real_call = {}, _sim.FakeCUDAKernel.__call__
    def _recording_call(self, *args):
        # the notebook's own kernels (check(..., profile=True) also runs the lab's reference)
        if not self._device and not _sim._kernel_context and self.fn.__module__ == "__main__":
            # A kernel built inside a function (a factory: one kernel per group size, say) is
            # rebuilt by calling that function again with the numbers its closure held.
            factory = self.fn.__qualname__.split(".<locals>.")[0] if ".<locals>." in self.fn.__qualname__ else ""
            held = tuple((n, c.cell_contents) for n, c in zip(self.fn.__code__.co_freevars, self.fn.__closure__ or ())
                         if type(c.cell_contents) in (int, float, bool, str))
            types = tuple(_numba.typeof(getattr(a, "_ary", a)) for a in args)
            _launches[(self.fn.__name__, types, factory, held)] = None
        return _real_call(self, *args)
    _sim.FakeCUDAKernel.__call__ = _recording_call
''')
SAVE_LAUNCHES = "import pickle as _p\nwith open({path!r}, 'wb') as _f:\n    _p.dump(list(_launches), _f)\n"
LEARNER_GPUS = ((7, 5), (8, 9), (9, 0))  # T4 (Colab), L4 (Colab), H100/H200


@pytest.mark.notebook
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_runs_top_to_bottom(path, tmp_path):
    """Run All in a fresh kernel, as a learner does: no cell skipped from outside, no error.

    Without a GPU this is simulator mode, where %%gpu cells skip themselves, and each kernel the
    run launched must then compile for a T4, an L4 and an H100. With a GPU, each GPU has only
    15 GB free, as on the smallest GPU the course supports.
    """
    if gpu_present():
        nb, _facts = run(path, timeout=1800, memory_cap=SMALL_GPU_BYTES)
    else:
        record = tmp_path / "launches.pkl"
        nb, _facts = run(path, timeout=1800, first=RECORD_LAUNCHES, last=SAVE_LAUNCHES.format(path=str(record)))
    errors = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"
              and any(o.get("output_type") == "error" for o in c.get("outputs", []))]
    assert not errors, f"cells {errors} stored an error"
    if not gpu_present():
        failed = {k: v for k, v in compile_kernels(path, record).items() if v != "ok"}
        assert not failed, "kernels that do not compile for a learner's GPU:\n" + "\n".join(
            f"  {k}: {v}" for k, v in failed.items())


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


def _contains_kernel(node: ast.FunctionDef) -> bool:
    """A kernel factory: a plain function that defines a cuda.jit kernel inside and returns it."""
    return any(isinstance(n, ast.FunctionDef) and any(_is_cuda_jit(d) for d in n.decorator_list)
               for n in ast.walk(node) if n is not node)


def _constant_names(target: ast.expr) -> bool:
    names = target.elts if isinstance(target, ast.Tuple) else [target]
    return all(isinstance(t, ast.Name) and t.id.isupper() for t in names)


def _guarded(code: str) -> str:
    """A statement that may fail outside the notebook (e.g. it needs a value we did not rebuild)."""
    return "try:\n" + textwrap.indent(code, "    ") + "\nexcept Exception:\n    pass"


def gpu_kernels(path: Path):
    """(all cuda.jit defs, kernel factories and constants of the notebook, kernels defined in %%gpu cells)."""
    nb = json.loads(path.read_text())
    prelude, wanted, factories = [], [], set()
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        src = "\n".join(l for l in "".join(cell["source"]).splitlines() if not l.lstrip().startswith(("%", "!")))
        tree = ast.parse(src)
        gpu = "gpu" in cell.get("metadata", {}).get("tags", []) or "".join(cell["source"]).startswith("%%gpu")
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and any(_is_cuda_jit(d) for d in node.decorator_list):
                # from the first decorator to the end of the body
                prelude.append("\n".join(src.splitlines()[node.decorator_list[0].lineno - 1:node.end_lineno]))
                if gpu and not any(_is_device_function(d) for d in node.decorator_list):
                    wanted.append(node.name)
            elif isinstance(node, ast.FunctionDef) and _contains_kernel(node):
                prelude.append(ast.get_source_segment(src, node))
                factories.add(node.name)
            elif isinstance(node, ast.Assign) and all(_constant_names(t) for t in node.targets):
                prelude.append(_guarded(ast.get_source_segment(src, node)))  # e.g. A = np.float32(0.5)
            elif (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                  and isinstance(node.value.func, ast.Name) and node.value.func.id in factories):
                prelude.append(_guarded(ast.get_source_segment(src, node)))  # k = make_kernel(TILE)
    return prelude, wanted


COMPILER = textwrap.dedent('''
    import json, math, pickle, sys
    import numpy as np
    import numba
    from numba import cuda, float32, float64, int32, int64, uint32
    from types import SimpleNamespace
    import numba.cuda.dispatcher as dispatcher
    # Device functions ask the current GPU for its compute capability; there is none here.
    dispatcher.get_current_device = lambda: SimpleNamespace(compute_capability=(9, 0))
    CCS = json.loads(sys.argv[1])
    launches = pickle.load(open(sys.argv[2], "rb")) if len(sys.argv) > 2 else []
    real_jit, report, pyfuncs = cuda.jit, {}, {}
    from numba.cuda import compiler
    def compile_each(fn, name, sig):
        # Typed and lowered once, for the oldest GPU; then NVVM makes each GPU's PTX from that IR. Where
        # the oldest GPU's lowering fails, each GPU is compiled on its own, as compile_ptx does.
        lowered = getattr(compiler, "_compile_pyfunc_with_fixup", None)
        try:
            lib = lowered(fn, sig, device=False, cc=tuple(CCS[0]), abi="numba")[0] if lowered else None
        except Exception:
            lib = None
        for cc in CCS:
            key = f"{name}{'' if isinstance(sig, str) else '(' + ', '.join(map(str, sig)) + ')'} sm_{cc[0]}{cc[1]}"
            try:
                if lib is not None:
                    lib.get_asm_strs(cc=tuple(cc))
                else:
                    cuda.compile_ptx(fn, sig, cc=tuple(cc))
                report[key] = "ok"
            except Exception as e:
                report[key] = f"{type(e).__name__}: {' '.join(str(e).split())[:600]}"
    def jit(*args, **kw):
        sig = args[0] if args and isinstance(args[0], str) else kw.get("signature")
        kw.pop("signature", None)
        def deco(fn):
            if not kw.get("device"):
                pyfuncs[fn.__name__] = fn
                if sig:
                    compile_each(fn, fn.__name__, sig)
                else:
                    report.setdefault(fn.__name__, "no signature")
            return real_jit(**kw)(fn)  # lazy: building it eagerly would need a driver
        return deco(args[0]) if args and callable(args[0]) else deco
    cuda.jit = jit
    namespace = {"cuda": cuda, "math": math, "np": np, "numba": numba, "float32": float32,
                 "float64": float64, "int32": int32, "int64": int64, "uint32": uint32}
    exec(sys.stdin.read(), namespace)
    import inspect
    for name, types, factory, held in launches:  # what the simulator run launched, with its argument types
        report.pop(name, None)
        make = namespace.get(factory) if factory else None
        if make is not None:  # a kernel built by a factory: call it with its parameters' values from the closure
            params, held = list(inspect.signature(make).parameters), dict(held)
            if all(p in held for p in params):
                pyfuncs.pop(name, None)
                make(**{p: held[p] for p in params})
        if name in pyfuncs:
            compile_each(pyfuncs[name], name, types)
        else:
            report[name] = "launched, but its definition could not be rebuilt outside the notebook"
    print(json.dumps(report))
''')


def _compile(path: Path, launches: Path | None = None):
    prelude, _wanted = gpu_kernels(path)
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    argv = [sys.executable, "-c", COMPILER, json.dumps(LEARNER_GPUS)] + ([str(launches)] if launches else [])
    return subprocess.run(argv, input="\n\n".join(prelude), capture_output=True, text=True, env=env, timeout=1200)


def compile_kernels(path: Path, launches: Path) -> dict:
    """{kernel, types, arch: "ok" or the compiler's error} for every launched or signed kernel."""
    r = _compile(path, launches)
    if r.returncode != 0:
        return {"(the notebook's kernels)": r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "crashed"}
    return {k: v for k, v in json.loads(r.stdout.strip().splitlines()[-1]).items() if v != "no signature"}


def compile_gpu_kernels(path: Path):
    """Compile a notebook's GPU-only kernels to PTX for each learner GPU, in a process without the simulator."""
    _prelude, wanted = gpu_kernels(path)
    r = _compile(path)
    report = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else {}
    return wanted, r, report


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_gpu_only_kernels_compile_to_ptx(path):
    if not gpu_kernels(path)[1]:
        pytest.skip("no kernels in GPU-only cells")
    wanted, r, report = compile_gpu_kernels(path)
    assert r.returncode == 0, r.stderr[-3000:]
    for name in wanted:
        assert report.get(name) != "no signature", (
            f"{name} (a kernel in a %%gpu cell) needs a signature in its decorator, "
            f"e.g. @cuda.jit('void(float32[:])'), so CI can compile it")
        for cc in LEARNER_GPUS:
            assert report.get(f"{name} sm_{cc[0]}{cc[1]}") == "ok", report


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
    assert r.returncode == 0 and report == {f"squares sm_{a}{b}": "ok" for a, b in LEARNER_GPUS}, r.stderr[-2000:]


def test_ptx_check_compiles_warp_shuffles_and_catches_errors(tmp_path):
    good = ("@cuda.jit('void(float32[:], float32[:])')\ndef warp_sum(x, out):\n    i = cuda.grid(1)\n"
            "    v = x[i]\n    for d in (16, 8, 4, 2, 1):\n        v += cuda.shfl_down_sync(0xffffffff, v, d)\n"
            "    if i % 32 == 0:\n        out[i // 32] = v\n")
    wanted, r, report = compile_gpu_kernels(_notebook_with_gpu_cell(tmp_path, good))
    assert r.returncode == 0 and report == {f"warp_sum sm_{a}{b}": "ok" for a, b in LEARNER_GPUS}, r.stderr[-2000:]
    bad = good.replace("out[i // 32] = v", "out[i // 32] = undefined_name + v")
    _, r, report = compile_gpu_kernels(_notebook_with_gpu_cell(tmp_path, bad))
    assert all("undefined_name" in v for v in report.values()) and len(report) == len(LEARNER_GPUS)


def test_launched_kernels_built_by_a_factory_are_rebuilt_and_compiled(tmp_path):
    """A kernel made inside a function (one per group size, say) is rebuilt by calling that
    function with the numbers the launched kernel's closure held; without them it is reported."""
    import pickle

    import numba
    import numpy as np

    path = tmp_path / "f.ipynb"
    path.write_text(json.dumps({"cells": [
        {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
         "source": "def scale_kernel_for(G):\n    @cuda.jit\n    def scale(x):\n        i = cuda.grid(1)\n"
                   "        if i < x.size:\n            x[i] *= G\n    return scale\n"}],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    types = (numba.typeof(np.zeros(3, np.float32)),)
    launches = tmp_path / "launches.pkl"
    launches.write_bytes(pickle.dumps([("scale", types, "scale_kernel_for", (("G", 4),))]))
    assert compile_kernels(path, launches) == {f"scale(array(float32, 1d, C)) sm_{a}{b}": "ok" for a, b in LEARNER_GPUS}
    launches.write_bytes(pickle.dumps([("scale", types, "scale_kernel_for", ())]))
    assert compile_kernels(path, launches) == {"scale": "launched, but its definition could not be rebuilt outside "
                                                        "the notebook"}


def test_consecutive_prints_are_stored_as_one_output():
    from course.notebooks import coalesce_streams

    def stream(name, text):
        return {"output_type": "stream", "name": name, "text": text}
    nb = {"cells": [{"cell_type": "code", "outputs": [
        stream("stdout", "a\n"), stream("stdout", ["b\n", "c\n"]), stream("stderr", "e\n"),
        {"output_type": "display_data", "data": {}}, stream("stdout", "d\n"), stream("stdout", "f\n")]},
        {"cell_type": "markdown", "source": "x"}]}
    coalesce_streams(nb)
    assert [(o["output_type"], o.get("text")) for o in nb["cells"][0]["outputs"]] == [
        ("stream", "a\nb\nc\n"), ("stream", "e\n"), ("display_data", None), ("stream", "d\nf\n")]
