"""autograder.memtrace: the sector and bank figures it computes for kernels run in the simulator.

The kernels are defined at module level with ``cuda`` a module global, as learners write them
(the simulator swaps the global named ``cuda`` during a launch). The tests run under the
grader's ``strict_barriers()`` (kernels without barriers run in turn in one thread); one test
runs the same kernels in a fresh process with the stock simulator (one thread per CUDA thread)
and checks that it gets the same figures.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from numba import cuda

from autograder import memtrace
from autograder.memtrace import trace

ROOT = Path(__file__).resolve().parent.parent


@cuda.jit
def copy(x, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = x[i]


@cuda.jit
def strided_read(x, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i * 32]


@cuda.jit
def neighbours(x, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i] + x[i + 1]  # two loads of x on one line: two sites


@cuda.jit
def naive_transpose(a, out):
    c, r = cuda.grid(2)
    if r < a.shape[0] and c < a.shape[1]:
        out[c, r] = a[r, c]


@cuda.jit
def tile_columns(a, out):
    """One warp stages a 32 x 32 block row by row, then reads the tile's columns."""
    tile = cuda.shared.array((32, 32), np.float32)
    tx = cuda.threadIdx.x
    for j in range(32):
        tile[j, tx] = a[j, tx]
    cuda.syncthreads()
    for j in range(32):
        out[j, tx] = tile[tx, j]


@cuda.jit
def tile_columns_padded(a, out):
    tile = cuda.shared.array((32, 33), np.float32)
    tx = cuda.threadIdx.x
    for j in range(32):
        tile[j, tx] = a[j, tx]
    cuda.syncthreads()
    for j in range(32):
        out[j, tx] = tile[tx, j]


@cuda.jit
def broadcast(a, out):
    tile = cuda.shared.array((32, 32), np.float32)
    tx = cuda.threadIdx.x
    tile[0, tx] = a[0, tx]
    cuda.syncthreads()
    out[0, tx] = tile[0, 0]


@pytest.fixture(autouse=True, scope="module")
def strict():
    """The grader's simulator: installed once per process, as the grader does."""
    from autograder.runner import independent_threads, strict_barriers

    barriers = strict_barriers()
    assert independent_threads(copy.py_func) and not independent_threads(tile_columns.py_func)
    return barriers


def one_launch(kernel, config, *args):
    with trace() as t:
        kernel[config](*args)
    report = t.report()
    assert len(report.launches) == 1 and not report.error
    return report, report.launches[0], t


def test_coalesced_float32_copy():
    n = 256
    x = np.arange(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    report, launch, t = one_launch(copy, (n // 32, 32), x, out)
    assert np.array_equal(out, x)  # the kernel still works while traced
    assert launch.kernel == "copy" and launch.grid == (8, 1, 1) and launch.block == (32, 1, 1)
    assert launch.accesses == 2 * n and launch.dropped == 0
    for kind in ("load", "store"):
        s = launch.site("x" if kind == "load" else "out", kind)
        assert s.requests == 8
        assert s.sectors_mean == 4 and s.sectors_max == 4
        assert s.bytes_requested == s.bytes_moved == 4 * n
        assert s.efficiency == 1.0 and s.stride == 1
    assert launch.load_bytes_moved == launch.load_bytes_min == 4 * n
    assert launch.store_bytes_moved == launch.store_bytes_min == 4 * n
    assert report.findings == []
    assert "findings: none" in report.text()
    json.dumps(report.as_dict())
    # which thread touched which element: thread i reads x[i]
    assert np.array_equal(t.touch_map("x", kind="load"), np.arange(n))
    assert (t.touch_map("x", kind="store") == -1).all()


def test_stride_32_read():
    x = np.arange(64 * 32, dtype=np.float32)
    out = np.zeros(64, np.float32)
    report, launch, _ = one_launch(strided_read, (2, 32), x, out)
    assert np.array_equal(out, x[::32])
    s = launch.site("x", "load")
    assert s.requests == 2 and s.sectors_mean == 32 and s.sectors_max == 32
    assert s.ideal_sectors_mean == 4 and s.stride == 32
    assert s.bytes_requested == 256 and s.bytes_moved == 2 * 32 * 32
    assert s.efficiency == pytest.approx(1 / 8)
    store = launch.site("out", "store")
    assert store.sectors_mean == 4 and store.efficiency == 1.0
    assert launch.load_bytes_moved == 2048 and launch.load_bytes_min == 256
    line = strided_read.py_func.__code__.co_firstlineno + 4
    assert s.line == line
    finding, = [f for f in report.findings if "`x`" in f]
    assert f"line {line}" in finding and "32 sectors instead of 4" in finding
    assert "strided" in finding and "elements 32 apart" in finding and "chapter 7" in finding


def test_float64_coalesced_read():
    n = 128
    x = np.arange(n, dtype=np.float64)
    out = np.zeros(n, np.float64)
    _, launch, _ = one_launch(copy, (n // 32, 32), x, out)
    s = launch.site("x", "load")
    assert s.itemsize == 8 and s.requests == 4
    assert s.sectors_mean == 8 and s.sectors_max == 8 and s.efficiency == 1.0
    assert launch.load_bytes_moved == launch.load_bytes_min == 8 * n


@pytest.mark.parametrize("n, blocks, threads, requests, sectors", [
    (100, 4, 32, 4, [4, 4, 4, 1]),       # the last block's warp has 4 active threads
    (100, 2, 64, 4, [4, 4, 4, 1]),       # the same warps, two per block
    (40, 1, 128, 2, [4, 1]),             # warps 2 and 3 access nothing: no request
])
def test_partial_last_warp(n, blocks, threads, requests, sectors):
    x = np.arange(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    _, launch, _ = one_launch(copy, (blocks, threads), x, out)
    assert np.array_equal(out, x)
    s = launch.site("x", "load")
    assert s.requests == requests
    assert s.sectors_mean == pytest.approx(np.mean(sectors)) and s.sectors_max == max(sectors)
    assert s.bytes_requested == 4 * n and s.bytes_moved == 32 * sum(sectors)
    assert launch.load_bytes_min == 4 * n


def test_sites_on_one_line_are_told_apart():
    x = np.arange(65, dtype=np.float32)
    out = np.zeros(64, np.float32)
    report, launch, _ = one_launch(neighbours, (2, 32), x, out)
    loads = [s for s in launch.global_sites if s.array == "x"]
    assert len(loads) == 2 and loads[0].line == loads[1].line
    assert sorted(s.sectors_mean for s in loads) == [4, 5]  # x[i + 1] starts 4 bytes into a sector
    assert any("misaligned" in f for f in report.findings)
    # each distinct byte once: x[0..64]
    assert launch.load_bytes_min == 4 * 65


def test_naive_transpose_writes_down_a_column():
    a = np.arange(32 * 32, dtype=np.float32).reshape(32, 32)
    out = np.zeros_like(a)
    report, launch, t = one_launch(naive_transpose, ((1, 1), (32, 32)), a, out)
    assert np.array_equal(out, a.T)
    assert launch.site("a", "load").sectors_mean == 4
    store = launch.site("out", "store")
    assert store.requests == 32 and store.sectors_mean == 32 and store.stride == 32
    finding = next(f for f in report.findings if "`out`" in f)
    assert "column" in finding and "32 sectors instead of 4" in finding
    # thread (x, y) = (c, r) of the one block wrote out[c, r]
    who = t.touch_map("out", kind="store")
    assert who[3, 5] == 5 * 32 + 3


def expected_tile_figures(launch, ways):
    store, load = launch.site("tile", "store", "shared"), launch.site("tile", "load", "shared")
    assert store.requests == load.requests == 32  # one warp, 32 iterations of each loop
    assert store.ways_mean == 1 and store.ways_max == 1
    assert load.ways_mean == ways and load.ways_max == ways and load.ideal_mean == 1
    for name, kind in (("a", "load"), ("out", "store")):
        s = launch.site(name, kind)
        assert s.requests == 32 and s.sectors_mean == 4 and s.efficiency == 1.0


def test_shared_tile_read_by_column_is_a_32_way_conflict():
    a = np.arange(32 * 32, dtype=np.float32).reshape(32, 32)
    out = np.zeros_like(a)
    report, launch, _ = one_launch(tile_columns, (1, 32), a, out)
    assert np.array_equal(out, a.T)
    expected_tile_figures(launch, 32)
    assert launch.site("tile", "load", "shared").stride == 32
    finding, = [f for f in report.findings if "`tile`" in f]
    assert "32-way bank conflicts" in finding and "32 x 33" in finding and "chapter 7" in finding


def test_padded_tile_has_no_conflict():
    a = np.arange(32 * 32, dtype=np.float32).reshape(32, 32)
    out = np.zeros_like(a)
    report, launch, _ = one_launch(tile_columns_padded, (1, 32), a, out)
    assert np.array_equal(out, a.T)
    expected_tile_figures(launch, 1)
    assert launch.site("tile", "load", "shared").stride == 33
    assert report.findings == []


def test_shared_broadcast_is_not_a_conflict():
    a = np.arange(32 * 32, dtype=np.float32).reshape(32, 32)
    out = np.zeros_like(a)
    report, launch, _ = one_launch(broadcast, (1, 32), a, out)
    assert (out[0] == a[0, 0]).all()
    load = launch.site("tile", "load", "shared")
    assert load.requests == 1 and load.ways_mean == 1 and load.ways_max == 1
    assert report.findings == []


def figures() -> dict:
    """A barrier-free kernel and a barrier kernel, traced: the figures both simulators must agree on."""
    n = 100
    x = np.arange(n, dtype=np.float32)
    a = np.arange(32 * 32, dtype=np.float32).reshape(32, 32)
    with trace() as t:
        copy[2, 64](x, np.zeros(n, np.float32))
        tile_columns[1, 32](a, np.zeros_like(a))
        strided_read[2, 32](np.arange(64 * 32, dtype=np.float32), np.zeros(64, np.float32))
    out = t.report().as_dict()
    for launch in out["launches"]:
        for site in launch["global_sites"] + launch["shared_sites"]:
            del site["file"]
    return out


@pytest.mark.parametrize("walls", [False, True], ids=["stock", "after-check"])
def test_in_turn_and_threaded_simulators_agree(walls):
    """In this process kernels without a barrier run in turn (strict_barriers); a fresh process
    with the stock simulator runs every CUDA thread as a thread. The figures are the same, also
    where check() has installed the grader's kernel arrays in the process first (a notebook that
    checks an exercise, then profiles a kernel of its own)."""
    from numba.cuda.simulator import kernel

    assert kernel.BlockManager.run.__qualname__ != "BlockManager.run"  # the grader's, installed here
    here = figures()
    script = (
        "import json, sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "import test_memtrace as m\n"
        "from numba.cuda.simulator import kernel, kernelapi\n"
        "assert kernel.BlockManager.run.__qualname__ == 'BlockManager.run'  # the stock simulator\n"
        + ("from autograder.judge import local_walls\nlocal_walls()\n"
           "assert hasattr(kernelapi.FakeCUDAShared.array, '_grader_plain_shared')\n" if walls else "")
        + "print(json.dumps(m.figures()))\n")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    there = json.loads(done.stdout.strip().splitlines()[-1])
    assert json.loads(json.dumps(here)) == there
    copy_launch, tile_launch, strided_launch = here["launches"]
    x = next(s for s in copy_launch["global_sites"] if s["array"] == "x")
    assert x["requests"] == 4 and x["sectors_max"] == 4 and x["bytes_moved"] == 13 * 32
    tile = [s for s in tile_launch["shared_sites"] if s["kind"] == "load"][0]
    assert tile["ways_mean"] == 32 and tile["requests"] == 32
    x = next(s for s in strided_launch["global_sites"] if s["array"] == "x")
    assert x["sectors_mean"] == 32


def patched_methods():
    from numba.cuda.simulator import kernelapi
    from numba.cuda.simulator.cudadrv.devicearray import FakeWithinKernelCUDAArray

    return [vars(FakeWithinKernelCUDAArray)["__getitem__"], vars(FakeWithinKernelCUDAArray)["__setitem__"],
            vars(kernelapi.FakeCUDAShared)["array"], vars(kernelapi.FakeCUDAModule)["__init__"]]


def test_methods_restored_after_the_block(strict):
    before = patched_methods()
    x = np.arange(64, dtype=np.float32)
    with trace():
        during = patched_methods()
        copy[2, 32](x, np.zeros_like(x))
    from numba.cuda.simulator import kernelapi

    # the grader's shared arrays (check() installs them in a notebook) stay and report to the tracer
    graders = hasattr(kernelapi.FakeCUDAShared.array, "_grader_plain_shared")
    assert [a is not b for a, b in zip(before, during)] == [True, True, not graders, True]
    assert patched_methods() == before
    assert strict.intact() and strict.problem() == ""


def test_methods_restored_after_an_exception(strict):
    before = patched_methods()
    with pytest.raises(ZeroDivisionError):
        with trace():
            copy[1, 32](np.ones(32, np.float32), np.zeros(32, np.float32))
            1 / 0
    assert patched_methods() == before
    # an error raised inside a kernel, too
    with pytest.raises(IndexError):
        with trace():
            strided_read[1, 32](np.ones(32, np.float32), np.zeros(32, np.float32))
    assert patched_methods() == before
    assert strict.intact()
    # nothing is recorded once the block is left
    with trace() as t:
        pass
    copy[1, 32](np.ones(32, np.float32), np.zeros(32, np.float32))
    assert t.report().launches == []


def test_one_trace_at_a_time():
    with trace():
        with pytest.raises(RuntimeError, match="already active"):
            with trace():
                pass
    with trace():  # the lock was released
        pass


def test_recording_stops_at_the_cap():
    n = 256
    x = np.arange(n, dtype=np.float32)
    with trace(max_accesses=100) as t:
        copy[n // 32, 32](x, np.zeros_like(x))
    report = t.report()
    launch, = report.launches
    assert launch.accesses == 100 and launch.dropped == 2 * n - 100
    assert any("recording stopped after 100 accesses" in f for f in report.findings)


def test_module_constants():
    assert memtrace.SECTOR == 32 and memtrace.BANKS == 32 and memtrace.WARP == 32


def test_finished_launches_release_their_arrays():
    import gc
    import weakref

    d = cuda.to_device(np.arange(64, dtype=np.float32))
    ref = weakref.ref(d)
    with trace() as t:
        copy[2, 32](d, np.zeros(64, np.float32))
    del d
    gc.collect()
    assert ref() is None
    assert t.report().launches[0].site("x").requests == 2  # the figures stay
