"""A Docker-like container for tests, made without Docker: what the grader meets on Gradescope.

Docker's default profile runs a container's root with a short list of capabilities: without
CAP_SYS_ADMIN, bubblewrap cannot make its namespaces, and the grader must fall back on walls
that need none (``autograder/uid_walls.py``). Here a command runs as root in a private mount
namespace (so ``binds`` can lay out Gradescope's ``/autograder`` without touching the machine)
and with Docker's capability bounding set, so that every process it starts, bubblewrap
included, has exactly the rights it would have in such a container.
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

# Docker's default capabilities (moby's defaults: oci/caps/defaults.go).
DOCKER_CAPS = ("chown", "dac_override", "fsetid", "fowner", "mknod", "net_raw", "setgid", "setuid", "setfcap",
               "setpcap", "net_bind_service", "sys_chroot", "kill", "audit_write")


def unusable() -> str:
    """Why no such container can be made here ('' if it can)."""
    if os.geteuid() != 0:
        return "needs root (a private mount namespace and a bounding set)"
    for tool in ("unshare", "setpriv", "mount"):
        if shutil.which(tool) is None:
            return f"needs {tool} (util-linux)"
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"unshare --mount fails here: {probe.stderr.strip()}"
    return ""


def command(command: list[str], *, binds: dict[str, Path] | None = None, python: str | None = None) -> list[str]:
    """The command line that runs ``command`` in the container: ``binds`` maps a path inside (created,
    empty, where missing) to a folder of the machine's; ``python``: an interpreter installed under a
    folder other users cannot enter (pyenv under /root), made reachable as in an image, where
    Python lives in /usr or /opt."""
    lines = ["set -e"]
    for inside, outside in (binds or {}).items():
        if not os.path.isdir(inside):
            os.makedirs(inside, exist_ok=True)  # an empty mount point (the mount itself is private)
        lines.append(f"mount --bind {shlex.quote(str(outside))} {shlex.quote(inside)}")
    if python:
        lines += _reachable(python)
    caps = ",".join(["-all"] + [f"+{c}" for c in DOCKER_CAPS])
    lines.append(f"exec setpriv --bounding-set={caps} -- {shlex.join(command)}")
    return ["unshare", "--mount", "--propagation", "private", "bash", "-c", "\n".join(lines)]


def _reachable(python: str) -> list[str]:
    """Shell lines that let every user run ``python``: the first folder above its installation that
    others cannot enter becomes an open, empty tmpfs with the installation bound back into it."""
    install = Path(python).resolve().parent.parent
    closed = next((p for p in reversed(install.parents) if not os.stat(p).st_mode & 0o001), None)
    if closed is None:
        return []
    # the installation is held open on descriptor 3 while the tmpfs covers its path (mount must not
    # resolve /proc/self/fd/3 to that path: it would bind the empty tmpfs folder onto itself)
    q = shlex.quote
    return [f"exec 3<{q(str(install))}", f"mount -t tmpfs -o mode=0755 tmpfs {q(str(closed))}",
            f"mkdir -p {q(str(install))}", f"mount --no-canonicalize --bind /proc/self/fd/3 {q(str(install))}", "exec 3<&-"]


def run(cmd: list[str], *, binds: dict[str, Path] | None = None, env: dict | None = None, cwd: Path | None = None,
        timeout: float = 600, python: str | None = None) -> subprocess.CompletedProcess:
    """``cmd`` in the container (see ``command``), to its end."""
    return subprocess.run(command(cmd, binds=binds, python=python), env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)
