"""The autograder against a bank of submissions with known grades (simulator on CPU)."""
from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from numba import cuda

from autograder.labs import get_lab
from autograder.results import atomic_write
from autograder.spec import Speed
from autograder.submission import forbidden_uses, load

ROOT = Path(__file__).resolve().parent.parent
BANK = ROOT / "tests" / "submissions" / "first_kernel"
GPU_BANK = ROOT / "tests" / "submissions" / "first_kernel_gpu"
MEMORY_GPU_BANK = ROOT / "tests" / "submissions" / "memory_gpu"
BARRIER_BANK = ROOT / "tests" / "submissions" / "reduction"
REDUCTION_GPU_BANK = ROOT / "tests" / "submissions" / "reduction_gpu"
EXPECTED = {k: v for k, v in json.loads((BANK / "expected.json").read_text()).items() if not k.startswith("_")}
SEED = "12345"
GPU_MODE = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") in ("", "0")  # the root conftest decides


def autograder(*args, check=True, **kw) -> subprocess.CompletedProcess:
    """The command line, as an instructor runs it (other test files use it too)."""
    r = subprocess.run([sys.executable, "-m", "autograder", *map(str, args)], capture_output=True, text=True,
                       cwd=ROOT, **kw)
    if check and r.returncode != 0:
        raise AssertionError(f"autograder {' '.join(map(str, args))} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r


def gradebook(out: Path) -> dict[str, dict[str, str]]:
    with open(out / "grades.csv", newline="") as f:
        return {row["submission"]: row for row in csv.DictReader(f)}


@pytest.fixture(scope="module")
def bank_grades(tmp_path_factory):
    out = tmp_path_factory.mktemp("bank")
    r = autograder("grade", "--lab", "first_kernel", "--out", str(out), "--timeout", "8", "--simulator",
                   "--memory-limit", "1", "--seed", SEED, str(BANK))
    return out, r


def test_bank_grades_as_expected(bank_grades):
    out, r = bank_grades
    assert r.returncode == 0, "failing submissions are grades, not errors"
    book = gradebook(out)
    assert set(book) == set(EXPECTED)
    for sub, scores in EXPECTED.items():
        for exercise, want in scores.items():
            assert float(book[sub][exercise]) == want, (sub, exercise, book[sub])


@pytest.mark.parametrize("sub, words", [
    ("syntax_error", "SyntaxError"),
    ("infinite_loop", "did not finish within 8 s"),
    ("crash", "import ctypes"),  # caught before it runs (a crash that runs: the batching bank's crashes.py)
    ("huge_output", "printed more than"),
    ("wrong_signature", "must take (a, b, out)"),
    ("mutates_input", "input 'a' was modified"),
    ("library_result", "forbids"),
    ("partial_write", "never written"),
    ("no_bounds_check", "out of bounds at line 8"),
    ("import_error", "No module named"),
    ("memory_hog", "more than 1 GB of host memory"),
])
def test_failures_are_explained_in_plain_words(bank_grades, sub, words):
    out, _ = bank_grades
    res = json.loads((out / sub / "results.json").read_text())
    assert words in res["tests"][0]["output"], res["tests"][0]["output"]


@pytest.mark.parametrize("sub, reason", [
    ("syntax_error", "syntax_error"), ("infinite_loop", "time_limit"), ("crash", "forbidden_construct"),
    ("huge_output", "too_much_output"), ("wrong_signature", "wrong_signature"), ("mutates_input", "input_modified"),
    ("library_result", "forbidden_call"), ("partial_write", "never_written"), ("no_bounds_check", "call_failed"),
    ("import_error", "cell_failed"), ("memory_hog", "memory_limit"), ("off_by_one", "never_written"),
    ("correct", ""),
])
def test_failures_carry_the_graders_own_reason(bank_grades, sub, reason):
    """The reason code the report shows, recorded where the grader decided the outcome (never read
    from the message, which can hold the learner's words)."""
    out, _ = bank_grades
    res = json.loads((out / sub / "results.json").read_text())
    vector_add = next(t for t in res["tests"]
                      if (t["extra_data"]["exercise"], t["extra_data"]["part"]) == ("vector_add", "correctness"))
    assert vector_add["extra_data"]["reason"] == reason, vector_add


def test_results_json_is_gradescope_format(bank_grades):
    out, _ = bank_grades
    res = json.loads((out / "correct" / "results.json").read_text())
    assert isinstance(res["score"], float) and isinstance(res["execution_time"], float)
    lab = get_lab("first_kernel")
    assert res["score"] == sum(t["score"] for t in res["tests"])
    # What the simulator cannot grade (kernel speed) is left out of the tests and listed instead.
    left_out = res["extra_data"]["not_graded"]
    assert left_out and all(part.endswith("/speed") or "needs a GPU" in why for part, why in left_out.items())
    points = {f"{e.name}/{part}": pts for e in lab.exercises
              for part, pts in (("correctness", e.points), ("speed", e.speed.points if e.speed else 0)) if pts}
    assert sum(t["max_score"] for t in res["tests"]) + sum(points[k] for k in left_out) == lab.max_points
    for t in res["tests"]:
        assert set(t) >= {"name", "score", "max_score", "status", "output", "visibility"}
        assert t["status"] in ("passed", "failed") and t["visibility"] == "visible"


def test_rerun_skips_graded_and_force_regrades(bank_grades, tmp_path):
    out = tmp_path / "g"
    sub = str(BANK / "correct.py")
    autograder("grade", "--lab", "first_kernel", "--out", str(out), "--simulator", sub)
    first = (out / "correct" / "results.json").stat().st_mtime_ns
    r = autograder("grade", "--lab", "first_kernel", "--out", str(out), "--simulator", sub)
    assert "skipping 1 already graded" in r.stderr
    assert (out / "correct" / "results.json").stat().st_mtime_ns == first
    autograder("grade", "--lab", "first_kernel", "--out", str(out), "--simulator", "--force", sub)
    assert (out / "correct" / "results.json").stat().st_mtime_ns != first


def _scores(out: Path) -> dict:
    return {name: [(t["name"], t["score"], t["output"]) for t in json.loads((out / name / "results.json").read_text())["tests"]]
            for name in gradebook(out)}


def test_parallel_workers_and_shards_match_serial(bank_grades, tmp_path):
    """Two workers, and two shards merged, grade as the bank's serial run did (same seed)."""
    names = ("correct", "off_by_one", "mutates_input", "wrong_index")
    subs = [str(BANK / f"{n}.py") for n in names]
    common = ["--lab", "first_kernel", "--simulator", "--seed", SEED, "--timeout", "8", "--memory-limit", "1"]
    autograder("grade", *common, "--gpus", "0,1", "--out", str(tmp_path / "parallel"), *subs)
    for i in range(2):
        autograder("grade", *common, "--shard", f"{i}/2", "--out", str(tmp_path / f"shard-{i}"), *subs)
    autograder("merge", "--lab", "first_kernel", "--out", str(tmp_path / "merged"),
               str(tmp_path / "shard-0"), str(tmp_path / "shard-1"))
    serial_out = bank_grades[0]
    serial = {name: v for name, v in _scores(serial_out).items() if name in names}
    assert len(serial) == len(names)
    assert _scores(tmp_path / "parallel") == serial
    assert _scores(tmp_path / "merged") == serial
    assert gradebook(tmp_path / "merged") == {n: row for n, row in gradebook(serial_out).items() if n in names}


def test_usage_errors_exit_nonzero(tmp_path):
    assert autograder("grade", "--lab", "no_such_lab", "--out", str(tmp_path), str(BANK / "correct.py"),
                      check=False).returncode != 0
    assert autograder("grade", "--lab", "first_kernel", "--out", str(tmp_path), "missing.py",
                      check=False).returncode != 0
    assert autograder("grade", "--lab", "first_kernel", "--exercise", "nope", "--out", str(tmp_path),
                      str(BANK / "correct.py"), check=False).returncode != 0


def test_report_writes_plots_and_table(bank_grades):
    out, _ = bank_grades
    autograder("report", "--lab", "first_kernel", str(out))
    assert (out / "scores.png").stat().st_size > 1000 and (out / "speed.png").stat().st_size > 1000
    table = (out / "report.md").read_text()
    assert "| vector_add |" in table and f"{len(EXPECTED)} submissions graded" in table


def test_atomic_write_keeps_old_file_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "grades.csv"
    atomic_write(target, "old\n")

    def boom(*a):
        raise KeyboardInterrupt  # a kill between writing and renaming

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, "new\n")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["grades.csv"]


def test_runner_replies_are_bounded_and_checked():
    """What a runner sends is JSON of bounded size, read within one deadline however slowly it
    arrives; anything else kills it with a plain message and never raises in the judge."""
    import socket
    import struct
    import threading
    import time

    from autograder.runproc import RunnerProcess, RunnerFailed

    def fake(sender):
        """A RunnerProcess whose 'runner' is a thread sending what `sender` writes."""
        proc = RunnerProcess.__new__(RunnerProcess)
        a, b = socket.socketpair()
        proc.sock, proc.memory_limit_gb = a, 1.0
        proc.proc = type("P", (), {"poll": lambda self: None, "wait": lambda self, timeout=None: 0,
                                   "pid": os.getpid()})()
        proc.log = type("L", (), {"total": 0})()
        proc.tree = type("T", (), {"rss_gb": lambda self: 0.0, "kill": lambda self: True})()
        threading.Thread(target=sender, args=(b,), daemon=True).start()
        return proc

    def frame(obj):
        data = json.dumps(obj).encode() if not isinstance(obj, bytes) else obj
        return struct.pack("<I", len(data)) + data

    assert fake(lambda s: s.sendall(frame({"ok": True}))).receive(5) == {"ok": True}
    for payload, words in ((b"[1, 2]", "could not read"), (b"\xff\xfe", "could not read"),
                           (b"{" * 100000, "could not read")):
        with pytest.raises(RunnerFailed, match=words):
            fake(lambda s, p=payload: s.sendall(frame(p))).receive(5)
    with pytest.raises(RunnerFailed, match="bytes where a short message"):
        fake(lambda s: s.sendall(struct.pack("<I", 1 << 30))).receive(5)

    def drip(s):
        for byte in frame({"ok": True, "pad": "x" * 50}):
            try:
                s.send(bytes([byte]))
            except OSError:  # the judge gave up on it, as it should
                return
            time.sleep(0.2)

    t0 = time.monotonic()
    with pytest.raises(RunnerFailed, match="did not finish within 2 s"):
        fake(drip).receive(2)
    assert time.monotonic() - t0 < 4


def test_static_check_sees_through_aliases():
    code = "import cupy as cp\nfrom numpy import add as plus\n\ndef helper(x):\n    return cp.sum(x)\n\n" \
           "def reduce(x, out):\n    out[0] = helper(x)\n\ndef unrelated(x):\n    return plus(x, x)\n"
    found = forbidden_uses(code, "reduce", ["cupy.sum", "numpy.add"])
    assert found == ["cupy.sum (line 5)"]


def test_static_check_sees_the_matmul_operator():
    code = "def gemm(a, b, out):\n    out[...] = a @ b\n\ndef gemm2(a, b, out):\n    out @= b\n"
    assert forbidden_uses(code, "gemm", ["operator.matmul"]) == ["operator.matmul (line 2)"]
    assert forbidden_uses(code, "gemm2", ["operator.matmul"]) == ["operator.matmul (line 5)"]
    assert forbidden_uses(code, "gemm", ["cupy.*"]) == []  # only where a lab forbids it


def test_notebook_answer_cells_only(tmp_path):
    nb = {"cells": [
        {"cell_type": "code", "metadata": {}, "source": "raise SystemExit('not an answer cell')"},
        {"cell_type": "code", "metadata": {"autograder": {"answer": "vector_add"}},
         "source": ["%timeit 1\n", "def vector_add(a, b, out):\n", "    pass\n"]},
    ], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "sub.ipynb"
    path.write_text(json.dumps(nb))
    src = load(path)
    assert "SystemExit" not in src.code and "def vector_add" in src.code and "%timeit" not in src.code.split("#")[0]
    compile(src.code, "sub", "exec")
    bad = tmp_path / "broken.ipynb"
    bad.write_text("{ not json")
    assert "not a valid notebook" in load(bad).problem


def test_guard_elements_see_writes_outside_the_view():
    """A real GPU does not check array bounds: the guard elements around each array must."""
    from autograder.measure import GUARD, guard_pattern, overruns

    for dtype in ("float32", "float16", "float64", "uint32", "int8"):
        pat = guard_pattern(dtype)
        flat = np.empty(12 + 2 * GUARD, dtype=dtype)
        flat.view(pat.dtype)[:] = pat
        flat[GUARD:GUARD + 12] = np.arange(12)
        assert overruns(flat, pat, GUARD) == (0, 0), dtype
        flat[GUARD + 12 + 3] = 1  # past the end
        flat[GUARD - 1] = 2  # just before the start
        assert overruns(flat, pat, GUARD) == (1, 1), dtype
        if np.dtype(dtype).kind == "f":
            flat[GUARD + 12] = np.nan  # a NaN written over a guard is a write too
            assert overruns(flat, pat, GUARD) == (1, 2), dtype


def test_leak_tracking_counts_unfreed_runtime_allocations():
    from types import SimpleNamespace

    from autograder.runner import _Leaks

    addresses = iter(range(4096, 1 << 20, 4096))
    rt = SimpleNamespace(malloc=lambda n: next(addresses), mallocManaged=lambda n, flags=1: next(addresses),
                         free=lambda p: None)
    original = rt.malloc
    with _Leaks(rt) as allocations:
        p = rt.malloc(100)
        rt.malloc(50)
        rt.free(p)
        rt.mallocManaged(8)
    assert allocations.leaked() == 58
    assert rt.malloc is original  # the runtime is restored after the call


def _one_exercise_lab(ex):
    from autograder.spec import Lab

    return Lab(name="test", title="test", exercises=(ex,))


def _run_local(ex, fn, params, inputs):
    """One case through the judge, in this process (as check() runs it)."""
    from autograder.check import local_judge

    judge = local_judge(_one_exercise_lab(ex), {ex.name: fn})
    try:
        proc = judge.runner_for(ex)
        return judge.run_case(proc, ex, params, inputs)
    finally:
        judge.close()


def test_pinned_args_reach_the_code_as_host_handles_in_the_simulator():
    """Inputs named in pinned_args stay on the host (NumPy arrays, page-locked, on a GPU, where the
    judge sees it when the function modifies one). In the simulator they are handles: shape, views
    and uploads, but no host maths and no writes."""
    from autograder.measure import compare
    from autograder.spec import Exercise, Out

    ex = Exercise(name="upload", title="upload from pinned memory", backend="numba", args=("x", "out"),
                  inputs=lambda p, rng: {"x": rng.random(p["n"], dtype=np.float32)},
                  outputs={"out": Out(lambda p: (p["n"],))}, reference=lambda x: {"out": x},
                  cases=lambda sim: [{"n": 5}], pinned_args=("x",))
    params = {"n": 5}
    inputs = ex.inputs(params, np.random.default_rng(0))
    seen = []

    def upload(x, out):
        seen.append((type(x).__name__, x.shape, x.dtype, len(x[1:3])))
        out[:2].copy_to_device(x[:2])
        out[2:].copy_to_device(x[2:])

    outputs, after, faults = _run_local(ex, upload, params, inputs)
    assert seen == [("HostArray", (5,), np.float32, 2)] and not faults
    assert compare(ex, params, inputs, outputs, after).passed

    for name, work in (("scribble", lambda x, out: x.__setitem__(0, 1.0)),
                       ("host maths", lambda x, out: out.copy_to_device(x * 2)),
                       ("NumPy's methods", lambda x, out: out.copy_to_device(x.copy()))):
        with pytest.raises(Exception, match="not the code's to change|unsupported operand|the work is a kernel's"):
            _run_local(ex, work, params, inputs)


def test_torch_backend_passes_tensors_poisons_outputs_and_sees_mutation():
    """backend="torch": tensors on the GPU (on the CPU in simulator mode); unwritten outputs
    stay NaN and fail; a modified input is seen."""
    pytest.importorskip("torch")
    from autograder.measure import compare
    from autograder.spec import Exercise, Out

    ex = Exercise(name="linear", title="x @ w.T", backend="torch", args=("x", "w", "out"),
                  inputs=lambda p, rng: {"x": rng.random((p["n"], 4), dtype=np.float32),
                                         "w": rng.random((3, 4), dtype=np.float32)},
                  outputs={"out": Out(lambda p: (p["n"], 3))}, reference=lambda x, w: {"out": x @ w.T},
                  cases=lambda sim: [{"n": 5}])
    params = {"n": 5}
    inputs = ex.inputs(params, np.random.default_rng(0))
    seen = []

    def right(x, w, out):
        seen.append(type(x).__module__)
        out.copy_(x @ w.T)

    def half(x, w, out):
        out[:2] = x[:2] @ w.T

    def scribble(x, w, out):
        out.copy_(x @ w.T)
        w.mul_(2)

    assert compare(ex, params, inputs, *_run_local(ex, right, params, inputs)).passed
    assert seen == ["torch"]
    assert "never written" in compare(ex, params, inputs, *_run_local(ex, half, params, inputs)).message
    assert "input 'w' was modified" in compare(ex, params, inputs, *_run_local(ex, scribble, params, inputs)).message


# --------------------------------------------------------------------------- barriers (simulator)
BARRIERS = {k: v for k, v in json.loads((BARRIER_BANK / "expected.json").read_text()).items() if not k.startswith("_")}
simulator_only = pytest.mark.skipif(GPU_MODE, reason="the simulator's barrier check: a GPU counts barrier arrivals per thread")


@simulator_only
def test_barrier_divergence_fails_the_grade(tmp_path):
    """A barrier some threads of a block skip, or meet at another line, gives 0 and says where;
    the same kernel with its barrier outside the if passes."""
    autograder("grade", "--lab", "reduction", "--exercise", "block_sums", "--simulator", "--seed", SEED,
               "--out", str(tmp_path), *[str(BARRIER_BANK / f"{name}.py") for name in BARRIERS])
    book = gradebook(tmp_path)
    for name, want in BARRIERS.items():
        output = json.loads((tmp_path / name / "results.json").read_text())["tests"][0]["output"]
        assert float(book[name]["block_sums"]) == want["block_sums"], (name, output)
        assert want["words"] in output, (name, output)


ORDERING_BANK = ROOT / "tests" / "submissions" / "ordering"


@simulator_only
def test_work_ordered_across_blocks_and_streams_is_no_race(tmp_path):
    """The simulator runs blocks and launches one after another, so the grader checks the order a GPU
    would need: these honest answers order theirs (a fence and a ticket, an event, a synchronize) and
    get full marks; the attack bank has each without its order (reduction/fence_last_block_sum,
    reduction/two_streams_race_sum), which scores 0."""
    want = {k: v for k, v in json.loads((ORDERING_BANK / "expected.json").read_text()).items()
            if not k.startswith("_")}
    autograder("grade", "--lab", "reduction", "--exercise", "reduce_sum", "--simulator", "--seed", SEED,
               "--out", str(tmp_path), *[str(ORDERING_BANK / f"{name}.py") for name in want])
    book = gradebook(tmp_path)
    for name, points in want.items():
        output = json.loads((tmp_path / name / "results.json").read_text())["tests"][0]["output"]
        assert float(book[name]["reduce_sum"]) == points, (name, output)


@simulator_only
def test_a_barrier_divergence_leaves_nothing_for_the_next_call(capsys):
    """A call that ends in a barrier divergence also leaves a kernel's exception with the memory walls:
    both are read with that call, so the next call (an honest kernel) is judged on its own."""
    import runpy

    from autograder import checker

    check = checker("reduction")
    assert check(runpy.run_path(str(BARRIER_BANK / "barrier_in_branch.py"))["block_sums"]).points == 0
    honest = check(runpy.run_path(str(BARRIER_BANK / "correct.py"))["block_sums"])
    assert honest.passed and all(c.passed for c in honest.cases), capsys.readouterr().out


@simulator_only
@pytest.mark.parametrize("name", ["barrier_in_branch", "two_barriers"])
def test_barrier_divergence_fails_check(name, capsys):
    """check() in a notebook runs the same check: every case fails, naming the block and the line."""
    import runpy

    from autograder import checker

    result = checker("reduction")(runpy.run_path(str(BARRIER_BANK / f"{name}.py"))["block_sums"])
    printed = capsys.readouterr().out
    assert result.points == 0 and result.cases and not any(c.passed for c in result.cases), printed
    assert all(BARRIERS[name]["words"] in c.message for c in result.cases), printed
    assert "barrier divergence in block (0, 0, 0)" in " ".join(printed.split()), printed  # wrapped to fit


@simulator_only
def test_barrier_check_cannot_be_switched_off_unseen():
    """Changing what a launch goes through (here, the block manager) is reported by the next call."""
    from numba.cuda.simulator import kernel

    from autograder.runner import StrictBarriers, strict_barriers

    barriers = strict_barriers()
    assert barriers.problem() == ""
    run = kernel.BlockManager.run
    try:
        kernel.BlockManager.run = lambda self, grid_point, *args: None
        assert barriers.problem() == StrictBarriers.TAMPERED
    finally:
        kernel.BlockManager.run = run
    assert barriers.problem() == ""


@simulator_only
def test_simulator_runs_the_threads_of_a_barrier_free_kernel_in_turn():
    """A kernel that names no barrier runs its threads one after another: a grid-stride loop on a
    fixed grid of 1024 blocks of 256 finishes in seconds, with the right answer. A kernel that
    waits at a barrier, directly or in a device function, or could reach one unnamed, keeps a
    thread each; and a thread's error still names the thread and the block."""
    import time

    from autograder.runner import independent_threads, strict_barriers

    strict_barriers()
    kernels = {}  # defined as a learner's module defines them: the simulator swaps its global `cuda`
    exec(textwrap.dedent("""
        from numba import cuda

        @cuda.jit
        def saxpy(a, x, y, out):
            i = cuda.grid(1)
            while i < x.shape[0]:
                out[i] = a * x[i] + y[i]
                i += cuda.gridsize(1)

        @cuda.jit(device=True)
        def wait():
            cuda.syncthreads()

        @cuda.jit
        def via_device_function(x):
            wait()

        @cuda.jit
        def unnamed(x):
            getattr(cuda, "sync" + "threads")()

        @cuda.jit
        def reads_past_the_end(x):
            x[cuda.grid(1) + 1] += 1.0

        @cuda.jit
        def waits_through_an_argument(x, wait):
            wait()
        """), kernels)
    saxpy, reads_past_the_end = kernels["saxpy"], kernels["reads_past_the_end"]
    via_device_function, unnamed = kernels["via_device_function"], kernels["unnamed"]
    x = np.arange(5003, dtype=np.float32)
    out = np.zeros_like(x)
    started = time.perf_counter()
    saxpy[1024, 256](np.float32(2), x, x, out)
    took = time.perf_counter() - started
    np.testing.assert_array_equal(out, 3 * x)
    assert took < 20, f"{took:.1f} s for 262,144 simulated threads"
    assert independent_threads(saxpy.py_func)
    assert not independent_threads(via_device_function.py_func) and not independent_threads(unnamed.py_func)
    with pytest.raises(IndexError, match=r"in thread \(31, 0, 0\) of block \(0, 0, 0\)"):
        reads_past_the_end[1, 32](np.zeros(32, np.float32))
    import threading

    from autograder.runner import BarrierDivergence

    barriers = strict_barriers()
    barriers.problem()
    with pytest.raises(BarrierDivergence, match="by its name"):  # a barrier the scan could not see
        kernels["waits_through_an_argument"][1, 32](x, lambda: threading.current_thread().syncthreads())
    assert "by its name" in barriers.problem()  # kept for the grade, even where the learner catches it


# The memory_access lab's transpose written the naive way: neighbouring threads read `a` down a column.
NAIVE_TRANSPOSE = textwrap.dedent("""
    from numba import cuda


    @cuda.jit
    def naive_kernel(a, out):
        r, c = cuda.grid(2)
        if r < a.shape[0] and c < a.shape[1]:
            out[c, r] = a[r, c]


    def transpose_tiled(a, out):
        naive_kernel[((a.shape[0] + 15) // 16, (a.shape[1] + 15) // 16), (16, 16)](a, out)
    """)


@simulator_only
def test_check_profile_traces_yours_and_the_reference_and_names_the_stride(capsys):
    """check(fn, profile=True) in simulator mode traces the memory accesses of the learner's kernels
    and of the lab's reference on the largest case: a naive transpose reads `a` down its columns
    (named, with the stride), the reference's padded tile reads it in whole sectors without bank
    conflicts."""
    from autograder import checker

    kernels = {}
    exec(NAIVE_TRANSPOSE, kernels)
    result = checker("memory_access")(kernels["transpose_tiled"], profile=True)
    printed = capsys.readouterr().out
    assert result.passed and result.profile is not None, printed
    yours, ref = result.profile["yours"], result.profile["reference"]
    assert yours["load_sectors_per_request"] > 3 * ref["load_sectors_per_request"], printed
    assert ref["load_sectors_per_request"] <= 4.0 and ref["shared_requests"] > 0 and ref["shared_ways"] < 1.1
    cols = result.profile["case"]["cols"]
    assert any("`a`" in f and f"{cols} apart" in f for f in result.profile["findings"]), printed
    assert "What to look at:" in printed
    # Which element each thread of the first warp loaded: down columns (16 rows), not along a row.
    drawn = result.profile["warp_map"]
    assert (drawn["array"], drawn["kind"], drawn["kernel"]) == ("a", "load", "naive_kernel")
    lanes = np.array(drawn["lanes"])
    assert sorted(lanes[lanes >= 0].tolist()) == list(range(32))
    assert (lanes >= 0).any(axis=1).sum() == 16 and (lanes >= 0).any(axis=0).sum() == 2, lanes


def test_the_warp_window_of_a_coalesced_and_a_strided_access():
    """memtrace.warp_window: a warp reading 32 neighbours lies along one row; reading every 32nd
    element (a 1D array shown as rows of 32) it runs down one column."""
    import matplotlib
    matplotlib.use("Agg")
    from autograder.memtrace import warp_window
    from course.plots_tools import warp_access_map

    n = 32 * 40
    coalesced = np.arange(n)  # element i touched by thread i
    lanes, others, origin = warp_window(coalesced)
    assert lanes.shape[0] == 1 and sorted(lanes[0].tolist()) == list(range(32)) and origin == (0, 0)
    strided = np.full(n, -1)
    strided[np.arange(32) * 32] = np.arange(32)  # thread t touched element 32 t
    lanes, others, _ = warp_window(strided)
    assert lanes.shape == (32, 32) and lanes[:, 0].tolist() == list(range(32)) and (lanes[:, 1:] == -1).all()
    fig = warp_access_map(lanes, others, (0, 0), "strided")
    assert fig.axes and fig.get_size_inches()[0] <= 7.5


@simulator_only
def test_grade_profile_traces_in_the_runners_and_changes_no_grade(tmp_path):
    """`grade --profile` (simulator) traces the learner's kernels in its sandboxed runner and the
    reference in its own, and puts the comparison in the feedback; the grade is the one a run
    without --profile gives."""
    sub = tmp_path / "naive.py"
    sub.write_text(NAIVE_TRANSPOSE)
    books = {}
    for flag in ([], ["--profile"]):
        out = tmp_path / f"out{len(flag)}"
        autograder("grade", "--lab", "memory_access", "--exercise", "transpose_tiled", "--simulator", "--seed", SEED,
                   "--out", str(out), *flag, str(sub))
        books[bool(flag)] = gradebook(out)["naive"]
        test = json.loads((out / "naive" / "results.json").read_text())["tests"][0]
        assert ("profile" in test["extra_data"]) == bool(flag)
    assert books[True] == books[False] and float(books[True]["transpose_tiled"]) == 2
    profile = test["extra_data"]["profile"]
    assert profile["yours"]["summary"]["load_sectors_per_request"] > 3 * profile["reference"]["summary"]["load_sectors_per_request"]
    assert any("`a`" in f and f"{profile['case']['cols']} apart" in f for f in profile["findings"]), profile
    assert "What to look at:" in test["output"] and "reference" in test["output"]


def test_a_profile_from_a_runner_is_checked_for_form():
    """A runner is the learner's process: what it reports as a profile keeps numbers and short texts only."""
    from autograder.memtrace import SUMMARY_KEYS, checked_profile
    from autograder.outcome import _profile

    forged = {"summary": {"launches": "many", "load_sectors_per_request": float("nan"), "load_efficiency": -3,
                          "shared_ways": True, "store_requests": 10**6, "extra": "x" * 10**6},
              "findings": ["ok", 7, "y" * 5000] + ["z"] * 50}
    got = checked_profile(forged)
    assert set(got["summary"]) == set(SUMMARY_KEYS) and got["summary"]["store_requests"] == 10**6
    assert got["summary"]["launches"] == 0 and got["summary"]["load_sectors_per_request"] is None
    assert got["summary"]["load_efficiency"] is None and got["summary"]["shared_ways"] is None
    assert got["findings"][0] == "ok" and len(got["findings"][1]) == 600 and len(got["findings"]) == 12
    assert checked_profile("junk") is None and checked_profile({"summary": 3}) is None
    assert _profile({"case": {"n": 5, "x": "big"}, "yours": forged, "text": "t" * 10**5})["case"] == {"n": 5}
    assert len(_profile({"text": "t" * 10**5})["text"]) == 6000 and _profile([1]) is None


def test_timing_inputs_drawn_ahead_are_the_ones_drawn_in_line():
    """On a GPU the judge draws each timed exercise's pool on a thread, one exercise ahead; the
    values and the float64 reference of the first set are those drawn in line, and a pool the
    judge moved past (its exercise failed its cases) is not kept."""
    import dataclasses

    from autograder.labs import get_lab
    from autograder.timing_inputs import POOL, Prefetch, draw

    lab = get_lab("reduction")
    timed = [(i, dataclasses.replace(ex, timing_case={**ex.timing_case, "n": 10_007}))
             for i, ex in enumerate(lab.exercises) if ex.timing_case]
    assert len(timed) >= 3
    ahead = Prefetch(timed, seed=1234)
    try:
        ahead.starting(timed[0][0])
        assert set(ahead.futures) == {timed[0][0], timed[1][0]}
        ahead.starting(timed[1][0])  # the first exercise failed its cases: never timed
        assert set(ahead.futures) == {timed[1][0], timed[2][0]}
        for i, ex in timed[1:]:
            ahead.starting(i)
            got, want = ahead.take(ex, i), draw(ex, 1234, i)
            assert i not in ahead.futures and len(got.sets) == POOL
            for g, w in zip(got.sets, want.sets):
                assert g.keys() == w.keys()
                for k in w:
                    np.testing.assert_array_equal(g[k], w[k])
            for k in want.ref64:
                np.testing.assert_array_equal(got.ref64[k], want.ref64[k])
    finally:
        ahead.close()


def test_sanitize_synccheck_is_offered_and_its_reports_reach_the_feedback(monkeypatch):
    """--sanitize synccheck puts the runner under compute-sanitizer's synccheck, and the judge picks
    synccheck's reports out of the runner's output (the command line and the parsing, without a GPU)."""
    from autograder import runproc
    from autograder.cli import parser
    from autograder.judge import sanitizer_findings

    args = parser().parse_args(["grade", "--lab", "reduction", "--out", "o", "--sanitize", "synccheck", "s.py"])
    assert args.sanitize == "synccheck"
    with pytest.raises(ValueError, match="synccheck"):
        runproc.sanitizer_prefix("synchcheck")

    class Started(Exception):
        pass

    def popen(argv, **kwargs):
        raise Started(argv)

    monkeypatch.setattr(runproc.subprocess, "Popen", popen)
    with pytest.raises(Started) as started:
        runproc.RunnerProcess({}, simulator=False, sandboxed=False, sanitize="synccheck")
    argv = started.value.args[0]
    assert argv[1:4] == ["--tool", "synccheck", "--print-limit"] and argv[-3].endswith("runner.py"), argv
    report = ["========= COMPUTE-SANITIZER", "========= Barrier error detected. Divergent thread(s) in block",
              "=========     at block_sums_kernel+0x1f0 in submission.py:19",
              "=========     by thread (128,0,0) in block (0,0,0)", "========= ERROR SUMMARY: 1 error"]
    assert sanitizer_findings(report) == [report[1]]


# --------------------------------------------------------------------------- check()'s messages
@simulator_only
def test_check_reports_an_out_of_bounds_index_as_one_failed_case(capsys):
    """Each case that indexes out of bounds is one failed case naming the thread, its block and the
    index, in a few short lines of the learner's own code; the cases after it still run."""
    import re
    import runpy

    from autograder import checker

    result = checker("first_kernel")(runpy.run_path(str(BANK / "no_bounds_check.py"))["vector_add"])
    printed = capsys.readouterr().out
    assert len(result.cases) == len(get_lab("first_kernel").exercise("vector_add").cases(True)), printed
    assert result.cases[-1].passed is False and any(c.passed for c in result.cases), printed  # n=1024 fits
    for case in (c for c in result.cases if not c.passed):
        assert re.match(r"thread \(\d+, 0, 0\) of block \(\d+, 0, 0\) of kernel 'add_kernel' accessed '[ab]' out of "
                        r"bounds at line 8: index \d+ of an array of shape \(\d+,\)$", case.message), case
        assert len(case.message.splitlines()) <= 3, case.message  # the error, then the learner's two lines
    assert "Traceback" not in printed and "site-packages" not in printed and "autograder" not in printed, printed
    assert max(map(len, printed.splitlines())) <= 88, printed


@cuda.jit
def _half_kernel(a, out):  # the second half of out is never written
    i = cuda.grid(1)
    if i < a.size // 2:
        out[i] = 2 * a[i]


@cuda.jit
def _add_to_kernel(a, out):  # adds to out, which it never set
    i = cuda.grid(1)
    if i < a.size:
        out[i] += 2 * a[i]


@cuda.jit
def _nan_kernel(a, out):  # writes every element, as NaN
    i = cuda.grid(1)
    if i < a.size:
        out[i] = a[i] * math.nan


def test_check_tells_outputs_never_set_from_outputs_written_as_nan(monkeypatch, capsys):
    """An element the call never wrote is said to be never set; one it only added to (an accumulator
    left unset) was read before any thread wrote it (the simulator's walls say so first); an element
    it wrote NaN into is said to be written as NaN, not 'never written'."""
    from autograder import check as check_module
    from autograder.spec import Exercise, Lab, Out

    ex = Exercise(name="double", title="out = 2a", backend="numba", args=("a", "out"),
                  inputs=lambda p, rng: {"a": rng.random(p["n"], dtype=np.float32) + np.float32(1)},
                  outputs={"out": Out(lambda p: (p["n"],))}, reference=lambda a: {"out": 2 * a},
                  cases=lambda sim: [{"n": 40}])
    monkeypatch.setattr(check_module, "get_lab", lambda name: Lab(name="double", title="double", exercises=(ex,)))
    check = check_module.checker("double")
    notes = {}
    for name, kernel in (("half", _half_kernel), ("add", _add_to_kernel), ("nan", _nan_kernel)):
        result = check(lambda a, out, k=kernel: k[1, 64](a, out), exercise="double")
        capsys.readouterr()
        (case,) = result.cases
        assert not case.passed, name
        notes[name] = case.message
    assert "20 elements never set: still the NaN the grader starts 'out' with" in notes["half"], notes
    assert "written as NaN" not in notes["half"], notes
    assert "read element 0 of 'out' at line" in notes["add"] and "before any thread wrote it" in notes["add"], notes
    assert "40 elements written as NaN" in notes["nan"] and "never set:" not in notes["nan"], notes
    assert "np.float32" not in "".join(notes.values()), notes  # values as numbers, not reprs


def test_speed_score_is_linear_between_thresholds():
    s = Speed(2, full_at=0.8, zero_at=0.2)
    assert s.score(1.5) == 2 and s.score(0.2) == 0 and s.score(0.5) == 1.0
    assert s.score(float("nan")) == 0 and s.score(None) == 0


# --------------------------------------------------------------------------- GPU only
@pytest.fixture(scope="module")
def gpu_grades(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpubank")
    subs = [GPU_BANK / f"{n}.py" for n in ("illegal_address", "side_stream", "side_stream_once", "cached_output",
                                           "timer_patch", "hung_kernel")] + [BANK / "mutates_input.py", BANK / "no_bounds_check.py"]
    r = autograder("grade", "--lab", "first_kernel", "--exercise", "vector_add", "--out", str(out),
                   "--timeout", "30", *map(str, subs))
    return out, r


def _tests(out: Path, sub: str) -> dict:
    return {t["name"].split(":")[0] + ":" + t["extra_data"]["part"]: t
            for t in json.loads((out / sub / "results.json").read_text())["tests"]}


@pytest.mark.gpu
def test_gpu_illegal_address_isolated(gpu_grades):
    out, _ = gpu_grades
    t = _tests(out, "illegal_address")["vector_add:correctness"]
    assert t["score"] == 0 and "CUDA" in t["output"].upper()
    # the submission graded right after it in the same batch is unaffected
    assert float(gradebook(out)["cached_output"]["vector_add"]) >= 2


@pytest.mark.gpu
def test_gpu_hung_kernel_times_out(gpu_grades):
    out, _ = gpu_grades
    assert "did not finish" in _tests(out, "hung_kernel")["vector_add:correctness"]["output"]


@pytest.mark.gpu
@pytest.mark.parametrize("sub", ["side_stream", "side_stream_once", "cached_output", "timer_patch"])
def test_gpu_cheats_are_caught(gpu_grades, sub):
    """The judge times and checks in its own process: work on another stream is counted (or its
    unfinished outputs fail the check), replayed outputs fail the check on fresh inputs, and
    clocks patched in the submission's process are not the judge's."""
    out, _ = gpu_grades
    speed = _tests(out, sub)["vector_add:speed"]
    ratio = speed["extra_data"]["timing"].get("ratio")
    flags = speed["extra_data"]["flags"]
    if sub == "cached_output":
        assert speed["score"] == 0 and any("cached or replayed" in f for f in flags), speed
    elif sub == "side_stream":  # its three launches are timed in full, or caught unfinished
        assert speed["score"] == 0 or ratio < 0.6, speed
    elif sub == "side_stream_once":  # the reference's work on another stream: no faster, or caught
        assert speed["score"] == 0 or ratio < 1.15, speed
    else:  # patched clocks in its own process change nothing
        assert 0.8 < ratio < 1.2, speed


@pytest.mark.gpu
def test_gpu_input_mutation_caught(gpu_grades):
    out, _ = gpu_grades
    assert "modified" in _tests(out, "mutates_input")["vector_add:correctness"]["output"]


@pytest.mark.gpu
def test_gpu_out_of_bounds_write_caught_without_sanitizer(gpu_grades):
    out, _ = gpu_grades
    t = _tests(out, "no_bounds_check")["vector_add:correctness"]
    assert t["score"] == 0 and "past the end of 'out'" in t["output"], t


@pytest.mark.gpu
def test_gpu_speed_ratio_is_repeatable(tmp_path):
    ratios = []
    for i in range(5):
        autograder("grade", "--lab", "first_kernel", "--exercise", "vector_add", "--out", str(tmp_path / str(i)),
                   str(BANK / "correct.py"))
        t = _tests(tmp_path / str(i), "correct")["vector_add:speed"]
        ratios.append(t["extra_data"]["timing"]["ratio"])
    print("speed ratios of 5 gradings:", ratios)
    assert max(ratios) / min(ratios) - 1 <= 0.06, ratios  # every ratio within +-3% of the middle


@pytest.mark.gpu
def test_gpu_sanitizer_finds_missing_bounds_check(tmp_path):
    autograder("grade", "--lab", "first_kernel", "--exercise", "vector_add", "--out", str(tmp_path),
               "--sanitize", "memcheck",
               str(BANK / "no_bounds_check.py"), str(BANK / "correct.py"))
    assert "compute-sanitizer" in _tests(tmp_path, "no_bounds_check")["vector_add:correctness"]["output"]
    assert _tests(tmp_path, "correct")["vector_add:correctness"]["score"] == 2


@pytest.mark.gpu
def test_gpu_synccheck_finds_a_warp_barrier_whose_mask_leaves_out_its_callers(tmp_path):
    # A cuda.syncthreads() in a divergent branch is not among them: from compute capability 7.0
    # a block barrier counts threads, whichever barrier call they reach, so neither the GPU nor
    # synccheck notices it. The simulator's check catches that one (tests/submissions/reduction).
    autograder("grade", "--lab", "reduction", "--exercise", "block_sums", "--out", str(tmp_path), "--timeout", "300",
               "--sanitize", "synccheck", str(REDUCTION_GPU_BANK / "warp_mask_too_narrow.py"),
               str(BARRIER_BANK / "correct.py"))
    found = _tests(tmp_path, "warp_mask_too_narrow")["block_sums:correctness"]
    assert found["score"] == 0 and "compute-sanitizer (synccheck)" in found["output"], found
    assert _tests(tmp_path, "correct")["block_sums:correctness"]["score"] == 2


@pytest.mark.gpu
@pytest.mark.parametrize("sub, exercise, words", [
    ("leaky", "copy_via_runtime", "leaked"),
    ("left_pinned", "upload", "page-locked"),
])
def test_gpu_memory_faults_fail_the_case(tmp_path, sub, exercise, words):
    autograder("grade", "--lab", "memory", "--exercise", exercise, "--out", str(tmp_path),
               str(MEMORY_GPU_BANK / f"{sub}.py"))
    t = _tests(tmp_path, sub)[f"{exercise}:correctness"]
    assert t["score"] == 0 and words in t["output"], t


CHECK_A_SYNCHRONISING_CALL = """
import sys
from numba import cuda
from autograder.check import checker

def upload(host, out):  # the memory lab's answer: unpinning at the end synchronises the device
    with cuda.pinned(host):
        out.copy_to_device(host)

result = checker("memory")(upload)
sys.exit(0 if result.passed and result.speed is not None and result.speed.ratio is not None else 1)
"""


@pytest.mark.gpu
def test_gpu_check_times_a_call_that_synchronises_the_device():
    """check() runs the learner's calls in the notebook's own thread: a call that waits for the
    whole device (cudaHostUnregister here) must not wait for a judge's stream that waits for it."""
    r = subprocess.run([sys.executable, "-c", CHECK_A_SYNCHRONISING_CALL], capture_output=True, text=True,
                       timeout=300, cwd=str(ROOT), env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


def _longest(kernels: list[dict]) -> dict:
    return max(kernels, key=lambda k: k["duration_us"])


@pytest.mark.gpu  # Nsight Compute measures real kernels
def test_check_profile_on_a_gpu_measures_yours_and_the_reference_with_nsight(capsys, tmp_path, monkeypatch):
    """On a GPU, check(fn, profile=True) runs the learner's function (sent as source) and the
    reference at the timing size under Nsight Compute: the naive transpose's loads touch many
    more sectors per request than the reference's, the diagnosis says they are strided, the
    report file is kept, and profiling adds at most 30 s to the check."""
    from autograder import checker

    monkeypatch.chdir(tmp_path)
    kernels = {}
    exec(compile(NAIVE_TRANSPOSE, str(tmp_path / "naive.py"), "exec"), kernels)
    (tmp_path / "naive.py").write_text(NAIVE_TRANSPOSE)  # inspect.getsource reads the file
    check = checker("memory_access")
    t0 = time.monotonic()
    check(kernels["transpose_tiled"], speed=True)
    plain = time.monotonic() - t0
    t0 = time.monotonic()
    result = check(kernels["transpose_tiled"], speed=True, profile=True)
    profiled = time.monotonic() - t0
    printed = capsys.readouterr().out
    prof = result.profile
    assert prof is not None and prof.get("tool") == "nsight", printed
    yours, ref = _longest(prof["yours"]), _longest(prof["reference"])
    assert yours["load_sectors_per_request"] + yours["store_sectors_per_request"] > \
        2 * (ref["load_sectors_per_request"] + ref["store_sectors_per_request"]), printed
    assert any("stride" in f for f in prof["findings"]), printed
    assert (tmp_path / "profiles" / "transpose_tiled.ncu-rep").is_file()
    assert "yours" in printed and "reference" in printed and "sectors/request" in printed
    print(f"check without profile {plain:.1f} s, with profile {profiled:.1f} s", file=sys.stderr)
    assert profiled - plain <= 30, (plain, profiled)


@pytest.mark.gpu  # Nsight Compute measures real kernels
def test_grade_profile_on_a_gpu_runs_nsight_in_the_sandbox_and_changes_no_grade(tmp_path):
    """`grade --profile` on a GPU: the learner's kernels are measured by Nsight Compute inside its
    sandbox, the reference's in its own runner; the table goes into the feedback, the figures
    into extra_data, and the grade is the one a run without --profile gives."""
    sub = tmp_path / "naive.py"
    sub.write_text(NAIVE_TRANSPOSE)
    books = {}
    for flag in ([], ["--profile"]):
        out = tmp_path / f"out{len(flag)}"
        autograder("grade", "--lab", "memory_access", "--exercise", "transpose_tiled", "--seed", SEED,
                   "--out", str(out), *flag, str(sub))
        books[bool(flag)] = gradebook(out)["naive"]
        test = json.loads((out / "naive" / "results.json").read_text())["tests"][0]
        assert ("profile" in test["extra_data"]) == bool(flag)
    assert books[True]["transpose_tiled"] == books[False]["transpose_tiled"]
    profile = test["extra_data"]["profile"]
    assert profile.get("tool") == "nsight", profile
    yours, ref = _longest(profile["yours"]), _longest(profile["reference"])
    assert yours["load_sectors_per_request"] + yours["store_sectors_per_request"] > \
        2 * (ref["load_sectors_per_request"] + ref["store_sectors_per_request"]), profile
    assert any("stride" in f for f in profile["findings"]), profile
    assert "sectors/request" in test["output"]


def test_the_guards_judge_a_frame_by_the_interpreters_own_package_folders(monkeypatch):
    """Which frames act for their caller: a package is known by its folder under this interpreter's own
    site-packages. A virtual environment at /opt/torch/.venv must not make Triton's frames look like
    torch's (the guard would take Triton's own torch calls, its autotuner's zero_, for the learner's);
    a folder that only calls itself site-packages (one a submission made under /tmp) holds no trusted
    package; and any package but the labs' own libraries acts for its caller (a template engine
    cannot make a forbidden call for the learner)."""
    from autograder import runner

    venv = "/opt/torch/.venv/lib/python3.12/site-packages"
    monkeypatch.setattr(runner, "_SITE_ROOTS", (venv + "/", "/usr/lib/python3/dist-packages/"))
    see = runner._see_through
    assert see(f"{venv}/torch/_tensor.py", ("torch", "numpy"))
    assert see("/usr/lib/python3/dist-packages/numpy/lib/_stride_tricks_impl.py", ("torch", "numpy"))
    assert not see(f"{venv}/triton/testing.py", ("torch", "numpy"))
    assert not see(f"{venv}/triton/testing.py")
    assert not see(f"{venv}/_numba_cuda_redirector.py")  # an import hook, for the import system
    assert see(f"{venv}/jinja2/environment.py") and see(f"{venv}/sympy/core/sympify.py")
    assert see("/tmp/x/site-packages/numpy/evil.py") and see("<template>") and see("<string>")
    assert not see(runner.__file__)  # the grader's own


def test_retired_runner_output_is_read_after_it_closed():
    """A runner's printed output reaches the feedback whole: its log is read once close() has
    waited for the pipe's last bytes (read before, a busy machine lost what a submission printed)."""
    from autograder.judge import Judge

    class Log:
        value = ""

        def text(self):
            return self.value

    class Proc:
        log = Log()

        def close(self):
            self.log.value = "ATTACK payload ran"  # what the pipe still held when the runner was retired
            return True

    judge = Judge.__new__(Judge)
    judge.log_tails, judge.notes = [], []
    judge._retire(Proc())
    assert judge.log_tails == ["ATTACK payload ran"] and judge.notes == []


def test_a_pool_being_drawn_is_never_drawn_again(monkeypatch):
    """A judge grades submission after submission: one that fails its cases at once (a blank
    release) ends while its exercises' pools are still being drawn, and the next submission wants
    the same pools. It waits for that draw instead of starting another (at the timing size of a
    FlashAttention lab a draw is a minute of host time; a row of blank notebooks would pile them up)."""
    import threading
    import time as _time

    from autograder import timing_inputs
    from autograder.labs import get_lab

    calls, gate = [], threading.Event()

    def slow_draw(ex, seed, index):
        calls.append((seed, index, ex.name))
        gate.wait(10)
        return timing_inputs.TimingPool([{}], {})

    monkeypatch.setattr(timing_inputs, "_draw", slow_draw)
    ex = get_lab("reduction").exercises[0]
    first, second = timing_inputs.Prefetch([(0, ex)], seed=99), timing_inputs.Prefetch([(0, ex)], seed=99)
    try:
        first.starting(0)
        first.close()  # the blank submission is done; its draw goes on
        second.starting(0)
        _time.sleep(0.2)
        gate.set()
        pool = second.take(ex, 0)
        assert calls == [(99, 0, ex.name)], calls
        assert isinstance(pool, timing_inputs.TimingPool)
    finally:
        second.close()


def test_timed_integer_inputs_change_between_calls():
    """The timing loop refreshes floating inputs before every call and copies integer ones from a
    pool of a few sets. An exercise whose inputs are all integers must name them in renew_inputs
    (with the parameter that bounds them), or a cache kept on the device answers its timed calls
    without the work (tests/submissions/attacks/diagnosis/device_cache_histogram.py)."""
    from autograder.labs import get_lab, lab_names
    from autograder.timing import _fresh_names

    seen = 0
    for lab in lab_names():
        for ex in get_lab(lab).exercises:
            if not ex.timing_case or ex.speed is None or ex.gpu_only and not ex.cases(True):
                continue
            x = ex.inputs(ex.cases(True)[-1], np.random.default_rng(0))
            arrays = {k: v for k, v in x.items() if isinstance(v, np.ndarray)}
            for name, bound in ex.renew_inputs.items():
                assert arrays[name].dtype in (np.int32, np.int64), (lab, ex.name, name)  # compiled ahead
                assert bound in ex.timing_case, (lab, ex.name, bound)
                seen += 1
            if arrays and not _fresh_names(ex, x) & set(arrays):
                assert set(arrays) <= set(ex.renew_inputs), (lab, ex.name, "integer inputs only, none renewed")
    assert seen >= 1


def test_an_exercise_that_needs_newer_hardware_names_the_need():
    import dataclasses

    ex = dataclasses.replace(get_lab("first_kernel").exercises[0], min_cc=(9, 0))
    assert "9.0" in ex.too_old((8, 9)) and "8.9" in ex.too_old((8, 9))
    assert ex.too_old((9, 0)) == "" and ex.too_old((10, 0)) == ""
    assert ex.too_old(None) == ""  # no GPU: the simulator rules apply instead
    assert get_lab("first_kernel").exercises[0].too_old((5, 0)) == ""  # no need stated, none checked


def test_library_imports_have_a_budget_of_their_own(tmp_path):
    """--timeout bounds the learner's code, not the grader's start: a runner whose interpreter takes
    longer than --timeout to start (a sitecustomize that sleeps, as a loaded machine importing torch
    would) still grades an honest answer in full."""
    slow = tmp_path / "slow"
    slow.mkdir()
    (slow / "sitecustomize.py").write_text("import time\ntime.sleep(3)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(slow), os.environ.get("PYTHONPATH", "")]))
    out = tmp_path / "out"
    autograder("grade", "--lab", "first_kernel", "--exercise", "vector_add", "--simulator", "--timeout", "2",
               "--out", str(out), str(BANK / "correct.py"), env=env)
    assert float(gradebook(out)["correct"]["vector_add"]) == 2


def test_an_allowed_array_method_may_use_what_the_learner_may_not():
    """CuPy's compiled ``fill`` calls numpy.asarray with no Python frame between: the call must count
    as CuPy's, not the learner's (an H100 refused the reduction lab's own solution for it), while the
    same function called by the learner is still refused."""
    script = textwrap.dedent('''
        import types
        import numpy
        from autograder import runner

        runner.GUARD.rules = {"deny": ["numpy.*"], "methods": []}
        runner.GUARD.exercise = "sum_squares"
        runner.install_function_guards(["numpy.*"])

        class FakeArray:  # a stand-in for cupy.ndarray: a compiled method, no frame between it and NumPy
            fill = staticmethod(numpy.asarray)
        cp = types.SimpleNamespace(ndarray=FakeArray)
        arrays = runner.guarded_cupy_class(cp)
        learner = compile("def go(a):\\n    a.fill(None)\\n    return 'filled'\\n"
                          "def direct():\\n    return numpy.asarray(0)\\n", "answer cell", "exec")
        runner.GUARD.add_code(learner)
        ns = {"numpy": numpy}
        exec(learner, ns)
        runner.GUARD.active = True
        print(ns["go"](arrays()))
        try:
            ns["direct"]()
            print("direct allowed")
        except runner.ForbiddenCall as exc:
            print("refused:", exc)
    ''')
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split("\n")
    assert lines[0] == "filled", out.stdout
    assert lines[1].startswith("refused: called numpy.asarray"), out.stdout


def test_a_correctly_rounded_subnormal_output_passes(dtype="float16"):
    """A case whose only value lies among float16's subnormals (gelu deep in its negative tail,
    1 x 1, on a GPU): the correctly rounded value passes, one two steps off fails."""
    from autograder.measure import compare
    from autograder.spec import Exercise, Out

    want = 52.25 * float(np.finfo(dtype).smallest_subnormal)
    ex = Exercise(name="tiny", title="a subnormal result", backend="numba", args=("x", "out"),
                  inputs=lambda p, rng: {"x": np.zeros(1, dtype=np.float32)},
                  outputs={"out": Out(lambda p: (1,), dtype=dtype)}, reference=lambda x: {"out": np.array([want])},
                  cases=lambda sim: [{"n": 1}], tolerance={dtype: (1e-3, 1e-4)})
    inputs = ex.inputs({"n": 1}, None)
    rounded = np.array([want], dtype=dtype)
    assert float(rounded[0]) != want  # the type cannot hold it: the best answer is off by a quarter step
    assert compare(ex, {"n": 1}, inputs, {"out": rounded}, inputs).passed
    off = np.array([want + 2 * float(np.finfo(dtype).smallest_subnormal)], dtype=dtype)
    assert not compare(ex, {"n": 1}, inputs, {"out": off}, inputs).passed
