"""Warp shuffles and syncwarp in Numba's CUDA simulator (autograder/sim_warps.py): each matches
what a GPU computes when the whole warp takes part, and a lane that never arrives is named."""
from __future__ import annotations

import textwrap

import numpy as np
import pytest

from autograder import sim_warps

cuda = pytest.importorskip("numba.cuda")


@pytest.fixture(autouse=True)
def patched():
    from numba import config

    if not config.ENABLE_CUDASIM:
        pytest.skip("the simulator's path")
    assert sim_warps.patch_simulator()


def test_xor_butterfly_gives_every_lane_the_warp_sum():
    @cuda.jit
    def warp_sums(x, out):
        i = cuda.grid(1)
        v = x[i]
        for off in (16, 8, 4, 2, 1):
            v += cuda.shfl_xor_sync(0xFFFFFFFF, v, off)
        out[i] = v

    x = np.arange(64, dtype=np.float32)
    out = np.zeros_like(x)
    warp_sums[1, 64](x, out)
    assert np.array_equal(out, np.repeat([x[:32].sum(), x[32:].sum()], 32))


def test_down_up_and_indexed_shuffles_read_the_lanes_a_gpu_reads():
    @cuda.jit
    def moves(x, down, up, bcast):
        i = cuda.grid(1)
        down[i] = cuda.shfl_down_sync(0xFFFFFFFF, x[i], 3)
        up[i] = cuda.shfl_up_sync(0xFFFFFFFF, x[i], 3)
        bcast[i] = cuda.shfl_sync(0xFFFFFFFF, x[i], 5)
        cuda.syncwarp()

    x = np.arange(32, dtype=np.int32) * 10
    down, up, bcast = (np.zeros_like(x) for _ in range(3))
    moves[1, 32](x, down, up, bcast)
    lanes = np.arange(32)
    assert np.array_equal(down, np.where(lanes + 3 < 32, x[np.minimum(lanes + 3, 31)], x))  # the top lanes keep theirs
    assert np.array_equal(up, np.where(lanes >= 3, x[np.maximum(lanes - 3, 0)], x))
    assert np.array_equal(bcast, np.full(32, x[5]))


def test_a_lane_that_left_early_is_named(monkeypatch):
    monkeypatch.setattr(sim_warps, "WAIT_S", 1.0)

    @cuda.jit
    def leaves(x):
        i = cuda.grid(1)
        if i == 7:
            return
        x[i] = cuda.shfl_xor_sync(0xFFFFFFFF, x[i], 1)

    with pytest.raises(RuntimeError, match="not every lane of warp 0 reached it"):
        leaves[1, 32](np.zeros(32, dtype=np.float32))


# --------------------------------------------------------------------------- graded in the sandbox
def _row_sums_inputs(p, rng):
    return {"x": rng.standard_normal((p["rows"], 32), dtype=np.float32)}


def _lab():
    from autograder.spec import NO_HOST_MATH, Exercise, Lab, Out

    return Lab(name="warp_sums", title="row sums by a warp", setup="from numba import cuda\n", exercises=(Exercise(
        name="row_sums", title="a warp per row of 32", backend="numba", args=("x", "out"), inputs=_row_sums_inputs,
        outputs={"out": Out(lambda p: (p["rows"],))},
        reference=lambda x: {"out": x.astype(np.float64).sum(axis=1)},
        cases=lambda simulator: [{"rows": 1}, {"rows": 5}], forbidden=NO_HOST_MATH, points=1.0),))


ROW_SUMS = """
@cuda.jit
def row_sums_kernel(x, out):
    row = cuda.blockIdx.x
    lane = cuda.threadIdx.x
    v = x[row, lane]
    for off in (16, 8, 4, 2, 1):
        v += cuda.shfl_xor_sync(0xFFFFFFFF, v, off)
    if lane == 0:
        out[row] = v


def row_sums(x, out):
    row_sums_kernel[x.shape[0], 32](x, out)
"""


def test_a_kernel_with_shuffles_is_graded_in_simulator_mode():
    from autograder.judge import Judge, Options

    cells = [{"code": ROW_SUMS, "filename": "the answer cell", "exercise": "row_sums", "defines": ["row_sums"]}]
    judge = Judge(_lab(), Options(simulator=True, seed=3, timeout=120.0), cells=cells)
    try:
        (result,) = judge.grade()
    finally:
        judge.close()
    assert result.passed and result.correctness == 1.0, result.message


def test_course_setup_gives_notebooks_the_graders_simulator():
    """course.setup() in simulator mode: shuffles, threads in turn for kernels without a barrier,
    and a barrier that not every thread of a block reaches fails at once (as in check()). In a
    fresh process: another test may have installed the grader's barriers in this one."""
    import os
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import numpy as np
        import course
        from autograder import runner
        assert course.setup(verbose=False) == "simulator"
        assert runner._BARRIERS and runner._BARRIERS[0].intact(), "no strict barriers"
        from numba import cuda

        @cuda.jit
        def early_exit(out):
            t = cuda.threadIdx.x
            if t < 16:  # half the block leaves before the barrier the other half waits at
                return
            cuda.syncthreads()
            out[t] = t

        try:
            early_exit[1, 32](np.zeros(32, dtype=np.int64))
        except runner.BarrierDivergence as e:
            print("divergence:", e)
    """)
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "divergence:" in r.stdout and "returned" in r.stdout, r.stdout


def test_the_graders_block_scheduler_runs_barriers_and_shuffles_fast_and_names_a_missing_lane_at_once():
    """Under the grader's scheduler (each simulated thread a greenlet, switched in one OS thread) a
    kernel that meets at 120 shuffles and 20 barriers per thread, in 4 blocks of 128 threads, runs
    in well under a second (OS threads took about 2.7 s), with a GPU's answer; a lane that never
    reaches a shuffle, or that waits at the block's barrier while its warp shuffles, is named at
    once, not after the 60 s a lane waits for an OS thread."""
    import time

    from autograder.runner import strict_barriers

    strict_barriers()
    kernels = {}  # defined as a learner's module defines them: the simulator swaps its global `cuda`
    exec(textwrap.dedent("""
        from numba import cuda, float32

        @cuda.jit
        def rounds(x, out):
            t = cuda.threadIdx.x
            s = cuda.shared.array(128, float32)
            v = x[cuda.blockIdx.x * 128 + t]
            for _ in range(10):
                off = 16
                while off > 0:
                    v += cuda.shfl_xor_sync(0xFFFFFFFF, v, off)
                    off //= 2
                s[t] = v
                cuda.syncthreads()
                v = s[(t + 32) % 128] * float32(0.5)
                cuda.syncthreads()
            out[cuda.blockIdx.x * 128 + t] = v

        @cuda.jit
        def leaves(x):
            i = cuda.grid(1)
            if i == 7:
                return
            x[i] = cuda.shfl_xor_sync(0xFFFFFFFF, x[i], 1)

        @cuda.jit
        def barrier_against_shuffle(x):
            i = cuda.grid(1)
            if i == 3:
                cuda.syncthreads()
            else:
                x[i] = cuda.shfl_xor_sync(0xFFFFFFFF, x[i], 1)
        """), kernels)
    x = np.arange(512, dtype=np.float32)
    out = np.zeros_like(x)
    started = time.perf_counter()
    kernels["rounds"][4, 128](x, out)
    took = time.perf_counter() - started
    expect = x.reshape(4, 4, 32).astype(np.float64)
    for _ in range(10):  # each warp's sum in every lane, then half the next warp's
        expect = np.roll(np.repeat(expect.sum(axis=2, keepdims=True), 32, axis=2), -1, axis=1) * 0.5
    np.testing.assert_allclose(out, expect.reshape(-1), rtol=1e-5)
    assert took < 1.0, f"{took:.2f} s for 512 threads meeting 140 times"
    for name in ("leaves", "barrier_against_shuffle"):
        started = time.perf_counter()
        with pytest.raises(RuntimeError, match="not every lane of warp 0 reached it"):
            kernels[name][1, 32](np.zeros(32, dtype=np.float32))
        assert time.perf_counter() - started < 5
