"""Learner code against the runner's walls, each wall on its own (tests/test_walls.py runs this).

Run as a script in a fresh process (the walls patch the simulator and Triton's interpreter for
the whole process): ``python walls_probe.py numba|triton|seal``. Each probe runs a snippet as
learner code (compiled and registered as the runner registers a submission's cells, under the
guard's rules of an exercise that forbids host computation) and prints one JSON line:
{probe: what happened}, where what happened is "ok: <value>" or "<ExceptionType>: <message>",
followed by the faults the walls kept ("fault: ...").
"""
from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
os.environ.setdefault("TRITON_INTERPRET", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autograder import runner  # noqa: E402

RULES = {"deny": ["numpy.*"], "allow": [], "host_read": True, "host_write": True, "array_math": False,
         "tensor_math": False, "methods": []}


def learner(source: str, namespace: dict) -> None:
    import linecache

    source = textwrap.dedent(source)
    linecache.cache["the answer cell"] = (len(source), None, source.splitlines(True), "the answer cell")
    code = compile(source, "the answer cell", "exec")  # its source registered, as the runner registers cells
    runner.GUARD.add_code(code)
    exec(code, namespace)


def outcome(source: str, namespace: dict, problem) -> str:
    try:
        learner(source, namespace)
        said = f"ok: {namespace.get('result')!r}"
    except BaseException as exc:  # noqa: BLE001 - the probe reports it
        said = f"{type(exc).__name__}: {exc}"
    found = problem()
    return said + (f" | fault: {found}" if found else "")


NUMBA = {
    "attributes": """
        seen = []
        for name in ("data", "_ary", "__dict__", "__array_interface__", "base", "gpu_data"):
            try:
                getattr(x, name)
                seen.append(name)
            except Exception:
                pass
        result = seen
    """,
    "match_pattern": """
        match x:
            case object(_ary=a):
                result = "reached"
            case _:
                result = "nothing"
    """,
    "numpy_view": "import numpy\nresult = numpy.asarray(x)",
    "memoryview": "result = memoryview(x)",
    "arithmetic": "result = x + x",
    "copy_to_host": "result = x.copy_to_host()",
    "repr": "result = repr(x)",
    "list_argument": """
        @cuda.jit
        def k(box):
            box[1][0] = box[0][0]
        k[1, 1]([x, out])
    """,
    "host_array_argument": """
        host = numpy.float32(0).repeat(4)
        @cuda.jit
        def k(a, h):
            h[0] = a[0]
        k[1, 1](x, host)
    """,
    "captured_list": """
        stash = [0.0]
        @cuda.jit
        def k(a):
            stash[0] = a[0]
        k[1, 1](x)
    """,
    "default_argument": """
        box = [0.0]
        @cuda.jit
        def k(a, acc=box):
            acc[0] = a[0]
        k[1, 1](x)
    """,
    "rebound_after_a_launch": """
        buf = 0
        @cuda.jit
        def k(a):
            buf[0] = a[0]
        try:
            k[1, 1](x)
        except Exception:
            pass
        buf = numpy.float32(0).repeat(8)
        k[1, 1](x)
    """,
    "fenced_racy_counts": """
        @cuda.jit
        def k(a, o):
            cuda.threadfence()
            o[0] += 1
        k[4, 1](x, out)
    """,
    "view_with_a_hooked_dtype": """
        class Hook(numpy.ndarray):
            def __array_finalize__(self, obj):
                pass
        result = x.view(Hook)
    """,
    "array_method_in_kernel": """
        @cuda.jit
        def k(a, o):
            o[0] = a.sum()
        k[1, 1](x, out)
    """,
    "try_in_kernel": """
        @cuda.jit
        def k(a, o):
            try:
                o[0] = a[99]
            except IndexError:
                o[0] = 0
        k[1, 1](x, out)
    """,
    "local_array_maths": """
        @cuda.jit
        def k(a, o):
            loc = cuda.local.array(4, numba.float32)
            for i in range(4):
                loc[i] = a[i]
            twice = loc * 2
            o[0] = twice[0]
        k[1, 1](x, out)
    """,
    "honest_vector_add": """
        @cuda.jit
        def k(a, o):
            i = cuda.grid(1)
            if i < o.size:
                o[i] = a[i] * 2
        k[1, 8](x, out)
        result = "done"
    """,
    "out_of_bounds_caught_on_host": """
        @cuda.jit
        def k(a, o):
            i = cuda.grid(1)
            if i <= o.size:
                v = a[i]
                if i < o.size:
                    o[i] = v
        try:
            k[1, 9](x, out)
        except IndexError:
            pass
        result = "caught"
    """,
    "shared_race": """
        @cuda.jit
        def k(a, o):
            counts = cuda.shared.array(4, numba.int32)
            t = cuda.threadIdx.x
            if t < 4:
                counts[t] = 0
            cuda.syncthreads()
            counts[int(a[t]) % 4] += 1
            cuda.syncthreads()
            if t == 0:
                o[0] = counts[0]
        k[1, 8](x, out)
    """,
    "shared_atomic": """
        @cuda.jit
        def k(a, o):
            counts = cuda.shared.array(4, numba.int32)
            t = cuda.threadIdx.x
            if t < 4:
                counts[t] = 0
            cuda.syncthreads()
            cuda.atomic.add(counts, int(a[t]) % 4, 1)
            cuda.syncthreads()
            if t == 0:
                o[0] = counts[0]
        k[1, 8](x, out)
        result = "done"
    """,
    "global_race_across_blocks": """
        @cuda.jit
        def k(a, o):
            o[0] = a[cuda.blockIdx.x]
        k[2, 1](x, out)
    """,
    "uninitialised_shared": """
        @cuda.jit
        def k(a, o):
            buf = cuda.shared.array(8, numba.float32)
            t = cuda.threadIdx.x
            if t < 4:
                buf[t] = a[t]
            cuda.syncthreads()
            if t == 0:
                o[0] = buf[5]
        k[1, 8](x, out)
    """,
}


def probe_numba() -> dict:
    import numba
    import numpy
    from numba import cuda

    from autograder import sim_memory, sim_warps

    sim_warps.patch_simulator()
    runner.strict_barriers()
    memory = runner.install_sim_memory(sim_memory.install)
    runner.GUARD.rules, runner.GUARD.exercise, runner.GUARD.active = RULES, "probe", True
    found = {}
    for name, source in NUMBA.items():
        x = memory.array(numpy.arange(8, dtype=numpy.float32), "x")
        out = memory.array(numpy.zeros(8, dtype=numpy.float32), "out")
        found[name] = outcome(source, {"x": x, "out": out, "cuda": cuda, "numba": numba, "numpy": numpy},
                              memory.problem)
    return found


TRITON = {
    "handle_by_match": """
        @triton.jit
        def k(x_ptr, o_ptr):
            offs = tl.arange(0, 8)
            v = tl.load(x_ptr + offs)
            match v:
                case object(handle=h):
                    pass
            tl.store(o_ptr + offs, v)
        k[(1,)](x, out)
    """,
    "repr_of_a_block": """
        shown = []
        @triton.jit
        def k(x_ptr, o_ptr):
            offs = tl.arange(0, 8)
            v = tl.load(x_ptr + offs)
            shown.append(repr(v))
            tl.store(o_ptr + offs, v)
        k[(1,)](x, out)
        result = shown[0]
    """,
    "one_past_the_end": """
        @triton.jit
        def k(x_ptr, o_ptr, n):
            offs = tl.arange(0, 16)
            mask = offs <= n
            v = tl.load(x_ptr + offs, mask=mask, other=0.0)
            tl.store(o_ptr + offs, v, mask=offs < n)
        k[(1,)](x, out, 8)
    """,
    "past_the_end_along_a_dimension": """
        @triton.jit
        def k(x_ptr, o_ptr, rows, cols, BR: tl.constexpr, BC: tl.constexpr):
            r = tl.arange(0, BR)
            c = tl.arange(0, BC)
            v = tl.load(x_ptr + r[:, None] * cols + c[None, :], mask=r[:, None] < rows, other=0.0)
            tl.store(o_ptr + r[:, None] * cols + c[None, :], v, mask=(r[:, None] < rows) & (c[None, :] < cols))
        k[(1,)](x.view(2, 4), out.view(2, 4), 2, 4, BR=2, BC=8)
    """,
    "flat_read_of_an_expanded_view": """
        @triton.jit
        def k(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)
        k[(1,)](x[:1].clone().expand(8), out, 8, BLOCK=8)
    """,
    "programs_race": """
        @triton.jit
        def k(x_ptr, o_ptr):
            p = tl.program_id(0)
            offs = tl.arange(0, 4) + 4 * p
            total = tl.load(o_ptr) + tl.sum(tl.load(x_ptr + offs))
            tl.store(o_ptr, total)
        k[(2,)](x, out)
    """,
    "programs_add_atomically": """
        @triton.jit
        def k(x_ptr, o_ptr):
            p = tl.program_id(0)
            offs = tl.arange(0, 4) + 4 * p
            tl.atomic_add(o_ptr, tl.sum(tl.load(x_ptr + offs)))
        k[(2,)](x, out)
        result = float(out[0])
    """,
    "honest_copy": """
        @triton.jit
        def k(x_ptr, o_ptr, n):
            offs = tl.arange(0, 16)
            mask = offs < n
            tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)
        k[(1,)](x, out, 8)
        result = float(out.sum())
    """,
    "interpreter_internals_by_match": """
        match triton:
            case object(runtime=object(interpreter=inside)):
                result = inside.ReduceOps(0, None, True)
    """,
    "interpreter_memory_directly": """
        from triton.runtime import interpreter
        result = interpreter._interpreter.load(numpy.array([x.data_ptr()], dtype=numpy.uint64),
                                               numpy.array([True]), numpy.zeros(1, numpy.float32), numpy.float32)
    """,
}


def probe_triton() -> dict:
    import numpy
    import torch
    import triton
    import triton.language as tl

    from autograder import triton_compat, triton_guard

    triton_compat.patch_interpreter()
    guard = runner.install_triton_guard(triton_guard.install)
    runner.GUARD.rules, runner.GUARD.exercise, runner.GUARD.active = RULES | {"deny": []}, "probe", True
    found = {}
    for name, source in TRITON.items():
        x = torch.arange(8, dtype=torch.float32)
        out = torch.zeros(8, dtype=torch.float32)
        found[name] = outcome(source, {"x": x, "out": out, "triton": triton, "tl": tl, "numpy": numpy},
                              guard.problem)
    return found


SEAL = {
    "set_a_library_attribute": "optests.opcheck = print",
    "set_it_by_another_name": "put = setattr\nput(optests, 'opcheck', print)",
    "delete_a_library_attribute": "del optests.opcheck",
    "swap_the_module": "sys_modules['torch.testing._internal.optests'] = numpy",
}


def probe_seal() -> dict:
    """Each change, from a fresh seal, and what the seal then says changed."""
    import importlib
    import sys as system

    import numpy
    import torch.testing._internal.optests as optests

    found = {}
    real = optests.opcheck
    for name, source in SEAL.items():
        seal = runner.ModuleSeal()
        seal.protect_all()
        outcome(source, {"optests": optests, "numpy": numpy, "sys_modules": system.modules}, lambda: "")
        found[name] = ", ".join(seal.changed())
        optests.opcheck = real
        system.modules["torch.testing._internal.optests"] = optests
    seal = runner.ModuleSeal()
    seal.protect_all()
    importlib.import_module("torch.testing._internal.optests.fake_tensor")  # the library importing a submodule
    found["library_imports_a_submodule"] = ", ".join(seal.changed()) or "nothing"
    return found


if __name__ == "__main__":
    print(json.dumps({"numba": probe_numba, "triton": probe_triton, "seal": probe_seal}[sys.argv[1]]()))
