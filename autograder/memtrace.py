"""Memory-access analysis of Numba kernels run in the CUDA simulator.

Without a GPU a learner gets no profiler. While ``trace()`` is active, this module records every
global- and shared-memory access that simulated kernels make, then computes what Nsight Compute
would report for them on a GPU::

    from autograder.memtrace import trace
    with trace() as t:
        kernel[blocks, threads](x, out)
    report = t.report()
    print(report.text())          # a table per launch and one sentence per finding
    report.as_dict()              # JSON-able

The model (chapter 7, *Memory access*):

- A *request* is one warp executing one access instruction: the accesses grouped by launch,
  block, warp (linear thread id // 32), site and k, where k counts how many times this thread
  has executed that site before. A *site* is one access in the source: code object and bytecode
  offset of the calling frame, the array, load or store.
- Global memory moves 32-byte *sectors*; a request costs its distinct sectors. Addresses are byte
  offsets within the array's allocation, which is taken to start at a multiple of 256 bytes as
  ``cudaMalloc`` guarantees (NumPy's own allocations are not aligned that way).
- Shared memory has 32 banks of 4-byte words; a request takes as many passes as the most used
  bank has distinct words (threads reading the same word share it: a broadcast).

Kernels run in turn or one greenlet per simulated thread (``autograder.runner.StrictBarriers``), or
one OS thread per simulated thread (the stock simulator); all are recorded the same way.

Not modelled: caches (bytes moved are the sectors each request asks for, as Nsight's
sectors-per-request counts them, not DRAM traffic), local arrays, and wide loads. An atomic
(``cuda.atomic.*``) counts as one request of kind "atomic". A slice assigned by one thread counts
as one request per element.
"""
from __future__ import annotations

import math
import operator
import os
import sys
import threading
from array import array
from dataclasses import asdict, dataclass, field

import numpy as np

SECTOR = 32
BANKS = 32
WORD = 4
WARP = 32
KINDS = ("load", "store", "atomic")
MAX_ACCESSES = 2_000_000  # per launch; 4 int64 each, so 64 MB at most
_CHAPTER = "see chapter 7 (memory access)"

_ACTIVE = threading.Lock()  # one trace at a time: the patches are process-wide


# --------------------------------------------------------------------------- report
@dataclass
class GlobalSite:
    """One global-memory access in the source, over one launch."""
    file: str
    line: int
    function: str
    array: str
    kind: str                  # "load", "store" or "atomic" (cuda.atomic.*)
    itemsize: int
    requests: int
    sectors_mean: float        # distinct 32-byte sectors per request
    sectors_max: int
    ideal_sectors_mean: float  # sectors the same distinct bytes would need if contiguous and aligned
    bytes_requested: int       # distinct elements of each request x itemsize, summed
    bytes_moved: int           # sectors x 32, summed
    efficiency: float          # bytes_requested / bytes_moved
    stride: int | None         # most common distance, in elements, between neighbouring threads' accesses


@dataclass
class SharedSite:
    """One shared-memory access in the source, over one launch."""
    file: str
    line: int
    function: str
    array: str
    kind: str
    itemsize: int
    requests: int
    ways_mean: float           # passes per request: distinct words in the most used bank
    ways_max: int
    ideal_mean: float          # passes with no conflict: distinct words / 32, rounded up
    stride: int | None         # most common distance, in 4-byte words, between neighbouring threads


@dataclass
class Launch:
    index: int
    kernel: str
    grid: tuple
    block: tuple
    accesses: int              # accesses recorded
    dropped: int               # accesses not recorded once the cap was reached
    global_sites: list = field(default_factory=list)
    shared_sites: list = field(default_factory=list)
    load_bytes_moved: int = 0  # distinct sectors of each request x 32, summed
    load_bytes_min: int = 0    # each distinct byte loaded, once
    store_bytes_moved: int = 0  # stores and atomics
    store_bytes_min: int = 0
    findings: list = field(default_factory=list)

    def site(self, array: str, kind: str = "load", space: str = "global"):
        """The first site of ``space`` that accesses ``array`` as ``kind`` (None if none)."""
        sites = self.global_sites if space == "global" else self.shared_sites
        return next((s for s in sites if s.array == array and s.kind == kind), None)


@dataclass
class Report:
    launches: list
    error: str = ""            # set if recording stopped on an internal error

    @property
    def findings(self) -> list:
        """Every launch's findings, each sentence once."""
        out: list = []
        for launch in self.launches:
            out += [f for f in launch.findings if f not in out]
        if self.error:
            out.append(self.error)
        return out

    def as_dict(self) -> dict:
        d = asdict(self)
        d["findings"] = self.findings
        return d

    def text(self, max_launches: int = 10) -> str:
        lines = []
        for launch in self.launches[:max_launches]:
            lines.append(f"launch {launch.index}: {launch.kernel}, grid {launch.grid}, block {launch.block}, "
                         f"{launch.accesses:,} accesses recorded" +
                         (f" ({launch.dropped:,} more not recorded)" if launch.dropped else ""))
            if launch.global_sites:
                lines.append(f"  {'global memory':<22}{'line':>5} {'kind':<6}{'requests':>9}"
                             f"{'sectors/req':>12}{'max':>5}{'requested':>11}{'moved':>11}{'efficiency':>11}")
                for s in launch.global_sites:
                    lines.append(f"  {_short(s.array, 22):<22}{s.line:>5} {s.kind:<6}{s.requests:>9,}"
                                 f"{s.sectors_mean:>12.1f}{s.sectors_max:>5}{_bytes(s.bytes_requested):>11}"
                                 f"{_bytes(s.bytes_moved):>11}{s.efficiency:>10.0%} ")
                lines.append(f"  totals: loads moved {_bytes(launch.load_bytes_moved)} (minimum "
                             f"{_bytes(launch.load_bytes_min)}), stores moved {_bytes(launch.store_bytes_moved)} "
                             f"(minimum {_bytes(launch.store_bytes_min)})")
            if launch.shared_sites:
                lines.append(f"  {'shared memory':<22}{'line':>5} {'kind':<6}{'requests':>9}{'ways':>12}{'max':>5}")
                for s in launch.shared_sites:
                    lines.append(f"  {_short(s.array, 22):<22}{s.line:>5} {s.kind:<6}{s.requests:>9,}"
                                 f"{s.ways_mean:>12.1f}{s.ways_max:>5}")
        if len(self.launches) > max_launches:
            lines.append(f"... and {len(self.launches) - max_launches} more launches")
        if not self.launches:
            lines.append("no kernel launch was recorded")
        findings = self.findings
        if findings:
            lines.append("findings:")
            lines += [f"  - {f}" for f in findings]
        else:
            lines.append("findings: none (every access is coalesced and free of bank conflicts)")
        return "\n".join(lines)


def summary(report: Report) -> dict:
    """A whole run's figures, every launch together: what check(profile=True) sets side by side."""
    out = {"launches": len(report.launches)}
    for kind in ("load", "store"):
        sites = [s for launch in report.launches for s in launch.global_sites
                 if s.kind == kind or (kind == "store" and s.kind == "atomic")]
        requests = sum(s.requests for s in sites)
        moved = sum(s.bytes_moved for s in sites)
        out[f"{kind}_requests"] = requests
        out[f"{kind}_sectors_per_request"] = moved / SECTOR / requests if requests else None
        out[f"{kind}_efficiency"] = sum(s.bytes_requested for s in sites) / moved if moved else None
    for kind in ("load", "store"):
        moved = sum(getattr(launch, f"{kind}_bytes_moved") for launch in report.launches)
        least = sum(getattr(launch, f"{kind}_bytes_min") for launch in report.launches)
        out[f"{kind}_bytes_moved"], out[f"{kind}_bytes_min"] = moved, least
    shared = [s for launch in report.launches for s in launch.shared_sites]
    requests = sum(s.requests for s in shared)
    out["shared_requests"] = requests
    out["shared_ways"] = sum(s.ways_mean * s.requests for s in shared) / requests if requests else None
    return out


def profile_of(report: Report) -> dict:
    """What a traced run tells about memory: its summary and its findings (JSON-able)."""
    return {"summary": summary(report), "findings": report.findings}


SUMMARY_KEYS = ("launches", "load_requests", "load_sectors_per_request", "load_efficiency", "store_requests",
                "store_sectors_per_request", "store_efficiency", "load_bytes_moved", "load_bytes_min",
                "store_bytes_moved", "store_bytes_min", "shared_requests", "shared_ways")


def checked_profile(d) -> dict | None:
    """A profile from a process that ran learner code: numbers stay numbers, findings stay short
    texts, anything else is dropped. A profile never changes a grade; it is only shown."""
    if not isinstance(d, dict) or not isinstance(d.get("summary"), dict):
        return None
    out = {}
    for key in SUMMARY_KEYS:
        v = d["summary"].get(key)
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
        out[key] = v if ok else (0 if key in ("launches", "load_bytes_min", "store_bytes_min", "load_bytes_moved",
                                             "store_bytes_moved", "load_requests", "store_requests",
                                             "shared_requests") else None)
    findings = [str(f)[:600] for f in (d.get("findings") or []) if isinstance(f, str)][:12]
    return {"summary": out, "findings": findings}


def side_by_side(case: str, mine: dict, reference: dict | None, labels=("yours", "reference")) -> str:
    """Two profiles (``profile_of``) of runs on the same inputs (``case``), one row per figure,
    then the findings where the first does worse than the second."""
    runs = [mine["summary"]] + ([reference["summary"]] if reference is not None else [])

    def cell(v, fmt) -> str:
        return "-" if v is None else fmt(v)

    rows = [("kernel launches", "launches", str),
            ("global loads: requests", "load_requests", lambda v: f"{v:,}"),
            ("  sectors per request", "load_sectors_per_request", lambda v: f"{v:.1f}"),
            ("  bytes used / moved", "load_efficiency", lambda v: f"{v:.0%}"),
            ("global stores: requests", "store_requests", lambda v: f"{v:,}"),
            ("  sectors per request", "store_sectors_per_request", lambda v: f"{v:.1f}"),
            ("  bytes used / moved", "store_efficiency", lambda v: f"{v:.0%}"),
            ("shared: requests", "shared_requests", lambda v: f"{v:,}"),
            ("  ways per request", "shared_ways", lambda v: f"{v:.1f}")]
    lines = [f"Profile ({case}, traced in the CUDA simulator: what a GPU's memory system would see):",
             f"  {'':<26}" + "".join(f"{label:>12}" for label in labels[:len(runs)])]
    for title, key, fmt in rows:
        lines.append(f"  {title:<26}" + "".join(f"{cell(r.get(key), fmt):>12}" for r in runs))
    for kind in ("load", "store"):
        lines.append(f"  {'global ' + kind + 's: moved':<26}" + "".join(
            f"{_bytes(r[kind + '_bytes_moved']):>12}" for r in runs) + f"   (least: {_bytes(runs[0][kind + '_bytes_min'])})")
    findings = worse_than(mine, reference)
    if findings:
        lines += ["What to look at:"] + [f"  - {f}" for f in findings]
    elif mine["findings"]:
        lines.append("Your kernels use memory about as well as the reference on this case (where both fall short of "
                     "whole sectors, the case's shape is the reason: rows that do not start on a sector, say).")
    else:
        lines.append("Every global access is coalesced and no shared access has a bank conflict.")
    return "\n".join(lines)


def worse_than(mine: dict, reference: dict | None) -> list:
    """The findings of profile ``mine`` where it does worse than ``reference`` on the same inputs:
    the reference's own figures show what the case's shape costs any kernel (small or odd sizes)."""
    if reference is None:
        return list(mine["findings"])
    a, b = mine["summary"], reference["summary"]

    def worse(kind: str) -> bool:
        if kind == "shared":
            return (a["shared_ways"] or 1.0) > 1.1 * (b["shared_ways"] or 1.0)
        if a[f"{kind}_efficiency"] is None:
            return False
        moved, least = a[f"{kind}_bytes_moved"], b[f"{kind}_bytes_moved"]
        return a[f"{kind}_efficiency"] < 0.9 * (b[f"{kind}_efficiency"] or 1.0) or moved > 1.25 * least

    kept = []
    for f in mine["findings"]:
        kind = "shared" if "shared array" in f else "store" if (" stores " in f or "atomic" in f) else \
            "load" if " loads " in f else None
        if kind is None or worse(kind):
            kept.append(f)
    return kept


def _bytes(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _short(s: str, width: int) -> str:
    return s if len(s) <= width else s[:width - 1] + "…"


def _num(x: float) -> str:
    return str(int(round(x))) if abs(x - round(x)) < 0.05 else f"{x:.1f}"


# --------------------------------------------------------------------------- recording
class _LaunchRecord:
    """What one launch recorded: a flat int64 buffer of (site, block, thread, byte offset)."""

    def __init__(self, index: int, ctx, kernel: str, code) -> None:
        self.index, self.ctx, self.kernel, self.code = index, ctx, kernel, code  # ctx kept: its id stays unique
        self.grid = tuple(int(v) for v in (ctx.gridDim.x, ctx.gridDim.y, ctx.gridDim.z))
        self.block = tuple(int(v) for v in (ctx.blockDim.x, ctx.blockDim.y, ctx.blockDim.z))
        self.buf = array("q")
        self.dropped = 0
        self.sites: dict = {}       # site key -> index into site_info
        self.site_info: list = []   # (file, line, function, array key, kind, space, itemsize)
        self.infos: dict = {}       # id(array object) -> its address info, for the launch's long-lived arrays
        self.fast: dict = {}        # (id(anchor), id(code), f_lasti, kind) -> (anchor, site, info)
        self.names: dict = {}       # array key -> name
        self.roots: dict = {}       # array key -> (shape, strides, itemsize) of the whole allocation


class Tracer:
    """Records accesses while active; see ``trace``."""

    def __init__(self, max_accesses: int = MAX_ACCESSES) -> None:
        self.max_accesses = int(max_accesses)
        self.launches: list = []
        self.error = ""
        self._lock = threading.Lock()
        self._launch = None
        self._tcache = (None, 0, 0)   # last simulated thread seen: (thread, block, thread id)
        self._patches: list = []
        self._undo: list = []  # calls that undo what is not a class attribute
        self._tables: dict = {}       # code object -> its instruction table (see _table), False for simulator code
        self._shared_ids: set = set()  # ids of the grader's kernel arrays that are shared memory (tap)
        self._on = False

    # ------------------------------------------------------------------ patching
    def __enter__(self):
        if not _ACTIVE.acquire(blocking=False):
            raise RuntimeError("memtrace: a trace is already active in this process")
        try:
            self._install()
        except BaseException:
            self._restore()
            _ACTIVE.release()
            raise
        self._on = True
        return self

    def __exit__(self, *exc):
        self._on = False
        try:
            self._restore()
        finally:
            _ACTIVE.release()
            self._close_launch()
        return False

    def _patch(self, cls, name, fn) -> None:
        self._patches.append((cls, name, name in cls.__dict__, cls.__dict__.get(name)))
        setattr(cls, name, fn)

    def _restore(self) -> None:
        while self._undo:
            self._undo.pop()()
        while self._patches:
            cls, name, had, old = self._patches.pop()
            if had:
                setattr(cls, name, old)
            else:
                delattr(cls, name)

    def _install(self) -> None:
        from numba import config
        if not config.ENABLE_CUDASIM:
            raise RuntimeError("memtrace works in the CUDA simulator only (set NUMBA_ENABLE_CUDASIM=1 "
                               "before numba is imported)")
        from numba.cuda.simulator import kernel as kmod, kernelapi
        from numba.cuda.simulator.cudadrv.devicearray import FakeWithinKernelCUDAArray as Fake
        from numba.cuda.np import numpy_support
        from numba.cuda import types

        tracer = self
        sim_dir = os.path.dirname(os.path.abspath(kmod.__file__)) + os.sep
        here = os.path.abspath(globals().get("__file__", "<grader memtrace>"))  # a grader's runner execs this source
        tables = self._tables
        get_frame = sys._getframe
        current_thread = threading.current_thread
        lock = self._lock
        cap = 4 * self.max_accesses
        orig_get, orig_set = Fake.__getitem__, Fake.__setitem__

        active, get_ident = threading._active, threading.get_ident
        atomics = {f.__code__ for f in vars(kernelapi.FakeCUDAAtomic).values() if hasattr(f, "__code__")}
        fast_max = 4096

        def resolve(launch, obj, anchor, info, kind, frame, fkey):
            """The site and address info of an access the fast cache does not know."""
            if info is None:
                info = launch.infos.get(id(obj))
                if info is None or info[0] is not obj:
                    info = tracer._info(launch, obj)
            # the site: the first frame outside the simulator, and its instruction
            code = frame.f_code
            table = tables.get(code)
            if table is None:
                table = tracer._table(code, sim_dir, here)
            inside = table is False
            if inside and code in atomics:
                # cuda.atomic.*: the simulator reads the element twice and writes it once; on a GPU
                # it is one atomic request, recorded at the write
                if kind == 0:
                    return None, info
                kind = 2
            while table is False and frame.f_back is not None:
                frame = frame.f_back
                code = frame.f_code
                table = tables.get(code)
                if table is None:
                    table = tracer._table(code, sim_dir, here)
            i = frame.f_lasti >> 1
            key = (id(code), table[i] if table and i < len(table) else i, info[1], kind)
            site = launch.sites.get(key)
            if site is None:
                site = tracer._new_site(launch, key, frame, obj, info)
            if not inside and len(launch.fast) < fast_max:  # holds anchor, so its id stays its own
                launch.fast[fkey] = (anchor, site, info)
            return site, info

        def record(obj, anchor, info, idx, kind, frame) -> None:
            """Append one access (or several, for a slice) of ``obj`` at ``idx`` made from ``frame``.
            ``anchor`` is the object whose identity, with the frame's instruction, names the site
            in the fast cache: the in-kernel array, or a shared array's ndarray."""
            ctx = kmod._kernel_context
            if ctx is None:
                return  # host code indexing an array: not a kernel's access
            launch = tracer._launch
            if launch is None or launch.ctx is not ctx:
                launch = tracer._new_launch(ctx, None)
            buf = launch.buf
            if len(buf) >= cap:
                launch.dropped += 1
                return
            # the simulated thread (threading.current_thread(), without its call)
            t = active.get(get_ident()) or current_thread()
            c = tracer._tcache
            if c[0] is t:
                blk, tid = c[1], c[2]
            else:
                b, g = t.blockIdx, launch.grid
                blk, tid = b.x + g[0] * (b.y + g[1] * b.z), t.thread_id
                tracer._tcache = (t, blk, tid)
            fkey = (id(anchor), id(frame.f_code), frame.f_lasti, kind)
            hit = launch.fast.get(fkey)
            if hit is not None and hit[0] is anchor:
                site, info = hit[1], hit[2]
            else:
                site, info = resolve(launch, obj, anchor, info, kind, frame, fkey)
                if site is None:
                    return
            # the element's byte offset in its allocation
            shape = info[4]
            if type(idx) is int:
                o = info[2] + (idx + shape[0] if idx < 0 else idx) * info[3][0]
            elif type(idx) is tuple and len(idx) == len(shape) and all(type(i) is int for i in idx):
                o = info[2]
                for i, s, n in zip(idx, info[3], shape):
                    o += (i + n if i < 0 else i) * s
            else:  # a slice, or integers of another type
                offs = _offsets(info, idx)
                room = max(0, (cap - len(buf)) // 4)
                if len(offs) > room:
                    launch.dropped += len(offs) - room
                    offs = offs[:room]
                with lock:
                    for o in offs:
                        buf.extend((site, blk, tid, o))
                return
            with lock:
                buf.extend((site, blk, tid, o))

        def getitem(self, idx):
            r = orig_get(self, idx)
            if tracer._on and type(r) is not Fake:
                try:
                    record(self, self, None, idx, 0, get_frame(1))
                except Exception as e:  # noqa: BLE001 - the kernel must not fail because of the tracer
                    tracer._fail(e)
            return r

        def setitem(self, idx, val):
            orig_set(self, idx, val)
            if tracer._on:
                try:
                    record(self, self, None, idx, 1, get_frame(1))
                except Exception as e:  # noqa: BLE001
                    tracer._fail(e)

        getitem.__name__, setitem.__name__ = "__getitem__", "__setitem__"

        class Shared:
            """A shared array while tracing: indexing is recorded, everything else is the array's."""
            __slots__ = ("_a", "_info")

            def __init__(self, a) -> None:
                self._a = a
                self._info = tracer._array_info(a, self)

            def __getitem__(self, idx):
                r = self._a[idx]
                if type(r) is np.ndarray:
                    return Shared(r)  # a view: its own accesses are recorded
                if tracer._on:
                    try:
                        record(self, self._a, self._info, idx, 0, get_frame(1))
                    except Exception as e:  # noqa: BLE001
                        tracer._fail(e)
                return r

            def __setitem__(self, idx, val):
                if type(val) is Shared:
                    val = val._a
                self._a[idx] = val
                if tracer._on:
                    try:
                        record(self, self._a, self._info, idx, 1, get_frame(1))
                    except Exception as e:  # noqa: BLE001
                        tracer._fail(e)

            def __getattr__(self, name):
                return getattr(self._a, name)

            def __len__(self):
                return len(self._a)

            def __iter__(self):
                return (self[i] for i in range(len(self._a)))

            def __array__(self, dtype=None, copy=None):
                return self._a if dtype is None else self._a.astype(dtype)

            def __array_ufunc__(self, ufunc, method, *args, **kwargs):
                args = tuple(a._a if type(a) is Shared else a for a in args)
                if "out" in kwargs:
                    kwargs["out"] = tuple(o._a if type(o) is Shared else o for o in kwargs["out"])
                return getattr(ufunc, method)(*args, **kwargs)

            def __repr__(self):
                return repr(self._a)

        for op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "neg", "pos", "abs",
                   "eq", "ne", "lt", "le", "gt", "ge"):
            name = f"__{op}__"

            def method(self, *a, _name=name):
                return getattr(self._a, _name)(*(x._a if type(x) is Shared else x for x in a))

            setattr(Shared, name, method)

        def shared_array(self, shape, dtype, alignment=None):
            # FakeCUDAShared.array, repeated here: it names an allocation by its caller's line, and
            # a wrapper calling it would make every allocation this wrapper's line.
            if alignment is not None:
                raise RuntimeError("Array alignment is not supported in cudasim")
            if isinstance(dtype, types.Type):
                dtype = numpy_support.as_dtype(dtype)
            if shape == 0:
                count = self._dynshared_size // np.dtype(dtype).itemsize
                res = np.frombuffer(self._dynshared.data, dtype=dtype, count=count)
            else:
                caller = get_frame(1)
                where = (caller.f_code.co_filename, caller.f_lineno)
                res = self._allocations.get(where)
                if res is None:
                    res = self._allocations[where] = np.empty(shape, dtype)
            try:
                return Shared(res)
            except Exception as e:  # noqa: BLE001
                tracer._fail(e)
                return res

        orig_init = kernelapi.FakeCUDAModule.__init__

        def module_init(self, *a, **k):  # one FakeCUDAModule per launch: the launch starts here
            orig_init(self, *a, **k)
            try:
                caller = get_frame(1).f_locals.get("self")
                fn = getattr(caller, "fn", None)
                tracer._new_launch(self, fn)
            except Exception as e:  # noqa: BLE001
                tracer._fail(e)

        def tap(obj, view, idx, kind, frame, shared) -> None:
            """An access made through the grader's kernel arrays (sim_memory's, in a graded run):
            ``obj`` the kernel array, ``view`` its memory, ``kind`` 0 load, 1 store, 2 atomic."""
            if not tracer._on:
                return
            try:
                if shared:
                    tracer._shared_ids.add(id(obj))
                record(obj, obj, tracer._array_info(view, obj), idx, kind, frame)
            except Exception as e:  # noqa: BLE001
                tracer._fail(e)

        self.tap = tap
        self._patch(Fake, "__getitem__", getitem)
        self._patch(Fake, "__setitem__", setitem)
        grader_shared = getattr(kernelapi.FakeCUDAShared.array, "_grader_plain_shared", None)
        if grader_shared is None:
            self._patch(kernelapi.FakeCUDAShared, "array", shared_array)
        else:  # the grader's kernel arrays are installed (they report through tap); the stock arrays
            grader_shared(Shared)  # they hand out outside a graded launch are wrapped here
            self._undo.append(lambda: grader_shared(None))
        self._patch(kernelapi.FakeCUDAModule, "__init__", module_init)
        self._shared_cls = Shared

    # ------------------------------------------------------------------ helpers of record()
    def _table(self, code, sim_dir: str, here: str):
        """For each 2-byte code unit of ``code``, the offset of the instruction it belongs to; False
        for the simulator's and this module's code. Python 3.11 reports a frame's position inside
        an instruction's inline cache once the instruction is specialised, so ``f_lasti`` alone
        would split one site in two."""
        if code.co_filename.startswith(sim_dir) or os.path.abspath(code.co_filename) == here:
            table = False
        else:
            import dis

            table = [0] * (len(code.co_code) // 2)
            starts = [ins.offset for ins in dis.get_instructions(code)] + [len(code.co_code)]
            for a, b in zip(starts, starts[1:]):
                table[a // 2:b // 2] = [a] * ((b - a) // 2)
        self._tables[code] = table
        return table

    def _fail(self, e: BaseException) -> None:
        if not self.error:
            self.error = f"memtrace stopped recording after an internal error ({type(e).__name__}: {e})"
        self._on = False

    def _close_launch(self) -> None:
        """Drop what kept the finished launch's arrays alive (its caches, the last thread)."""
        if self._launch is not None:
            self._launch.fast, self._launch.infos, self._launch.ctx = {}, {}, None
        self._launch = None
        self._tcache = (None, 0, 0)

    def _new_launch(self, ctx, fn) -> _LaunchRecord:
        with self._lock:
            if self._launch is not None and self._launch.ctx is ctx:
                return self._launch
            self._close_launch()
            name = getattr(fn, "__name__", None) or "kernel"
            launch = _LaunchRecord(len(self.launches), ctx, name, getattr(fn, "__code__", None))
            self.launches.append(launch)
            self._launch = launch
            return launch

    @staticmethod
    def _array_info(a, owner) -> tuple:
        """(owner, key, base offset, strides, shape, itemsize, array) of ndarray ``a``: the key is
        its allocation's address, the offset is in bytes from the allocation's start."""
        root = a
        while isinstance(root.base, np.ndarray):
            root = root.base
        key = root.__array_interface__["data"][0]
        base = a.__array_interface__["data"][0] - key
        return (owner, key, base, a.strides, a.shape, a.itemsize, a)

    def _info(self, launch: _LaunchRecord, obj) -> tuple:
        item = obj.__dict__["_item"]
        a = item.__dict__.get("_ary")
        if a is None:
            a = item._ary
        info = self._array_info(a, obj)
        if len(launch.infos) < 64:  # the first arrays seen, the launch's arguments among them
            launch.infos[id(obj)] = info
        return info

    def _new_site(self, launch: _LaunchRecord, key, frame, obj, info) -> int:
        with self._lock:
            site = launch.sites.get(key)
            if site is not None:
                return site
            akey = info[1]
            if akey not in launch.roots:
                root = info[6]
                while isinstance(root.base, np.ndarray):
                    root = root.base
                launch.roots[akey] = (root.shape, root.strides, root.itemsize)
            name = launch.names.get(akey) or self._name(frame, obj, akey)
            launch.names.setdefault(akey, name)
            space = 1 if type(obj) is self._shared_cls or id(obj) in self._shared_ids else 0
            code = frame.f_code
            launch.site_info.append((code.co_filename, frame.f_lineno, code.co_name, akey, key[3], space, info[5]))
            site = launch.sites[key] = len(launch.site_info) - 1
            return site

    def _name(self, frame, obj, akey) -> str:
        """The name of a local variable in the accessing frame that holds ``obj``'s array."""
        f, depth = frame, 0
        while f is not None:
            local = f.f_locals
            for name, v in local.items():
                if v is obj:
                    return name
            for name, v in local.items():
                try:
                    if type(v) is self._shared_cls:
                        a = v._a
                    elif hasattr(v, "__dict__") and "_item" in v.__dict__:
                        a = v.__dict__["_item"]._ary
                    elif isinstance(v, np.ndarray):
                        a = v
                    else:
                        continue
                    if isinstance(a, np.ndarray) and self._array_info(a, None)[1] == akey:
                        return name
                except Exception:  # noqa: BLE001 - naming is best effort
                    continue
            depth += 1
            f = f.f_back if f.f_code is not getattr(self._launch, "code", None) and depth < 4 else None
        return f"array at line {frame.f_lineno}"

    # ------------------------------------------------------------------ results
    def report(self) -> Report:
        launches = [_analyse(r) for r in self.launches]
        return Report(launches=launches, error=self.error)

    def launch_of(self, kernel: str) -> int:
        """The index of the last launch of ``kernel`` (a kernel may be launched several times)."""
        found = [i for i, r in enumerate(self.launches) if r.kernel == kernel]
        if not found:
            raise KeyError(f"no launch of kernel {kernel!r}")
        return found[-1]

    def touch_map(self, array: str, launch: int = -1, kind: str | None = None) -> np.ndarray:
        """For a figure of the access pattern: an int array of ``array``'s shape holding the linear
        index of the thread that last touched each element, ``block * threads_per_block +
        thread_id`` (block and thread ids linear, x fastest), -1 where no thread did. Where several
        threads touched an element, the last one recorded. ``kind``: "load", "store", "atomic" or
        None for all."""
        rec = self.launches[launch]
        akeys = [k for k, n in rec.names.items() if n == array]
        if not akeys:
            raise KeyError(f"no array named {array!r} in launch {rec.index} (names: {sorted(set(rec.names.values()))})")
        akey = akeys[0]
        shape, strides, _ = rec.roots[akey]
        data = np.array(rec.buf, dtype=np.int64).reshape(-1, 4)
        if len(data) == 0:
            return np.full(shape, -1, np.int64)
        info = rec.site_info
        want = np.array([i[3] == akey and (kind is None or KINDS[i[4]] == kind) for i in info])
        data = data[want[data[:, 0]]]
        out = np.full(shape, -1, np.int64)
        if len(data) == 0:
            return out
        offs = data[:, 3]
        if strides and all(s > 0 for s in strides):
            # the element with this byte offset: unravel along the strides, largest first
            rest = offs.copy()
            order = sorted(range(len(shape)), key=lambda d: -strides[d])
            coords = [None] * len(shape)
            for d in order:
                coords[d], rest = np.divmod(rest, strides[d])
            ok = (rest == 0) & np.all([(c >= 0) & (c < n) for c, n in zip(coords, shape)], axis=0)
            who = data[:, 1] * int(np.prod(rec.block)) + data[:, 2]
            out[tuple(c[ok] for c in coords)] = who[ok]  # later accesses win
        return out


def warp_window(touch: np.ndarray, warp: int = 0, most: tuple = (32, 64)) -> tuple:
    """Where one warp's 32 threads (the warp-th of the grid, thread ids as ``touch_map`` numbers
    them) touched an array: (lanes, others, origin). ``lanes`` holds the lane (0-31) that touched
    each element of a window around them, -1 elsewhere; ``others`` marks the elements other
    threads touched; ``origin`` is the window's first (row, column). A 1D array is shown as rows
    of 32 elements. The window is at most ``most`` (rows, columns)."""
    grid = touch if touch.ndim == 2 else None
    if grid is None:
        flat = touch.reshape(-1)
        pad = (-len(flat)) % 32
        grid = np.concatenate([flat, np.full(pad, -1, flat.dtype)]).reshape(-1, 32)
    first = 32 * warp
    mine = (grid >= first) & (grid < first + 32)
    if not mine.any():
        return np.full((1, 1), -1), np.zeros((1, 1), bool), (0, 0)
    rows, cols = np.nonzero(mine)
    r0, c0 = int(rows.min()), int(cols.min())
    r1 = min(int(rows.max()) + 1, r0 + most[0])
    c1 = min(max(int(cols.max()) + 1, c0 + min(32, grid.shape[1] - c0)), c0 + most[1])
    window = grid[r0:r1, c0:c1]
    lanes = np.where((window >= first) & (window < first + 32), window - first, -1)
    return lanes, (window >= 0) & (lanes < 0), (r0, c0)


def worst_access(findings: list) -> tuple | None:
    """(array, kind, kernel) of the first global-memory finding, to draw: None if there is none."""
    import re

    for f in findings:
        m = re.match(r"each warp's (loads|stores|atomics) of `(\w+)` at line \d+ \(kernel `(\w+)`\)", f)
        if m:
            return m.group(2), {"loads": "load", "stores": "store", "atomics": "atomic"}[m.group(1)], m.group(3)
    return None


def _offsets(info, idx) -> tuple:
    """Byte offsets of the elements ``idx`` selects (integers of any kind, slices, ellipsis)."""
    a, base, strides, shape = info[6], info[2], info[3], info[4]
    if not isinstance(idx, tuple):
        idx = (idx,)
    try:
        ints = [operator.index(i) for i in idx]
    except TypeError:
        ints = None
    if ints is not None and len(ints) == len(shape):
        return (base + sum((i + n if i < 0 else i) * s for i, s, n in zip(ints, strides, shape)),)
    view = a[idx]
    if not isinstance(view, np.ndarray):
        return ()
    offs = np.full(view.shape, Tracer._array_info(view, None)[2], dtype=np.int64)
    for d, (n, s) in enumerate(zip(view.shape, view.strides)):
        shape_d = [1] * view.ndim
        shape_d[d] = n
        offs = offs + (np.arange(n, dtype=np.int64) * s).reshape(shape_d)
    return tuple(int(o) for o in offs.ravel())


# --------------------------------------------------------------------------- analysis
def _combine(*cols) -> np.ndarray:
    """A dense int64 id per distinct row of the columns (0, 1, 2, ...)."""
    n = len(cols[0])
    key = np.zeros(n, np.int64)
    if n == 0:
        return key
    for c in cols:
        c = np.asarray(c, np.int64)
        c = c - c.min()
        m = int(c.max()) + 1
        if (int(key.max()) + 1) * m >= 2 ** 62:
            key = np.unique(key, return_inverse=True)[1].astype(np.int64)
            if (int(key.max()) + 1) * m >= 2 ** 62:
                c = np.unique(c, return_inverse=True)[1].astype(np.int64)
                m = int(c.max()) + 1
        key = key * m + c
    return np.unique(key, return_inverse=True)[1].astype(np.int64).reshape(n)


def _rank(group: np.ndarray) -> np.ndarray:
    """For each element, how many earlier elements share its group (its occurrence count k)."""
    order = np.argsort(group, kind="stable")
    g = group[order]
    pos = np.arange(len(g))
    start = np.r_[True, g[1:] != g[:-1]] if len(g) else np.zeros(0, bool)
    first = np.maximum.accumulate(np.where(start, pos, 0))
    rank = np.empty_like(group)
    rank[order] = pos - first
    return rank


def _per_group_max(group: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros(n, np.int64)
    np.maximum.at(out, group, values)
    return out


def _mode_stride(site, req, tid, off, nsites: int) -> list:
    """Per site, the most common byte distance between neighbouring threads of one request."""
    if len(off) < 2:
        return [None] * nsites
    order = np.lexsort((tid, req))
    s, r, t, o = site[order], req[order], tid[order], off[order]
    nb = (r[1:] == r[:-1]) & (t[1:] == t[:-1] + 1)
    if not nb.any():
        return [None] * nsites
    ps, pd = s[1:][nb], (o[1:] - o[:-1])[nb]
    pair = _combine(ps, pd)
    counts = np.bincount(pair)
    first = np.zeros(len(counts), np.int64)
    first[pair] = np.arange(len(pair))
    us, ud = ps[first], pd[first]
    best = np.lexsort((-counts, us))
    su, sd = us[best], ud[best]
    top = np.r_[True, su[1:] != su[:-1]]
    out: list = [None] * nsites
    for i, d in zip(su[top], sd[top]):
        out[int(i)] = int(d)
    return out


def _analyse(rec: _LaunchRecord) -> Launch:
    data = np.array(rec.buf, dtype=np.int64).reshape(-1, 4)
    launch = Launch(index=rec.index, kernel=rec.kernel, grid=rec.grid, block=rec.block,
                    accesses=len(data), dropped=rec.dropped)
    info = rec.site_info
    if len(data) == 0:
        return launch
    S, B, T, O = (data[:, i].copy() for i in range(4))
    nsites = len(info)
    isz = np.array([i[6] for i in info], np.int64)
    space = np.array([i[5] for i in info], np.int64)
    store = np.array([i[4] for i in info], np.int64)
    akeys = [i[3] for i in info]
    K = _rank(_combine(S, B, T))
    R = _combine(S, B, T // WARP, K)
    nreq = int(R.max()) + 1
    req_site = np.zeros(nreq, np.int64)
    req_site[R] = S
    site_requests = np.bincount(req_site, minlength=nsites)
    strides = _mode_stride(S, R, T, O, nsites)
    size_r = isz[req_site]

    # distinct elements per request
    u = np.unique(_combine(R, O), return_index=True)[1]
    elems = np.bincount(R[u], minlength=nreq)
    gl = space[S] == 0
    # global: distinct sectors per request (an element may straddle two)
    Rg, Og, Zg = R[gl], O[gl], isz[S[gl]]
    sec_r = np.concatenate([Rg, Rg])
    sec = np.concatenate([Og // SECTOR, (Og + Zg - 1) // SECTOR])
    u = np.unique(_combine(sec_r, sec), return_index=True)[1]
    sectors = np.bincount(sec_r[u], minlength=nreq)
    ideal = -(-(elems * size_r) // SECTOR)
    # shared: distinct words per request, and the most used bank's count of them
    Rs, Os, Zs = R[~gl], O[~gl], isz[S[~gl]]
    ways = np.zeros(nreq, np.int64)
    words = np.zeros(nreq, np.int64)
    if len(Rs):
        wr, ww = [], []
        for j in range(int(-(-Zs.max() // WORD)) + 1):
            keep = (Os // WORD + j) <= (Os + Zs - 1) // WORD
            wr.append(Rs[keep])
            ww.append(Os[keep] // WORD + j)
        wr, ww = np.concatenate(wr), np.concatenate(ww)
        u = np.unique(_combine(wr, ww), return_index=True)[1]
        wr, ww = wr[u], ww[u]
        words = np.bincount(wr, minlength=nreq)
        bank = _combine(wr, ww % BANKS)
        per_bank = np.bincount(bank)
        owner = np.zeros(len(per_bank), np.int64)
        owner[bank] = wr
        ways = _per_group_max(owner, per_bank, nreq)
    passes_ideal = -(-words // BANKS)

    def site_sum(v):
        return np.bincount(req_site, weights=v, minlength=nsites)

    sec_sum, ideal_sum = site_sum(sectors), site_sum(ideal)
    sec_max = _per_group_max(req_site, sectors, nsites)
    req_bytes = site_sum(elems * size_r)
    ways_sum, ways_max = site_sum(ways), _per_group_max(req_site, ways, nsites)
    pi_sum = site_sum(passes_ideal)

    for s, (file, line, fn, akey, kind, sp, size) in enumerate(info):
        n = int(site_requests[s])
        if n == 0:
            continue
        name = rec.names.get(akey, "?")
        kind_s = KINDS[kind]
        stride = strides[s]
        if sp == 0:
            moved = int(sec_sum[s]) * SECTOR
            site = GlobalSite(file=file, line=line, function=fn, array=name, kind=kind_s, itemsize=size,
                              requests=n, sectors_mean=float(sec_sum[s] / n), sectors_max=int(sec_max[s]),
                              ideal_sectors_mean=float(ideal_sum[s] / n), bytes_requested=int(req_bytes[s]),
                              bytes_moved=moved, efficiency=float(req_bytes[s] / moved) if moved else 1.0,
                              stride=None if stride is None else stride // size if stride % size == 0 else None)
            launch.global_sites.append(site)
            if moved and site.sectors_mean > 1.1 * site.ideal_sectors_mean:
                launch.findings.append(_global_finding(site, stride, rec.roots.get(akey), rec.kernel))
        else:
            site = SharedSite(file=file, line=line, function=fn, array=name, kind=kind_s, itemsize=size,
                              requests=n, ways_mean=float(ways_sum[s] / n), ways_max=int(ways_max[s]),
                              ideal_mean=float(pi_sum[s] / n),
                              stride=None if stride is None or stride % WORD else stride // WORD)
            launch.shared_sites.append(site)
            if site.ways_mean > 1.1 * site.ideal_mean:
                launch.findings.append(_shared_finding(site, rec.roots.get(akey), rec.kernel))

    # per-launch totals: bytes moved against each distinct byte touched once
    for attr, m in (("load", gl & (store[S] == 0)), ("store", gl & (store[S] >= 1))):
        if m.any():
            reqs = np.unique(R[m])
            moved, ideal_moved = int(sectors[reqs].sum()) * SECTOR, int(ideal[reqs].sum()) * SECTOR
            ak = np.array(akeys, dtype=np.int64)[S[m]]
            u = np.unique(_combine(ak, O[m]), return_index=True)[1]
            minimum = int(isz[S[m]][u].sum())
        else:
            moved = ideal_moved = minimum = 0
        setattr(launch, f"{attr}_bytes_moved", moved)
        setattr(launch, f"{attr}_bytes_min", minimum)
        # a finding only where the excess is large, in bytes and against the minimum
        if minimum and moved >= 2 * minimum and moved - minimum >= 4096:
            cause = ("most of the excess is sectors fetched but not used (the findings above say where)"
                     if moved - ideal_moved >= ideal_moved - minimum else
                     "most of the excess is the same data read again by other warps or loop iterations; "
                     "on a GPU the caches serve part of it, and a block can stage data it shares in shared memory")
            launch.findings.append(
                f"the {attr}s of kernel `{rec.kernel}` moved {_bytes(moved)} of global memory for "
                f"{_bytes(minimum)} of distinct data ({moved / minimum:.1f}x the minimum): {cause}; {_CHAPTER}.")
    if rec.dropped:
        launch.findings.append(
            f"recording stopped after {launch.accesses:,} accesses in launch {rec.index} of `{rec.kernel}` "
            f"({rec.dropped:,} more were not recorded): the figures cover the first part of the grid only; "
            "trace a smaller problem for the whole picture.")
    return launch


def _global_finding(site: GlobalSite, stride_bytes, root, kernel: str) -> str:
    verb, noun = {"load": ("read", "loads"), "store": ("write", "stores"),
                  "atomic": ("update", "atomic updates")}[site.kind]
    head = (f"each warp's {noun} of `{site.array}` at line {site.line} (kernel `{kernel}`) touch "
            f"{_num(site.sectors_mean)} sectors instead of {_num(site.ideal_sectors_mean)}, so "
            f"{site.efficiency:.0%} of the bytes moved are used: ")
    size = site.itemsize
    if stride_bytes is not None and stride_bytes == size:
        return head + ("the accesses are contiguous but misaligned (a warp's first element does not start a "
                       f"32-byte sector); {_CHAPTER}, section 'Misaligned access'.")
    if stride_bytes is not None and stride_bytes != 0 and stride_bytes % size == 0:
        s = abs(stride_bytes) // size
        why = (f"the accesses are strided (neighbouring threads {verb} elements {s} apart)")
        if root is not None and len(root[0]) >= 2 and abs(stride_bytes) in root[1][:-1]:
            why += (", that is down a column of a row-major array: let threadIdx.x (the x of cuda.grid) "
                    "pick the last index, so neighbouring threads take neighbouring elements of a row")
        return head + why + f"; {_CHAPTER}, section 'What a warp asks of memory'."
    return head + ("the addresses are scattered (neighbouring threads do not take neighbouring elements); "
                   f"arrange the work so that thread t of a warp takes element t of a contiguous run; {_CHAPTER}.")


def _shared_finding(site: SharedSite, root, kernel: str) -> str:
    noun = {"load": "reads", "store": "writes", "atomic": "atomic updates"}[site.kind]
    head = (f"each warp's {noun} of the shared array `{site.array}` at line {site.line} (kernel `{kernel}`) "
            f"are {_num(site.ways_mean)}-way bank conflicts: {_num(site.ways_mean)} passes instead of "
            f"{_num(site.ideal_mean)}")
    tail = f"; {_CHAPTER}, section 'Bank conflicts'."
    s = site.stride
    if not s:
        return head + ", because several threads of a warp access different words of the same bank" + tail
    g = math.gcd(abs(s), BANKS)
    share = "all 32 threads share one bank" if g == BANKS else f"{g} threads share each bank"
    head += f", because neighbouring threads access words {abs(s)} apart, so {share}"
    if root is not None and len(root[0]) >= 2 and abs(s) * WORD in root[1][:-1]:
        return head + (": they walk down a column of the array; make its row width odd, one word of padding "
                       "(a 32 x 32 tile becomes 32 x 33), so a column spans all 32 banks" + tail)
    return head + ": let neighbouring threads take neighbouring words, or make the stride odd" + tail


def trace(max_accesses: int = MAX_ACCESSES) -> Tracer:
    """A context manager recording the simulator's memory accesses: ``with trace() as t: ...``,
    then ``t.report()``. At most ``max_accesses`` accesses are recorded per launch."""
    return Tracer(max_accesses)
