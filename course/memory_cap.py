"""Run a notebook as if the GPU were small, and measure how much memory it really used.

A learner's GPU may be a 16 GB T4 on Colab while ours has 80 or 141 GB. To prove a notebook
fits, :func:`capped` starts a helper process that allocates all but ``leave`` bytes on every
GPU and holds them; every library in the notebook (Numba, CuPy, torch) then sees only what is
left, exactly as on the small card. :class:`PeakMemory` samples NVML meanwhile, so
the stamp can record the most memory a notebook needed.
"""
from __future__ import annotations

import contextlib
import ctypes
import subprocess
import sys
import threading

# The helper talks to the driver through ctypes, so it needs neither CuPy nor torch.
_HOLDER = r"""
import ctypes, sys
leave = int(sys.argv[1])
cu = ctypes.CDLL("libcuda.so.1")
assert cu.cuInit(0) == 0
count = ctypes.c_int(); cu.cuDeviceGetCount(ctypes.byref(count))
held = []
for d in range(count.value):
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    cu.cuDeviceGet(ctypes.byref(dev), d)
    cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
    cu.cuCtxSetCurrent(ctx)
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
    hold, chunk = free.value - leave, 1 << 30
    while hold > 0:
        ptr, n = ctypes.c_uint64(), min(chunk, hold)
        if cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(n)) != 0:
            if chunk == 1 << 20:
                break
            chunk //= 2
            continue
        held.append(ptr); hold -= n
    cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
    print(d, free.value, total.value, flush=True)
print("holding", flush=True)
sys.stdin.read()  # until the parent closes our stdin
"""


@contextlib.contextmanager
def capped(leave_bytes: int):
    """Within the block, each GPU has only about ``leave_bytes`` free. Yields {device: free bytes}."""
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(int(leave_bytes))], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    free = {}
    try:
        for line in proc.stdout:
            if line.startswith("holding"):
                break
            d, f, _total = map(int, line.split())
            free[d] = f
        else:
            raise RuntimeError("the memory holder exited before holding any memory")
        yield free
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)


class _Nvml:
    """Memory in use on each GPU, read through NVML: no process to start per sample, so sampling
    does not slow the notebook's own kernel launches (nvidia-smi five times a second did)."""

    class _Memory(ctypes.Structure):
        _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]

    def __init__(self):
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        if self.lib.nvmlInit_v2() != 0:
            raise OSError("nvmlInit failed")
        count = ctypes.c_uint()
        self.lib.nvmlDeviceGetCount_v2(ctypes.byref(count))
        self.handles = []
        for i in range(count.value):
            handle = ctypes.c_void_p()
            self.lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(handle))
            self.handles.append(handle)

    def used_mib(self) -> list[int]:
        out = []
        for handle in self.handles:
            mem = self._Memory()
            self.lib.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(mem))
            out.append(mem.used >> 20)
        return out

    def close(self):
        self.lib.nvmlShutdown()


def _nvidia_smi_used_mib() -> list[int]:
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=30).stdout
    return [int(v) for v in out.split()]


class PeakMemory:
    """Highest memory in use on any GPU while the block runs, in MiB above what was in use at its start."""

    def __init__(self, interval_ms: int = 200):
        self.interval_ms = interval_ms
        self.start = self.peak = None
        self._nvml = None

    def _sample(self) -> list[int]:
        return self._nvml.used_mib() if self._nvml else _nvidia_smi_used_mib()

    def __enter__(self):
        try:
            self._nvml = _Nvml()
        except (OSError, AttributeError):
            self._nvml = None  # no NVML library here: nvidia-smi reads the same counters
        self.start = self._sample()
        self.peak = list(self.start)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.wait(self.interval_ms / 1000):
            with contextlib.suppress(Exception):
                self.peak = [max(p, u) for p, u in zip(self.peak, self._sample())]

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        if self._nvml:
            self._nvml.close()

    @property
    def used_mib(self) -> int:
        return max(p - s for p, s in zip(self.peak, self.start))
