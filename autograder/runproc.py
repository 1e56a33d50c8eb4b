"""Starting a runner process (sandboxed, or trusted for the lab's reference) and talking to it.

Every answer from a runner has a deadline for the whole message and a byte budget; a process
that dies, hangs, prints too much or uses too much memory is killed with everything it
started, and the exercise it was on gets a plain message. A runner's answers are JSON and are
checked before use: nothing it sends can raise in the judge.
"""
from __future__ import annotations

import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from . import sandbox

MAX_REPLY = 1 << 20  # bytes of one message from a runner: messages and flags, never data
OUTPUT_LIMIT = 2 << 20  # bytes of printing before the runner is stopped
RSS_EVERY_S = 0.05  # how often the host memory of a runner's processes is summed
SCRATCH_EVERY_S = 1.0  # how often the uid walls' scratch folder is measured
# Seconds a runner may take to import the exercise's libraries and build the grader's walls, before
# any learner code runs: its own budget, not the learner's time limit (torch and Triton alone take
# tens of seconds on a loaded CPU).
IMPORT_BUDGET_S = 300.0
TAIL = 64 << 10  # bytes of printing kept for the learner to see
LINE_LIMIT = 1 << 20  # bytes of one line kept (a profiler prints a table row of tens of kB)
SIGNALS = {signal.SIGSEGV: "segmentation fault", signal.SIGABRT: "abort", signal.SIGKILL: "killed",
           signal.SIGBUS: "bus error", signal.SIGFPE: "floating-point exception"}


class RunnerFailed(Exception):
    """The runner died, hung, printed too much, used too much memory or answered nonsense."""


class OutputLog:
    """The runner's stdout and stderr, read from a pipe: a byte count and the last part."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.total = 0
        self.tail = bytearray()
        self.lines_seen: list[str] = []  # every line, up to a limit, for the sanitizer's reports
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        partial = b""
        while True:
            try:
                data = os.read(self.fd, 65536)
            except OSError:
                break
            if not data:
                break
            with self.lock:
                self.total += len(data)
                self.tail += data
                if len(self.tail) > TAIL:
                    del self.tail[:len(self.tail) - TAIL]
                if len(self.lines_seen) < 20000:
                    partial += data
                    *lines, partial = partial.split(b"\n")
                    self.lines_seen += [x.decode("utf-8", "replace") for x in lines]
                    partial = partial[-LINE_LIMIT:]
        try:
            os.close(self.fd)
        except OSError:
            pass

    def mark(self) -> int:
        with self.lock:
            return len(self.lines_seen)

    def lines_since(self, mark: int) -> list[str]:
        with self.lock:
            return self.lines_seen[mark:]

    def text(self) -> str:
        with self.lock:
            return bytes(self.tail).decode("utf-8", "replace")


class RunnerProcess:
    """One runner: ``job`` is its first message (what to load)."""

    _rss_checked = 0.0  # when the memory of its processes was last summed (time.monotonic)
    _scratch_checked = 0.0  # when the uid walls' scratch folder was last measured
    cmd = None  # the sandbox's command (sandbox.Command): its uid and folders, released when the runner ends

    def __init__(self, job: dict, *, simulator: bool, sandboxed: bool, slot: int = 0,
                 memory_limit_gb: float = 16.0, hidden: dict | None = None, trusted: bool = False,
                 sanitize: str | None = None, wrap: list[str] | None = None,
                 wrap_dirs: list[str] | None = None) -> None:
        # wrap: a profiler's command line (Nsight Compute) that starts the runner; wrap_dirs: its
        # installation, bound into the sandbox
        self.memory_limit_gb = memory_limit_gb
        self.sandboxed = sandboxed and not trusted
        parent, child = socket.socketpair()
        self.sock = parent
        out_r, out_w = os.pipe()
        # Simulator mode: Numba's CUDA simulator, and Triton's interpreter for Triton kernels.
        # NumPy's OpenBLAS on one thread: its helper threads spin at import (a fifth of a simulated
        # runner's start, on a core a parallel worker needs), and a runner times GPU kernels, not BLAS.
        env_extra = {"NUMBA_ENABLE_CUDASIM": "1" if simulator else "0", "TRITON_INTERPRET": "1" if simulator else "0",
                     "OPENBLAS_NUM_THREADS": "1"}
        self.tmp = None
        if self.sandboxed:
            argv = [sys.executable, sandbox.RUNNER_ARG, str(child.fileno()), sandbox.UID_ARG]
            limits = sandbox.Limits(memory_gb=memory_limit_gb)
            self.scratch_limit = limits.scratch_mb << 20
            extra_ro = list(wrap_dirs or [])
            if sanitize:
                argv = sanitizer_prefix(sanitize) + argv
                extra_ro.append(str(Path(_sanitizer()).resolve().parent.parent))
            argv = list(wrap or []) + argv
            if argv[0] != sys.executable and os.geteuid() == 0 and sandbox.walls() == "bwrap":
                # A tool starts the runner (compute-sanitizer, Nsight Compute): it runs as the
                # sandbox's unprivileged user too, not as the root bubblewrap starts with (the
                # uid walls change the user before anything runs).
                argv = sandbox.as_user(slot) + argv
            self.cmd = sandbox.command(argv, gpu=not simulator, slot=slot, limits=limits, hidden=hidden,
                                       env=env_extra, extra_ro=extra_ro or None)
            argv = self.cmd.argv
            fds = self.cmd.fds + [child.fileno()]
            preexec = self.cmd.preexec_fn()
            cwd = "/"
            env = None
        else:
            # Trusted (the reference) or --no-sandbox: a plain process with a scrubbed environment
            # and a private working folder.
            runner = str(Path(__file__).resolve().parent / "runner.py")
            argv = [sys.executable, runner, str(child.fileno()), "0"]
            if sanitize and not trusted:
                argv = sanitizer_prefix(sanitize) + argv
            argv = list(wrap or []) + argv
            fds = [child.fileno()]
            preexec = die_with_parent
            self.tmp = tempfile.TemporaryDirectory(prefix="autograder-")
            cwd = self.tmp.name
            env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOGRADER_")}
            env.update(env_extra, PYTHONUNBUFFERED="1", HOME=self.tmp.name, TMPDIR=self.tmp.name)
            root = str(Path(__file__).resolve().parent.parent)
            env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in [os.environ.get("PYTHONPATH")] if p])
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out_w, stderr=out_w, pass_fds=fds,
                                         env=env, cwd=cwd, start_new_session=True, preexec_fn=preexec)
        except BaseException:
            if self.cmd is not None:
                self.cmd.release()
            raise
        finally:
            os.close(out_w)
            child.close()
            if self.cmd is not None:
                self.cmd.close()
        self.log = OutputLog(out_r)
        uid = self.cmd.uid if self.cmd is not None and self.cmd.walls == "uid" else None
        self.tree = sandbox.ProcessTree(self.proc.pid, self.sandboxed, uid=uid)
        self.mapped: set[int] = set()
        self.send(job)

    # -- messages
    def send(self, obj, fds: list[int] = ()) -> None:
        data = json.dumps(obj).encode()
        frame = struct.pack("<I", len(data)) + data
        try:
            if fds:
                socket.send_fds(self.sock, [frame[:4]], list(fds))
                self.sock.sendall(frame[4:])
            else:
                self.sock.sendall(frame)
        except OSError:
            raise RunnerFailed(self._death()) from None

    def receive(self, timeout: float) -> dict:
        """One message, within ``timeout`` seconds in all, however slowly it arrives."""
        deadline = time.monotonic() + timeout
        head = self._read(4, deadline, timeout)
        (n,) = struct.unpack("<I", head)
        if n > MAX_REPLY:
            self.kill()
            raise RunnerFailed(f"the process running your code sent {n:,} bytes where a short message "
                               "was expected; stopped")
        body = self._read(n, deadline, timeout)
        try:
            msg = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            self.kill()
            raise RunnerFailed("the grader could not read the answer of the process running your code") from None
        if not isinstance(msg, dict):
            self.kill()
            raise RunnerFailed("the grader could not read the answer of the process running your code")
        return msg

    def _read(self, n: int, deadline: float, timeout: float) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            self._watch(deadline, timeout)
            ready, _, _ = select.select([self.sock], [], [], 0.05)
            if not ready:
                continue
            try:
                chunk = self.sock.recv(min(n - len(buf), 1 << 20))
            except OSError:
                chunk = b""
            if not chunk:
                raise RunnerFailed(self._death())
            buf += chunk
        return bytes(buf)

    def _watch(self, deadline: float, timeout: float) -> None:
        if self.proc.poll() is not None:
            raise RunnerFailed(self._death())
        if self.log.total > OUTPUT_LIMIT:
            self.kill()
            raise RunnerFailed(f"your code printed more than {OUTPUT_LIMIT >> 20} MB; stopped")
        now = time.monotonic()
        # The memory of the whole process tree, from /proc: as often as while waiting on a call
        # (every 50 ms), not on every one of a policy's thousands of quick calls.
        if now - self._rss_checked >= RSS_EVERY_S:
            self._rss_checked = now
            if self.tree.rss_gb() > self.memory_limit_gb:
                self.kill()
                raise RunnerFailed(f"your code used more than {self.memory_limit_gb:g} GB of host memory; stopped")
        if self.cmd is not None and self.cmd.scratch is not None and now - self._scratch_checked >= SCRATCH_EVERY_S:
            self._scratch_checked = now  # the uid walls' scratch folder is on disk: no tmpfs bounds it
            if self.cmd.scratch_bytes() > self.scratch_limit:
                self.kill()
                raise RunnerFailed(f"your code wrote more than {self.scratch_limit >> 20} MB of temporary files; "
                                   "stopped")
        if time.monotonic() > deadline:
            self.kill()
            raise RunnerFailed(f"did not finish within {timeout:.0f} s (an endless loop, "
                               "a kernel that never ends, or a grid far too large?)")

    def hello(self, timeout: float) -> dict:
        """The runner's answer to its job: after the libraries are in (within their own budget,
        IMPORT_BUDGET_S), the learner's cells within ``timeout``."""
        msg = self.receive(max(IMPORT_BUDGET_S, timeout))
        return self.receive(timeout) if msg.get("ready") == "libraries" else msg

    def pending(self) -> bool:
        """Whether a message waits unread (a request given up on): the next answer would be stale."""
        try:
            return bool(select.select([self.sock], [], [], 0)[0])
        except (OSError, ValueError):
            return True

    def request(self, msg: dict, timeout: float, fds: list[int] = ()) -> dict:
        self.send(msg, fds)
        return self.receive(timeout)

    def map(self, arena, cid: int, timeout: float) -> None:
        """Give the runner a chunk of the judge's memory (once)."""
        if cid in self.mapped:
            return
        c = arena.chunks[cid]
        fd = c.export()
        try:
            reply = self.request({"op": "map", "chunk": cid, "size": c.size,
                                  "kind": "host" if c.kind == "host" else "device"}, timeout, [fd])
        finally:
            os.close(fd)
        if not reply.get("ok"):
            raise RunnerFailed("the process running your code could not map the grader's memory")
        self.mapped.add(cid)

    def unmap(self, cids, timeout: float) -> None:
        cids = [c for c in cids if c in self.mapped]
        if cids and self.alive():
            self.request({"op": "unmap", "chunks": cids}, timeout)
        self.mapped.difference_update(cids)

    # -- life and death
    def alive(self) -> bool:
        return self.proc.poll() is None

    def _death(self) -> str:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
            return "the process running your code stopped answering"
        if code > 128 and self.sandboxed and self.cmd is not None and self.cmd.walls == "bwrap":
            code = -(code - 128)  # bubblewrap passes on its child's signal as 128 + n
        said = [line for line in self.log.text().splitlines() if line.startswith("sandbox: ")]
        if said:  # confine.py could not build the walls: the grader's trouble, not the learner's
            return f"the grader's sandbox could not start ({said[-1][len('sandbox: '):]})"
        if code < 0:
            return f"the process running your code crashed ({SIGNALS.get(-code, f'signal {-code}')})"
        if code == 0:
            return "the process running your code exited before it answered (did your code call exit()?)"
        return f"the process running your code exited unexpectedly (exit code {code})"

    def kill(self) -> bool:
        """Kill it and everything it started; True once nothing is left."""
        gone = self.tree.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        if self.cmd is not None:  # its folders and user (a process that would not die keeps neither)
            self.cmd.release()
        return gone

    def close(self) -> bool:
        if self.alive():
            try:
                self.send({"op": "exit"})
                self.proc.wait(timeout=10)
            except (RunnerFailed, subprocess.TimeoutExpired):
                pass
        gone = self.kill()
        self.sock.close()
        self.log.thread.join(timeout=5)
        if self.tmp is not None:
            self.tmp.cleanup()
        return gone


def die_with_parent() -> None:
    """Killed when the parent dies (Linux's parent-death signal): a runner without a sandbox
    when its judge dies, a judge when the grader dies."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - not Linux: the judge kills its runners itself
        pass


def _sanitizer() -> str:
    import shutil

    return shutil.which("compute-sanitizer") or "compute-sanitizer"


# compute-sanitizer's tools (--sanitize): out-of-bounds and misaligned accesses, races on shared
# memory, reads of memory never written, and barriers not reached by every thread of a block.
SANITIZER_TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")


def sanitizer_prefix(tool: str) -> list[str]:
    """The compute-sanitizer command line that runs a runner under ``tool``: at most 20 reports,
    and none for CUDA API return codes (the runner's own probes may fail on purpose)."""
    if tool not in SANITIZER_TOOLS:
        raise ValueError(f"no compute-sanitizer tool named {tool!r}; one of {', '.join(SANITIZER_TOOLS)}")
    return [_sanitizer(), "--tool", tool, "--print-limit", "20", "--report-api-errors", "no"]
