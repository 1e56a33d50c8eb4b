"""The sandbox a submission runs in (autograder/sandbox.py), checked directly: what a process
inside can see, reach and leave behind. The attack bank (test_attacks.py) checks the same
through whole gradings."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autograder import sandbox

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(not sandbox.available()[0], reason="bubblewrap is not usable here")

PROBE = r"""
import json, os, socket, sys
report = {}
uid = int(sys.argv[1])
if os.getuid() == 0 and uid:
    os.setgroups([]); os.setresgid(uid, uid, uid); os.setresuid(uid, uid, uid)
report["uid"] = os.getuid()
report["env"] = sorted(os.environ)
def can_read(path):
    try:
        with open(path, "rb") as f:
            f.read(1)
        return True
    except OSError:
        return False
report["secret"] = can_read(sys.argv[2])
report["repo"] = os.path.exists(sys.argv[3])
report["procs"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
try:
    s = socket.create_connection(("127.0.0.1", int(sys.argv[4])), timeout=2)
    report["net"] = "connected"
except OSError as e:
    report["net"] = type(e).__name__
for lib in ("autograder", "torch"):
    try:
        __import__(lib).anything
        report[lib] = "usable"
    except Exception as e:
        report[lib] = str(e)
try:
    with open("/tmp/x", "w") as f:
        f.write("scratch")
    report["tmp"] = "writable"
except OSError as e:
    report["tmp"] = str(e)
try:
    open("/usr/evil", "w")
    report["usr"] = "writable"
except OSError:
    report["usr"] = "read-only"
if os.fork() == 0:  # a daemon that outlives its parent (until the sandbox ends)
    os.setsid()
    import time
    time.sleep(60)
    os._exit(0)
print(json.dumps(report), flush=True)
"""


def test_a_process_inside_sees_and_reaches_nothing_of_the_machine(tmp_path):
    secret = tmp_path / "home" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("instructor's secret")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.setblocking(False)
    os.environ["GRADER_TEST_SECRET_TOKEN"] = "do-not-pass"  # not passed into the sandbox
    try:
        cmd = sandbox.command([sys.executable, "-c", PROBE, str(sandbox.UID_BASE + 7), str(secret),
                               str(ROOT / "autograder" / "judge.py"), str(listener.getsockname()[1])],
                              gpu=False, slot=7, hidden={"torch": "this exercise forbids torch"})
        proc = subprocess.Popen(cmd.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=cmd.fds,
                                preexec_fn=cmd.preexec, start_new_session=True)
        cmd.close()
        tree = sandbox.ProcessTree(proc.pid, sandboxed=True)
        out, err = proc.communicate(timeout=120)
        report = json.loads(out.decode().strip().splitlines()[-1])
    finally:
        os.environ.pop("GRADER_TEST_SECRET_TOKEN", None)
    if os.geteuid() == 0:
        assert report["uid"] == sandbox.UID_BASE + 7  # not root inside
    assert not report["secret"] and not report["repo"]
    assert "GRADER_TEST_SECRET_TOKEN" not in report["env"]
    assert report["net"] != "connected"
    with pytest.raises(BlockingIOError):
        listener.accept()
    assert "grader's own code is not importable" in report["autograder"]
    assert "forbids torch" in report["torch"]
    assert report["tmp"] == "writable" and report["usr"] == "read-only"
    assert max(report["procs"]) < 50  # its own pid namespace: a handful of processes
    # The daemon it forked dies with the sandbox: nothing of it is left.
    assert tree.kill(timeout=10)
    assert not tree.pids()
    assert not Path("/tmp/x").exists() or Path("/tmp/x").read_text() != "scratch"


def test_process_limit_stops_a_fork_bomb():
    bomb = ("import os, sys\nuid = int(sys.argv[1])\n"
            "if os.getuid() == 0:\n    os.setgroups([]); os.setresgid(uid, uid, uid); os.setresuid(uid, uid, uid)\n"
            "n = 0\ntry:\n    for _ in range(5000):\n        if os.fork() == 0:\n            import time; time.sleep(30); os._exit(0)\n"
            "        n += 1\nexcept OSError:\n    pass\nprint(n, flush=True)\n")
    limits = sandbox.Limits(processes=64)
    cmd = sandbox.command([sys.executable, "-c", bomb, str(sandbox.UID_BASE + 8)], gpu=False, slot=8, limits=limits)
    started = time.monotonic()
    r = subprocess.run(cmd.argv, capture_output=True, text=True, pass_fds=cmd.fds, preexec_fn=cmd.preexec,
                       timeout=120)
    cmd.close()
    forked = int(r.stdout.strip().splitlines()[-1])
    assert forked < 200, forked  # stopped at the limit, far below 5000
    assert time.monotonic() - started < 60


def test_a_zombie_counts_as_gone_unless_its_threads_still_run():
    """Killing a sandbox waits for its processes to end, not for them to be reaped (where the
    machine's init reaps late, that wait held up every submission); but a main thread that
    exited while its other threads run also shows as a zombie, and is not gone."""
    code = ("import ctypes, threading, time\n"
            "threading.Thread(target=time.sleep, args=(2,)).start()\n"
            "ctypes.CDLL(None).pthread_exit(None)\n")
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        time.sleep(0.5)
        assert Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
        assert not sandbox._zombie(proc.pid)  # its second thread sleeps on
        time.sleep(2.5)
        assert sandbox._zombie(proc.pid)  # dead, not yet reaped
    finally:
        proc.kill()
        proc.wait()
    assert sandbox._zombie(proc.pid)  # reaped: gone


@pytest.mark.skipif(os.geteuid() != 0, reason="as an unprivileged user every process of the sandbox is that user")
def test_a_tool_that_starts_the_runner_runs_as_the_sandbox_user_too():
    """compute-sanitizer and Nsight Compute start the runner inside its sandbox. When the grader
    is root, bubblewrap starts as root and only the runner dropped to its own user: the tool,
    a parent of learner code, kept root. It now runs as the sandbox's user as well."""
    from autograder.judge import Judge, Options
    from autograder.labs import get_lab
    from autograder.runproc import RunnerProcess

    lab = get_lab("first_kernel")
    judge = Judge(lab, Options(simulator=True, seed=1, timeout=60.0), cells=[])
    wrapper = ["/bin/sh", "-c", 'echo "wrapper uid $(id -u) caps $(grep CapEff /proc/self/status)"; exec "$@"', "sh"]
    proc = RunnerProcess(judge._runner_job(lab.exercises[0]), simulator=True, sandboxed=True, wrap=wrapper)
    try:
        hello = proc.hello(60)
        assert hello.get("ok"), hello
    finally:
        proc.close()
        judge.close()
    said = proc.log.text()
    assert f"wrapper uid {sandbox.UID_BASE}" in said and "CapEff:\t0000000000000000" in said, said


def test_a_venv_under_tmp_shows_its_packages_but_not_an_installed_grader(tmp_path):
    """A virtual environment under /tmp (pytest's folders there are private to root): the runner,
    as its own user, imports the venv's packages; the course installed in it is a stub; the
    folder of a script on the path (/tmp itself) is not shown."""
    site = tmp_path / "venv" / "lib" / "site-packages"
    (site / "autograder").mkdir(parents=True)
    (site / "autograder" / "__init__.py").write_text("SECRET = 'the installed grader'\n")
    (site / "tinylib").mkdir()
    (site / "tinylib" / "__init__.py").write_text("VALUE = 42\n")
    probe = ("import os, sys\n"
             "u = int(sys.argv[2])\n"
             "if os.getuid() == 0 and u:\n    os.setgroups([]); os.setresgid(u, u, u); os.setresuid(u, u, u)\n"
             "import tinylib\n"
             "try:\n    import autograder; said = str(getattr(autograder, 'SECRET', 'stub'))\n"
             "except ImportError as e:\n    said = 'stub: ' + str(e)\n"
             "print(tinylib.VALUE, said, os.path.exists(sys.argv[1]), sep='|')\n")
    sys.path.insert(0, str(site))
    try:
        cmd = sandbox.command([sys.executable, "-c", probe, str(tmp_path / "beside.txt"), sandbox.UID_ARG],
                              gpu=False, slot=9, env={"PYTHONPATH": str(site)})
    finally:
        sys.path.remove(str(site))
    (tmp_path / "beside.txt").write_text("a file beside the venv")
    r = subprocess.run(cmd.argv, capture_output=True, text=True, pass_fds=cmd.fds, preexec_fn=cmd.preexec_fn(),
                       timeout=60)
    cmd.close()
    value, said, beside = r.stdout.strip().split("|")
    assert value == "42" and said.startswith("stub") and beside == "False", r.stdout + r.stderr
