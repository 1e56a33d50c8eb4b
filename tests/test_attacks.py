"""Hostile submissions (tests/submissions/attacks) and the outcome a secure grader must give them.

Every attack is graded through the command line, as an instructor would run it. The bank's
expected.json says, per attack, the most (and for a few the least) its exercise may score and in
which mode it is graded: "cpu" attacks run with --simulator (everywhere), "gpu" attacks on a GPU
(skipped in simulator mode by the root conftest).

- forged / library / speed attacks are graded a few runs per lab; each must score at most its
  max_points (0 for most; the correctness points alone for speed attacks). Where expected.json gives
  "words", the feedback must contain them: for the attacks written to pass the static check (no
  getattr, exec, `import os` ...), the words are the run-time guard's or the sandbox's, so that each
  defence is shown to hold on its own. "printed" is a phrase the attack's own report (the printed tail)
  must contain: its payload ran, to its end. "lines" (races and out-of-bounds accesses the simulator
  lets through): the feedback must name at least one of these lines of the attack's file, as "line N".
- machine attacks run with canaries: a fake HOME holding secrets, a classmate's file beside the
  attacks, another student's results.json already in the --out folder, a secret in the grader's own
  environment, a listening socket on 127.0.0.1 (its port in HOME and in a well-known file in /tmp).
  Afterwards nothing may have leaked into the --out folder, no canary may have changed, no results.json
  of nobody may be there, no daemon may write within ~5 s of the end nor be alive then, nothing may have
  connected, no file may be left in the real /tmp or /dev/shm, and the gradebook lists exactly the
  graded submissions. They run twice: as answers to a kernel exercise (those that `import os` are
  refused by the static check; those written with pathlib, http.client, asyncio ... run), and the
  os-level ones ("policy_run") as answers to the batching lab's policy exercise, where the static
  check allows every construct, so that the sandbox alone stands between them and the canaries.
- abort attacks (malformed replies, a reply followed by a reset connection, hostile notebooks and
  file names, a non-numeric results.json planted in the --out folder, a reply dripped byte by byte,
  a flood of reply bytes): `autograder grade` exits 0,
  every submission is in grades.csv, nothing is written outside the --out folder, the run stays
  within a few times --timeout and the grader's own memory stays bounded.

ATTACK_GRADER_ROOT=/path/to/checkout grades with another checkout's autograder (e.g. an export of an
older commit), the bank staying this one.
"""
from __future__ import annotations

import csv
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

import container  # noqa: E402 - tests/ is on the path (the root conftest)

ROOT = Path(__file__).resolve().parent.parent
BANK = ROOT / "tests" / "submissions" / "attacks"
HONEST = ROOT / "tests" / "submissions" / "first_kernel" / "correct.py"
EXPECTED = {k: v for k, v in json.loads((BANK / "expected.json").read_text()).items() if not k.startswith("_")}
GRADER_ROOT = Path(os.environ.get("ATTACK_GRADER_ROOT", ROOT)).resolve()
TIMEOUT = 20  # --timeout of most runs, seconds per exercise
TAG_VAR = "GPU_COURSE_ATTACK_TAG"  # marks every process a run starts, to find and end strays
MARKER = "DAEMON_WAS_HERE"
DAEMON_WAIT_S = 5.0


def attack_file(key: str) -> Path:
    lab, name = key.split("/", 1)
    for suffix in (".py", ".ipynb"):
        if (BANK / lab / (name + suffix)).exists():
            return BANK / lab / (name + suffix)
    raise FileNotFoundError(key)


def keys(cls: set[str], mode: str, lab: str | None = None) -> list[str]:
    return sorted(k for k, v in EXPECTED.items()
                  if v["class"] in cls and mode in v["modes"] and (lab is None or k.startswith(lab + "/")))


# --------------------------------------------------------------------------- running the grader
@dataclass
class Run:
    out: Path
    rc: int
    seconds: float
    maxrss_gb: float  # peak resident memory of the grader or any process it waited for
    stdout: str
    stderr: str
    subs: list[Path]

    def explain(self) -> str:
        return f"rc={self.rc} after {self.seconds:.1f} s\n--- stdout\n{self.stdout[-2000:]}\n--- stderr\n{self.stderr[-3000:]}"


def _ppid_map() -> dict[int, int]:
    parents = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    parents[int(d)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    return parents


def _descendants(pid: int) -> list[int]:
    parents, found, todo = _ppid_map(), [], [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parents.items() if pp == p]
        found += kids
        todo += kids
    return found


def _tagged(tag: str) -> list[int]:
    """Processes (of this user) whose environment carries this run's tag: daemons included."""
    needle = f"{TAG_VAR}={tag}".encode()
    found = []
    for d in os.listdir("/proc"):
        if d.isdigit() and int(d) != os.getpid():
            try:
                with open(f"/proc/{d}/environ", "rb") as f:
                    if needle in f.read():
                        found.append(int(d))
            except OSError:
                continue
    return found


def _kill(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def end_strays(tag: str) -> None:
    """End every process left from a run (by pid, found by its tag)."""
    _kill(_tagged(tag))


def grade(lab: str, subs: list[Path], out: Path, *extra: str, env: dict | None = None, limit_s: float = 600,
          tag: str | None = None, wrap=None) -> Run:
    """`python -m autograder grade` on these files; killed (with every process it started) after limit_s.
    ``wrap``: turns the command line into the one that runs (a Docker-like container's)."""
    tag = tag or uuid.uuid4().hex
    full_env = dict(os.environ, **(env or {}))
    full_env[TAG_VAR] = tag
    if GRADER_ROOT != ROOT:
        full_env["PYTHONPATH"] = str(GRADER_ROOT)
    logs = out.parent / f".{out.name}-grader-logs"
    logs.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "autograder", "grade", "--lab", lab, "--out", str(out), *extra, *map(str, subs)]
    if wrap is not None:
        cmd = wrap(cmd)
    tmp_before = set(os.listdir("/tmp"))
    started = time.monotonic()
    with open(logs / "stdout", "w") as so, open(logs / "stderr", "w") as se:
        proc = subprocess.Popen(cmd, cwd=GRADER_ROOT, env=full_env, stdout=so, stderr=se, stdin=subprocess.DEVNULL)
        status = rusage = None
        try:
            while status is None:
                pid, st, ru = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    status, rusage = st, ru
                elif time.monotonic() - started > limit_s:
                    break
                else:
                    time.sleep(0.05)
        finally:
            if status is None:  # hung, or the test was interrupted: end the grader and all it started
                _kill(_descendants(proc.pid) + _tagged(tag))
                _kill([proc.pid])
                _, status, rusage = os.wait4(proc.pid, 0)
                for name in set(os.listdir("/tmp")) - tmp_before:  # the killed grader's working folders
                    if name.startswith("autograder-"):
                        shutil.rmtree(Path("/tmp") / name, ignore_errors=True)
    proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.monotonic() - started
    return Run(out, proc.returncode, seconds, rusage.ru_maxrss / 2**20, (logs / "stdout").read_text(errors="replace"),
               (logs / "stderr").read_text(errors="replace"), list(subs))


def results(out: Path) -> dict[str, tuple[str, dict]]:
    """Submission file name -> (its folder in the --out folder, its results.json)."""
    found = {}
    for path in sorted(out.glob("*/results.json")):
        try:
            res = json.loads(path.read_text())
            name = res.get("extra_data", {}).get("submission") or path.parent.name
        except (OSError, ValueError, AttributeError):
            continue
        found[name] = (path.parent.name, res)
    return found


def exercise_score(res: dict, exercise: str) -> float:
    return round(sum(float(t.get("score", 0)) for t in res.get("tests", [])
                     if t.get("extra_data", {}).get("exercise") == exercise), 2)


def feedback(res: dict, exercise: str) -> str:
    """An exercise's feedback as the learner reads it (Gradescope renders the escaped Markdown)."""
    from autograder.results import md_unescape

    return md_unescape("\n".join(str(t.get("output", "")) for t in res.get("tests", [])
                                  if t.get("extra_data", {}).get("exercise") == exercise))


def gradebook(out: Path) -> dict[str, dict[str, str]]:
    with open(out / "grades.csv", newline="") as f:
        return {row["submission"]: row for row in csv.DictReader(f)}


def expected(key: str, mode: str = "cpu") -> dict:
    """An attack's expected outcome in a mode: its entry, with what its "gpu" entry says instead on a
    GPU (where the walls that stop it differ: a race the simulator names is a wrong sum there)."""
    exp = {k: v for k, v in EXPECTED[key].items() if k != "gpu"}
    return exp | EXPECTED[key].get("gpu", {}) if mode == "gpu" else exp


def check_scores(run: Run, keys_: list[str], name_of=lambda k: attack_file(k).name, mode: str = "cpu") -> list[str]:
    """Problems with the scores of these attacks in a run, in words."""
    found, problems = results(run.out), []
    for key in keys_:
        exp = expected(key, mode)
        name = name_of(key)
        if name not in found:
            problems.append(f"{key}: no results.json for {name} in {run.out}")
            continue
        res = found[name][1]
        score = exercise_score(res, exp["exercise"])
        if not exp.get("min_points", 0) <= score <= exp["max_points"]:
            problems.append(f"{key}: {exp['exercise']} scored {score}, expected "
                            f"{exp.get('min_points', 0)} to {exp['max_points']}; feedback: "
                            f"{feedback(res, exp['exercise'])[:300]!r}; printed: "
                            f"{res.get('extra_data', {}).get('printed_tail', '')[-600:]!r}")
        words = [exp["words"]] if isinstance(exp.get("words"), str) else exp.get("words") or []
        if words and not any(w in feedback(res, exp["exercise"]) for w in words):  # a list: any of them (walls differ)
            problems.append(f"{key}: feedback lacks {exp['words']!r}: {feedback(res, exp['exercise'])[:300]!r}")
        if exp.get("lines") and not any(re.search(rf"\bline {n}\b", feedback(res, exp["exercise"]))
                                        for n in exp["lines"]):
            problems.append(f"{key}: feedback names none of the lines {exp['lines']} (as 'line N'): "
                            f"{feedback(res, exp['exercise'])[:300]!r}")
        printed = res.get("extra_data", {}).get("printed_tail", "")
        said = [exp["printed"]] if isinstance(exp.get("printed"), str) else exp.get("printed") or []
        if said and not any(p in printed for p in said):
            problems.append(f"{key}: its payload did not run to the end (the printed tail lacks "
                            f"{exp['printed']!r}); feedback: {feedback(res, exp['exercise'])[:300]!r}; "
                            f"printed: {printed[-600:]!r}")
    return problems


def check_book(run: Run, extra_rows: set[str] = frozenset(), optional_rows: set[str] = frozenset()) -> list[str]:
    """grades.csv exists, lists every graded submission exactly once (plus extra_rows), nothing else
    (but optional_rows), and every score in it is a number."""
    if not (run.out / "grades.csv").is_file():
        return [f"no grades.csv in {run.out}"]
    book = gradebook(run.out)
    found = results(run.out)
    problems = []
    folders = set()
    for sub in run.subs:
        name = sub.name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")  # as the results show it
        if name not in found:
            problems.append(f"{name}: not graded (no results.json in the --out folder)")
        else:
            folders.add(found[name][0])
    missing = (folders | set(extra_rows)) - set(book)
    unexpected = set(book) - folders - set(extra_rows) - set(optional_rows)
    if missing:
        problems.append(f"grades.csv lacks {sorted(missing)}")
    if unexpected:
        problems.append(f"grades.csv has rows nobody submitted: {sorted(unexpected)}")
    for name, row in book.items():
        for col, value in row.items():
            if col not in ("submission",):
                try:
                    float(value)
                except (TypeError, ValueError):
                    problems.append(f"grades.csv: {name}.{col} = {value!r} is not a number")
    return problems


# --------------------------------------------------------------------------- forged, library, speed
KERNEL_CLASSES = {"forged", "library", "speed"}
AIMED_AT: dict[str, set[str]] = {}  # lab -> the exercises its attacks aim at
for _key, _exp in EXPECTED.items():
    AIMED_AT.setdefault(_key.split("/")[0], set()).add(_exp["exercise"])


def graded_on(key: str) -> tuple[str, ...]:
    """The exercises an attack is graded on: its own, and every other one its file names (one
    exercise's run may prime the runner for another's, as in a class's run of the whole lab)."""
    lab, text = key.split("/")[0], attack_file(key).read_text(errors="replace")
    return tuple(sorted({EXPECTED[key]["exercise"]}
                        | {e for e in AIMED_AT[lab] if re.search(rf"\b{re.escape(e)}\b", text)}))


def group_of(key: str) -> str:
    """The attacks graded in one run: a lab's that are graded on the same exercises."""
    return f"{key.split('/')[0]}.{'+'.join(graded_on(key))}"


CPU_KERNEL = keys(KERNEL_CLASSES, "cpu") + keys({"abort"}, "cpu", "batching")
GPU_KERNEL = keys(KERNEL_CLASSES, "gpu")


def _group(tmp_path_factory, mode: str, group: str, cache: dict) -> Run:
    """Grade, once per session, a group's attacks in one mode (the kernel attacks, and the policy lab's
    abort attacks that are not run with canaries)."""
    if group not in cache:
        ks = [k for k in (CPU_KERNEL if mode == "cpu" else GPU_KERNEL) if group_of(k) == group]
        lab, exercises = group.split(".", 1)
        out = tmp_path_factory.mktemp(f"{mode}-{lab}") / "out"
        extra = [a for e in exercises.split("+") for a in ("--exercise", e)]
        if mode == "cpu":
            extra += ["--simulator", "--timeout", str(TIMEOUT), "--memory-limit", "2"]
        else:
            extra += ["--timeout", "60"]
        run = grade(lab, [attack_file(k) for k in ks], out, *extra, limit_s=900)
        cache[group] = (run, ks)
    return cache[group][0]


@pytest.fixture(scope="session")
def cpu_group(tmp_path_factory):
    cache: dict = {}
    return lambda group: _group(tmp_path_factory, "cpu", group, cache)


@pytest.fixture(scope="session")
def gpu_group(tmp_path_factory):
    cache: dict = {}
    return lambda group: _group(tmp_path_factory, "gpu", group, cache)


def _attack_id(key: str) -> str:  # the group first: conftest hands a group's tests to one worker
    return f"{group_of(key)}/{key.split('/', 1)[1]}"


@pytest.mark.parametrize("key", CPU_KERNEL, ids=_attack_id)
def test_cpu_attack_scores_nothing(cpu_group, key):
    run = cpu_group(group_of(key))
    problems = check_scores(run, [key])
    assert not problems, "\n".join(problems) + "\n" + run.explain()


@pytest.mark.parametrize("group", sorted({group_of(k) for k in CPU_KERNEL}))
def test_cpu_groups_grade_every_submission(cpu_group, group):
    run = cpu_group(group)
    problems = ([f"exit code {run.rc}"] if run.rc != 0 else []) + check_book(run)
    assert not problems, "\n".join(problems) + "\n" + run.explain()


@pytest.mark.gpu
@pytest.mark.parametrize("key", GPU_KERNEL, ids=_attack_id)
def test_gpu_attack_scores_nothing(gpu_group, key):
    run = gpu_group(group_of(key))
    problems = check_scores(run, [key], mode="gpu")
    assert not problems, "\n".join(problems) + "\n" + run.explain()


@pytest.mark.gpu
@pytest.mark.parametrize("group", sorted({group_of(k) for k in GPU_KERNEL}))
def test_gpu_groups_grade_every_submission(gpu_group, group):
    run = gpu_group(group)
    problems = ([f"exit code {run.rc}"] if run.rc != 0 else []) + check_book(run)
    assert not problems, "\n".join(problems) + "\n" + run.explain()


# --------------------------------------------------------------------------- the machine
# Two runs with the same canaries. first_kernel: the machine attacks as a learner would submit them to a
# kernel exercise; those that `import os` are refused by the static check, those written with pathlib,
# http.client, asyncio ... run, and only the sandbox stands between them and the canaries. batching: the
# os-level attacks (fork, setsid, socket, /proc/<ppid>/mem ...) graded as a policy lab's answer, where
# the static check allows every construct, so the sandbox alone must stop them.
SCRATCH = ("/tmp", "/dev/shm")  # shared scratch folders: nothing may be left there
PORT_FILE = Path("/tmp/gpu-course-attack-license-port")  # the listener's port, where any process could read it
# Command lines of processes a submission left behind: the attacks' own daemons (marked), and processes
# forked from a runner or worker (they keep its command line).
SURVIVOR_MARKS = (b"gpu-course-attack-daemon", b"/grader/runner.py", b"autograder.worker")


def _tree(folder: Path) -> dict[str, bytes]:
    """Every file under a folder: relative path -> content."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _tmp_entries() -> set[str]:
    return {f"{d}/{n}" for d in SCRATCH if os.path.isdir(d) for n in os.listdir(d)
            if not n.startswith("pytest-of-")}


def _clean_tmp(before: set[str]) -> None:
    """Remove what the attacks left in /tmp and /dev/shm (only names they use)."""
    for entry in _tmp_entries() - before:
        name = os.path.basename(entry)
        if name.startswith("gpu-course-attack-") or name in ("numba.py", "sitecustomize.py"):
            path = Path(entry)
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)


def _survivors(before: set[int]) -> dict[int, str]:
    """Processes (not there before the run) whose command line marks them as left by a submission."""
    found = {}
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) in before:
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if any(m in cmd for m in SURVIVOR_MARKS):
            found[int(d)] = cmd.replace(b"\0", b" ")[:160].decode("utf-8", "replace")
    return found


def _results_files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.glob("*/results.json"))}


@dataclass
class Canaries:
    secrets: dict[str, str]
    home: Path
    subs_dir: Path
    out: Path
    listener: socket.socket
    env: dict[str, str]
    tmp_before: set[str]
    home_before: dict[str, bytes]
    subs_before: dict[str, bytes]
    canary_results: bytes


def _canaries(base: Path, lab: str = "first_kernel", exercise: str = "vector_add") -> Canaries:
    token = uuid.uuid4().hex[:12]
    secrets = {"home": f"HOME-SECRET-{token}", "solution": f"SOLUTION-SECRET-{token}",
               "classmate": f"CLASSMATE-SECRET-{token}", "grader_env": f"ENV-SECRET-{token}"}
    home = base / "home"
    (home / "solutions").mkdir(parents=True)
    (home / "secret.txt").write_text(secrets["home"] + "\n")
    (home / "solutions" / "lab0_solution.py").write_text(f"# {secrets['solution']}\n")
    (home / ".bashrc").write_text("export PATH=$PATH\n")
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    (home / ".license_port").write_text(f"{port}\n")
    PORT_FILE.write_text(f"{port}\n")  # a well-known place too: a hidden HOME must not be the only defence
    subs_dir = base / "submissions"
    subs_dir.mkdir()
    (subs_dir / "classmate.py").write_text(f"# {secrets['classmate']}: my own work, do not copy\n"
                                           + HONEST.read_text())
    shutil.copy(HONEST, subs_dir / "zz_victim.py")
    out = base / "out"
    (out / "canary_student").mkdir(parents=True)
    canary = {"score": 2.0, "execution_time": 1.0, "output": "2 of 8 points (simulator mode)",
              "tests": [{"name": f"{exercise}: correctness", "score": 2.0, "max_score": 2.0,
                         "status": "passed", "output": "all cases correct", "visibility": "visible",
                         "extra_data": {"exercise": exercise, "part": "correctness"}}],
              "extra_data": {"submission": "canary_student.py", "lab": lab, "mode": "simulator",
                             "max_score": 8.0, "printed_tail": ""}}
    (out / "canary_student" / "results.json").write_text(json.dumps(canary, indent=2))
    # ...graded in an earlier run: the grader's record lists it (the gradebook is built from that record).
    (out / ".autograder.json").write_text(json.dumps({"lab": lab, "submissions": {"canary_student": {
        "source": "canary_student.py", "sha256": "0" * 64, "exercises": [exercise]}}}))
    env = {"HOME": str(home), "LICENSE_SERVER_PORT": str(port), "AUTOGRADER_API_TOKEN": secrets["grader_env"]}
    return Canaries(secrets, home, subs_dir, out, listener, env, _tmp_entries(), {}, {},
                    (out / "canary_student" / "results.json").read_bytes())


def _accepted(listener: socket.socket) -> list[bytes]:
    got = []
    while True:
        try:
            conn, _ = listener.accept()
        except (BlockingIOError, OSError):
            return got
        conn.settimeout(1.0)
        try:
            got.append(conn.recv(65536))
        except OSError:
            got.append(b"")
        conn.close()


@dataclass
class MachineRun:
    run: Run
    can: Canaries
    markers: list[Path]
    connections: list[bytes]
    tmp_new: set[str]
    home_after: dict[str, bytes]
    subs_after: dict[str, bytes]
    canary_after: bytes | None
    leaks: list[str]
    late_changes: list[str]  # results.json files changed after grading ended
    survivors: dict[int, str]  # processes of submissions alive after grading ended
    keys: list[str]
    lab: str
    exercise: str
    renames: dict[str, str]


def _machine_run(base: Path, attack_keys: list[str], extra_subs: list[str], lab: str = "first_kernel",
                 exercise: str = "vector_add", renames: dict[str, str] | None = None,
                 in_container: bool = False) -> MachineRun:
    """Grade the attacks (copied beside the canaries, under their own names or ``renames[key]``) and
    extra_subs (files already in the canaries' submissions folder), then look at the canaries.
    ``in_container``: as root in a Docker-like container, where bubblewrap cannot make namespaces and
    the uid walls stand between the attacks and the canaries."""
    tag = uuid.uuid4().hex
    procs_before = {int(d) for d in os.listdir("/proc") if d.isdigit()}
    survivors: dict[int, str] = {}
    can = _canaries(base, lab, exercise)
    try:
        subs = []
        for key in attack_keys:
            subs.append(can.subs_dir / (renames or {}).get(key, attack_file(key).name))
            shutil.copy(attack_file(key), subs[-1])
        subs += [can.subs_dir / n for n in extra_subs]
        can.home_before, can.subs_before = _tree(can.home), _tree(can.subs_dir)
        wrap = (lambda cmd: container.command(cmd, python=sys.executable)) if in_container else None
        env = dict(can.env, AUTOGRADER_SANDBOX="uid") if in_container else can.env
        # Two workers, as an instructor grades a class on a laptop: two runners side by side, each
        # attack beside another submission's runner (and half the wall time of one).
        run = grade(lab, subs, can.out, "--exercise", exercise, "--simulator", "--workers", "2", "--timeout",
                    str(TIMEOUT), "--memory-limit", "2", env=env, tag=tag, limit_s=600, wrap=wrap)
        at_end = _results_files(can.out)
        time.sleep(DAEMON_WAIT_S)  # a daemon's moment: after grading ends
        survivors = _survivors(procs_before)
        markers = [p for d in (can.out, can.home, can.subs_dir, base) for p in d.rglob(MARKER)]
        later = _results_files(can.out)
        late_changes = sorted(k for k in at_end.keys() | later.keys() if at_end.get(k) != later.get(k))
        connections = _accepted(can.listener)
        tmp_new = _tmp_entries() - can.tmp_before
        canary_path = can.out / "canary_student" / "results.json"
        leaks = []
        for path in sorted(p for p in can.out.rglob("*") if p.is_file()):
            data = path.read_bytes()
            leaks += [f"{which} secret in {path.relative_to(can.out)}" for which, s in can.secrets.items()
                      if s.encode() in data]
        return MachineRun(run, can, markers, connections, tmp_new, _tree(can.home), _tree(can.subs_dir),
                          canary_path.read_bytes() if canary_path.exists() else None, leaks, late_changes,
                          survivors, list(attack_keys), lab, exercise, dict(renames or {}))
    finally:
        end_strays(tag)
        _kill(list(survivors) + list(_survivors(procs_before)))
        can.listener.close()
        PORT_FILE.unlink(missing_ok=True)
        _clean_tmp(can.tmp_before)


MACHINE = [k for k in keys({"machine"}, "cpu") if not k.endswith(("/plant_module", "/plant_pathlib"))]
# The os-level attacks (refused by the static check in a kernel exercise), as answers to the policy lab.
POLICY_MACHINE = [k for k in MACHINE if EXPECTED[k].get("policy_run")]


@pytest.fixture(scope="module", params=["first_kernel", "batching", "first_kernel-uid", "batching-uid"])
def machine(request, tmp_path_factory):
    """The machine attacks with bubblewrap, and again in a Docker-like container (the uid walls)."""
    lab, _, walls = request.param.partition("-")
    inside = walls == "uid"
    if inside and container.unusable():
        pytest.skip(container.unusable())
    if lab == "first_kernel":
        return _machine_run(tmp_path_factory.mktemp("machine"), MACHINE, ["classmate.py", "zz_victim.py"],
                            in_container=inside)
    # No honest policy is graded here (a simulation takes ~20 s): the canaries are the victims. The
    # module planter goes last (the grader takes files in name order): where it is not stopped, it breaks
    # the grading of every submission after it, which would hide what their payloads do.
    return _machine_run(tmp_path_factory.mktemp("machine-policy"), POLICY_MACHINE + ["first_kernel/plant_module"],
                        [], lab="batching", exercise="schedule",
                        renames={"first_kernel/plant_module": "zz_plant_module.py"}, in_container=inside)


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """The module planters, followed by an honest student: alone, so their daemons meet that student."""
    return _machine_run(tmp_path_factory.mktemp("plant"), ["first_kernel/plant_module", "first_kernel/plant_pathlib"],
                        ["zz_victim.py"])


def _policy_scores(m: MachineRun) -> list[str]:
    """In the policy run: every attack graded, 0 points, and its payload ran (it printed its report)."""
    found, problems = results(m.run.out), []
    for key in m.keys:
        name = m.renames.get(key, attack_file(key).name)
        if name not in found:
            problems.append(f"{key}: no results.json for {name}")
            continue
        res = found[name][1]
        score = exercise_score(res, m.exercise)
        printed = res.get("extra_data", {}).get("printed_tail", "")
        if score != 0:
            problems.append(f"{key} (as a policy): {m.exercise} scored {score}")
        if f"ATTACK {attack_file(key).stem}" not in printed:
            problems.append(f"{key} (as a policy): its payload printed nothing (did it run?); feedback: "
                            f"{feedback(res, m.exercise)[:300]!r}")
    return problems


def test_machine_grading_completes(machine):
    run = machine.run
    problems = ([f"exit code {run.rc}"] if run.rc != 0 else []) + check_book(run, {"canary_student"})
    if machine.lab == "first_kernel":
        problems += check_scores(run, MACHINE)
        found = results(run.out)
        for honest in ("classmate.py", "zz_victim.py"):
            if honest in found and exercise_score(found[honest][1], "vector_add") != 2:
                problems.append(f"{honest} (an honest submission) scored "
                                f"{exercise_score(found[honest][1], 'vector_add')}")
    else:
        problems += _policy_scores(machine)
    assert not problems, "\n".join(problems) + "\n" + run.explain()


def test_machine_no_secret_reaches_the_out_folder(machine):
    assert not machine.leaks, "\n".join(machine.leaks) + "\n" + _printed(machine)


def _printed(m: MachineRun) -> str:
    """What the attacks printed (their own reports), for the failure message."""
    return "\n".join(f"--- {name}: {res.get('extra_data', {}).get('printed_tail', '')[-700:]}"
                     for name, (_, res) in results(m.run.out).items() if name != "canary_student.py")


def test_machine_home_unchanged(machine):
    before, after = machine.can.home_before, machine.home_after
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, f"files changed or added in the instructor's home: {changed}"


def test_machine_classmates_unchanged(machine):
    before, after = machine.can.subs_before, machine.subs_after
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, f"files changed or added in the submissions folder: {changed}"


def test_machine_other_results_unchanged(machine):
    assert machine.canary_after == machine.can.canary_results, \
        f"another student's results.json changed: {(machine.canary_after or b'(deleted)')[:300]!r}"


def test_machine_no_phantom_results(machine):
    found = results(machine.run.out)
    graded = {"canary_student"} | {found[s.name][0] for s in machine.run.subs if s.name in found}
    phantoms = sorted(str(p.relative_to(machine.can.out)) for p in machine.can.out.glob("*/results.json")
                      if p.parent.name not in graded)
    assert not phantoms, f"results.json of nobody graded in the --out folder: {phantoms}"


def test_machine_no_daemon_outlives_grading(machine):
    assert not machine.markers and not machine.late_changes and not machine.survivors, (
        "a process of a submission lived on: " + ", ".join(
            f"{p}: {p.read_text(errors='replace').strip()!r}" for p in machine.markers)
        + f"; results.json changed after grading ended: {machine.late_changes}"
        + f"; alive {DAEMON_WAIT_S:g} s after grading ended: {machine.survivors}")


def test_machine_no_network(machine):
    assert not machine.connections, f"{len(machine.connections)} connection(s) reached 127.0.0.1; they sent: " \
                                    f"{[c[:200] for c in machine.connections]}"


def test_machine_no_files_left_in_tmp(machine):
    assert not machine.tmp_new, f"left in /tmp or /dev/shm: {sorted(machine.tmp_new)}"


def test_planted_module_breaks_nobody(planted):
    run = planted.run
    problems = ([f"exit code {run.rc}"] if run.rc != 0 else []) + check_book(run, {"canary_student"})
    problems += check_scores(run, ["first_kernel/plant_pathlib"])
    found = results(run.out)
    victim = found.get("zz_victim.py")
    if victim is None or exercise_score(victim[1], "vector_add") != 2:
        problems.append("the student graded after the planters lost points: " + (
            feedback(victim[1], "vector_add")[:400] if victim else "not graded"))
    if planted.tmp_new:
        problems.append(f"left in /tmp: {sorted(planted.tmp_new)}")
    if planted.markers or planted.survivors:
        problems.append(f"markers: {planted.markers}; processes alive after grading: {planted.survivors}")
    assert not problems, "\n".join(problems) + "\n" + run.explain()


# --------------------------------------------------------------------------- grading must not abort
ABORT_QUICK = [k for k in keys({"abort"}, "cpu", "first_kernel")
               if not k.endswith(("/reply_flood", "/reply_trickle"))]
PLANTED_RESULTS = {"score": "ninety", "execution_time": "slow", "output": "hand-made",
                   "tests": [{"name": "vector_add: correctness", "score": "full marks", "max_score": 2,
                              "extra_data": {"exercise": "vector_add", "part": "correctness", "flags": "many"}}],
                   "extra_data": {"submission": "zz_planted.py"}}


NOT_UTF8 = b"zz_name_\xff.py"  # a file name that is no UTF-8 (a zip from another system): one grade, not a crash


@pytest.fixture(scope="module")
def aborts(tmp_path_factory):
    """The quick abort attacks and an honest submission, in a folder of their own, so that writes
    beside the --out folder show. Two exercises: some attacks strike between one and the next."""
    base = tmp_path_factory.mktemp("abort")
    subs_dir, out = base / "subs", base / "out"
    subs_dir.mkdir()
    subs = []
    for key in ABORT_QUICK:
        subs.append(subs_dir / attack_file(key).name)
        shutil.copy(attack_file(key), subs[-1])
    subs.append(subs_dir / "zz_honest.py")
    shutil.copy(HONEST, subs[-1])
    subs.append(subs_dir / os.fsdecode(NOT_UTF8))  # an honest answer whose file name is no UTF-8
    shutil.copy(HONEST, subs[-1])
    subs_before = _tree(subs_dir)
    run = grade("first_kernel", subs, out, "--exercise", "vector_add", "--exercise", "saxpy", "--simulator",
                "--timeout", str(TIMEOUT), "--memory-limit", "2", limit_s=600)
    return run, base, subs_before


@pytest.fixture(scope="module")
def planted_results(tmp_path_factory):
    """A results.json with non-numeric scores, planted in the --out folder before grading (by a
    learner with write access earlier, or a corrupted disk), then an honest submission."""
    base = tmp_path_factory.mktemp("planted-results")
    out = base / "out"
    (out / "zz_planted").mkdir(parents=True)
    (out / "zz_planted" / "results.json").write_text(json.dumps(PLANTED_RESULTS))
    honest = base / "honest.py"
    shutil.copy(HONEST, honest)
    return grade("first_kernel", [honest], out, "--exercise", "vector_add", "--simulator", "--timeout",
                 str(TIMEOUT), limit_s=300)


def test_planted_non_numeric_results_do_not_stop_grading(planted_results):
    run = planted_results
    problems = ([f"exit code {run.rc}"] if run.rc != 0 else []) + check_book(run, optional_rows={"zz_planted"})
    found = results(run.out)
    if "honest.py" not in found or exercise_score(found["honest.py"][1], "vector_add") != 2:
        problems.append("the honest submission did not get its 2 points")
    assert not problems, "\n".join(problems) + "\n" + run.explain()


def test_abort_attacks_do_not_stop_grading(aborts):
    run, base, _ = aborts
    problems = ([f"exit code {run.rc}"] if run.rc != 0 else []) + check_book(run)
    problems += check_scores(run, ABORT_QUICK)
    found = results(run.out)
    for name in ("zz_honest.py", NOT_UTF8.decode("utf-8", "replace")):
        if name not in found or exercise_score(found[name][1], "vector_add") != 2:
            problems.append(f"the honest submission {name!r} graded with the abort attacks did not get its 2 points")
    assert not problems, "\n".join(problems) + "\n" + run.explain()


def test_abort_attacks_write_nothing_outside_out(aborts):
    run, base, subs_before = aborts
    outside = sorted(str(p.relative_to(base)) for p in base.iterdir()
                     if p.name not in ("subs", "out") and not p.name.startswith(".out-grader-logs"))
    changed = sorted(k for k in subs_before.keys() | _tree(base / "subs").keys()
                     if subs_before.get(k) != _tree(base / "subs").get(k))
    assert not outside and not changed, f"written beside the --out folder: {outside}; " \
                                        f"changed in the submissions folder: {changed}"


SLOW_TIMEOUT = 8
MEMORY_LIMIT_GB = 1


@pytest.fixture(scope="module")
def slow_replies(tmp_path_factory):
    """A reply flooded far above --memory-limit and one dripped a byte a second, then an honest
    submission: the run must end within a few times --timeout, with the grader's memory bounded."""
    base = tmp_path_factory.mktemp("slow")
    (base / "subs").mkdir()
    subs = [base / "subs" / n for n in ("reply_flood.py", "reply_trickle.py", "zz_honest.py")]
    for src, dst in zip([attack_file("first_kernel/reply_flood"), attack_file("first_kernel/reply_trickle"), HONEST], subs):
        shutil.copy(src, dst)
    run = grade("first_kernel", subs, base / "out", "--exercise", "vector_add", "--simulator",
                "--timeout", str(SLOW_TIMEOUT), "--memory-limit", str(MEMORY_LIMIT_GB),
                limit_s=4 * SLOW_TIMEOUT + 60)
    return run


def test_slow_and_flooded_replies_are_cut_off(slow_replies):
    run = slow_replies
    bound = 4 * SLOW_TIMEOUT + 30  # the trickle's exercise, the flood's, the honest one, worker starts
    problems = []
    if run.rc != 0:
        problems.append(f"exit code {run.rc}" + (" (killed by the test: the run hung)" if run.rc < 0 else ""))
    if run.seconds > bound:
        problems.append(f"took {run.seconds:.0f} s with --timeout {SLOW_TIMEOUT} (at most {bound} s expected)")
    if run.maxrss_gb > MEMORY_LIMIT_GB + 1.0:
        problems.append(f"the grading processes peaked at {run.maxrss_gb:.1f} GB of memory with "
                        f"--memory-limit {MEMORY_LIMIT_GB}")
    if run.rc == 0:
        problems += check_book(run)
        problems += check_scores(run, ["first_kernel/reply_flood", "first_kernel/reply_trickle"])
    assert not problems, "\n".join(problems) + "\n" + run.explain()
