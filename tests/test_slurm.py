"""Grading on Slurm: the array script's shards merge to the single-process gradebook, and merge
refuses what is missing. Without Slurm the script runs under bash with the SLURM_* variables
Slurm sets; test_real_slurm runs it through sbatch where a cluster answers
(autograder/slurm/local-cluster.sh starts one on this machine)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from test_autograder import autograder, gradebook

ROOT = Path(__file__).resolve().parent.parent
BANK = ROOT / "tests" / "submissions" / "first_kernel"
SCRIPT = ROOT / "autograder" / "slurm" / "grade_array.sbatch"
SUBMISSIONS = ("correct", "off_by_one", "syntax_error", "wrong_index")
SHARDS = 3
GRADE = ["--simulator", "--seed", "12345", "--exercise", "vector_add", "--timeout", "20"]
VENV = sys.prefix if sys.prefix != sys.base_prefix else None


def scores(out: Path) -> dict:
    return {name: [(t["name"], t["score"], t["output"]) for t in json.loads((out / name / "results.json").read_text())["tests"]]
            for name in gradebook(out)}


def task_env(index: int | None, low: int, high: int, count: int, **extra) -> dict[str, str]:
    """A task's environment as Slurm sets it for --array=low-high (count tasks), without the
    grader on PATH: the script must activate the environment itself."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "AUTOGRADER_VENV")}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep)
                                  if not (Path(p) / "autograder").exists()) or "/usr/bin:/bin"
    if VENV:
        env["AUTOGRADER_VENV"] = VENV
    if index is not None:
        env.update(SLURM_ARRAY_JOB_ID="77", SLURM_ARRAY_TASK_ID=str(index), SLURM_ARRAY_TASK_COUNT=str(count),
                   SLURM_ARRAY_TASK_MIN=str(low), SLURM_ARRAY_TASK_MAX=str(high))
    env.update(extra)
    return env


def run_script(env: dict, subs: Path, out: Path, *grade: str, wait: bool = True):
    cmd = ["bash", str(SCRIPT), "first_kernel", str(subs), str(out), *grade]
    if wait:
        return subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT, timeout=300)
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The same submissions graded once by one process and once as the array's three tasks,
    all at the same time, as a cluster would run them."""
    if VENV is None:
        pytest.skip("needs the course's virtual environment (the script activates it)")
    tmp = tmp_path_factory.mktemp("slurm")
    subs = tmp / "submissions"
    subs.mkdir()
    for name in SUBMISSIONS:
        shutil.copy(BANK / f"{name}.py", subs)
    single = subprocess.Popen([sys.executable, "-m", "autograder", "grade", "--lab", "first_kernel", "--quiet",
                               "--out", str(tmp / "single"), *GRADE, str(subs)], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tasks = [run_script(task_env(i, 0, SHARDS - 1, SHARDS), subs, tmp / "out", *GRADE, wait=False)
             for i in range(SHARDS)]
    logs = [p.communicate(timeout=300)[0] for p in tasks]
    single_log = single.communicate(timeout=300)[0]
    assert single.returncode == 0, single_log
    for i, (p, log) in enumerate(zip(tasks, logs)):
        assert p.returncode == 0, f"task {i}:\n{log}"
    return tmp, subs, logs


def test_array_tasks_merge_to_the_single_run(graded):
    tmp, _, logs = graded
    out = tmp / "out"
    for i, log in enumerate(logs):
        assert f"shard {i}/{SHARDS} of" in log and str(Path(VENV) / "bin" / "autograder") in log, log
    per_shard = [set(gradebook(out / f"shard-{i}")) for i in range(SHARDS)]
    assert sum(map(len, per_shard)) == len(SUBMISSIONS) and set().union(*per_shard) == set(SUBMISSIONS)
    assert sum(1 for p in per_shard if p) >= 2, "the shards split the submissions"
    r = autograder("merge", "--lab", "first_kernel", "--out", out, *(out / f"shard-{i}" for i in range(SHARDS)))
    assert r.stdout.strip() == str(out / "grades.csv") and not r.stderr
    single = gradebook(tmp / "single")
    assert set(single) == set(SUBMISSIONS) and float(single["correct"]["total"]) > 0  # a comparison that can differ
    assert gradebook(out) == single
    assert scores(out) == scores(tmp / "single")


@pytest.mark.parametrize("array, count, words", [
    ((1, 3), 3, "the array must be 0-2 for its 3 tasks"),   # --array=1-3: shard 0 would go ungraded
    ((0, 4), 3, "it is 0-4"),                                 # --array=0-4:2: shards 1 and 3 of 0..4
    (None, 0, "not a job array task"),                        # sbatch without --array
])
def test_script_refuses_an_array_that_is_not_0_to_n_minus_1(tmp_path, array, count, words):
    env = task_env(None, 0, 0, 0) if array is None else task_env(array[0], *array, count)
    r = run_script(env, BANK, tmp_path / "out", "--simulator")
    assert r.returncode != 0 and words in r.stderr, r.stderr
    assert not (tmp_path / "out").exists(), "a refused task grades nothing"


@pytest.mark.parametrize("extra, words", [
    ({"AUTOGRADER_VENV": "/nonexistent/venv"}, "no virtual environment at /nonexistent/venv"),
    ({"AUTOGRADER_VENV": ""}, "no autograder command"),  # none named and none on PATH: say how to give one
])
def test_script_says_when_it_has_no_grader(tmp_path, extra, words):
    r = run_script(task_env(0, 0, 0, 1, **extra), BANK, tmp_path / "out", "--simulator")
    assert r.returncode != 0 and words in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()


def test_script_keeps_lab_out_and_shard_to_itself(tmp_path):
    r = run_script(task_env(0, 0, 1, 2), BANK, tmp_path / "out", "--shard", "0/1")
    assert r.returncode != 0 and "--shard is the script's to set" in r.stderr, r.stderr


def shard_copies(graded, tmp_path) -> list[Path]:
    """Copies of the graded shards, for a test to damage."""
    src = graded[0] / "out"
    dirs = []
    for i in range(SHARDS):
        shutil.copytree(src / f"shard-{i}", tmp_path / f"shard-{i}")
        dirs.append(tmp_path / f"shard-{i}")
    return dirs


def edit_record(folder: Path, change) -> None:
    path = folder / ".autograder.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def refused(shards, tmp_path, *words, lab="first_kernel", partial=False):
    out = tmp_path / "merged"
    r = autograder("merge", "--lab", lab, "--out", out, *(["--allow-partial"] if partial else []), *shards, check=False)
    assert r.returncode != 0, r.stdout
    assert "merge refused, nothing written" in r.stderr, r.stderr
    for w in words:
        assert w in r.stderr, r.stderr
    assert not out.exists(), "a refused merge writes nothing"
    return r


def test_merge_refuses_a_missing_shard(graded, tmp_path):
    s = shard_copies(graded, tmp_path)
    refused([s[0], s[2]], tmp_path, "shard 1 of 0..2 missing")
    shutil.rmtree(s[1])
    refused(s, tmp_path, f"{s[1]}: no such folder", "shard 1 of 0..2 missing")
    s[1].mkdir()  # what autograder slurm leaves when the task never ran: the folder for its log
    refused(s, tmp_path, f"{s[1]}: no grader record", "shard 1 of 0..2 missing")


@pytest.mark.parametrize("damage", ["killed", "truncated"])
def test_merge_refuses_an_interrupted_shard_and_allow_partial_lists_it(graded, tmp_path, damage):
    s = shard_copies(graded, tmp_path)
    i = max(range(SHARDS), key=lambda k: len(gradebook(s[k])))
    names = sorted(gradebook(s[i]))
    victim = names[0]
    if damage == "killed":  # killed while grading it: no result, no record entry
        shutil.rmtree(s[i] / victim)
        edit_record(s[i], lambda d: d["submissions"].pop(victim))
    else:  # a results.json that is not a valid result
        (s[i] / victim / "results.json").write_text('{"score": 9')
    refused(s, tmp_path, f"{s[i]} (shard {i}/3): 1 of {len(names)} submissions not graded: {victim}")

    out = tmp_path / "merged"
    r = autograder("merge", "--lab", "first_kernel", "--allow-partial", "--out", out, *s)
    assert "partial merge" in r.stderr and victim in r.stderr, r.stderr
    single = gradebook(graded[0] / "single")
    assert gradebook(out) == {k: v for k, v in single.items() if k != victim}


def test_merge_refuses_a_shard_given_twice(graded, tmp_path):
    s = shard_copies(graded, tmp_path)
    shutil.copytree(s[0], tmp_path / "again")
    refused([*s, tmp_path / "again"], tmp_path, "shard 0/3 given 2 times")
    refused([*s, tmp_path / "again"], tmp_path, "shard 0/3 given 2 times", partial=True)  # not even partially


def test_merge_refuses_shards_of_another_lab_or_run(graded, tmp_path):
    s = shard_copies(graded, tmp_path)
    refused(s, tmp_path, f"{s[0]}: graded for lab 'first_kernel', not 'reduction'", lab="reduction")
    edit_record(s[1], lambda d: d.update(lab="reduction"))
    refused(s, tmp_path, f"{s[1]}: graded for lab 'reduction', not 'first_kernel'")
    shutil.rmtree(s[1])
    shutil.copytree(graded[0] / "out" / "shard-1", s[1])
    edit_record(s[2], lambda d: d["shard"].update(count=4))  # a shard of a 4-shard run
    refused(s, tmp_path, "different shard counts", f"{s[2]} is 2/4")
    refused([graded[0] / "single"], tmp_path, "not a shard")


def test_merge_refuses_to_write_over_a_shard(graded, tmp_path):
    s = shard_copies(graded, tmp_path)
    r = autograder("merge", "--lab", "first_kernel", "--out", s[0], *s, check=False)
    assert r.returncode != 0 and "is one of the shards" in r.stderr, r.stderr
    # Merging into the shards' parent (as autograder slurm does), a submission named like a
    # shard folder would replace that shard.
    i = next(k for k in range(SHARDS) if gradebook(s[k]))
    victim = sorted(gradebook(s[i]))[0]
    other = s[(i + 1) % SHARDS].name
    (s[i] / victim).rename(s[i] / other)
    edit_record(s[i], lambda d: (d["submissions"].__setitem__(other, d["submissions"].pop(victim)),
                                 d["shard"].__setitem__("names", [other if n == victim else n for n in d["shard"]["names"]])))
    r = autograder("merge", "--lab", "first_kernel", "--out", tmp_path, *s, check=False)
    assert r.returncode != 0 and f"submission {other} would overwrite the shard folder" in r.stderr, r.stderr
    assert not (tmp_path / "grades.csv").exists()


def fake_tools(tmp_path, gres: str, cpus: str) -> dict:
    """A sinfo that reports nodes with this gres and CPU count, for autograder slurm to read."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sinfo = bin_dir / "sinfo"
    sinfo.write_text(f'#!/bin/sh\ncase "$*" in *%G*) echo "{gres}";; *%c*) echo "{cpus}";; esac\n')
    sinfo.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


@pytest.mark.parametrize("gres, cpus, flags, want, unwanted", [
    ("(null)", "1", [], ["--cpus-per-task=1", "--simulator"], ["--gres"]),           # CPU-only, 1-CPU nodes
    ("gpu:4(S:0-1)", "64", [], ["--gres=gpu:1", "--cpus-per-task=2"], ["--simulator"]),
    ("gpu:4", "64", ["--gpus-per-task", "2", "--cpus-per-task", "8"], ["--gres=gpu:2", "--cpus-per-task=8",
                                                                       "--gpus 0,1"], ["--simulator"]),
    ("gpu:4", "64", ["--gpus-per-task", "0"], ["--simulator"], ["--gres"]),
])
def test_slurm_command_asks_for_what_the_cluster_has(tmp_path, gres, cpus, flags, want, unwanted):
    env = fake_tools(tmp_path, gres, cpus)
    r = autograder("slurm", "--lab", "first_kernel", "--out", tmp_path / "out", "--shards", "4", *flags,
                   "--dry-run", BANK, "--", "--seed", "3", env=env)
    line = r.stdout
    for w in ["sbatch", "--array=0-3", f"--export=ALL,AUTOGRADER_VENV={VENV}" if VENV else "--export=ALL",
              f"--output={tmp_path / 'out'}/shard-%a/slurm-%A_%a.log", str(SCRIPT), "--seed 3", *want]:
        assert w in line, (w, line)
    for w in unwanted:
        assert w not in line, (w, line)
    assert not (tmp_path / "out").exists(), "a dry run makes nothing"


def test_slurm_command_refuses_what_would_not_merge(tmp_path):
    (tmp_path / "out" / "shard-5").mkdir(parents=True)  # left by an earlier run of 6 shards
    r = autograder("slurm", "--lab", "first_kernel", "--out", tmp_path / "out", "--shards", "4",
                   "--gpus-per-task", "0", "--dry-run", BANK, check=False)
    assert r.returncode != 0 and "shard-5 of an earlier run" in r.stderr, r.stderr
    r = autograder("slurm", "--lab", "first_kernel", "--out", tmp_path / "o", "--shards", "2",
                   "--gpus-per-task", "0", "--dry-run", BANK, "--", "--shard", "0/2", check=False)
    assert r.returncode != 0 and "the job's to set" in r.stderr, r.stderr
    r = autograder("slurm", "--lab", "first_kernel", "--out", tmp_path / "o", "--shards", "2",
                   "--gpus-per-task", "0", "--dry-run", BANK, "--", "--no-such-option", check=False)
    assert r.returncode != 0 and "--no-such-option" in r.stderr, r.stderr


def _cluster() -> str | None:
    """Why no real Slurm test can run here, or None."""
    if not shutil.which("sbatch"):
        return "no sbatch (autograder/slurm/local-cluster.sh installs and starts a one-node cluster)"
    try:
        ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=30)
        nodes = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"Slurm does not answer: {exc}"
    if ping.returncode != 0 or "UP" not in ping.stdout:
        said = (ping.stdout + ping.stderr).strip().splitlines()
        return f"no slurmctld answers (scontrol ping: {said[0] if said else ping.returncode})"
    if not any(s.startswith(("idle", "mix")) for s in nodes.stdout.split()):
        return f"no node takes jobs (sinfo states: {nodes.stdout.split()})"
    return None


NO_CLUSTER = _cluster()


@pytest.mark.skipif(NO_CLUSTER is not None, reason=str(NO_CLUSTER))
def test_real_slurm(graded, tmp_path):
    """sbatch runs the array; its shards merge to the single-process gradebook; --array=1-3 fails."""
    _, subs, _ = graded
    out = tmp_path / "out"
    r = autograder("slurm", "--lab", "first_kernel", "--out", out, "--shards", SHARDS, "--gpus-per-task", "0",
                   "--cpus-per-task", "1", "--wait", subs, "--", *GRADE, timeout=600)
    assert "Merge: autograder merge" in r.stdout, r.stdout + r.stderr
    for i in range(SHARDS):
        log = next((out / f"shard-{i}").glob("slurm-*.log")).read_text()
        assert f"shard {i}/{SHARDS} of" in log, log
    autograder("merge", "--lab", "first_kernel", "--out", out, *(out / f"shard-{i}" for i in range(SHARDS)))
    assert gradebook(out) == gradebook(graded[0] / "single")
    assert scores(out) == scores(graded[0] / "single")

    bad = subprocess.run(["sbatch", "--wait", "--array=1-3", f"--output={tmp_path}/bad-%a.log",
                          f"--export=ALL,AUTOGRADER_VENV={VENV}", str(SCRIPT), "first_kernel", str(subs),
                          str(tmp_path / "bad"), *GRADE], capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0
    assert "the array must be 0-2" in (tmp_path / "bad-1.log").read_text()
    assert not (tmp_path / "bad").exists()
