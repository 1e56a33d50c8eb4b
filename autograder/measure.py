"""Run one exercise's cases against a learner function, and time it honestly.

This module is the single code path behind ``check()`` in a notebook and behind
batch grading (where the grader's worker process calls it). It binds the clocks
and CUDA calls it times with when it is imported, which the worker does before it
runs any learner code, so a submission that patches ``time.perf_counter`` or
CuPy's events cannot change the numbers.
"""
from __future__ import annotations

import fnmatch
import linecache
import math
import os
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .spec import Exercise

_perf_counter = time.perf_counter  # bound before any learner code runs
_urandom = os.urandom

POISON_INT = -123456789


# --------------------------------------------------------------------------- device
class Device:
    """The numba/cupy handles one process uses. Imports happen on first use."""

    def __init__(self) -> None:
        from numba import config, cuda

        self.cuda = cuda
        self.simulator = bool(config.ENABLE_CUDASIM)
        self.cp = None
        if not self.simulator:
            try:
                import cupy

                self.cp = cupy
            except ImportError:  # numba-only install: correctness still works
                self.cp = None
        if self.cp is not None:
            cp = self.cp
            # Bind now: learner code may replace these attributes later.
            self._event = cp.cuda.Event
            self._record = cp.cuda.Event.record
            self._event_sync = cp.cuda.Event.synchronize
            self._elapsed = cp.cuda.get_elapsed_time
            self._device_sync = cp.cuda.runtime.deviceSynchronize
            self._asarray = cp.asarray
            self._flush_buf = None
            # Build the grader's own kernels now, before any learner code can patch CuPy.
            self._hold = self._build_hold()
            cp.ones(1, dtype=cp.int32).max()  # the flush's reduction kernel, compiled

    def _build_hold(self):
        cp = self.cp
        kernel = cp.RawKernel(_HOLD_SOURCE, "grader_hold")
        props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
        smem = int(props.get("sharedMemPerBlockOptin", 0)) or int(props["sharedMemPerBlock"])
        try:
            kernel.max_dynamic_shared_size_bytes = smem  # compiles and loads the kernel
        except Exception:  # an older GPU or driver: the default 48 KiB still fills most SMs
            smem = int(props["sharedMemPerBlock"])
        return kernel, int(props["multiProcessorCount"]), smem

    # -- arrays
    def to_device(self, host: np.ndarray, backend: str):
        if backend == "cupy":
            if self.cp is None:
                raise RuntimeError("this exercise needs CuPy and a GPU")
            return self.cp.asarray(host)
        if backend == "torch":  # on the GPU; on the CPU in simulator mode (torch needs no simulator)
            import torch

            tensor = torch.from_numpy(np.array(host, copy=True))
            return tensor if self.simulator else tensor.to("cuda")
        return self.cuda.to_device(host)

    def pinned_copy(self, host: np.ndarray) -> np.ndarray:
        """A copy of a host array in pinned (page-locked) host memory; still a NumPy array."""
        out = self.cuda.pinned_array(host.shape, dtype=host.dtype)
        out[...] = host
        return out

    def to_host(self, dev) -> np.ndarray:
        if hasattr(dev, "copy_to_host"):
            return dev.copy_to_host()
        if _is_tensor(dev):
            return dev.detach().cpu().numpy()
        return self.cp.asnumpy(dev)

    def poison(self, dev) -> None:
        """Fill an output with NaN (or a sentinel for integers) so unwritten elements fail."""
        dtype = _np_dtype(dev)
        value = _guard_fill(dtype)
        if _is_tensor(dev):
            dev.fill_(value.item() if isinstance(value, np.generic) else value)
        elif self.cp is not None:
            self._asarray(dev).fill(value)
        else:
            dev.copy_to_device(np.full(dev.shape, value, dtype=dtype))

    def synchronize(self) -> None:
        if self.cp is not None:
            self._device_sync()
        else:
            self.cuda.synchronize()

    def flush_l2(self) -> None:
        """Read 256 MiB so the next timed call starts with a cold L2 (60 MB on an H200).

        Reading, not writing: the L2 is left holding clean lines, so the timed call does not
        pay for writing the flush's own data back to memory."""
        if self._flush_buf is None:
            self._flush_buf = self.cp.ones(64 << 20, dtype=self.cp.int32)
        self._flush_buf.max()

    def hold(self, seconds: float) -> None:
        """Keep every SM of the GPU busy for ``seconds`` (the grader's own kernel, on the
        default stream), so the host can queue the calls to be timed before the first starts.

        Each block takes all of an SM's shared memory, so no other kernel, on any stream, can
        run beside it: work a submission hides on another stream cannot finish unclocked."""
        kernel, sms, smem = self._hold
        kernel((sms,), (1024,), (np.int64(seconds * 1e9),), shared_mem=smem)

    def event(self):
        return self._event()


def _is_tensor(x) -> bool:
    """A torch tensor (the "torch" backend), found without importing torch."""
    return type(x).__module__.startswith("torch") and hasattr(x, "fill_")


def _np_dtype(x) -> np.dtype:
    """The NumPy dtype of a device array or tensor."""
    if _is_tensor(x):
        return x.new_empty(0).cpu().numpy().dtype
    return np.dtype(x.dtype)


# Spins until `ns` nanoseconds have passed on the GPU's global timer. The shared memory is
# allocated at launch (one block per SM takes all of it); the never-taken branch keeps it.
_HOLD_SOURCE = r"""
extern "C" __global__ void __launch_bounds__(1024, 1) grader_hold(long long ns) {
    extern __shared__ int held[];
    long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
    if (t < 0) held[threadIdx.x] = 0;
}
"""

_DEVICE: Device | None = None


def device() -> Device:
    global _DEVICE
    if _DEVICE is None:
        _DEVICE = Device()
    return _DEVICE


# --------------------------------------------------------------------------- results
@dataclass
class CaseResult:
    params: dict
    passed: bool
    max_abs_err: float | None = None
    message: str = ""


@dataclass
class SpeedResult:
    measured: bool
    message: str = ""
    median_s: float | None = None
    baseline_median_s: float | None = None
    ratio: float | None = None  # baseline time / submission time
    gbps: float | None = None
    gflops: float | None = None
    copy_gbps: float | None = None
    pct_of_copy: float | None = None
    reps: int = 0
    flags: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


# --------------------------------------------------------------------------- correctness
def describe(params) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items())


def _count(n: int, noun: str) -> str:
    """'1 element', '3 elements': counts in messages a learner reads."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


GUARD = 256  # elements around every array a learner gets; out-of-bounds accesses land here
# Off under compute-sanitizer, which needs exact-size allocations to see overruns itself.
USE_GUARDS = True


def _guard_fill(dtype: np.dtype):
    """The poison for outputs: NaN for floats, POISON_INT (wrapped to the type) for integers."""
    dtype = np.dtype(dtype)
    return np.nan if dtype.kind == "f" else np.array(POISON_INT, dtype=np.int64).astype(dtype)[()]


# Guards of floating arrays hold a NaN with a payload no arithmetic produces, so a stray
# write of NaN (say, a sum that read a guard) still changes the bits and is seen.
_GUARD_NAN_BITS = {2: 0x7E5A, 4: 0x7FA5A5A5, 8: 0x7FF4A5A5A5A5A5A5}


class Guarded:
    """A device allocation with guard elements before and after the view the learner gets.

    A real GPU does not check array bounds. Guards make out-of-bounds reads produce NaN
    (or a poison integer) and let out-of-bounds writes be seen.
    """

    def __init__(self, dev: "Device", host: np.ndarray, backend: str) -> None:
        flat = np.empty(host.size + 2 * GUARD, dtype=host.dtype)
        bits = flat.view(f"u{host.dtype.itemsize}")
        if host.dtype.kind == "f" and host.dtype.itemsize in _GUARD_NAN_BITS:
            bits[:] = _GUARD_NAN_BITS[host.dtype.itemsize]
        else:
            flat[:] = _guard_fill(host.dtype)
        self.pattern = bits[0]
        flat[GUARD:GUARD + host.size] = host.ravel()
        self.size = host.size
        self.full = dev.to_device(flat, backend)
        self.view = self.full[GUARD:GUARD + host.size].reshape(host.shape)

    def overrun(self, dev: "Device") -> tuple[int, int]:
        """How many guard elements (before, after) the call changed, bit for bit."""
        bits = dev.to_host(self.full).view(self.pattern.dtype)
        return (int(np.count_nonzero(bits[:GUARD] != self.pattern)),
                int(np.count_nonzero(bits[GUARD + self.size:] != self.pattern)))


class RuntimeAllocations:
    """Counts device memory taken with ``cupy.cuda.runtime.malloc`` and not freed during a call.

    The module's functions are replaced only while the learner's function runs. (CuPy's own
    memory pool calls the runtime from compiled code and is not counted.)
    """

    NAMES = ("malloc", "mallocManaged", "free")

    def __init__(self, runtime) -> None:
        self.runtime = runtime
        self.live: dict[int, int] = {}
        self._saved: dict[str, Any] = {}

    def __enter__(self):
        rt = self.runtime
        self._saved = {n: getattr(rt, n) for n in self.NAMES}
        live = self.live

        def tracked(alloc):
            def wrapper(size, *a, **k):
                ptr = alloc(size, *a, **k)
                live[int(ptr)] = int(size)
                return ptr
            return wrapper

        def free(ptr):
            self._saved["free"](ptr)
            live.pop(int(ptr), None)

        rt.malloc = tracked(self._saved["malloc"])
        rt.mallocManaged = tracked(self._saved["mallocManaged"])
        rt.free = free
        return self

    def __exit__(self, *exc):
        for n, f in self._saved.items():
            setattr(self.runtime, n, f)
        return False

    def leaked(self) -> int:
        return sum(self.live.values())


def _still_registered(dev: "Device", host: np.ndarray) -> bool:
    """True if a host array was left page-locked (cudaHostRegister without unregister);
    then unregister it, so the grader's own memory is not left pinned."""
    if dev.cp is None or host.size == 0:
        return False
    rt = dev.cp.cuda.runtime
    try:
        registered = rt.pointerGetAttributes(host.ctypes.data).type == getattr(rt, "memoryTypeHost", 1)
    except Exception:
        return False
    if registered:
        try:
            rt.hostUnregister(host.ctypes.data)
        except Exception:
            pass
    return registered


def _on_host(ex: Exercise) -> tuple[str, ...]:
    """The inputs an exercise leaves on the host: pageable (host_args) or pinned (pinned_args)."""
    return tuple(ex.host_args) + tuple(ex.pinned_args)


def run_case(ex: Exercise, fn: Callable, params, host_inputs: dict[str, Any], guard=None):
    """Copy inputs to the device, poison outputs, call fn, and bring everything back.

    Returns (outputs, inputs_after, faults) with host arrays; ``faults`` lists memory
    errors seen after the call (out-of-bounds writes, leaks, host memory left pinned).
    Learner exceptions propagate.
    """
    dev = device()
    dev_args: dict[str, Any] = {}
    guarded: dict[str, Guarded] = {}
    for name, value in host_inputs.items():
        if not isinstance(value, np.ndarray):
            dev_args[name] = value
        elif name in ex.host_args:
            dev_args[name] = value.copy()  # pageable, as a learner's own NumPy array would be
        elif name in ex.pinned_args:
            dev_args[name] = dev.pinned_copy(value)  # page-locked, as a data loader's batch might be
        elif USE_GUARDS:
            guarded[name] = Guarded(dev, value, ex.backend)
            dev_args[name] = guarded[name].view
        else:
            dev_args[name] = dev.to_device(value, ex.backend)
    for name, out in ex.outputs.items():
        dtype = np.dtype(out.dtype)
        if out.init is not None:  # updated in place: starts as a copy of an input
            poisoned = np.array(host_inputs[out.init], dtype=dtype)
        else:
            poisoned = np.full(out.shape(params), _guard_fill(dtype), dtype=dtype)
        if USE_GUARDS:
            guarded[name] = Guarded(dev, poisoned, ex.backend)
            dev_args[name] = guarded[name].view
        else:
            dev_args[name] = dev.to_device(poisoned, ex.backend)
    dev.synchronize()
    track = ex.check_leaks and dev.cp is not None
    allocations = RuntimeAllocations(dev.cp.cuda.runtime) if track else _null()
    with (guard if guard is not None else _null()), _quiet_small_grids(), allocations:
        fn(*[dev_args[a] for a in ex.args])
        dev.synchronize()
    faults = []
    for name, g in guarded.items():
        before, after = g.overrun(dev)
        where = " and ".join(f"{_count(k, 'element')} {side} of '{name}'" for k, side in
                             ((after, "past the end"), (before, "before the start")) if k)
        if where:
            faults.append(f"wrote to {where}: an out-of-bounds write (check your bounds)")
    if track and allocations.leaked():
        faults.append(f"leaked {allocations.leaked():,} bytes of device memory: every "
                      "cupy.cuda.runtime.malloc needs a matching free before the function returns")
    for name in ex.host_args:
        if isinstance(dev_args.get(name), np.ndarray) and _still_registered(dev, dev_args[name]):
            faults.append(f"left the host array '{name}' page-locked (registered): unregister it "
                          "before returning (the cuda.pinned context manager does this for you)")
    outputs = {n: dev.to_host(dev_args[n]) for n in ex.outputs}
    inputs_after = {
        n: (dev_args[n] if n in _on_host(ex) else dev.to_host(dev_args[n]))
        for n, v in host_inputs.items() if isinstance(v, np.ndarray)
    }
    return outputs, inputs_after, faults


def compare(ex: Exercise, params, host_inputs, outputs, inputs_after, faults=()) -> CaseResult:
    """Judge one case: no memory faults, inputs untouched, every output within tolerance
    of the float64 reference."""
    params = dict(params)
    if faults:
        return CaseResult(params, False, None, "; ".join(str(f) for f in faults))
    for name, before in host_inputs.items():
        if not isinstance(before, np.ndarray):
            continue
        after = inputs_after.get(name)
        if after is None or after.shape != before.shape or not np.array_equal(after, before, equal_nan=True):
            return CaseResult(params, False, None, f"input '{name}' was modified by the call")
    ref64 = ex.reference(
        **{k: (v.astype(np.float64) if isinstance(v, np.ndarray) and v.dtype.kind == "f" else v)
           for k, v in host_inputs.items()}
    )
    worst = 0.0
    for name, spec in ex.outputs.items():
        got = outputs.get(name)
        want = np.asarray(ref64[name])
        if got is None or tuple(got.shape) != tuple(want.shape):
            shape = None if got is None else tuple(got.shape)
            return CaseResult(params, False, None, f"output '{name}' has shape {shape}, expected {want.shape}")
        if np.dtype(spec.dtype).kind in "iub":
            bad = got != want
            if bad.any():
                idx = tuple(int(i) for i in np.argwhere(bad)[0])
                never = " (never written)" if got[idx] == POISON_INT else ""
                return CaseResult(params, False, None,
                                  f"{name}{list(idx)} = {got[idx]}{never}, expected {want[idx]}; "
                                  f"{int(bad.sum())} of {bad.size} elements wrong")
            continue
        rtol, atol = ex.tol(spec.dtype)
        got64 = got.astype(np.float64)
        scale = float(np.max(np.abs(want))) if want.size else 0.0
        err = np.abs(got64 - want)
        bad = ~(err <= atol * max(scale, 1e-30) + rtol * np.abs(want))  # NaN compares False: fails
        case_err = float(np.max(err)) if err.size else 0.0  # NaN if any element is NaN
        worst = max(worst, case_err) if not math.isnan(case_err) else case_err
        if bad.any():
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            nan = int(np.isnan(got64).sum())
            hint = f"; {_count(nan, 'element')} never written (still NaN)" if nan else ""
            return CaseResult(params, False, case_err,
                              f"{name}{list(idx)} = {got[idx]!r}, expected {want[idx]:.6g}; "
                              f"{int(bad.sum())} of {bad.size} elements wrong{hint}")
    return CaseResult(params, True, worst, "")


# --------------------------------------------------------------------------- forbidden calls
class ForbiddenGuard:
    """Wraps forbidden library functions while the learner's function runs and records
    the calls made from learner code (libraries calling each other are not counted)."""

    def __init__(self, patterns) -> None:
        self.patterns = [p for p in patterns if not p.startswith("!")]
        self.allowed = [p[1:] for p in patterns if p.startswith("!")]
        self.used: list[str] = []
        self._patched: list[tuple[Any, str, Any]] = []

    def _targets(self):
        import importlib
        import sys
        import types

        plain = (types.FunctionType, types.BuiltinFunctionType, types.MethodDescriptorType)
        for pat in self.patterns:
            if pat.startswith("*."):  # a method on device arrays
                method = pat[2:]
                for cls in _device_array_classes():
                    if isinstance(cls.__dict__.get(method), types.FunctionType):
                        yield cls, method, f"{cls.__name__}.{method}"
                continue
            mod_name, _, attr = pat.rpartition(".")
            mod = sys.modules.get(mod_name)
            if mod is None:
                try:
                    mod = importlib.import_module(mod_name)
                except Exception:
                    continue
            for a in dir(mod):
                full = f"{mod_name}.{a}"
                if a.startswith("_") or not fnmatch.fnmatch(a, attr):
                    continue
                if any(fnmatch.fnmatch(full, ok) for ok in self.allowed):
                    continue
                with warnings.catch_warnings():  # looking up a deprecated name warns
                    warnings.simplefilter("ignore")
                    found = getattr(mod, a, None)
                # Plain functions only: wrapping classes or ufuncs would break their other uses.
                if isinstance(found, plain):
                    yield mod, a, full

    def __enter__(self):
        import sys

        for owner, attr, full in self._targets():
            original = getattr(owner, attr)

            def wrapper(*a, __orig=original, __full=full, **k):
                caller = sys._getframe(1)
                if _is_learner_code(caller.f_code.co_filename):
                    # Compiled code (Cython, C) has no frame of its own: count the call only
                    # when the learner's line names the function, so a library's inner calls
                    # are not blamed on the learner.
                    line = linecache.getline(caller.f_code.co_filename, caller.f_lineno)
                    if __full.rpartition(".")[2] in line:
                        self.used.append(__full)
                return __orig(*a, **k)

            try:
                setattr(owner, attr, wrapper)
            except (AttributeError, TypeError):
                continue
            self._patched.append((owner, attr, original))
        return self

    def __exit__(self, *exc):
        for owner, attr, original in reversed(self._patched):
            setattr(owner, attr, original)
        self._patched.clear()
        return False


def _library_dirs() -> tuple[str, ...]:
    import site
    import sysconfig

    dirs = {sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
            os.path.dirname(os.path.abspath(__file__))}
    dirs.update(site.getsitepackages() if hasattr(site, "getsitepackages") else [])
    return tuple(sorted(d for d in dirs if d))


_LIBRARY_DIRS = _library_dirs()


def _is_learner_code(filename: str) -> bool:
    return not (filename.startswith(_LIBRARY_DIRS) or filename.startswith("<frozen"))


def _device_array_classes():
    classes = []
    try:
        from numba.cuda.cudadrv.devicearray import DeviceNDArray

        classes.append(DeviceNDArray)
    except Exception:
        pass
    try:
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        classes.append(FakeCUDAArray)
    except Exception:
        pass
    return classes


@contextmanager
def _null():
    yield


@contextmanager
def _quiet_small_grids():
    """Awkward sizes launch tiny grids on purpose (and a learner may zero a counter with one
    thread): Numba's low-occupancy warning is noise in check() output."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Grid size .* under-utilization")
        yield


# --------------------------------------------------------------------------- speed
_COPY_GBPS: float | None = None


def copy_bandwidth_gbps() -> float:
    """This GPU's device-to-device copy bandwidth (bytes read + written), measured once."""
    global _COPY_GBPS
    if _COPY_GBPS is None:
        dev = device()
        cp = dev.cp
        src = cp.ones(1 << 28, dtype=cp.float32)  # 1 GiB
        dst = cp.empty_like(src)
        start, end = dev.event(), dev.event()
        times = []
        for i in range(12):
            dev._record(start)
            dst[...] = src
            dev._record(end)
            dev._event_sync(end)
            if i >= 2:
                times.append(dev._elapsed(start, end) / 1e3)
        _COPY_GBPS = 2 * src.nbytes / float(np.median(times)) / 1e9
        del src, dst
    return _COPY_GBPS


BATCH = 4  # calls per timed sample, each on its own buffers


def _fresh_rng() -> np.random.Generator:
    return np.random.default_rng(int.from_bytes(_urandom(8), "little"))


def time_exercise(ex: Exercise, fn: Callable, time_cap_s: float = 3.0, min_reps: int = 10,
                  max_reps: int = 200, watch: dict | None = None) -> SpeedResult:
    """Time fn against the exercise's baseline, interleaved, each call from a cold L2.

    ``watch`` maps names to the objects the grader bound before learner code ran; if
    the submission replaced them, the result is flagged.
    """
    with _quiet_small_grids():
        return _time_exercise(ex, fn, time_cap_s, min_reps, max_reps, watch)


def _time_exercise(ex, fn, time_cap_s, min_reps, max_reps, watch) -> SpeedResult:
    dev = device()
    if dev.simulator:
        return SpeedResult(False, "speed not measured: no GPU (simulator mode)" if ex.backend == "torch"
                           else "speed not measured: the CUDA simulator does not time kernels")
    if dev.cp is None:
        return SpeedResult(False, "speed not measured: install CuPy to time kernels")
    if ex.timing_case is None:
        return SpeedResult(False, "this exercise is graded on correctness only")
    params = ex.timing_case
    rng = _fresh_rng()

    def place(k, v):
        if not isinstance(v, np.ndarray) or k in ex.host_args:
            return v
        return dev.pinned_copy(v) if k in ex.pinned_args else dev.to_device(v, ex.backend)

    def make_set():
        host = ex.inputs(params, rng)
        args = {k: place(k, v) for k, v in host.items()}
        outs = {n: dev.to_device(np.empty(o.shape(params), o.dtype), ex.backend) for n, o in ex.outputs.items()}
        return host, args, outs

    # Each timed sample is BATCH calls back to back, each on its own set of buffers, between two
    # events. The grader first holds the GPU busy for as long as the host takes to launch the
    # batch, then records the start event: the calls are queued by the time the clock starts,
    # so the sample measures the GPU's work, not the host's cost of a Python launch (tens of
    # microseconds, hidden behind the GPU's work in a real program). Separate sets keep each
    # call's data cold.
    sets = [make_set() for _ in range(BATCH)]
    flags: list[str] = []

    def call(impl, s):
        _, args, outs = s
        merged = {**args, **outs}
        impl(*[merged[a] for a in ex.args])

    def reset(outs, args) -> None:
        """Poison each output, or refill it from its input where it is updated in place."""
        for n, o in outs.items():
            init = ex.outputs[n].init
            if init is None:
                dev.poison(o)
            else:
                dev._asarray(o)[...] = dev._asarray(args[init])

    def outputs_ok(s) -> CaseResult:
        host, args, outs = s
        got = {n: dev.to_host(o) for n, o in outs.items()}
        after = {n: (a if n in _on_host(ex) else dev.to_host(a)) for n, a in args.items()
                 if isinstance(host[n], np.ndarray)}
        return compare(ex, params, host, got, after)

    impls = {"submission": fn}
    if ex.baseline is not None:
        impls["baseline"] = ex.baseline
    launch_s = 0.0  # the host's time to launch one call, the slower of the two
    for impl in impls.values():  # warm-up: compile, load modules, create handles
        for s in sets:
            for _ in range(2):
                call(impl, s)
        dev.synchronize()
        spent = []
        for s in sets:
            t0 = _perf_counter()
            call(impl, s)
            spent.append(_perf_counter() - t0)
            dev.synchronize()
        launch_s = max(launch_s, float(np.median(spent)))
    # Long enough to queue the whole batch; capped, since a call that waits for the GPU itself
    # (a copy to the host, say) gains nothing from a longer hold.
    hold_s = min(max(1.5 * BATCH * launch_s, 50e-6), 5e-3)
    if ex.launch_cost_counts or _on_host(ex):
        # No hold: launch costs are the point, or copies from the host could run on the copy
        # engines beside the hold (it fills the SMs, not the copy engines) and go unclocked.
        hold_s = 0.0
    dev.synchronize()
    reset(sets[0][2], sets[0][1])
    dev.synchronize()
    call(fn, sets[0])
    dev.synchronize()
    res = outputs_ok(sets[0])
    if not res.passed:
        return SpeedResult(False, f"not timed: wrong at the timing size ({describe(params)}): {res.message}")

    # Before each timed call, inputs are scaled by a random power of two (exact in floating
    # point), and after it the output is compared, on the device, with the baseline's output
    # for the same inputs. A submission that replays cached outputs is wrong at once.
    scratch = ({n: dev.to_device(np.empty(o.shape(params), o.dtype), ex.backend) for n, o in ex.outputs.items()}
               if ex.baseline is not None else None)
    log2_scale = [0] * BATCH
    wrong_runs: list[str] = []

    def perturb(which: int) -> None:
        step = 1 if rng.random() < 0.5 else -1
        if abs(log2_scale[which] + step) > 3:
            step = -step
        log2_scale[which] += step
        for k, v in sets[which][1].items():
            if ex.scaled_inputs is not None and k not in ex.scaled_inputs:
                continue
            if isinstance(v, np.ndarray) or not hasattr(v, "dtype") or _np_dtype(v).kind != "f":
                continue
            view = dev._asarray(v)
            view *= view.dtype.type(2.0 ** step)

    def verify(which: int) -> str:
        _, args, outs = sets[which]
        merged = {**args, **scratch}
        reset(scratch, args)
        ex.baseline(*[merged[a] for a in ex.args])
        dev.synchronize()
        for name, spec in ex.outputs.items():
            got, want = dev._asarray(outs[name]), dev._asarray(scratch[name])
            if np.dtype(spec.dtype).kind in "iub":
                bad = int((got != want).sum())
            else:
                rtol, atol = ex.tol(spec.dtype)
                scale = float(abs(want).max()) if want.size else 0.0
                # 4x the tolerance: both are float32 approximations of the exact result
                bad = int((~(abs(got - want) <= 4 * (atol * scale + rtol * abs(want)))).sum())
            if bad:
                return f"{bad} of {got.size} elements of '{name}' wrong"
        return ""

    start, mid, end = dev.event(), dev.event(), dev.event()
    times = {k: [] for k in impls}
    mids = {k: [] for k in impls}
    began = _perf_counter()
    for rep in range(max_reps):
        order = list(impls) if rep % 2 == 0 else list(reversed(impls))
        for name in order:
            if name == "submission" and scratch is not None:
                for which in range(BATCH):
                    perturb(which)
            for s in sets:
                reset(s[2], s[1])
            dev.flush_l2()  # after the poison: its dirty lines are written back now, unclocked
            dev._device_sync()  # the grader's own work is done before the clock starts
            if hold_s:
                dev.hold(hold_s)
            dev._record(start)  # fires when the hold ends, with the calls queued behind it
            for s in sets:
                call(impls[name], s)
            dev._record(mid)  # on the null stream: passes side-stream work still running
            dev._device_sync()  # whole device: side-stream work is counted
            dev._record(end)
            dev._event_sync(end)
            times[name].append(dev._elapsed(start, end) / 1e3 / BATCH)
            mids[name].append(dev._elapsed(start, mid) / 1e3 / BATCH)
            if name == "submission" and scratch is not None:
                for which in range(BATCH):
                    msg = verify(which)
                    if msg:
                        wrong_runs.append(msg)
        if rep + 1 >= min_reps:
            stable = all(np.std(v) / math.sqrt(len(v)) < 0.01 * np.mean(v) for v in times.values())
            if stable or _perf_counter() - began > time_cap_s:
                break
    if wrong_runs:
        flags.append(f"outputs of the timed calls were wrong in {len(wrong_runs)} of "
                     f"{BATCH * len(times['submission'])} calls (cached or replayed results?): {wrong_runs[0]}")
    # Fresh values in the same buffers: a submission that caches results by buffer fails here.
    host, args, outs = sets[0]
    fresh = ex.inputs(params, rng)
    for k, v in fresh.items():
        if isinstance(v, np.ndarray) and k in _on_host(ex):
            args[k][...] = v
        elif isinstance(v, np.ndarray):
            if hasattr(args[k], "copy_to_device"):  # Numba
                args[k].copy_to_device(v)
            else:  # CuPy, or a torch tensor seen through CuPy (the same memory)
                dev._asarray(args[k]).set(v)
        else:
            args[k] = v
    sets[0] = (fresh, args, outs)
    reset(outs, args)
    dev.synchronize()
    call(fn, sets[0])
    dev.synchronize()
    msg = verify(0) if scratch is not None else ("" if outputs_ok(sets[0]).passed else "wrong")
    if msg:
        flags.append(f"wrong on fresh inputs in the same buffers (cached or replayed outputs?): {msg}")

    med = float(np.median(times["submission"]))
    med_mid = float(np.median(mids["submission"]))
    if med > 20e-6 and med_mid < 0.5 * med:
        flags.append(
            "work was still running on another stream when the function returned; "
            "the grader waits for the whole device, so that time is counted"
        )
    # Host wall-clock cross-check of back-to-back calls against the event timing.
    n_wall = 10
    dev._device_sync()
    t0 = _perf_counter()
    for _ in range(n_wall):
        call(fn, sets[1])
    dev._device_sync()
    wall = (_perf_counter() - t0) / n_wall
    if wall > 2.0 * med + 200e-6:
        flags.append(f"event timing ({med * 1e6:.1f} us) disagrees with the wall clock "
                     f"({wall * 1e6:.1f} us per call): timers tampered with?")
    for name, original in (watch or {}).items():
        if _resolve(name) is not original:
            flags.append(f"the submission replaced {name}; the grader timed with its own copy")

    result = SpeedResult(True, median_s=med, reps=len(times["submission"]), flags=flags)
    if "baseline" in times:
        result.baseline_median_s = float(np.median(times["baseline"]))
        result.ratio = result.baseline_median_s / med
    if ex.bytes_moved:
        result.gbps = ex.bytes_moved(params) / med / 1e9
        result.copy_gbps = copy_bandwidth_gbps()
        result.pct_of_copy = 100.0 * result.gbps / result.copy_gbps
    if ex.flops:
        result.gflops = ex.flops(params) / med / 1e9
    return result


def _resolve(dotted: str):
    import importlib

    mod_name, _, attr = dotted.rpartition(".")
    parts = mod_name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for p in parts[i:] + [attr]:
            obj = getattr(obj, p, None)
        return obj
    return None


WATCHED = (
    "time.perf_counter",
    "time.perf_counter_ns",
    "cupy.cuda.get_elapsed_time",
    "cupy.cuda.Event",
    "cupy.cuda.Event.record",
    "cupy.cuda.Event.synchronize",
    "cupy.cuda.runtime.deviceSynchronize",
    "numba.cuda.event_elapsed_time",
    "numba.cuda.synchronize",
)


def snapshot_watched() -> dict:
    """The timing-related objects as they are before learner code runs."""
    out = {}
    for name in WATCHED:
        obj = _resolve(name)
        if obj is not None:
            out[name] = obj
    return out
