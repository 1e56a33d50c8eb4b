"""The sandbox without namespaces: a user of its own, confined by Landlock and seccomp.

Used where bubblewrap cannot run and the grader is root (a Docker container with the default
profile, as on Gradescope). Each runner gets:

- a uid of its own, unused by any process (so its processes are found, counted and killed by
  uid, and the process limit counts them alone);
- a scratch folder, ``<base>/work``, owned by that uid and nothing else it may write; the base
  folder is root's (mode 0711: the uid can enter its own folder and list nothing);
- a copy of the runner and the stubs of hidden packages, root's and read-only;
- ``confine.py`` as its first program: limits, no_new_privs, Landlock (where the kernel has it),
  seccomp, then the change of user.

With Landlock the runner reads only the system, the interpreter and the libraries it needs,
less the grader's packages and the libraries its exercise hides. Without it, ordinary file
permissions are all that guard the rest of the machine: ``sandbox.available()`` then refuses
the walls unless the grader's own files are unreadable to other users (Gradescope's setup.sh
makes them so).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

CONFINE = Path(__file__).resolve().parent / "confine.py"
UID_FIRST = 1_991_000_000  # far above real accounts, and above bubblewrap's per-slot uids
UIDS_PER_SLOT = 1000
SYSTEM_READ = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/proc", "/sys")
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
SHARED_SCRATCH = ("/tmp", "/var/tmp", "/dev/shm")  # where a uid could leave files without Landlock

_in_use: set[int] = set()
_lock = threading.Lock()


def landlock_abi() -> int:
    import ctypes

    from .confine import landlock_abi as abi

    try:
        return abi(ctypes.CDLL(None, use_errno=True))
    except OSError:
        return 0


def _uid_busy(uid: int) -> bool:
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if os.stat(f"/proc/{p}").st_uid == uid:
                    return True
            except OSError:
                continue
    return False


def take_uid(slot: int) -> int:
    """A uid of this slot's range that no process has and no runner of this process holds."""
    with _lock:
        first = UID_FIRST + slot * UIDS_PER_SLOT
        for uid in range(first, first + UIDS_PER_SLOT):
            if uid not in _in_use and not _uid_busy(uid):
                _in_use.add(uid)
                return uid
    raise RuntimeError(f"no free sandbox user left for slot {slot}")


def give_back_uid(uid: int) -> None:
    with _lock:
        _in_use.discard(uid)


def _carve(root: str, hidden: set[str], out: list[str], listed: list[str]) -> None:
    """Read rules for ``root`` that leave out the folders in ``hidden``: the whole of ``root``
    where nothing hidden is inside it, else its listing and each child carved in turn."""
    inside = [h for h in hidden if h == root or h.startswith(root.rstrip(os.sep) + os.sep)]
    if not inside:
        out.append(root)
        return
    if root in hidden or not os.path.isdir(root):
        return
    listed.append(root)
    try:
        children = sorted(os.listdir(root))
    except OSError:
        return
    for name in children:
        _carve(os.path.join(root, name), hidden, out, listed)


def readable(python_dirs: list[str], hidden_dirs: list[str], extra: list[str]) -> tuple[list[str], list[str]]:
    """(folders and files the runner may read and execute, folders it may only list)."""
    hidden = {os.path.realpath(h) for h in hidden_dirs}
    roots = []
    for d in [*SYSTEM_READ, *python_dirs, *extra]:
        real = os.path.realpath(d)
        if os.path.exists(real) and real not in roots:
            roots.append(real)
    read: list[str] = []
    listed: list[str] = []
    for root in roots:
        _carve(root, hidden, read, listed)
    return read, listed


class Scratch:
    """A runner's folders: ``work`` (its own, writable), ``grader/runner.py`` and ``stubs``."""

    def __init__(self, uid: int, runner: Path, stubs: dict[str, str]) -> None:
        self.uid = uid
        self.base = Path(tempfile.mkdtemp(prefix="autograder-sandbox-", dir=_scratch_parent()))
        os.chmod(self.base, 0o711)
        self.work = self.base / "work"
        self.work.mkdir(mode=0o700)
        os.chown(self.work, uid, uid)
        grader = self.base / "grader"
        grader.mkdir(mode=0o755)
        self.runner = grader / "runner.py"
        shutil.copyfile(runner, self.runner)
        os.chmod(self.runner, 0o444)
        self.stubs = self.base / "stubs"
        self.stubs.mkdir(mode=0o755)
        for name, source in stubs.items():
            (self.stubs / name).mkdir(mode=0o755)
            (self.stubs / name / "__init__.py").write_text(source)
            os.chmod(self.stubs / name / "__init__.py", 0o444)

    def bytes_used(self) -> int:
        total = 0
        for folder, _, files in os.walk(self.work):
            for f in files:
                try:
                    total += os.lstat(os.path.join(folder, f)).st_blocks * 512
                except OSError:
                    continue
        return total

    def remove(self) -> None:
        shutil.rmtree(self.base, ignore_errors=True)


def _scratch_parent() -> str:
    """Where scratch folders go: a folder every user may enter (the judge's own temporary folder
    is private to it)."""
    return os.environ.get("AUTOGRADER_SANDBOX_DIR") or "/tmp"


def config(argv: list[str], *, uid: int, scratch: Scratch, read: list[str], listed: list[str], devices: list[str],
           env: dict[str, str], rlimits: dict[str, int], landlock: bool) -> dict:
    """What confine.py needs to launch ``argv``."""
    return {"uid": uid, "cwd": str(scratch.work), "landlock": landlock, "read": read + [str(scratch.base / "grader"),
            str(scratch.stubs)], "list": listed, "write": [str(scratch.work)], "devices": devices, "env": env,
            "limits": rlimits, "argv": argv}


def launcher(cfg: dict) -> list[str]:
    return [sys.executable, "-I", "-S", str(CONFINE), json.dumps(cfg)]


def kill_all(uid: int) -> None:
    """SIGKILL every process of ``uid``, from a process of that uid (kill(-1) reaches them all at
    once, so none can fork away from a list taken a moment earlier)."""
    code = ("import os\n"
            f"os.setgroups([]); os.setresgid({uid}, {uid}, {uid}); os.setresuid({uid}, {uid}, {uid})\n"
            "try:\n    os.kill(-1, 9)\nexcept ProcessLookupError:\n    pass\n")
    try:
        subprocess.run([sys.executable, "-I", "-S", "-c", code], timeout=10, capture_output=True)
    except (OSError, subprocess.TimeoutExpired):
        pass


def remove_leftovers(uid: int) -> None:
    """Files ``uid`` left in the machine's shared scratch folders (without Landlock it can)."""
    for top in SHARED_SCRATCH:
        try:
            entries = os.listdir(top)
        except OSError:
            continue
        for name in entries:
            path = os.path.join(top, name)
            try:
                if os.lstat(path).st_uid != uid:
                    continue
            except OSError:
                continue
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    os.unlink(path)
                except OSError:
                    pass
