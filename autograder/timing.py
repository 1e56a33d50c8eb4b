"""Timing a submission against the lab's reference with the judge's own clock.

The judge owns every buffer and every event. One timed sample is a batch of ``BATCH`` calls,
each on its own set of buffers, run like this on the judge's stream:

    hold (the GPU busy while the runners queue their calls behind a flag) -> fresh inputs ->
    poison the reference's outputs -> flush the L2 -> start -> raise the reference's flag ->
    wait for its "done" -> end -> poison the submission's outputs -> flush -> start -> raise
    the submission's flag -> wait for its "done" -> end -> compare the submission's outputs
    with the reference's, at once, on the GPU.

A runner only queues its calls behind a flag in memory (``cuStreamWaitValue32``) and raises
its own flag after them; it cannot move the judge's events. Work it leaves running on another
stream is either still running when the comparison reads the outputs (and fails it) or, when
it finished by then, is counted by a second end event after the runner's own device-wide
synchronisation. Inputs are fresh for every call: each set is rebuilt from a pool drawn from
the secret seed, with a new gain and a new per-element jitter from a new key, so neither a
cache keyed on buffers nor one keyed on sampled values can replay an answer.

Two processes on one GPU take turns (time-slicing), and the switch between them costs a fixed
time per batch (about 0.3 ms on an H200). The judge measures that overhead with a trusted
runner's empty calls and subtracts it, so short kernels are not made to look slower.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from .devmem import driver_ok

BATCH = 4  # calls per timed sample at least, each on its own buffers
MAX_CALLS = 32  # more for short calls, so that the switch between processes is a small part
TARGET_BATCH_S = 2e-3  # of a batch: calls are added until a batch is expected to take this long
SETS_BUDGET = 8 << 30  # bytes of buffers for those extra calls
MAX_HOLD_S = 0.1

# Spins until `ns` nanoseconds have passed on the GPU's global timer. The shared memory is
# allocated at launch (one block per SM takes all of it); the never-taken branch keeps it.
HOLD_SOURCE = r"""
extern "C" __global__ void __launch_bounds__(1024, 1) grader_hold(long long ns) {
    extern __shared__ int held[];
    long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
    if (t < 0) held[threadIdx.x] = 0;
}
"""

# Fresh values: x * gain * (1 + eps * u), u in [-1, 1) from a hash of (key, index); with
# flip, a sign from the same hash too. The gain changes every linear output; the jitter and
# the sign change every element, so no two calls see the same input.
FRESH_SOURCE = r"""
#include <cuda_fp16.h>
__device__ __forceinline__ unsigned long long mix(unsigned long long z) {
    z += 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
__device__ __forceinline__ float tof(float x) { return x; }
__device__ __forceinline__ float tof(double x) { return (float)x; }
__device__ __forceinline__ float tof(__half x) { return __half2float(x); }
__device__ __forceinline__ void put(float* d, float v) { *d = v; }
__device__ __forceinline__ void put(double* d, float v) { *d = (double)v; }
__device__ __forceinline__ void put(__half* d, float v) { *d = __float2half(v); }
template <typename T>
__device__ void fresh(const T* src, T* dst, long long n, unsigned long long key, float gain, float eps, int flip) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        unsigned long long h = mix(key ^ (unsigned long long)i);
        float u = (float)(h >> 40) * (1.0f / 8388608.0f) - 1.0f;
        float s = (flip && (h & 1ULL)) ? -1.0f : 1.0f;
        put(&dst[i], tof(src[i]) * gain * (1.0f + eps * u) * s);
    }
}
#define FRESH(NAME, T) extern "C" __global__ void fresh_##NAME(const T* s, T* d, long long n, unsigned long long k, \
    float g, float e, int f) { fresh<T>(s, d, n, k, g, e, f); }
FRESH(float32, float) FRESH(float64, double) FRESH(float16, __half)
"""
JITTER = 2.0 ** -7  # per-element relative change of fresh inputs
# The comparison of a timed call's outputs with the reference's, compiled once per dtype when
# the judge starts (a kernel compiled while the judge's stream waits on a runner would wait for
# the device itself). maxabs: the largest |want| (atomicMax on the bits of a non-negative double,
# which order as integers); bad: how many elements differ by more than 4x the tolerance (NaN
# counts), or, for integers, differ at all. One atomic per warp.
COMPARE_SOURCE = r"""
#include <cuda_fp16.h>
__device__ __forceinline__ double val(float x) { return (double)x; }
__device__ __forceinline__ double val(double x) { return x; }
__device__ __forceinline__ double val(__half x) { return (double)__half2float(x); }
__device__ __forceinline__ unsigned long long warp_sum(unsigned long long v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double warp_max(double v) {
    for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_down_sync(0xffffffffu, v, o));
    return v;
}
template <typename T>
__device__ void maxabs(const T* w, long long n, unsigned long long* out) {
    double m = 0.0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        m = fmax(m, fabs(val(w[i])));
    m = warp_max(m);
    if ((threadIdx.x & 31) == 0) atomicMax(out, (unsigned long long)__double_as_longlong(m));
}
template <typename T>
__device__ void bad_float(const T* g, const T* w, long long n, const unsigned long long* scale_bits,
                          double rtol, double atol, unsigned long long* count) {
    double scale = __longlong_as_double((long long)*scale_bits);
    unsigned long long c = 0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        double a = val(g[i]), b = val(w[i]);
        c += !(fabs(a - b) <= 4.0 * (atol * scale + rtol * fabs(b)));
    }
    c = warp_sum(c);
    if ((threadIdx.x & 31) == 0 && c) atomicAdd(count, c);
}
template <typename T>
__device__ void bad_int(const T* g, const T* w, long long n, unsigned long long* count) {
    unsigned long long c = 0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        c += g[i] != w[i];
    c = warp_sum(c);
    if ((threadIdx.x & 31) == 0 && c) atomicAdd(count, c);
}
#define FLOAT(NAME, T) \
extern "C" __global__ void maxabs_##NAME(const T* w, long long n, unsigned long long* o) { maxabs<T>(w, n, o); } \
extern "C" __global__ void bad_##NAME(const T* g, const T* w, long long n, const unsigned long long* s, double r, double a, unsigned long long* c) { bad_float<T>(g, w, n, s, r, a, c); }
#define INT(NAME, T) \
extern "C" __global__ void bad_##NAME(const T* g, const T* w, long long n, unsigned long long* c) { bad_int<T>(g, w, n, c); }
FLOAT(float32, float) FLOAT(float64, double) FLOAT(float16, __half)
INT(int8, signed char) INT(uint8, unsigned char) INT(int16, short) INT(uint16, unsigned short)
INT(int32, int) INT(uint32, unsigned int) INT(int64, long long) INT(uint64, unsigned long long) INT(bool, bool)
"""



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
    overhead_s: float | None = None  # the switch between processes, per batch, subtracted
    flags: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


class Hold:
    """The hold kernel: one block per SM, each filling its SM, spinning for a given time on the
    current stream. Work queued behind it starts together when it ends, so the clock measures
    the GPU, not the host's launches."""

    def __init__(self) -> None:
        import cupy as cp

        props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
        self.sms = int(props["multiProcessorCount"])
        smem = int(props.get("sharedMemPerBlockOptin", 0)) or int(props["sharedMemPerBlock"])
        self.kernel = cp.RawKernel(HOLD_SOURCE, "grader_hold")
        try:
            self.kernel.max_dynamic_shared_size_bytes = smem
        except Exception:  # an older GPU or driver: 48 KiB still fills most SMs
            smem = int(props["sharedMemPerBlock"])
        self.smem = smem

    def __call__(self, seconds: float) -> None:
        self.kernel((self.sms,), (1024,), (np.int64(seconds * 1e9),), shared_mem=self.smem)


class JudgeGPU:
    """The judge's own CUDA objects: its stream, the hold kernel, the L2 flush, the kernels
    that refresh inputs and compare outputs. All built before any runner exists."""

    def __init__(self) -> None:
        import cupy as cp

        self.cp = cp
        cc = cp.cuda.Device().compute_capability  # "90"
        self.cc = (int(cc[:-1]), int(cc[-1]))
        self.stream = cp.cuda.Stream(non_blocking=True)
        self.side = cp.cuda.Stream(non_blocking=True)  # to release a stuck stream
        self.hold = Hold()
        mod = cp.RawModule(code=FRESH_SOURCE, options=("-std=c++14",))
        self.fresh = {t: mod.get_function(f"fresh_{t}") for t in ("float32", "float64", "float16")}
        self.flush_buf = cp.ones(64 << 20, dtype=cp.int32)  # 256 MiB: beyond any L2 we know
        self.copy_gbps: float | None = None
        cmp = cp.RawModule(code=COMPARE_SOURCE, options=("-std=c++14",))
        self._cmp = {n: cmp.get_function(n) for n in
                     [f"{k}_{t}" for k in ("maxabs", "bad") for t in ("float32", "float64", "float16")]
                     + [f"bad_{t}" for t in ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
                                              "uint64", "bool")]}
        self.scratch = cp.zeros(64, cp.uint64)  # scale bits for the comparisons
        self.dtypes = ("float32", "float16", "float64", "int8", "uint8", "int16", "int32", "uint32", "int64")
        self.renew_ints = None  # built by warm_renew(), only for an exercise with renew_inputs
        with self.stream:  # compile and load everything used while the stream waits on a runner
            self.flush_buf.max()
            self.hold(1e-6)
            slots = cp.zeros(2, cp.uint64)
            for dt in self.dtypes + ("uint16", "uint64", "bool"):
                a, b = cp.zeros(8, dt), cp.zeros(8, dt)
                a.fill(0)
                b[...] = a
                if np.dtype(dt).kind == "f":
                    a.fill(np.nan)
                self.bad_count(a, b, dt, (1e-5, 1e-5), slots[0:1], slots[1:2])
            for name, k in self.fresh.items():
                z = cp.zeros(8, name)
                k((1,), (32,), (z, z, np.int64(8), np.uint64(1), np.float32(1), np.float32(0), np.int32(0)))
        self.stream.synchronize()

    def flush_l2(self) -> None:
        self.flush_buf.max()

    def bad_count(self, got, want, dtype: str, tol: tuple[float, float], count, scale) -> None:
        """Add to `count` (one uint64 on the device, zeroed before) how many elements of `got`
        differ from `want` beyond 4x the exercise's tolerance (both approximate the exact answer);
        `scale` (one zeroed uint64) receives the bits of the largest |want|."""
        got, want = got.ravel(), want.ravel()
        n = np.int64(got.size)
        if n == 0:
            return
        blocks = (min(self.hold.sms * 8, -(-int(n) // 256)),)
        name = np.dtype(dtype).name
        if np.dtype(dtype).kind in "iub":
            self._cmp[f"bad_{name}"](blocks, (256,), (got, want, n, count))
            return
        rtol, atol = tol
        self._cmp[f"maxabs_{name}"](blocks, (256,), (want, n, scale))
        self._cmp[f"bad_{name}"](blocks, (256,), (got, want, n, scale, np.float64(rtol), np.float64(atol), count))

    def copy_bandwidth(self) -> float:
        """This GPU's device-to-device copy bandwidth (bytes read + written), measured once."""
        if self.copy_gbps is None:
            cp = self.cp
            src = cp.ones(1 << 28, dtype=cp.float32)
            dst = cp.empty_like(src)
            start, end = cp.cuda.Event(), cp.cuda.Event()
            times = []
            with self.stream:
                for i in range(12):
                    start.record()
                    dst[...] = src
                    end.record()
                    end.synchronize()
                    if i >= 2:
                        times.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
            self.copy_gbps = 2 * src.nbytes / float(np.median(times)) / 1e9
            del src, dst
        return self.copy_gbps

    def write_flag(self, ptr: int, value: int, stream=None) -> None:
        from cuda.bindings import driver as cu

        s = self.stream if stream is None else stream
        driver_ok(cu.cuStreamWriteValue32(cu.CUstream(s.ptr), cu.CUdeviceptr(ptr), value, 0))

    def wait_flag(self, ptr: int, value: int) -> None:
        from cuda.bindings import driver as cu

        driver_ok(cu.cuStreamWaitValue32(cu.CUstream(self.stream.ptr), cu.CUdeviceptr(ptr), value,
                                   cu.CUstreamWaitValue_flags.CU_STREAM_WAIT_VALUE_GEQ))

    def warm_renew(self, dtypes) -> None:
        """Compile and load renew()'s kernel for these integer types now, before any batch: loading
        a module while the judge's stream waits on a runner could wait forever."""
        cp = self.cp
        if self.renew_ints is None:
            self.renew_ints = cp.ElementwiseKernel(
                "T src, uint64 key, int64 bound", "T dst",
                """
                unsigned long long h = ((unsigned long long)i + 1) * 0x9E3779B97F4A7C15ULL ^ key;
                h ^= h >> 31; h *= 0xBF58476D1CE4E5B9ULL; h ^= h >> 29;
                dst = (src >= 0 && (long long)src < bound && (h & 63) == 0) ? (T)((h >> 8) % bound) : src;
                """, "renew_ints")
        with self.stream:
            for dt in dtypes:
                a = cp.zeros(8, dt)
                self.renew(a, cp.empty_like(a), 1, 3)
        self.stream.synchronize()

    def renew(self, src, dst, key: int, bound: int) -> None:
        """dst = src with a pseudo-random 1/64 of its values in [0, bound) replaced by new values in
        [0, bound) (Exercise.renew_inputs): which ones depends on ``key``, so the only way to the
        answer is to read them all."""
        if src.size:
            self.renew_ints(src, np.uint64(key), np.int64(max(bound, 1)), dst)

    def refresh(self, src, dst, dtype: str, key: int, gain: float, flip: bool) -> None:
        n = int(src.size)
        if n == 0:
            return
        k = self.fresh.get(dtype)
        if k is None:
            dst[...] = src
            return
        blocks = min(self.hold.sms * 8, -(-n // 256))
        k((blocks,), (256,), (src, dst, np.int64(n), np.uint64(key), np.float32(gain), np.float32(JITTER),
                              np.int32(1 if flip else 0)))




class Target:
    """Who runs the calls: a runner process, or the notebook itself (``check()``).

    ``queue(sets, seq, gated)`` queues the calls behind the flag (``gated``) or makes them now,
    then raises the done flag; it returns once queued. ``finish(seq)`` returns an error text
    ('' if none) once the calls and a device-wide synchronisation are over, after raising the
    synced flag."""

    flags: tuple[int, int, int]  # device addresses of GO, DONE, SYNCED in the judge's memory

    def warm(self, sets, repeat: int) -> str:
        raise NotImplementedError

    def queue(self, sets, seq: int, gated: bool) -> None:
        raise NotImplementedError

    def finish(self, seq: int) -> str:
        raise NotImplementedError


def time_batches(judge: JudgeGPU, ex, params, pool: list[dict], sets: dict, sub: Target, base: Target | None,
                 null: Target | None, rng: np.random.Generator, *, time_cap_s: float = 3.0, min_reps: int = 10,
                 max_reps: int = 200) -> SpeedResult:
    """The timing loop. ``sets``: {"inputs": [{name: Buf}] * BATCH, "sub": [{out: Buf}] * BATCH,
    "base": [...], "pool": [{name: Buf or host array}] * P, "values": [{name: value}] * P}.
    ``pool`` holds the host copies the pool was made from (for the scalar arguments)."""
    cp = judge.cp
    local = getattr(sub, "local", False)  # check(): the targets run in this very thread
    calls = len(sets["inputs"])
    on_host = tuple(ex.host_args) + tuple(ex.pinned_args)
    gated = not (ex.launch_cost_counts or on_host)
    flags: list[str] = []
    fresh_names = _fresh_names(ex, pool[0])
    renewed = dict(getattr(ex, "renew_inputs", None) or {})
    if renewed:
        judge.warm_renew({np.dtype(pool[0][name].dtype).name for name in renewed})
    flip = set(getattr(ex, "flip_inputs", ()) or ())
    # Scalars travel in the messages; float ones change with every call too.
    values_for = []

    def prepare() -> None:
        """Fresh inputs into every set, on the judge's stream."""
        values_for.clear()
        for s in range(calls):
            j = int(rng.integers(len(pool)))
            vals = {}
            for name, v in pool[j].items():
                if isinstance(v, np.ndarray):
                    src, dst = sets["pool"][j][name], sets["inputs"][s][name]
                    gain = float(2.0 ** rng.uniform(-0.5, 0.5))
                    if name in on_host:
                        np.multiply(src.view, np.asarray(gain, dtype=src.view.dtype), out=dst.view, casting="unsafe")
                    elif name in fresh_names:
                        judge.refresh(src.view.ravel(), dst.view.ravel(), dst.dtype, int(rng.integers(1, 2**63)),
                                      gain, name in flip)
                    elif name in renewed:
                        judge.renew(src.view.ravel(), dst.view.ravel(), int(rng.integers(1, 2**63)),
                                    int(params[renewed[name]]))
                    else:
                        dst.view.ravel()[...] = src.view.ravel()
                elif isinstance(v, float) and name in fresh_names:
                    vals[name] = float(np.float32(v * 2.0 ** rng.uniform(-0.5, 0.5)))
                else:
                    vals[name] = v
            values_for.append(vals)

    def poison(outs) -> None:
        for s in range(calls):
            for name, buf in outs[s].items():
                init = ex.outputs[name].init
                flat = buf.view.ravel()  # flat views: kernels already compiled (see JudgeGPU)
                if init is not None:
                    flat[...] = sets["inputs"][s][init].view.ravel()
                elif np.dtype(buf.dtype).kind == "f":
                    flat.fill(np.nan)
                else:
                    flat.fill(np.array(-123456789, dtype=np.int64).astype(buf.dtype)[()])

    def one_batch(targets, hold_s):
        """Run each target's batch in order on the judge's stream; return per-target events
        (start, end, end2, wrong, wrong after the synchronisation), whether a target was still
        queueing when its clock started, and each target's error text."""
        try:
            return _one_batch(targets, hold_s)
        except BaseException:
            release(targets)  # no stream of the judge's may stay waiting on a flag
            raise

    def _one_batch(targets, hold_s):
        if local:
            return _one_batch_local(targets)
        seq = next_seq()
        events = {}
        with judge.stream:
            if gated:
                judge.hold(hold_s)  # the GPU stays busy while the targets queue their calls
            prepare()
            args = {role: _arg_sets(ex, sets, role, values_for) for role, _, _ in targets}
        if not gated and not local:
            # Timed as launched: each target prepares its calls first and waits on the host for
            # its flag; the clock starts after that, with nothing of theirs queued.
            judge.stream.synchronize()
            for role, t, _ in targets:
                t.queue(args[role], seq, gated)
        with judge.stream:
            for role, t, outs in targets:
                start, end, end2 = cp.cuda.Event(), cp.cuda.Event(), cp.cuda.Event()  # noqa: F841
                if outs is not None:
                    poison(outs)
                judge.flush_l2()
                start.record()
                go, done, synced = t.flags
                judge.write_flag(go, seq)
                judge.wait_flag(done, seq)
                end.record()
                compare = role == "sub" and base is not None
                bad = _compare(judge, ex, sets) if compare else None
                judge.wait_flag(synced, seq)
                end2.record()
                bad2 = _compare(judge, ex, sets) if compare else None
                events[role] = (start, end, end2, bad, bad2)
        late = False
        if gated:
            for role, t, _ in targets:
                t.queue(args[role], seq, gated)
                if events[role][0].done:
                    late = True  # its calls were still being queued when its clock started
            errors = {role: t.finish(seq) for role, t, _ in targets}
        elif local:  # as launched, in this thread: one target after the other
            errors = {}
            for role, t, _ in targets:
                t.queue(args[role], seq, gated)
                errors[role] = t.finish(seq)
        else:  # as launched, by runners already waiting for their flags
            errors = {role: t.finish(seq) for role, t, _ in targets}
        judge.stream.synchronize()
        return events, late, errors

    def _one_batch_local(targets):
        """check(): the learner's calls run in this thread, so the judge's stream must never wait
        for them. A call that synchronises the device (freeing pinned memory, say) would wait for
        the judge's stream, which would wait for the rest of the calls. Each target runs with
        nothing of the judge's pending, timed as launched on the legacy stream, which waits for
        every blocking stream the learner's libraries use."""
        seq = next_seq()
        events, errors = {}, {}
        null = cp.cuda.Stream.null
        with judge.stream:
            prepare()
            args = {role: _arg_sets(ex, sets, role, values_for) for role, _, _ in targets}
        for role, t, outs in targets:
            with judge.stream:
                if outs is not None:
                    poison(outs)
                judge.flush_l2()
                judge.write_flag(t.flags[0], seq)  # GO: the runner's own wait for it passes at once
            judge.stream.synchronize()
            start, end = cp.cuda.Event(), cp.cuda.Event()
            t.queue(args[role], seq, False)
            start.record(null)
            t.proc.runner.go_live()
            end.record(null)
            errors[role] = t.finish(seq)  # waits for the device
            bad = None
            if role == "sub" and base is not None:
                with judge.stream:
                    bad = _compare(judge, ex, sets)
            events[role] = (start, end, end, bad, bad)
        judge.stream.synchronize()
        return events, False, errors

    def release(targets) -> None:
        """Free the judge's stream if a target died before raising its flags."""
        for _, t, _ in targets:
            for ptr in t.flags:
                judge.write_flag(ptr, 0x7FFFFFFF, stream=judge.side)
        judge.side.synchronize()
        judge.stream.synchronize()

    counter = [0]

    def next_seq() -> int:
        counter[0] += 1
        return counter[0]

    # Warm-up: compile and load on both sides, with fresh inputs, untimed.
    with judge.stream:
        prepare()
    judge.stream.synchronize()
    for role, t in (("sub", sub), ("base", base)):
        if t is None:
            continue
        err = t.warm(_arg_sets(ex, sets, role, values_for), repeat=2)
        if err:
            return SpeedResult(False, f"timing failed: {err}" if role == "sub" else f"the reference failed: {err}")
    # A dry run of the judge's own work on the real buffers (inputs, poison, comparison): any
    # kernel it needs is compiled and loaded now, while no stream waits on a runner.
    with judge.stream:
        prepare()
        poison(sets["sub"])
        poison(sets["base"])
        if base is not None:
            _compare(judge, ex, sets)
        judge.flush_l2()
    judge.stream.synchronize()
    hold_s = 2e-3
    # The switch between processes, per batch: empty calls of a trusted runner, timed the same
    # way, in every round (the median is subtracted; other work on the GPU slows these too).
    nulls: list[float] = []

    def calibrate() -> str:
        ev, late, errs = one_batch([("null", null, None)], hold_s)
        if errs.get("null"):
            return errs["null"]
        if not late:
            nulls.append(cp.cuda.get_elapsed_time(ev["null"][0], ev["null"][1]) / 1e3)
        return ""

    if null is not None:
        for _ in range(3):
            err = calibrate()
            if err:
                return SpeedResult(False, f"timing failed in the grader's calibration: {err}")
    targets = [("base", base, sets["base"])] if base is not None else []
    targets.append(("sub", sub, sets["sub"]))
    times = {role: [] for role, _, _ in targets}
    wrong: list[int] = []
    unjoined = 0
    began = time.perf_counter()
    reps = 0
    while reps < max_reps:
        if null is not None:
            err = calibrate()
            if err:
                return SpeedResult(False, f"timing failed in the grader's calibration: {err}")
        events, late, errors = one_batch(targets, hold_s)
        if errors.get("base"):
            return SpeedResult(False, f"the reference failed while timed: {errors['base']}")
        if errors.get("sub"):
            return SpeedResult(False, f"timing failed: {errors['sub']}")
        if late:
            if hold_s >= MAX_HOLD_S:
                flags.append("your function takes longer to queue its calls than the grader holds the GPU "
                             f"({MAX_HOLD_S * 1e3:.0f} ms): the host's time is counted")
            else:
                hold_s = min(2 * hold_s, MAX_HOLD_S)
                continue
        for role, _, _ in targets:
            start, end, end2, bad, bad2 = events[role]
            t = cp.cuda.get_elapsed_time(start, end) / 1e3
            if bad is not None:
                n_bad, n_bad2 = int(bad.get().sum()), int(bad2.get().sum())
                if n_bad and not n_bad2:
                    unjoined += 1  # finished only after the device-wide synchronisation
                    t = cp.cuda.get_elapsed_time(start, end2) / 1e3
                elif n_bad:
                    wrong.append(n_bad)
            times[role].append(t)  # the whole batch; the overhead comes off at the end
        reps += 1
        if reps >= min_reps:
            stable = all(np.std(v) / math.sqrt(len(v)) < 0.01 * np.mean(v) for v in times.values() if np.mean(v) > 0)
            if stable or time.perf_counter() - began > time_cap_s:
                break
    overhead = float(np.median(nulls)) if nulls else 0.0
    shortest = min(float(np.median(v)) for v in times.values())
    if overhead > 0.5 * shortest:
        # The batches are not much longer than the switch itself (or the GPU is shared): take off
        # no more than half of the shorter batch, and say so.
        flags.append(f"the calls are short next to the grader's overhead ({overhead * 1e6:.0f} us per batch of "
                     f"{calls}): their times are less precise")
        overhead = 0.5 * shortest
    times = {role: [max(t - overhead, 0.0) / calls for t in v] for role, v in times.items()}
    if wrong:
        flags.append(f"outputs of the timed calls were wrong in {len(wrong)} of {reps} samples "
                     f"(work skipped, cached or replayed, or finished after the function returned?): "
                     f"{wrong[0]:,} elements wrong")
    if unjoined:
        flags.append("work was still running on another stream when the function returned; the grader "
                     "waited for the whole device, so that time (and the wait) is counted")
    med = float(np.median(times["sub"]))
    result = SpeedResult(True, median_s=med, reps=reps, flags=flags, overhead_s=overhead)
    if base is not None:
        result.baseline_median_s = float(np.median(times["base"]))
        result.ratio = result.baseline_median_s / med if med > 0 else float("inf")
    if med <= 0:
        result.flags.append("the calls took no measurable time beyond the grader's overhead")
    if ex.bytes_moved and med > 0:
        result.gbps = ex.bytes_moved(params) / med / 1e9
        result.copy_gbps = judge.copy_bandwidth()
        result.pct_of_copy = 100.0 * result.gbps / result.copy_gbps
    if ex.flops and med > 0:
        result.gflops = ex.flops(params) / med / 1e9
    return result


def _fresh_names(ex, host_inputs: dict) -> set:
    names = {k for k, v in host_inputs.items()
             if (isinstance(v, np.ndarray) and v.dtype.kind == "f") or isinstance(v, float)}
    if ex.scaled_inputs is not None:
        names &= set(ex.scaled_inputs)
    return names


def _arg_sets(ex, sets, role, values_for) -> list[list]:
    """Per call: the arguments in contract order, as Bufs (arrays) or plain values."""
    out = []
    for s in range(len(sets["inputs"])):
        args = []
        outs = sets[role][s] if role in ("sub", "base") else {}
        for a in ex.args if role != "null" else ():
            if a in outs:
                args.append(outs[a])
            elif a in sets["inputs"][s]:
                args.append(sets["inputs"][s][a])
            else:
                args.append(values_for[s][a] if s < len(values_for) else None)
        out.append(args)
    return out


def _compare(judge: JudgeGPU, ex, sets):
    """Device counts of the submission's wrong elements over the batch (not synchronised)."""
    cp = judge.cp
    calls = len(sets["inputs"])
    k = calls * len(ex.outputs)
    slots = cp.zeros(2 * k, cp.uint64)  # a memset: no kernel to load
    i = 0
    for s in range(calls):
        for name, spec in ex.outputs.items():
            got, want = sets["sub"][s][name].view, sets["base"][s][name].view
            judge.bad_count(got, want, spec.dtype, ex.tol(spec.dtype), slots[2 * i:2 * i + 1], slots[2 * i + 1:2 * i + 2])
            i += 1
    return slots[0::2]
