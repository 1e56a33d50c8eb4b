"""A sandbox for the process that runs a submission, built on bubblewrap (``bwrap``).

What the code inside sees and can do:

- no network (a network namespace of its own, loopback only);
- its own process and IPC namespaces: ``/proc`` shows only its processes, and when the
  sandbox ends every process it started is killed by the kernel, daemons included;
- a read-only view of the system (``/usr``, the dynamic loader's files), of the Python
  installation, and of one file of the grader (``runner.py``), and nothing else: not the
  course's code or its lab references, not the submissions folder, the output folder,
  the instructor's home or the parent's ``/proc``;
- one writable place, a size-limited ``/tmp`` in memory, gone when the sandbox ends;
- a scrubbed environment, limits on processes, open files and file size, and, on a GPU
  node, the NVIDIA device nodes and driver libraries.

When the grader runs as root, bubblewrap runs privileged and the runner drops to an
unprivileged user of its own (so that the process limit applies); otherwise bubblewrap
uses an unprivileged user namespace. Host memory is watched from outside
(``ProcessTree``), since CUDA reserves more address space than any rlimit could allow.
"""
from __future__ import annotations

import glob
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

RUNNER = Path(__file__).resolve().parent / "runner.py"
ROOT = Path(__file__).resolve().parent.parent  # the course's checkout: never visible inside
INSIDE_RUNNER = "/grader/runner.py"
# Unprivileged users for the runner when the grader is root: one per parallel slot, far above
# any real account, so the process limit counts one sandbox's processes and nothing else.
UID_BASE = 1_990_000_000
# Packages that are never importable inside: the grader itself (its lab references) and the
# course's helpers.
ALWAYS_HIDDEN = ("autograder", "course")
# Environment variables that pass into the sandbox unchanged (configuration of the libraries
# the submission uses; nothing that names the instructor's files or holds a secret).
PASSED_ENV = ("CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH", "NUMBA_CUDA_DRIVER",
              "NUMBA_CUDA_USE_NVIDIA_BINDING", "NUMBA_ENABLE_CUDASIM", "NUMBA_CUDA_PER_THREAD_DEFAULT_STREAM",
              "CUPY_ACCELERATORS", "NVIDIA_TF32_OVERRIDE", "LANG")


@dataclass(frozen=True)
class Limits:
    memory_gb: float = 16.0  # host memory of all its processes together (watched from outside)
    processes: int = 2048  # processes and threads (CUDA, Numba and torch start dozens)
    open_files: int = 4096
    scratch_mb: int = 1024  # the size of its /tmp (counts towards host memory)
    file_mb: int = 512  # the largest file it may write


def bwrap_path() -> str | None:
    return os.environ.get("AUTOGRADER_BWRAP") or shutil.which("bwrap")


_AVAILABLE: tuple[bool, str] | None = None


def available() -> tuple[bool, str]:
    """Whether a sandbox can be made here, and what was tried (cached for the process)."""
    global _AVAILABLE
    if _AVAILABLE is not None:
        return _AVAILABLE
    bwrap = bwrap_path()
    if bwrap is None:
        _AVAILABLE = (False, "bubblewrap (bwrap) is not installed: apt-get install bubblewrap")
        return _AVAILABLE
    cmd = command([sys.executable, "-c", "import os; print(os.getuid())"], gpu=False, slot=0)
    try:
        r = subprocess.run(cmd.argv, capture_output=True, text=True, timeout=30, pass_fds=cmd.fds,
                           preexec_fn=cmd.preexec)
    except (OSError, subprocess.TimeoutExpired) as exc:
        _AVAILABLE = (False, f"{bwrap} could not be started: {exc}")
        return _AVAILABLE
    finally:
        cmd.close()
    if r.returncode != 0:
        detail = (r.stderr.strip().splitlines() or ["no message"])[-1]
        _AVAILABLE = (False, f"{bwrap} failed: {detail} (are user namespaces allowed? "
                             "sysctl kernel.unprivileged_userns_clone, or AppArmor's restriction on Ubuntu)")
        return _AVAILABLE
    version = subprocess.run([bwrap, "--version"], capture_output=True, text=True).stdout.strip()
    _AVAILABLE = (True, f"{version or bwrap} works here")
    return _AVAILABLE


# --------------------------------------------------------------------------- what is visible
def _python_dirs() -> list[str]:
    """The directories the interpreter and its packages live in (read-only inside)."""
    dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
            os.path.dirname(os.path.realpath(sys.executable))}
    for entry in sys.path:
        if not entry or not os.path.isdir(entry):
            continue
        real = os.path.realpath(entry)
        if real == str(ROOT) or os.path.isdir(os.path.join(real, "autograder", "labs")):
            continue  # the course's checkout: its code stays outside
        dirs.add(entry)
    out: list[str] = []
    for d in sorted(dirs, key=len):  # a folder already bound covers the folders inside it
        real = os.path.realpath(d)
        if any(real == o or real.startswith(o + os.sep) for o in out):
            continue
        if real.startswith(("/usr/", "/proc", "/dev", "/tmp")) or real == "/usr":
            continue  # /usr is bound whole; /tmp and /proc are the sandbox's own
        out.append(real)
    return out


def _package_dirs(names) -> list[tuple[str, str]]:
    """(folder, name) of each top-level package called one of ``names`` on the sandbox's path."""
    found = []
    for entry in [sys.prefix, *sys.path]:
        if not entry or not os.path.isdir(entry):
            continue
        for name in names:
            d = os.path.join(os.path.realpath(entry), name)
            if os.path.isdir(d):
                found.append((d, name))
    return sorted(set(found))


def stub_source(name: str, why: str) -> str:
    """An importable stand-in for a package that is not available inside: any use says why."""
    return (f'"""{name} is not available here: {why}"""\n'
            f"def __getattr__(attr):\n"
            f"    raise ImportError({f'{name} is not available while this exercise runs: {why}'!r})\n")


def _gpu_devices() -> list[str]:
    return sorted(set(glob.glob("/dev/nvidia*")) | set(glob.glob("/dev/dxg")))


@dataclass
class Command:
    argv: list[str]
    fds: list[int]  # to keep open in the child (stub files bubblewrap copies in)
    privileged: bool  # bubblewrap runs as root: the runner must drop to `uid`
    uid: int
    nproc: int
    limits: Limits

    def preexec(self) -> None:
        """In the child before exec: limits every process of the sandbox inherits."""
        lim = self.limits
        for res, value in ((resource.RLIMIT_CORE, 0), (resource.RLIMIT_NOFILE, lim.open_files),
                           (resource.RLIMIT_FSIZE, lim.file_mb << 20), (resource.RLIMIT_NPROC, self.nproc)):
            try:
                soft, hard = resource.getrlimit(res)
                value = value if hard == resource.RLIM_INFINITY else min(value, hard)
                resource.setrlimit(res, (value, hard if hard != resource.RLIM_INFINITY else value))
            except (ValueError, OSError):
                pass

    def close(self) -> None:
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds = []


def _user_tasks() -> int:
    """Processes and threads of this user now (the process limit counts them too)."""
    uid, n = os.getuid(), 0
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if os.stat(f"/proc/{p}").st_uid == uid:
                    n += len(os.listdir(f"/proc/{p}/task"))
            except OSError:
                continue
    return n


def command(argv: list[str], *, gpu: bool, slot: int = 0, limits: Limits = Limits(),
            hidden: dict[str, str] | None = None, env: dict[str, str] | None = None,
            extra_ro: list[str] | None = None) -> Command:
    """The bubblewrap command line that runs ``argv`` sandboxed.

    ``hidden`` maps package names (cupy, torch) to the reason they are not available: each is
    replaced by a stub that raises ImportError with that reason when used.
    """
    bwrap = bwrap_path() or "bwrap"
    privileged = os.geteuid() == 0
    a = [bwrap, "--die-with-parent", "--new-session", "--clearenv"]
    if privileged:
        # No user namespace: the runner drops to an unprivileged uid itself; it keeps only the
        # capabilities to do that, and loses them with the uid change.
        a += ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
              "--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        a += ["--unshare-all", "--disable-userns"] if _supports_disable_userns(bwrap) else ["--unshare-all"]
    made: set[str] = {"/"}  # folders that exist in the sandbox: created, or bound
    bound: set[str] = set()  # folders bound whole from the machine

    def mkdirs(path: str) -> None:
        """Create the parents of a mount point readable by everyone (bwrap makes them 0700)."""
        parts = Path(path).parent.parts
        for i in range(2, len(parts) + 1):
            d = str(Path(*parts[:i]))
            if d not in made:
                a.extend(["--perms", "0755", "--dir", d])
                made.add(d)

    def ro(src: str, dst: str | None = None) -> None:
        dst = dst or src
        mkdirs(dst)
        a.extend(["--ro-bind", src, dst])
        made.add(dst)
        bound.add(dst)

    # The system: /usr whole, the merged-/usr links or the real folders, the loader's cache.
    ro("/usr")
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            a.extend(["--symlink", os.readlink(top), top])
        elif os.path.isdir(top):
            ro(top)
    for etc in ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
                "/etc/localtime", "/etc/nvidia", "/etc/OpenCL"):
        if os.path.exists(etc):
            ro(etc)
    for d in _python_dirs():
        ro(d)
    ro(str(RUNNER), INSIDE_RUNNER)
    for d in extra_ro or ():  # e.g. compute-sanitizer's installation
        if os.path.isdir(d) and not any(d == m or d.startswith(m + os.sep) for m in bound):
            ro(d)
    fds: list[int] = []
    own = "the grader's own code is not importable by submissions"
    masked = [(str(ROOT / n), n, own) for n in ALWAYS_HIDDEN]  # where an editable install points
    masked += [(d, n, own) for d, n in _package_dirs(ALWAYS_HIDDEN)]
    masked += [(d, n, why) for n, why in (hidden or {}).items() for d, _ in _package_dirs([n])]
    for d, name, why in sorted(set(masked)):
        mkdirs(d)
        a.extend(["--perms", "0755", "--tmpfs", d])
        r, w = os.pipe()
        os.write(w, stub_source(name, why).encode())
        os.close(w)
        fds.append(r)
        a.extend(["--perms", "0444", "--ro-bind-data", str(r), os.path.join(d, "__init__.py")])
    a += ["--proc", "/proc", "--dev", "/dev"]
    if gpu:  # the driver's device nodes; its libraries are under /usr
        for node in _gpu_devices():
            a.extend(["--dev-bind", node, node])
    a += ["--perms", "1777", "--size", str(limits.scratch_mb << 20), "--tmpfs", "/tmp",
          "--perms", "1777", "--size", str(64 << 20), "--tmpfs", "/dev/shm", "--chdir", "/tmp"]
    environ = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "TMPDIR": "/tmp", "USER": "learner",
               "LOGNAME": "learner", "PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1",
               "PYTHONUNBUFFERED": "1", "NUMBA_CACHE_DIR": "/tmp/.numba", "CUPY_CACHE_DIR": "/tmp/.cupy",
               "OMP_NUM_THREADS": "4", "MKL_NUM_THREADS": "4", "NUMBA_NUM_THREADS": "4",
               "MPLBACKEND": "Agg", "MPLCONFIGDIR": "/tmp/.matplotlib"}
    environ.update({k: os.environ[k] for k in PASSED_ENV if k in os.environ})
    # The instructor's PYTHONPATH, less the course's checkout (its folders are bound above).
    path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
            if p and os.path.isdir(p) and os.path.realpath(p) != str(ROOT)
            and not os.path.isdir(os.path.join(p, "autograder", "labs"))]
    if path:
        environ["PYTHONPATH"] = os.pathsep.join(os.path.realpath(p) for p in path)
    environ.update(env or {})
    for k, v in environ.items():
        a.extend(["--setenv", k, v])
    uid = UID_BASE + slot
    nproc = limits.processes if privileged else _user_tasks() + limits.processes
    return Command(a + ["--", *argv], fds, privileged, uid, nproc, limits)


_DISABLE_USERNS: dict[str, bool] = {}


def _supports_disable_userns(bwrap: str) -> bool:
    if bwrap not in _DISABLE_USERNS:
        try:
            out = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.TimeoutExpired):
            out = ""
        _DISABLE_USERNS[bwrap] = "--disable-userns" in out
    return _DISABLE_USERNS[bwrap]


def as_user(slot: int = 0) -> list[str]:
    """The command prefix that runs what follows as the sandbox's unprivileged user (when
    bubblewrap runs as root): for a tool that starts the runner, so that no process of the
    sandbox keeps root while learner code runs."""
    uid = str(UID_BASE + slot)
    setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
    return [setpriv, "--reuid", uid, "--regid", uid, "--clear-groups"]


def drop_privileges(uid: int) -> None:
    """In the runner, first thing: become an unprivileged user (when bubblewrap ran as root)."""
    if os.getuid() == 0:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)  # also clears every capability


# --------------------------------------------------------------------------- its processes
def _pid_ns(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def _zombie(pid: int) -> bool:
    """Dead and waiting to be reaped: nothing of it runs. A sandbox's own init process often ends
    as one, its parent gone; where the machine's init reaps late (or never, in a container
    without one), waiting for it to vanish would hold up every submission."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                return False
        # A main thread that exited while its other threads run shows as a zombie too: not dead.
        return len(os.listdir(f"/proc/{pid}/task")) <= 1
    except (OSError, IndexError):
        return True  # gone already


class ProcessTree:
    """The processes of one sandbox, found by their pid namespace (or, without a sandbox, by
    their session), zombies left out: their memory, and killing them all."""

    def __init__(self, leader: int, sandboxed: bool) -> None:
        self.leader = leader
        self.sandboxed = sandboxed
        self.ns: str | None = None
        self.session = leader

    def _find_ns(self) -> None:
        if self.ns is None and self.sandboxed:
            for child in _children(self.leader):
                ns = _pid_ns(child)
                if ns and ns != _pid_ns(self.leader):
                    self.ns = ns
                    return

    def pids(self) -> list[int]:
        self._find_ns()
        out = []
        for p in os.listdir("/proc"):
            if not p.isdigit():
                continue
            pid = int(p)
            if pid == self.leader:
                continue
            if self.sandboxed:
                if self.ns is not None and _pid_ns(pid) == self.ns:
                    out.append(pid)
            else:
                try:
                    if os.getsid(pid) == self.session:
                        out.append(pid)
                except OSError:
                    continue
        return [pid for pid in out if not _zombie(pid)]

    def rss_gb(self) -> float:
        total = 0
        for pid in [self.leader, *self.pids()]:
            try:
                with open(f"/proc/{pid}/statm") as f:
                    total += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            except (OSError, ValueError, IndexError):
                continue
        return total / 2**30

    def kill(self, timeout: float = 10.0) -> bool:
        """Kill every process; True once none is left."""
        for pid in [self.leader, *self.pids()]:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if not self.sandboxed:
            try:
                os.killpg(self.session, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            left = self.pids()
            if not left:
                return True
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.02)
        return not self.pids()


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []

