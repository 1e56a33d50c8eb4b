"""Grading a class from the command line: several workers on the CPU in simulator mode, and an
output folder given relative to any working folder."""
from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autograder.cli import _worker_gpus
from autograder.host_parallel import cores
from test_autograder import gradebook

ROOT = Path(__file__).resolve().parent.parent
BANK = ROOT / "tests" / "submissions" / "first_kernel"
# Honest and failing answers that all start a runner (a statically refused one would cost nothing).
KINDS = ("correct", "wrong_index", "off_by_one", "no_bounds_check")


def grade(*args, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """`autograder grade` of vector_add in the simulator, with one seed, as an instructor runs it."""
    cmd = [sys.executable, "-m", "autograder", "grade", "--lab", "first_kernel", "--simulator", "--seed", "7",
           "--exercise", "vector_add", *map(str, args)]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
    assert r.returncode == 0, r.stderr
    return r


@pytest.mark.whole_machine  # a timing: alone on the machine, after the parallel tests
@pytest.mark.skipif(cores() < 2, reason="two workers need two cores")
def test_two_workers_grade_a_class_in_about_0_6_of_the_time_with_the_same_grades(tmp_path):
    subs = tmp_path / "class"
    subs.mkdir()
    for i in range(48 // len(KINDS)):
        for kind in KINDS:
            shutil.copy(BANK / f"{kind}.py", subs / f"{kind}_{i:02d}.py")
    seconds, said = {}, {}
    for workers in (1, 2):
        started = time.monotonic()
        said[workers] = grade("--workers", workers, "--out", tmp_path / f"out{workers}", subs).stderr
        seconds[workers] = time.monotonic() - started
    print(f"48 submissions: {seconds[1]:.1f} s on one worker, {seconds[2]:.1f} s on two")
    one, two = (tmp_path / f"out{w}" / "grades.csv" for w in (1, 2))
    assert two.read_text() == one.read_text()
    assert sorted(row["vector_add"] for row in gradebook(tmp_path / "out1").values()) == ["0"] * 36 + ["2"] * 12
    assert "48 submission(s) on 2 workers" in said[2] and "48/48" in said[2]
    assert not list((tmp_path / "out2").glob(".tmp-judge-*"))  # each worker's temporary folder is gone
    # Two workers on two cores: 0.50 to 0.60 of one worker's time here (median 0.54 over seven runs), once
    # runners start NumPy's OpenBLAS on one thread (its helper thread spun on the second core). One worker's
    # time varies most (29 to 37 s): it waits on every reply between judge and runner. The bound leaves
    # that noise a little room and still catches workers that wait for each other (near 1.0).
    assert seconds[2] <= 0.62 * seconds[1], seconds


def test_a_relative_out_from_another_working_folder(tmp_path):
    """The judges run in the course's folder: every path they get must not depend on ours."""
    (tmp_path / "subs").mkdir()
    for kind in ("correct", "wrong_index"):
        shutil.copy(BANK / f"{kind}.py", tmp_path / "subs" / f"{kind}.py")
    grade("--out", "graded", "subs", cwd=tmp_path)
    rows = gradebook(tmp_path / "graded")
    assert {name: row["vector_add"] for name, row in rows.items()} == {"correct": "2", "wrong_index": "0"}
    assert (tmp_path / "graded" / "correct" / "judge.log").read_text().strip()


@pytest.mark.parametrize("gpus, workers, simulator, refused", [
    (None, 2, False, "simulator mode only"),  # side by side on one GPU, timings would suffer
    ("0,1", 2, True, "give --workers N alone"),
    (None, 0, True, "1 or more"),
    (None, 10_000, True, "core(s)"),
])
def test_workers_refused_where_they_would_cost_grades(gpus, workers, simulator, refused):
    with pytest.raises(SystemExit, match=refused.replace("(", r"\(").replace(")", r"\)")):
        _worker_gpus(gpus, workers, simulator)


def test_workers_and_gpus_give_one_worker_each():
    assert _worker_gpus(None, 2, True) == [None, None]
    assert _worker_gpus("0,1", None, False) == ["0", "1"]
    assert _worker_gpus(None, None, True) == [None]


def test_slurm_asks_for_a_cpu_per_worker(capsys, tmp_path):
    from autograder.cli import main

    main(["slurm", "--lab", "first_kernel", "--out", str(tmp_path / "out"), "--shards", "2", "--gpus-per-task", "0",
          "--dry-run", str(BANK), "--", "--workers", "3"])
    sbatch = capsys.readouterr().out
    assert "--cpus-per-task=3" in sbatch and sbatch.rstrip().endswith("--workers 3 --simulator"), sbatch
    with pytest.raises(SystemExit, match="each worker needs a CPU"):
        main(["slurm", "--lab", "first_kernel", "--out", str(tmp_path / "out"), "--shards", "2", "--gpus-per-task",
              "0", "--cpus-per-task", "2", "--dry-run", str(BANK), "--", "--workers", "3"])
