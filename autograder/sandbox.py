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

Where bubblewrap cannot make its namespaces (Docker's default profile, as on Gradescope) and
the grader is root, the runner gets other walls (``uid_walls.py``, ``confine.py``): a user of
its own with no capabilities, no_new_privs, seccomp, resource limits, a private scratch folder,
and Landlock where the kernel has it. Where neither can be made, there is no sandbox: grading
refuses to start rather than run submissions unconfined (``--no-sandbox`` says so on every
result). ``AUTOGRADER_SANDBOX=bwrap`` or ``=uid`` picks the walls instead of trying in turn.
"""
from __future__ import annotations

import glob
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
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
_WALLS: str | None = None  # "bwrap" or "uid", once available() found one
SANDBOX_ENV = "AUTOGRADER_SANDBOX"
VERDICT_ENV = "AUTOGRADER_SANDBOX_VERDICT"  # the grader's probe, handed to the judge processes it starts


_PROBING = threading.Lock()


def available() -> tuple[bool, str]:
    """Whether a sandbox can be made here, and what was tried (cached for the process). One probe at
    a time: the workers of ``--workers N`` ask at once, and two uid probes share one user, so one
    would kill the other's probe and the whole class would be graded as having no sandbox."""
    with _PROBING:
        return _available()


def verdict_env() -> dict[str, str]:
    """What a judge process started by this grader is told of the walls, so that it does not probe
    again: a uid probe runs as the first worker's user, and killing what it left (kill_all) would kill
    a submission that worker's judge is grading at that moment."""
    ok, why = available()
    return {SANDBOX_ENV: _WALLS, VERDICT_ENV: why} if ok and _WALLS else {}


def _available() -> tuple[bool, str]:
    global _AVAILABLE, _WALLS
    if _AVAILABLE is not None:
        return _AVAILABLE
    wanted = os.environ.get(SANDBOX_ENV, "")
    handed = os.environ.get(VERDICT_ENV)
    if handed and wanted in ("bwrap", "uid"):  # the grader that started this judge probed already
        _WALLS, _AVAILABLE = wanted, (True, handed)
        return _AVAILABLE
    if wanted not in ("", "bwrap", "uid"):
        _AVAILABLE = (False, f"{SANDBOX_ENV}={wanted!r}: it names bwrap or uid")
        return _AVAILABLE
    tried = []
    if wanted in ("", "bwrap"):
        ok, why = _try_bwrap()
        if ok:
            _WALLS, _AVAILABLE = "bwrap", (True, why)
            return _AVAILABLE
        tried.append(why)
    if wanted in ("", "uid"):
        ok, why = _try_uid()
        if ok:
            _WALLS, _AVAILABLE = "uid", (True, why + (f" ({tried[0]})" if tried else ""))
            return _AVAILABLE
        tried.append(why)
    _AVAILABLE = (False, "; ".join(tried))
    return _AVAILABLE


def walls() -> str:
    """The sandbox in use: "bwrap" or "uid" (available() must have said yes)."""
    if _WALLS is None and not available()[0]:
        raise RuntimeError(f"no sandbox can be made here: {available()[1]}")
    return _WALLS


def _try_bwrap() -> tuple[bool, str]:
    bwrap = bwrap_path()
    if bwrap is None:
        return False, "bubblewrap (bwrap) is not installed: apt-get install bubblewrap"
    cmd = _bwrap_command([sys.executable, "-c", "import os; print(os.getuid())"], gpu=False, slot=0)
    try:
        r = subprocess.run(cmd.argv, capture_output=True, text=True, timeout=30, pass_fds=cmd.fds,
                           preexec_fn=cmd.preexec)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"{bwrap} could not be started: {exc}"
    finally:
        cmd.close()
    if r.returncode != 0:
        detail = (r.stderr.strip().splitlines() or ["no message"])[-1]
        return False, (f"{bwrap} failed: {detail} (are user namespaces allowed? sysctl "
                       "kernel.unprivileged_userns_clone, or AppArmor's restriction on Ubuntu; in Docker, "
                       "the default profile forbids them)")
    version = subprocess.run([bwrap, "--version"], capture_output=True, text=True).stdout.strip()
    return True, f"{version or bwrap} works here"


# What the probe of the uid walls checks from inside: it runs as its own user, cannot read the
# grader's lab references, cannot open a network socket, and can write its scratch folder.
_UID_PROBE = r"""
import os, socket, sys
said = []
try:
    open(sys.argv[1], "rb").close()
    said.append("read " + sys.argv[1])
except OSError:
    pass
try:
    socket.socket(socket.AF_INET).close()
    said.append("opened a network socket")
except OSError:
    pass
with open("scratch-probe", "w") as f:
    f.write("ok")
print("uid", os.getuid(), "; ".join(said))
"""


def _try_uid() -> tuple[bool, str]:
    from . import uid_walls

    if os.geteuid() != 0:
        return False, ("the grader is not root, so it cannot run submissions as a user of their own (run it as "
                       "root in its container, or let bubblewrap make user namespaces)")
    probe_file = str(Path(__import__("autograder.labs", fromlist=["x"]).__file__).resolve())
    cmd = _uid_command([sys.executable, "-I", "-c", _UID_PROBE, probe_file], gpu=False, slot=0)
    try:
        r = subprocess.run(cmd.argv, capture_output=True, text=True, timeout=60, pass_fds=cmd.fds)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"the uid sandbox could not be started: {exc}"
    finally:
        cmd.close()
        from .uid_walls import kill_all

        kill_all(cmd.uid)
        cmd.release()
    out = r.stdout.strip()
    if r.returncode != 0 or not out.startswith(f"uid {cmd.uid}"):
        detail = (r.stderr.strip().splitlines() or [out or "no message"])[-1]
        return False, f"the uid sandbox failed: {detail}"
    leaks = out[len(f"uid {cmd.uid}"):].strip()
    abi = uid_walls.landlock_abi()
    if leaks:
        return False, (f"the uid sandbox is not tight here: a process inside it {leaks}"
                       + ("" if abi else " (the kernel has no Landlock, so ordinary file permissions must keep "
                                         "the grader's files from other users: chmod -R o-rwx them)"))
    return True, ("a user of its own, no_new_privs, seccomp, resource limits and a private scratch folder" +
                  (f", Landlock (ABI {abi})" if abi else ", file permissions (no Landlock in this kernel)"))


# --------------------------------------------------------------------------- what is visible
def _python_dirs(keep_tmp: bool = False) -> list[str]:
    """The directories the interpreter and its packages live in (read-only inside). ``keep_tmp``:
    those under /tmp too (a venv there), which the walls must bind or allow on their own."""
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                os.path.dirname(os.path.realpath(sys.executable))}
    dirs = set(prefixes)
    configured = {os.path.realpath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    for entry in sys.path:
        if not entry or not os.path.isdir(entry):
            continue
        real = os.path.realpath(entry)
        if real == str(ROOT) or _a_checkout(real):
            continue  # the course's checkout: its code stays outside (an installed course is hidden by stubs)
        if not _a_library_folder(real, prefixes, configured):
            continue  # a script's own folder on the path (/tmp, a home folder): not the interpreter's to show
        dirs.add(entry)
    out: list[str] = []
    for d in sorted(dirs, key=len):  # a folder already bound covers the folders inside it
        real = os.path.realpath(d)
        if any(real == o or real.startswith(o + os.sep) for o in out):
            continue
        if real.startswith(("/usr/", "/proc", "/dev")) or real == "/usr":
            continue  # /usr is bound whole; /proc and /dev are the sandbox's own
        if not keep_tmp and (real == "/tmp" or real.startswith("/tmp/")):
            continue
        out.append(real)
    return out


def _a_library_folder(folder: str, prefixes, configured) -> bool:
    """A folder of the path the interpreter installed or was told to use: inside one of its prefixes,
    a site-packages or dist-packages folder, or named in PYTHONPATH."""
    inside = any(folder == os.path.realpath(p) or folder.startswith(os.path.realpath(p) + os.sep) for p in prefixes)
    return inside or folder in configured or os.path.basename(folder) in ("site-packages", "dist-packages")


def _a_checkout(folder: str) -> bool:
    """A checkout of the course (its code and its project file), not a site-packages folder where the
    course is installed among the libraries the sandbox needs."""
    return os.path.isdir(os.path.join(folder, "autograder", "labs")) and \
        os.path.isfile(os.path.join(folder, "pyproject.toml"))


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


# In a runner's command line: where the runner file is, and the uid it runs as (each walls fill them in).
RUNNER_ARG = "{runner}"
UID_ARG = "{uid}"


@dataclass
class Command:
    argv: list[str]
    fds: list[int]  # to keep open in the child (stub files bubblewrap copies in)
    privileged: bool  # bubblewrap runs as root: the runner must drop to `uid`
    uid: int
    nproc: int
    limits: Limits
    walls: str = "bwrap"
    scratch: object = None  # the uid walls' folders (uid_walls.Scratch), removed by close()

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
        """After the start: the stub files' descriptors (the process has its own copies)."""
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds = []

    def release(self) -> None:
        """Once every process of the sandbox is gone: the uid walls' folders, what the user left in
        shared scratch folders, and the user itself (free for the next runner)."""
        if self.scratch is not None:
            from . import uid_walls

            uid_walls.remove_leftovers(self.uid)
            self.scratch.remove()
            uid_walls.give_back_uid(self.uid)
            self.scratch = None

    def scratch_bytes(self) -> int:
        """What the runner keeps in its scratch folder (the uid walls: no tmpfs bounds it)."""
        return self.scratch.bytes_used() if self.scratch is not None else 0

    def preexec_fn(self):
        """What subprocess runs in the child before exec: the limits, for bubblewrap (the uid
        walls set their own in confine.py, in a process of their own)."""
        return self.preexec if self.walls == "bwrap" else None


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
    """The command line that runs ``argv`` sandboxed, in the walls ``available()`` found.

    ``hidden`` maps package names (cupy, torch) to the reason they are not available: each is
    replaced by a stub that raises ImportError with that reason when used. In ``argv``,
    ``RUNNER_ARG`` stands for the runner's file and ``UID_ARG`` for the uid it runs as.
    """
    make = _uid_command if walls() == "uid" else _bwrap_command
    return make(argv, gpu=gpu, slot=slot, limits=limits, hidden=hidden, env=env, extra_ro=extra_ro)


def _environment(tmp: str, env: dict[str, str] | None) -> dict[str, str]:
    """The sandbox's whole environment: nothing of the grader's but library settings."""
    environ = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": tmp, "TMPDIR": tmp, "USER": "learner",
               "LOGNAME": "learner", "PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1",
               "PYTHONUNBUFFERED": "1", "NUMBA_CACHE_DIR": f"{tmp}/.numba", "CUPY_CACHE_DIR": f"{tmp}/.cupy",
               "OMP_NUM_THREADS": "4", "MKL_NUM_THREADS": "4", "NUMBA_NUM_THREADS": "4",
               "MPLBACKEND": "Agg", "MPLCONFIGDIR": f"{tmp}/.matplotlib"}
    environ.update({k: os.environ[k] for k in PASSED_ENV if k in os.environ})
    # The instructor's PYTHONPATH, less the course's checkout (its folders are bound above).
    path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
            if p and os.path.isdir(p) and os.path.realpath(p) != str(ROOT)
            and not _a_checkout(os.path.realpath(p))]
    if path:
        environ["PYTHONPATH"] = os.pathsep.join(os.path.realpath(p) for p in path)
    environ.update(env or {})
    return environ


def _fill(argv: list[str], runner: str, uid: int) -> list[str]:
    return [runner if a == RUNNER_ARG else str(uid) if a == UID_ARG else a for a in argv]


def _uid_command(argv: list[str], *, gpu: bool, slot: int = 0, limits: Limits = Limits(),
                 hidden: dict[str, str] | None = None, env: dict[str, str] | None = None,
                 extra_ro: list[str] | None = None) -> Command:
    """The uid walls (``uid_walls.py``): confine.py starts ``argv`` as a user of its own."""
    from . import uid_walls

    own = "the grader's own code is not importable by submissions"
    stubs = {n: stub_source(n, own) for n in ALWAYS_HIDDEN}
    stubs.update({n: stub_source(n, why) for n, why in (hidden or {}).items()})
    hidden_dirs = [str(ROOT / n) for n in ALWAYS_HIDDEN] + [d for d, _ in _package_dirs(stubs)]
    uid = uid_walls.take_uid(slot)
    try:
        scratch = uid_walls.Scratch(uid, RUNNER, stubs)
    except BaseException:
        uid_walls.give_back_uid(uid)
        raise
    read, listed = uid_walls.readable(_python_dirs(keep_tmp=True), hidden_dirs, list(extra_ro or ()))
    environ = _environment(str(scratch.work), env)
    environ["PYTHONPATH"] = os.pathsep.join([str(scratch.stubs)] + [p for p in environ.get("PYTHONPATH", "").split(
        os.pathsep) if p])
    devices = list(uid_walls.DEVICES) + (_gpu_devices() if gpu else [])
    rlimits = {"RLIMIT_CORE": 0, "RLIMIT_NOFILE": limits.open_files, "RLIMIT_FSIZE": limits.file_mb << 20,
               "RLIMIT_NPROC": limits.processes}
    cfg = uid_walls.config(_fill(argv, str(scratch.runner), uid), uid=uid, scratch=scratch, read=read,
                           listed=listed, devices=devices, env=environ, rlimits=rlimits,
                           landlock=uid_walls.landlock_abi() > 0)
    return Command(uid_walls.launcher(cfg), [], True, uid, limits.processes, limits, walls="uid", scratch=scratch)


def _bwrap_command(argv: list[str], *, gpu: bool, slot: int = 0, limits: Limits = Limits(),
                   hidden: dict[str, str] | None = None, env: dict[str, str] | None = None,
                   extra_ro: list[str] | None = None) -> Command:
    """The bubblewrap command line that runs ``argv`` sandboxed."""
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
    under_tmp = []  # an interpreter under /tmp (a venv there) is bound after the sandbox's own /tmp
    for d in _python_dirs(keep_tmp=True):
        if d == "/tmp" or d.startswith("/tmp/"):
            under_tmp.append(d)
        else:
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

    def mask(d: str, name: str, why: str) -> None:
        """A stub package over folder ``d``: any use of the package says why it is not here."""
        mkdirs(d)
        a.extend(["--perms", "0755", "--tmpfs", d])
        r, w = os.pipe()
        os.write(w, stub_source(name, why).encode())
        os.close(w)
        fds.append(r)
        a.extend(["--perms", "0444", "--ro-bind-data", str(r), os.path.join(d, "__init__.py")])

    def in_tmp(d: str) -> bool:
        return d == "/tmp" or d.startswith("/tmp/")

    for d, name, why in sorted(set(masked)):
        if not in_tmp(d):  # those under /tmp (a venv there) after the sandbox's own /tmp and the venv's bind
            mask(d, name, why)
    a += ["--proc", "/proc", "--dev", "/dev"]
    if gpu:  # the driver's device nodes; its libraries are under /usr
        for node in _gpu_devices():
            a.extend(["--dev-bind", node, node])
    a += ["--perms", "1777", "--size", str(limits.scratch_mb << 20), "--tmpfs", "/tmp",
          "--perms", "1777", "--size", str(64 << 20), "--tmpfs", "/dev/shm", "--chdir", "/tmp"]
    made.difference_update({m for m in made if in_tmp(m)})  # the new /tmp holds none of the folders made before
    made.add("/tmp")
    for d in under_tmp:
        ro(d)
    for d, name, why in sorted(set(masked)):
        if in_tmp(d):
            mask(d, name, why)
    for k, v in _environment("/tmp", env).items():
        a.extend(["--setenv", k, v])
    uid = UID_BASE + slot
    nproc = limits.processes if privileged else _user_tasks() + limits.processes
    return Command(a + ["--", *_fill(argv, INSIDE_RUNNER, uid)], fds, privileged, uid, nproc, limits)


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
    """The processes of one sandbox, zombies left out: their memory, and killing them all. Found by
    their pid namespace (bubblewrap), by their user (the uid walls: ``uid``), or, without a
    sandbox, by their session."""

    def __init__(self, leader: int, sandboxed: bool, uid: int | None = None) -> None:
        self.leader = leader
        self.sandboxed = sandboxed
        self.uid = uid
        self.ns: str | None = None
        self.session = leader

    def _find_ns(self) -> None:
        if self.ns is None and self.sandboxed and self.uid is None:
            for child in _children(self.leader):
                ns = _pid_ns(child)
                if ns and ns != _pid_ns(self.leader):
                    self.ns = ns
                    return

    def _member(self, pid: int) -> bool:
        try:
            if self.uid is not None:
                return os.stat(f"/proc/{pid}").st_uid == self.uid
            if self.sandboxed:
                return self.ns is not None and _pid_ns(pid) == self.ns
            return os.getsid(pid) == self.session
        except OSError:
            return False

    def pids(self) -> list[int]:
        self._find_ns()
        out = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != self.leader and self._member(int(p))]
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
        if self.uid is not None:
            from .uid_walls import kill_all

            kill_all(self.uid)
        elif not self.sandboxed:
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

