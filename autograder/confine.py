"""Confine a process without namespaces, then run a command in it (the sandbox's ``uid`` walls).

Where bubblewrap cannot make its namespaces (Docker's default profile, which Gradescope uses;
kernels with unprivileged user namespaces off), the grader, running as root, starts the runner
through this launcher instead::

    python -I -S confine.py CONFIG_JSON

It runs as root for a moment, in a fresh single-threaded process (not a pre-exec hook of the
multithreaded judge), and before it executes the command:

- sets resource limits (processes of the sandbox's user, open files, file size, no core dumps);
- sets ``no_new_privs``, so nothing it executes can gain privileges (setuid binaries, file
  capabilities);
- applies a Landlock ruleset where the kernel has Landlock (5.13 and newer): the process may read
  and execute the system, the interpreter and the libraries it is given, write its own scratch
  folder, and touch nothing else of the file system; TCP, signals to other processes and abstract
  Unix sockets are refused where the kernel's Landlock knows them;
- applies a seccomp filter: sockets other than Unix ones, ptrace, reading other processes'
  memory, mounts, namespaces, BPF, io_uring, kernel keyrings and module loading are refused;
- becomes the sandbox's unprivileged user (a uid of its own, no groups), which drops every
  capability, and checks that it has none left.

Every step that cannot be made fails the launch with exit status 125 and a line on stderr that
starts with "sandbox:", except Landlock, which is reported as absent in the config's own
``landlock`` field (the grader decides whether it may go on without it). This file uses the
standard library only and imports nothing of the grader: it runs with ``-I -S``.
"""
from __future__ import annotations

import ctypes
import json
import os
import platform
import resource
import struct
import sys

FAIL = 125
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2

# --------------------------------------------------------------------------- Landlock
SYS_LANDLOCK_CREATE_RULESET, SYS_LANDLOCK_ADD_RULE, SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
LANDLOCK_CREATE_RULESET_VERSION = 1
LANDLOCK_RULE_PATH_BENEATH = 1
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR, MAKE_REG = 1 << 4, 1 << 5, 1 << 6, 1 << 7, 1 << 8
MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # the rights a rule on a file may name
READ = EXECUTE | READ_FILE | READ_DIR
WRITE = READ | WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_DIR | MAKE_REG | MAKE_SYM | MAKE_FIFO | MAKE_SOCK | \
    REFER | TRUNCATE
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1


def _fs_rights(abi: int) -> int:
    """Every file-system right this Landlock ABI knows: all of them are handled (denied unless a
    rule grants them)."""
    rights = (1 << 13) - 1
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


def landlock_abi(libc) -> int:
    """The kernel's Landlock ABI version, 0 where it has none (or it is disabled)."""
    libc.syscall.restype = ctypes.c_long
    v = libc.syscall(SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0),
                     ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION))
    return max(int(v), 0)


def apply_landlock(libc, abi: int, read: list[str], write: list[str], devices: list[str],
                   listed: list[str] = ()) -> None:
    """Only these paths from now on: ``read`` (read and execute), ``write`` (anything inside),
    ``devices`` (read, write and ioctl), ``listed`` (folders whose entries may be listed, not
    read: parents of something hidden). Paths that do not exist are skipped."""
    handled = _fs_rights(abi)
    fields = [handled]
    if abi >= 4:
        fields.append(NET_BIND_TCP | NET_CONNECT_TCP)  # handled, no rule: no TCP at all
    if abi >= 6:
        fields.append(SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL)
    attr = struct.pack(f"<{len(fields)}Q", *fields)
    fd = libc.syscall(SYS_LANDLOCK_CREATE_RULESET, attr, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if fd < 0:
        fail(f"Landlock could not make a ruleset: {os.strerror(ctypes.get_errno())}")
    try:
        for paths, rights in ((read, READ), (write, WRITE), (devices, READ_FILE | WRITE_FILE | IOCTL_DEV),
                              (listed, READ_DIR)):
            for path in paths:
                _add_rule(libc, fd, path, rights & handled)
        if libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, fd, ctypes.c_uint32(0)) != 0:
            fail(f"Landlock could not restrict the process: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(fd)


def _add_rule(libc, ruleset: int, path: str, rights: int) -> None:
    try:
        target = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # not on this machine
    try:
        if not os.path.isdir(path):
            rights &= FILE_RIGHTS
        rule = struct.pack("<Qi", rights, target)  # struct landlock_path_beneath_attr (packed)
        if libc.syscall(SYS_LANDLOCK_ADD_RULE, ruleset, LANDLOCK_RULE_PATH_BENEATH, rule, ctypes.c_uint32(0)) != 0:
            fail(f"Landlock refused a rule for {path}: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(target)


# --------------------------------------------------------------------------- seccomp
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
# System calls the sandbox refuses (EPERM), by architecture: other processes' memory, mounts and
# namespaces, kernel code and BPF, io_uring (its operations bypass this filter), kernel keyrings.
DENIED = {
    "x86_64": {"ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "mount": 165, "umount2": 166,
               "pivot_root": 155, "chroot": 161, "swapon": 167, "swapoff": 168, "reboot": 169,
               "init_module": 175, "finit_module": 313, "delete_module": 176, "kexec_load": 246,
               "kexec_file_load": 320, "unshare": 272, "setns": 308, "bpf": 321, "perf_event_open": 298,
               "userfaultfd": 323, "keyctl": 250, "add_key": 248, "request_key": 249,
               "open_by_handle_at": 304, "name_to_handle_at": 303, "io_uring_setup": 425,
               "io_uring_enter": 426, "io_uring_register": 427, "fsopen": 430, "fsmount": 432,
               "move_mount": 429, "open_tree": 428, "mount_setattr": 442, "pidfd_getfd": 438},
    "aarch64": {"ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "mount": 40, "umount2": 39,
                "pivot_root": 41, "chroot": 51, "swapon": 224, "swapoff": 225, "reboot": 142,
                "init_module": 105, "finit_module": 273, "delete_module": 106, "kexec_load": 104,
                "kexec_file_load": 294, "unshare": 97, "setns": 268, "bpf": 280, "perf_event_open": 241,
                "userfaultfd": 282, "keyctl": 219, "add_key": 217, "request_key": 218,
                "open_by_handle_at": 265, "name_to_handle_at": 264, "io_uring_setup": 425,
                "io_uring_enter": 426, "io_uring_register": 427, "fsopen": 430, "fsmount": 432,
                "move_mount": 429, "open_tree": 428, "mount_setattr": 442, "pidfd_getfd": 438},
}
SOCKET = {"x86_64": 41, "aarch64": 198}
AF_UNIX = 1
X32_BIT = 0x40000000  # x86_64's x32 ABI: the same calls under other numbers
RET_ALLOW, RET_KILL = 0x7FFF0000, 0x80000000
EPERM, EAFNOSUPPORT = 1, 97
LD_ABS_W, JEQ_K, JGE_K, RET_K = 0x20, 0x15, 0x35, 0x06


def seccomp_program(arch: str) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k) instructions. Jumps name labels; the offsets BPF wants
    (instructions to skip) are worked out at the end."""
    errno = lambda e: 0x00050000 | e  # noqa: E731 - SECCOMP_RET_ERRNO
    prog: list = [(LD_ABS_W, None, None, 4),  # seccomp_data.arch
                  (JEQ_K, "nr", "kill", AUDIT_ARCH[arch]),
                  "kill", (RET_K, None, None, RET_KILL),  # another ABI's calls: never ours
                  "nr", (LD_ABS_W, None, None, 0)]  # seccomp_data.nr
    if arch == "x86_64":
        prog.append((JGE_K, "deny", "next", X32_BIT))
    prog.append("next")
    for nr in sorted(set(DENIED[arch].values())):
        prog.append((JEQ_K, "deny", None, nr))
    prog += [(JEQ_K, "socket", "allow", SOCKET[arch]),
             "allow", (RET_K, None, None, RET_ALLOW),
             "socket", (LD_ABS_W, None, None, 16),  # socket(): seccomp_data.args[0], low word: the family
             (JEQ_K, "unix", "nofamily", AF_UNIX),
             "unix", (RET_K, None, None, RET_ALLOW),  # BPF jumps only forward: a second ALLOW
             "nofamily", (RET_K, None, None, errno(EAFNOSUPPORT)),
             "deny", (RET_K, None, None, errno(EPERM))]
    labels, code, pending = {}, [], []
    for item in prog:
        if isinstance(item, str):
            pending.append(item)
            continue
        for name in pending:
            labels[name] = len(code)
        pending = []
        code.append(item)

    def skip(target, here: int) -> int:
        return 0 if target is None else labels[target] - here - 1

    return [(op, skip(jt, i), skip(jf, i), k) for i, (op, jt, jf, k) in enumerate(code)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def apply_seccomp(libc, arch: str) -> None:
    prog = seccomp_program(arch)
    raw = b"".join(struct.pack("<HBBI", *ins) for ins in prog)
    buf = ctypes.create_string_buffer(raw, len(raw))
    fprog = _SockFprog(len(prog), ctypes.cast(buf, ctypes.c_void_p))
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        fail(f"the seccomp filter could not be set: {os.strerror(ctypes.get_errno())}")


# --------------------------------------------------------------------------- the launch
def fail(message: str) -> None:
    print(f"sandbox: {message}", file=sys.stderr, flush=True)
    os._exit(FAIL)


def set_limits(limits: dict) -> None:
    for name, value in limits.items():
        res = getattr(resource, name)
        try:
            _, hard = resource.getrlimit(res)
            value = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(res, (value, value))
        except (ValueError, OSError) as exc:
            fail(f"could not set {name}: {exc}")


def become(uid: int) -> None:
    """The sandbox's user, with no groups and no capability left."""
    try:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    except OSError as exc:
        fail(f"could not become user {uid}: {exc}")
    if os.getuid() != uid or os.geteuid() != uid or os.getgid() != uid:
        fail(f"still running as {os.getuid()}:{os.getgid()}, not {uid}")
    with open("/proc/self/status") as f:
        caps = {k: v.strip() for k, v in (line.split(":", 1) for line in f if line.startswith("Cap"))}
    if any(int(caps.get(k, "0"), 16) for k in ("CapEff", "CapPrm", "CapAmb")):
        fail(f"capabilities left after the change of user: {caps}")


def main(config: dict) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    os.umask(0o077)
    set_limits(config.get("limits", {}))
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        fail(f"no_new_privs could not be set: {os.strerror(ctypes.get_errno())}")
    arch = platform.machine()
    if arch not in AUDIT_ARCH:
        fail(f"no seccomp filter for the {arch} architecture")
    if config.get("landlock"):
        abi = landlock_abi(libc)
        if abi < 1:
            fail("Landlock is not available in this kernel")
        apply_landlock(libc, abi, config["read"], config["write"], config.get("devices", []), config.get("list", []))
    apply_seccomp(libc, arch)
    if os.getuid() == 0:
        become(int(config["uid"]))
    os.chdir(config["cwd"])
    argv = config["argv"]
    try:
        os.execve(argv[0], argv, config["env"])
    except PermissionError as exc:  # a venv in a home folder other users cannot enter (/root is 700)
        fail(f"could not start {argv[0]}: {exc}; the submissions run as a user of their own, who must be able "
             f"to read and run the Python environment: put it where every user can (under /opt or /usr/local), "
             f"or open its folders to them (chmod o+rx on each folder above it)")
    except OSError as exc:
        fail(f"could not start {argv[0]}: {exc}")


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
