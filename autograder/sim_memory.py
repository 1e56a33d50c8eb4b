"""Device memory in Numba's CUDA simulator, as a graded run sees it: default deny.

In the simulator a "device array" is a NumPy array, and a kernel is Python run by one thread per
CUDA thread, so any channel to the array's memory lets NumPy do the kernel's work. Here the
arrays learner code receives expose nothing but what a GPU's would:

- ``DeviceArray`` (the host's handle): shape, dtype, views and copies. A copy to or from the
  host, or an element read on the host, is made only where the exercise allows host transfers.
  No buffer, no ``.data``, no ``__array__``, no ``__dict__``, no arithmetic.
- ``KernelArray`` (what a kernel's threads hold): element reads and writes, views, shape, and
  nothing else; usable only by the threads of the launch that made it, while it runs.

The memory itself lives in this module's closures, never on an object learner code holds.

A graded launch is checked before it runs, as Numba would check it when compiling for a GPU:
its arguments are device arrays, numbers and tuples of them; its code (and the device functions
it calls) reaches only those, the ``cuda``, ``math``, ``numpy`` (scalar) and ``numba`` names a
GPU kernel may use, and no lists, dicts, sets, f-strings, try blocks or imports. Every element
access is then checked as compute-sanitizer would on a GPU:

- **races**: two threads touch one element, at least one writes without an atomic, and no
  barrier orders them (``cuda.syncthreads()`` for a block; ``cuda.syncwarp()`` within a warp;
  threads of different blocks are ordered only by a fence after the write, in the writing
  thread or past a barrier that follows the write, then an atomic by the fencing thread, which
  the reading thread, or its block before a barrier, follows with an atomic of its own);
- **out of bounds**: an index outside the array, even where the code catches the error;
- **uninitialised reads**: shared memory, or an array the learner allocated, read before any
  thread wrote that element.

What is found is kept, like a barrier divergence (``runner.StrictBarriers``), and fails the
graded call with the line; learner code cannot catch it away. ``install()`` patches the
simulator once per process; launches whose arguments hold no DeviceArray, outside grading (a
notebook's own kernels), run as the stock simulator runs them.
"""
from __future__ import annotations

import bisect
import dis
import math
import operator
import sys
import threading
import types
import weakref

import numpy as np

# --------------------------------------------------------------------------- what a kernel may name
# Attribute names kernel code may use: the cuda module's (and its Dim3s'), an array's shape, the
# math module's, NumPy's scalar types and scalar functions, Numba's types. Anything else is a name
# Numba cannot compile for a GPU (or one that would reach host memory in the simulator).
_CUDA = {"threadIdx", "blockIdx", "blockDim", "gridDim", "grid", "gridsize", "laneid", "warpsize", "x", "y", "z",
         "syncthreads", "syncthreads_count", "syncthreads_and", "syncthreads_or", "syncwarp", "threadfence",
         "threadfence_block", "threadfence_system", "shared", "local", "const", "array", "array_like", "atomic",
         "add", "sub", "and_", "or_", "xor", "inc", "dec", "exch", "max", "min", "nanmax", "nanmin",
         "compare_and_swap", "cas", "shfl_sync", "shfl_up_sync", "shfl_down_sync", "shfl_xor_sync", "all_sync",
         "any_sync", "eq_sync", "ballot_sync", "match_any_sync", "match_all_sync", "activemask", "lanemask_lt",
         "popc", "brev", "clz", "ffs", "fma", "cbrt", "selp", "fp16", "cg", "this_grid", "sync", "libdevice",
         "nanosleep", "cuda", "types"}
_ARRAY = {"shape", "size", "ndim", "dtype", "strides", "itemsize", "T", "real", "imag", "conjugate"}
_NUMPY = {"float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "intp", "uintp", "bool_", "complex64", "complex128", "sqrt", "cbrt", "exp", "exp2", "expm1", "log", "log2",
          "log10", "log1p", "sin", "cos", "tan", "arcsin", "arccos", "arctan", "arctan2", "sinh", "cosh", "tanh",
          "arcsinh", "arccosh", "arctanh", "abs", "absolute", "fabs", "floor", "ceil", "trunc", "rint", "sign",
          "minimum", "maximum", "fmin", "fmax", "isnan", "isinf", "isfinite", "power", "hypot", "copysign", "pi",
          "e", "inf", "nan", "square", "reciprocal", "negative", "deg2rad", "rad2deg", "remainder", "mod", "fmod",
          "floor_divide", "true_divide", "divide", "multiply", "subtract", "signbit", "ldexp", "frexp",
          "bitwise_and", "bitwise_or", "bitwise_xor", "invert", "left_shift", "right_shift", "logical_and",
          "logical_or", "logical_not", "logical_xor", "finfo", "iinfo", "eps", "tiny", "bits", "float_", "int_",
          "uint", "half", "single", "double"}
# math: what Numba's CUDA target compiles (math.fsum, prod or dist would do a whole array's work on the host)
_MATH = {"acos", "acosh", "asin", "asinh", "atan", "atan2", "atanh", "ceil", "copysign", "cos", "cosh", "degrees", "e",
         "erf", "erfc", "exp", "expm1", "fabs", "floor", "fmod", "frexp", "gamma", "hypot", "inf", "isfinite", "isinf",
         "isnan", "ldexp", "lgamma", "log", "log10", "log1p", "log2", "modf", "nan", "pi", "pow", "radians",
         "remainder", "sin", "sinh", "sqrt", "tan", "tanh", "tau", "trunc"}
KERNEL_ATTRIBUTES = frozenset(_CUDA | _ARRAY | _NUMPY | _MATH)
KERNEL_BUILTINS = frozenset({"range", "len", "min", "max", "abs", "int", "float", "bool", "complex", "round", "print",
                             "pow", "divmod", "enumerate", "zip", "slice", "True", "False", "None", "IndexError",
                             "ValueError", "RuntimeError", "AssertionError", "ZeroDivisionError"})
KERNEL_MODULES = ("numba", "math", "cmath", "numpy")
# Bytecode a GPU kernel cannot have: Python containers, strings built at run time, exception
# handling, context managers, imports, classes, generators, and stores outside the function.
_REFUSED_OPS = {
    "BUILD_LIST": "a list", "BUILD_SET": "a set", "BUILD_MAP": "a dict", "BUILD_CONST_KEY_MAP": "a dict",
    "LIST_APPEND": "a list", "SET_ADD": "a set", "MAP_ADD": "a dict", "LIST_EXTEND": "a list",
    "SET_UPDATE": "a set", "DICT_UPDATE": "a dict", "DICT_MERGE": "a dict", "FORMAT_VALUE": "an f-string",
    "BUILD_STRING": "an f-string", "SETUP_FINALLY": "try", "PUSH_EXC_INFO": "try/except",
    "CHECK_EXC_MATCH": "try/except", "SETUP_WITH": "with", "BEFORE_WITH": "with", "IMPORT_NAME": "import",
    "IMPORT_FROM": "import", "LOAD_BUILD_CLASS": "a class", "YIELD_VALUE": "a generator",
    "STORE_GLOBAL": "a global variable", "DELETE_GLOBAL": "a global variable", "STORE_ATTR": "an attribute",
    "DELETE_ATTR": "an attribute", "STORE_NAME": "a module variable", "DELETE_NAME": "a module variable"}


# NumPy's scalar types of numbers (not void, str_, bytes_, object_ or datetime64: a structured
# scalar's .base is the array it came from)
_NUMPY_NUMBERS = frozenset(t for t in np.sctypeDict.values() if isinstance(t, type) and issubclass(t, (np.number, np.bool_)))


class KernelRefused(TypeError):
    """A launch Numba would refuse to compile for a GPU (or a GPU could not run)."""


def _allowed_callables() -> set[int]:
    """The library functions kernel code may hold under a name of its own (from math import sqrt)."""
    found = set()
    for module, names in ((math, _MATH), (np, _NUMPY)):
        for n in names:
            obj = getattr(module, n, None)
            if callable(obj):
                found.add(id(obj))
    return found


def _numba_type_names() -> set[str]:
    """numba's names for its types (numba.boolean, numba.float32, numba.f8, ...)."""
    import numba
    from numba.core import types as ntypes

    return {n for n in dir(numba) if not n.startswith("_") and isinstance(getattr(numba, n, None), ntypes.Type)}


def _numba_type_classes(root: type) -> frozenset:
    """Numba's type classes as they are before learner code runs (their subclasses, all of numba's)."""
    found, todo = set(), [root]
    while todo:
        cls = todo.pop()
        if cls not in found and (cls.__module__ or "").split(".")[0] in ("numba", "numba_cuda"):
            found.add(cls)
            todo += cls.__subclasses__()
    return frozenset(found)


class KernelCheck:
    """Whether a kernel's code reaches only what a GPU kernel can (see the module's docstring).

    What the code does (its bytecode and the attributes it names) is read once per code object;
    what its names hold (globals, closure cells, default arguments) is checked at every launch, so
    rebinding a name after a launch that passed changes nothing."""

    def __init__(self, is_kernel, fake_cuda) -> None:
        from numba.core import types as ntypes

        self.is_kernel = is_kernel  # a simulator kernel or device function: obj -> its Python function, or None
        self.fake_cuda = fake_cuda  # the simulator's cuda module classes (swapped in during a launch)
        self.numba_types = _numba_type_classes(ntypes.Type)  # numba's own; a learner's subclass is none of them
        self.callables = _allowed_callables()
        self.attributes = KERNEL_ATTRIBUTES | _numba_type_names()
        self.scalars = _NUMPY_NUMBERS
        self.read: dict = {}  # code object -> (why its code is refused or '', [(name, line, closure?), ...])

    def problem(self, fn, name: str) -> str:
        return self._check(fn, name, set())

    def _check(self, fn, name: str, visiting: set) -> str:
        code = getattr(fn, "__code__", None)
        if not isinstance(code, types.CodeType):
            return f"{name} is not Python code the simulator can check"
        if id(fn) in visiting:
            return ""
        visiting.add(id(fn))
        if code not in self.read:
            self.read[code] = self._read(code, name)
        why, names = self.read[code]
        if why:
            return why
        scope = getattr(fn, "__globals__", {})
        builtins = scope.get("__builtins__", {})
        builtins = builtins if isinstance(builtins, dict) else vars(builtins)
        cells = {}
        for var, cell in zip(code.co_freevars, getattr(fn, "__closure__", None) or ()):
            try:
                cells[var] = cell.cell_contents
            except ValueError:
                cells[var] = None
        for var, line, closure in names:
            where = f"{name}, line {line}"
            if closure:
                why = self._value(cells.get(var), var, where, visiting)
            elif var in scope:
                why = self._value(scope[var], var, where, visiting)
            elif var not in builtins or var not in KERNEL_BUILTINS:
                why = f"{where} uses {var}(), which a GPU kernel does not have"
            if why:
                return why
        defaults = list(getattr(fn, "__defaults__", None) or ()) + list((getattr(fn, "__kwdefaults__", None)
                                                                           or {}).values())
        for value in defaults:
            why = self._value(value, "a default argument", f"{name} (its definition)", visiting)
            if why:
                return why
        return ""

    def _read(self, code, name: str) -> tuple[str, list]:
        """(why the code is refused, or '', the names it loads: (name, line, from a closure cell))."""
        names, seen = [], set()
        for c in _codes(code):
            line = c.co_firstlineno
            where = f"{name}, line {{line}}"
            for ins in dis.get_instructions(c):
                if ins.starts_line:
                    line = ins.starts_line
                op = ins.opname
                if op in _REFUSED_OPS:
                    return (f"{where.format(line=line)} uses {_REFUSED_OPS[op]}, which Numba cannot compile into a "
                            "GPU kernel"), []
                if op in ("STORE_DEREF", "DELETE_DEREF") and ins.argval in c.co_freevars:
                    return f"{where.format(line=line)} assigns {ins.argval}, a variable outside the kernel", []
                if op in ("LOAD_ATTR", "LOAD_METHOD", "LOAD_SUPER_ATTR"):
                    attr = ins.argval if isinstance(ins.argval, str) else str(ins.argval)
                    if attr not in self.attributes:
                        return (f"{where.format(line=line)} uses .{attr}: in a kernel only array elements, .shape "
                                "and the cuda, math, numpy scalar and numba names a GPU kernel has are available"), []
                elif op in ("LOAD_GLOBAL", "LOAD_NAME") or (op in ("LOAD_DEREF", "LOAD_CLASSDEREF")
                                                             and ins.argval in c.co_freevars and c is code):
                    key = (ins.argval, op.startswith("LOAD_DEREF") or op == "LOAD_CLASSDEREF")
                    if key not in seen:
                        seen.add(key)
                        names.append((ins.argval, line, key[1]))
        return "", names

    def _value(self, value, var: str, where: str, visiting: set) -> str:
        """'' if a kernel may use ``value`` (named ``var``), else why not."""
        if value is None or type(value) in (bool, int, float, complex, str) or type(value) in self.scalars \
                or type(value) is np.dtype or isinstance(value, np.dtype) and type(value).__module__ == "numpy.dtypes":
            return ""
        if type(value) is tuple:
            return next((w for w in (self._value(v, var, where, visiting) for v in value) if w), "")
        if isinstance(value, types.ModuleType):
            top = value.__name__.split(".")[0]
            return "" if top in KERNEL_MODULES else f"{where} uses the module {value.__name__}, which a GPU kernel " \
                                                    "cannot call"
        if isinstance(value, type) and value in self.scalars:
            return ""  # np.float32 and its kind, as a constructor
        if type(value) in self.numba_types:
            return ""  # a Numba type (float32 from numba)
        if type(value) in self.fake_cuda:
            return ""  # the simulator's cuda module during a launch
        inner = self.is_kernel(value)
        if inner is not None:
            return self._check(inner, getattr(inner, "__name__", var), visiting)
        if id(value) in self.callables:
            return ""
        if type(value) is types.FunctionType and value.__module__ in ("submission", "__main__"):
            return self._check(value, value.__name__, visiting)  # a plain function of the learner's: checked the same
        kind = "a NumPy array on the host" if isinstance(value, np.ndarray) else f"a {type(value).__name__}"
        return (f"{where} uses {var}, {kind}: a GPU kernel reaches only its arguments, numbers, tuples, device "
                "functions and the cuda, math and numba modules (pass arrays as arguments)")


_STARTS: dict = {}  # code object -> the offsets its instructions start at


def _instruction(code, lasti: int) -> int:
    """The offset of the instruction a frame is at (Python 3.11 may report a place inside a
    specialised instruction's inline cache)."""
    starts = _STARTS.get(code)
    if starts is None:
        starts = _STARTS[code] = [ins.offset for ins in dis.get_instructions(code)]
    return starts[max(bisect.bisect_right(starts, lasti) - 1, 0)]


def _codes(code):
    out, todo = [], [code]
    while todo:
        c = todo.pop()
        out.append(c)
        todo += [k for k in c.co_consts if isinstance(k, types.CodeType)]
    return out


# --------------------------------------------------------------------------- the check of every access
WARP = 32


class Fault(Exception):
    """What the access check found (kept; raised only where a GPU would fault too)."""


def install(*, guarded, host_rules, refuse, allocators: bool = True, frame=None, kernel_print=None,
            kernel_thread=lambda t: getattr(t, "blockIdx", None) is not None):
    """Patch the simulator once; the Memory object the runner uses. ``guarded()``: learner code may
    run under the exercise's rules now; ``host_rules()``: (host reads forbidden, host writes
    forbidden); ``refuse(what)``: the exception for a forbidden call; ``allocators``: the cuda
    module's device_array, to_device ... make the grader's arrays too (a sandbox; not a notebook,
    whose own code goes on with the stock simulator's); ``kernel_print``: the print a graded launch's
    kernels get (a sandbox's own output, which host code cannot catch as it can sys.stdout);
    ``kernel_thread(t)``: whether a thread object is one of a kernel's simulated threads (the
    grader's scheduler's own: no thread object learner code builds holds a kernel's arrays)."""
    from numba.cuda.simulator import kernel as kmod
    from numba.cuda.simulator import kernelapi
    from numba.cuda.simulator.cudadrv import devicearray as sim_da

    import builtins

    getattr = builtins.getattr  # noqa: A001 - as it is now: the guards may later put a stand-in in builtins
    if frame is None:  # the caller's frame, ``depth`` above the function asking (the runner's is quieter)
        def frame(depth: int = 0):
            return sys._getframe(depth + 1)
    store: dict[int, list] = {}  # id(handle) -> [weakref to it, its record]; every array's memory is here
    current_thread = threading.current_thread
    active, get_ident = threading._active, threading.get_ident  # current_thread() without its call
    atomic_lock = threading.Lock()
    found: list[str] = []  # faults since the last problem(), first first
    state = {"launch": None, "tap": None, "plain_shared": None}  # tap: a memory tracer's (memtrace) hook, while --profile traces

    faults = [0]  # how many fault() calls there have been (found keeps the first few)

    def fault(message: str) -> None:
        faults[0] += 1
        if len(found) < 4 and message not in found:
            found.append(message)

    def record_of(obj):
        entry = store.get(id(obj))
        if entry is None or entry[0]() is not obj:
            return None
        return entry[1]

    def register(obj, rec) -> None:
        key = id(obj)
        store[key] = [weakref.ref(obj), rec]
        weakref.finalize(obj, store.pop, key, None)

    # ------------------------------------------------------------------ allocations
    class Allocation:
        """One block of memory: its flat base array, what it is called, and which elements any thread
        has written (None where every element counts as written: the grader's own buffers)."""
        __slots__ = ("base", "name", "space", "written", "address", "streams", "__weakref__")

        def __init__(self, base: np.ndarray, name: str, space: str, initialised: bool) -> None:
            self.base, self.name, self.space = base, name, space
            self.written = None if initialised else bytearray(base.size)
            self.address = base.__array_interface__["data"][0]
            self.streams = None  # see Streams: stream -> (elements written, elements read) not yet ordered

    class Streams:
        """What launches and copies on streams other than the default one did to memory that nothing
        has ordered yet (a synchronize, an event waited on, or work on the legacy default stream,
        which waits for every stream). The simulator runs each launch to its end, one after another;
        on a GPU two streams run at once, so an element one stream writes and another reads or
        writes, unordered, is a race."""

        def __init__(self) -> None:
            self.pending: dict = {}  # stream key -> the allocations it has pending accesses in
            self.held: dict = {}  # stream key -> the stream (its id stays its own while it is pending)
            self.of_kernel = weakref.WeakKeyDictionary()  # kernel object -> the stream of its configuration
            self.of_event = weakref.WeakKeyDictionary()  # event -> the stream key it was recorded on
            self.default = None  # the object cuda.default_stream() and its kin return

        def key(self, stream):
            if stream is None or stream is self.default or (type(stream) is int and stream == 0):
                return None
            self.held[id(stream)] = stream
            return id(stream)

        def settle(self, key=None, every: bool = False) -> None:
            """Stream ``key``'s pending accesses are ordered before what comes next (every stream's)."""
            for k in (list(self.pending) if every else [key]):
                for rec in self.pending.pop(k, ()):
                    if rec.streams is not None:
                        rec.streams.pop(k, None)
                self.held.pop(k, None)

        def access(self, rec, flats, write: bool, key, what: str) -> None:
            """``what`` (a launch's access at a line, or a copy) on stream ``key`` touches ``flats``."""
            if rec.space != "global":
                return
            if rec.streams is None:
                rec.streams = {}
            for other, (w, r) in rec.streams.items():
                if other == key:
                    continue
                clash = next((f for f in flats if f in w or (write and f in r)), None)
                if clash is not None:
                    did = "wrote" if clash in w else "read"
                    fault(f"a race between streams on {rec.name}: {what} {'writes' if write else 'reads'} element "
                          f"{clash}, which work on another stream {did} with nothing ordering the two (synchronize "
                          "that stream first, or have this stream wait for an event recorded after it). On a GPU "
                          "the two streams run at the same time.")
                    break
            mine = rec.streams.get(key)
            if mine is None:
                mine = rec.streams[key] = (set(), set())
                self.pending.setdefault(key, weakref.WeakSet()).add(rec)
            mine[0 if write else 1].update(flats)

    streams = Streams()

    def element(rec, view: np.ndarray, idx) -> int:
        """The flat element of the allocation that ``view[idx]`` is."""
        offset = view.__array_interface__["data"][0] - rec.address
        for i, s in zip(idx, view.strides):
            offset += i * s
        return offset // rec.base.itemsize

    # ------------------------------------------------------------------ the host's handle
    class DeviceArray:
        """A device array in the simulator, as the host holds it (numba's DeviceNDArray's API)."""
        __slots__ = ("__weakref__",)
        __array_ufunc__ = None

        def __new__(cls, *args, **kwargs):
            raise TypeError("device arrays are made with cuda.device_array, cuda.device_array_like or cuda.to_device")

        # shape and type
        _numba_type_ = property(lambda self: _numba_type(_view(self)))  # numba.typeof: metadata only
        shape = property(lambda self: _view(self).shape)
        dtype = property(lambda self: _view(self).dtype)
        size = property(lambda self: _view(self).size)
        ndim = property(lambda self: _view(self).ndim)
        strides = property(lambda self: _view(self).strides)
        itemsize = property(lambda self: _view(self).itemsize)
        nbytes = property(lambda self: _view(self).nbytes)
        alloc_size = nbytes
        stream = 0

        def __len__(self):
            return len(_view(self))

        def is_c_contiguous(self):
            return bool(_view(self).flags.c_contiguous)

        def is_f_contiguous(self):
            return bool(_view(self).flags.f_contiguous)

        def __repr__(self):
            v = _view(self)
            return f"<device array shape={v.shape} dtype={v.dtype}>"

        __str__ = __repr__

        # views: more handles on the same memory
        def __getitem__(self, key):
            v = _view(self)
            out = v[_plain_key(key)]
            if isinstance(out, np.ndarray):
                return handle(out, _rec(self))
            _host("read", "reading a device array element on the host")
            return out

        def reshape(self, *shape, order="C"):
            shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
            return handle(_view(self).reshape(_ints(shape), order=_order(order)), _rec(self))

        def ravel(self, order="C"):
            v = _view(self)
            if not (v.flags.c_contiguous or v.flags.f_contiguous):
                raise NotImplementedError("ravel of a device array that is not contiguous")
            return handle(v.ravel(_order(order)), _rec(self))

        def view(self, dtype):
            return handle(_view(self).view(_plain_dtype(dtype)), _rec(self))

        def transpose(self, axes=None):
            return handle(np.transpose(_view(self), None if axes is None else _ints(axes)), _rec(self))

        T = property(transpose)

        def squeeze(self, axis=None, stream=0):
            axis = None if axis is None else _ints(axis) if isinstance(axis, (tuple, list)) else operator.index(axis)
            return handle(_view(self).squeeze(axis), _rec(self))

        def split(self, section, stream=0):
            v = _view(self)
            section = operator.index(section)
            return [handle(p, _rec(self)) for p in np.split(v, range(section, len(v), section))]

        def bind(self, stream=0):
            return self

        # copies across the host and the device: only where the exercise allows them
        def copy_to_host(self, ary=None, stream=0):
            _host("read", "host access to a device array (copy_to_host)", stream=True)
            v = _view(self)
            _copy_on(stream, self, v, False)
            if ary is None:
                return np.array(v)
            if type(ary) is not np.ndarray:
                raise TypeError("copy_to_host writes into a NumPy array")
            ary[...] = v
            return ary

        def copy_to_device(self, ary, stream=0):
            _host("write", "host access to a device array (copy_to_device)", stream=True)
            src = _plain_copy(ary)
            v = _view(self)
            if src.shape != v.shape or src.dtype != v.dtype:
                raise ValueError(f"incompatible arrays: {src.shape} {src.dtype} into {v.shape} {v.dtype}")
            _copy_on(stream, self, v, True)
            v[...] = src
            _mark_written(_rec(self), v)

        def __setitem__(self, key, value):
            _host("write", "writing a device array element on the host")
            v = _view(self)
            v[_plain_key(key)] = _plain_copy(value)
            _mark_written(_rec(self), v)

        def __array__(self, dtype=None, copy=None):
            _host("read", "host access to a device array (__array__)")
            v = np.array(_view(self))
            return v if dtype is None else v.astype(dtype)

        def __iter__(self):
            _host("read", "reading a device array element on the host")
            return iter(np.array(_view(self)))

        def __reduce_ex__(self, protocol):
            raise TypeError("a device array cannot be copied or pickled on the host")

        __copy__ = __deepcopy__ = lambda self, *a: (_ for _ in ()).throw(
            TypeError("a device array cannot be copied on the host: use cuda.device_array_like and a kernel"))

    class HostArray:
        """An input the exercise leaves on the host (NumPy memory of the caller's), as the learner's code
        holds it: its shape, views of it (x[a:b]) and uploads (cuda.to_device, copy_to_device, cuda.pinned).
        Its elements are a kernel's to read once uploaded; reading them in Python, or NumPy's maths on
        them, is host access, which the exercise's rules decide."""
        __slots__ = ("__weakref__",)
        __array_ufunc__ = None

        def __new__(cls, *args, **kwargs):
            raise TypeError("host arrays are the exercise's inputs")

        shape = property(lambda self: _host_view(self).shape)
        dtype = property(lambda self: _host_view(self).dtype)
        size = property(lambda self: _host_view(self).size)
        ndim = property(lambda self: _host_view(self).ndim)
        strides = property(lambda self: _host_view(self).strides)
        itemsize = property(lambda self: _host_view(self).itemsize)
        nbytes = property(lambda self: _host_view(self).nbytes)

        def __len__(self):
            return len(_host_view(self))

        def __repr__(self):
            v = _host_view(self)
            return f"<host array shape={v.shape} dtype={v.dtype}>"

        __str__ = __repr__

        def __getitem__(self, key):
            out = _host_view(self)[_plain_key(key)]
            if isinstance(out, np.ndarray):
                return host_handle(out)
            _host("read", "reading a host array's elements in Python (upload it: a kernel reads them)")
            return out

        def __array__(self, dtype=None, copy=None):
            _host("read", "a host array as a NumPy array (upload it: a kernel reads it)")
            v = np.array(_host_view(self))
            return v if dtype is None else v.astype(dtype)

        def __iter__(self):
            _host("read", "reading a host array's elements in Python (upload it: a kernel reads them)")
            return iter(np.array(_host_view(self)))

        def __setitem__(self, key, value):
            raise TypeError("the exercise's host input is not the code's to change (upload it; a kernel writes the "
                            "outputs)")

        def __getattr__(self, name):
            raise AttributeError(f"a host array here has shape, dtype, size, views (x[a:b]) and uploads "
                                 f"(cuda.to_device, copy_to_device, cuda.pinned), not .{name}: the work is a kernel's")

        def __reduce_ex__(self, *args):
            raise TypeError("a host array cannot be copied or pickled here: upload it")

        __copy__ = __deepcopy__ = __reduce_ex__

    def host_handle(view: np.ndarray) -> HostArray:
        h = object.__new__(HostArray)
        register(h, (view, None))
        return h

    def _host_view(obj) -> np.ndarray:
        return record_of(obj)[0]

    def _plain_copy(value) -> np.ndarray:
        """A value learner code gives to be copied into device memory, as a plain NumPy array of its own:
        no hook of the learner's (a subclass, __array_function__) runs while the grader's memory is reachable."""
        if isinstance(value, DeviceArray):
            return np.array(_view(value))
        if isinstance(value, HostArray):
            return np.array(_host_view(value))
        out = np.array(value, subok=False)
        if out.dtype.hasobject:
            raise TypeError("a device array holds numbers")
        return out

    def _copy_on(stream, arr, view: np.ndarray, write: bool) -> None:
        """A copy between the host and ``arr`` on ``stream``: on the default stream it waits for every
        stream; on another it is that stream's access."""
        key = streams.key(stream)
        if key is None:
            streams.settle(every=True)
            return
        rec = _rec(arr)
        streams.access(rec, _elements(rec, view), write, key, f"a copy {'to' if write else 'from'} the device")

    def _host(kind: str, what: str, stream: bool = False) -> None:
        """A host access, if the exercise allows it. ``stream``: a copy that may run on a stream (see
        _copy_on); any other waits for every stream, as a synchronous copy does."""
        read_forbidden, write_forbidden = host_rules()
        if guarded() and (read_forbidden if kind == "read" else write_forbidden):
            raise refuse(what)
        if not stream:
            streams.settle(every=True)

    def _rec_pair(obj):
        r = record_of(obj)
        if r is None:
            raise RuntimeError("this array's memory is gone (it belonged to a kernel launch that has ended)")
        return r

    def _view(obj) -> np.ndarray:
        return _rec_pair(obj)[0]

    def _rec(obj) -> Allocation:
        return _rec_pair(obj)[1]

    def handle(view: np.ndarray, rec: Allocation) -> DeviceArray:
        h = object.__new__(DeviceArray)
        register(h, (view, rec))
        return h

    def _elements(rec: Allocation, view: np.ndarray):
        """The flat elements of the allocation that ``view`` covers (a range where it is contiguous)."""
        if view.size == 0:
            return range(0)
        span = max(1, view.itemsize // rec.base.itemsize)  # a view of a wider type covers several per element
        if view.flags.c_contiguous or view.flags.f_contiguous:
            first = element(rec, view, (0,) * view.ndim)
            last = element(rec, view, tuple(s - 1 for s in view.shape))
            return range(min(first, last), max(first, last) + span)
        return [f for idx in np.ndindex(*view.shape) for f in range(element(rec, view, idx),
                                                                     element(rec, view, idx) + span)]

    def _mark_written(rec: Allocation, view: np.ndarray) -> None:
        if rec.written is None:
            return
        flats = _elements(rec, view)
        if type(flats) is range:
            rec.written[flats.start:flats.stop] = b"\1" * len(flats)
        else:
            for flat in flats:
                rec.written[flat] = 1

    # ------------------------------------------------------------------ a launch and its threads
    class Launch:
        def __init__(self, name: str, grid, block) -> None:
            self.name = name
            self.grid = tuple(int(v) for v in grid)
            self.block = tuple(int(v) for v in block)
            self.block_size = self.block[0] * self.block[1] * self.block[2]
            # Ordering across blocks, as a fence and an atomic give it (the last block of a reduction
            # reads every block's partial sum): a clock that each fence and atomic advances. A thread's
            # fence then atomic publishes what that thread wrote before the fence, and what its block
            # wrote before a barrier the fence came after; an atomic acquires for its own thread, and for
            # its block after the next barrier. So, per thread: its last fence, its publications
            # (fence clock, atomic clock) and its last atomic; per block and barrier phase: the first
            # publication's atomic clock, and the last atomic (Phased).
            self.clock = 0
            self.stream = None  # its stream's key (None: the default stream)
            self.fences: dict[int, int] = {}
            self.own_published: dict[int, list] = {}
            self.own_acquired: dict[int, int] = {}
            self.block_published: dict[int, dict] = {}
            self.block_acquired: dict[int, Phased] = {}
            self.states: dict[int, dict] = {}  # id(allocation or per-block shared record) -> element -> state
            self.shared: dict = {}  # (block, site) -> its KernelArray
            self.alive = True

    class Phased:
        """A block's atomics by barrier phase: the latest clock in the current phase, and the latest in
        every phase before it (what a thread past the next barrier has acquired)."""
        __slots__ = ("phase", "now", "before")

        def __init__(self) -> None:
            self.phase, self.now, self.before = 0, -1, -1

        def add(self, phase: int, clock: int) -> None:
            if phase > self.phase:
                self.phase, self.before, self.now = phase, max(self.before, self.now), clock
            elif phase == self.phase:
                self.now = max(self.now, clock)
            else:
                self.before = max(self.before, clock)

        def seen_by(self, phase: int) -> int:
            return max(self.before, self.now) if phase > self.phase else self.before

    def phase_of(key: int) -> int:
        return (key >> 22) & 0xFFFF

    def who(launch):
        """(global thread id, ordering key, thread) of the simulated thread running now, or None."""
        t = active.get(get_ident()) or current_thread()
        if not kernel_thread(t):  # only threads the grader's block scheduler made hold a kernel's arrays
            return None
        b = t.blockIdx
        g = launch.grid
        block = b.x + g[0] * (b.y + g[1] * b.z)
        tid = t.thread_id
        phase = getattr(t, "grader_phase", 0)
        warp_phase = getattr(t, "grader_warp_phase", 0)
        key = (block << 38) | ((phase & 0xFFFF) << 22) | ((tid // WARP & 0x3F) << 16) | (warp_phase & 0xFFFF)
        return block * launch.block_size + tid, key, t

    def concurrent(launch, a: int, b: int) -> bool:
        """Whether two accesses (ordering keys) are unordered within their block: different blocks,
        or the same block and barrier phase, in different warps or the same warp phase (see
        ordered() for what orders two blocks)."""
        if a >> 38 != b >> 38:
            return True
        if (a >> 22) & 0xFFFF != (b >> 22) & 0xFFFF:
            return False
        return (a >> 16) & 0x3F != (b >> 16) & 0x3F or a & 0xFFFF == b & 0xFFFF

    def ordered(launch, first_g: int, first_time: int, first_atomic: bool, first_key: int, then_g: int,
                then_key: int) -> bool:
        """Whether an access by thread ``first_g`` of another block (at ``first_time`` on the launch's
        clock; an atomic's time is its own tick) comes before thread ``then_g``'s: an atomic comes
        before what a thread does after an atomic that followed it (its own, or its block's before a
        barrier); a plain access, where it was published (a fence after it, by its thread or past a
        barrier of its block, then an atomic by the fencing thread) and the other thread acquired that."""
        size = launch.block_size
        if first_g // size == then_g // size:
            return False
        block_seen = launch.block_acquired.get(then_g // size)
        seen = max(launch.own_acquired.get(then_g, -1),
                   block_seen.seen_by(phase_of(then_key)) if block_seen is not None else -1)
        if first_atomic:
            return seen > first_time
        # the earliest publication of the access: its own thread's first fence after it, or any
        # thread's of its block in a later barrier phase
        pubs = [a for f, a in launch.own_published.get(first_g, ()) if f >= first_time]
        phase = phase_of(first_key)
        pubs += [a for p, a in launch.block_published.get(first_g // size, {}).items() if p > phase]
        return bool(pubs) and seen >= min(pubs)

    def tick(launch, g: int, key: int, kind: str) -> None:
        """A fence ('f') or an atomic ('a') of thread ``g`` (ordering key ``key``): the launch's clock
        advances."""
        with atomic_lock:
            launch.clock += 1
            if kind == "f":
                launch.fences[g] = (launch.clock - 1, phase_of(key))
                return
            block = g // launch.block_size
            launch.own_acquired[g] = launch.clock
            launch.block_acquired.setdefault(block, Phased()).add(phase_of(key), launch.clock)
            fence = launch.fences.pop(g, None)  # a fence publishes once: with the atomic that follows it
            if fence is not None:
                own = launch.own_published.setdefault(g, [])
                own.append((fence[0], launch.clock))
                if len(own) > 64:  # a loop of publications: the latest serve every earlier write too
                    del own[0]
                # the block's writes before the fence's barrier phase: the phase's first publication
                launch.block_published.setdefault(block, {}).setdefault(fence[1], launch.clock)

    def thread_words(launch, g: int) -> str:
        block, tid = divmod(g, launch.block_size)
        bx, by = launch.block[0], launch.block[1]
        t = (tid % bx, tid // bx % by, tid // (bx * by))
        gx, gy = launch.grid[0], launch.grid[1]
        b = (block % gx, block // gx % gy, block // (gx * gy))
        return f"thread {t} of block {b}"

    def check(launch, rec, state_key, flat: int, kind: str, line: int) -> None:
        """One access: kind 'r', 'w' or 'a' (atomic read-modify-write)."""
        me = who(launch)
        if me is None:  # the launching thread, or one of the learner's: only the kernel's threads hold its arrays
            fault(f"an array of kernel '{launch.name}' was used at line {line} by code that is not one of the "
                  "kernel's threads (a GPU kernel's arrays are its threads' alone)")
            raise KernelRefused(f"line {line}: an array of kernel '{launch.name}' used outside the kernel's threads")
        g, key, _ = me
        if launch.stream is not None:
            streams.access(rec, (flat,), kind != "r", launch.stream, f"kernel '{launch.name}' at line {line}")
        states = launch.states.setdefault(state_key, {})
        s = states.get(flat)
        if s is None:  # the last write (thread, key, line, atomic, time), then two readers (thread, key, line, time)
            s = states.setdefault(flat, [-1, 0, 0, False, 0, -1, 0, 0, 0, -1, 0, 0, 0])  # threads side by side
        now = launch.clock
        w_g, w_key, w_line, w_atomic, w_time = s[0], s[1], s[2], s[3], s[4]
        if kind == "r":
            # a plain read beside another thread's atomic update races as a plain write would
            if w_g >= 0 and w_g != g and concurrent(launch, key, w_key) and not ordered(launch, w_g, w_time,
                                                                                       w_atomic, w_key, g, key):
                race(launch, rec, flat, g, line, "read", w_g, w_line, "updated atomically" if w_atomic else "wrote")
            if s[5] < 0 or s[5] == g or not concurrent(launch, key, s[6]):
                s[5], s[6], s[7], s[8] = g, key, line, now
            elif s[9] < 0 or s[9] == g or not concurrent(launch, key, s[10]):
                s[9], s[10], s[11], s[12] = g, key, line, now
            return
        atomic = kind == "a"
        if w_g >= 0 and w_g != g and not (atomic and w_atomic) and concurrent(launch, key, w_key) \
                and not ordered(launch, w_g, w_time, w_atomic, w_key, g, key):
            race(launch, rec, flat, g, line, "wrote" if not atomic else "updated atomically", w_g, w_line,
                 "wrote" if not w_atomic else "updated atomically")
        for r in (5, 9):
            if s[r] >= 0 and s[r] != g and concurrent(launch, key, s[r + 1]) \
                    and not ordered(launch, s[r], s[r + 3], False, s[r + 1], g, key):
                race(launch, rec, flat, g, line, "wrote" if not atomic else "updated atomically", s[r], s[r + 2],
                     "read")
        if atomic:
            tick(launch, g, key, "a")
        s[0], s[1], s[2], s[3], s[4] = g, key, line, atomic, launch.clock if atomic else now
        s[5] = s[9] = -1

    def race(launch, rec, flat, g, line, did, other, other_line, other_did) -> None:
        same = g // launch.block_size == other // launch.block_size
        fix = ("separate the accesses with cuda.syncthreads(), or use cuda.atomic" if same else
               "threads of different blocks are never ordered within a launch but by a fence after the write, in "
               "its thread or past a barrier, then atomics on both sides: use cuda.atomic, or a second launch")
        fault(f"a data race on {rec.name} in kernel '{launch.name}': {thread_words(launch, g)} {did} element {flat} "
              f"at line {line}, and {thread_words(launch, other)} {other_did} it at line {other_line}, with nothing "
              f"ordering the two ({fix}). On a GPU the result would depend on timing.")

    # ------------------------------------------------------------------ what a kernel's threads hold
    class KernelArray:
        """An array inside a kernel: elements, views and the shape, for this launch's threads only."""
        __slots__ = ("__weakref__",)
        __array_ufunc__ = None

        def __new__(cls, *args, **kwargs):
            raise TypeError("arrays inside a kernel come from its arguments or cuda.shared/cuda.local")

        def __getitem__(self, key):
            entry = store.get(id(self))
            k = entry[1] if entry is not None and state["launch"] is entry[1][0] else _inside(self)
            launch, view, rec, state_key = k[0], k[1], k[2], k[3]
            shape = k[6]
            if type(key) is int and len(shape) == 1 and 0 <= key < shape[0]:  # the common case, inline
                idx, flat = (key,), (k[4] + key * k[5][0]) // k[7]
            else:
                idx = _element(k, key)
                if idx is None:  # slices: a view of the same memory
                    return kernel_view(launch, view[key], rec, state_key)
                flat = _flat(k, idx)
            if k[8] > 1:  # an element of a wider type than the allocation's: it covers several of them
                covered(k, flat, "r", frame(1).f_lineno)
            else:
                if rec.written is not None and not rec.written[flat]:
                    fault(f"kernel '{launch.name}' read element {flat} of {rec.name} at line {frame(1).f_lineno} "
                          "before any thread wrote it (on a GPU it holds whatever was there before)")
                if state_key is not None:
                    check(launch, rec, state_key, flat, "r", frame(1).f_lineno)
            if state["tap"] is not None:
                state["tap"](self, view, idx, 0, frame(1), rec.space == "shared")
            return view[idx]

        def __setitem__(self, key, value):
            entry = store.get(id(self))
            k = entry[1] if entry is not None and state["launch"] is entry[1][0] else _inside(self)
            launch, view, rec, state_key = k[0], k[1], k[2], k[3]
            idx = _element(k, key)
            if idx is None:
                raise KernelRefused(f"line {frame(1).f_lineno}: a kernel writes array elements one at a time (a slice "
                                    "assignment is not a GPU kernel's operation)")
            if type(value) not in _NUMBERS:
                if not isinstance(value, (int, float, complex, bool, np.generic)):
                    raise KernelRefused(f"line {frame(1).f_lineno}: a kernel stores numbers in array elements, not a "
                                        f"{type(value).__name__}")
                value = view.dtype.type(value)  # a plain number: no hook of a subclass runs on the memory
            flat = _flat(k, idx)
            if k[8] > 1:
                covered(k, flat, "w", frame(1).f_lineno)
            elif state_key is not None:
                check(launch, rec, state_key, flat, "w", frame(1).f_lineno)
            view[idx] = value
            if rec.written is not None:
                rec.written[flat:flat + k[8]] = b"\1" * k[8]
            if state["tap"] is not None:
                state["tap"](self, view, idx, 1, frame(1), rec.space == "shared")

        def __len__(self):
            return len(_inside(self)[1])

        def __iter__(self):
            n = len(self)
            return (self[i] for i in range(n))

        def __array__(self, dtype=None, copy=None):
            raise KernelRefused("a kernel's arrays are not NumPy arrays (a GPU kernel reads its elements one by one)")

        def __reduce_ex__(self, protocol):
            raise KernelRefused("a kernel's arrays cannot be copied")

        def __repr__(self):
            v = _inside(self)[1]
            return f"<array in a kernel: shape={v.shape} dtype={v.dtype}>"

        _numba_type_ = property(lambda self: _numba_type(_rec_pair(self)[1]))  # numba.typeof: metadata only
        shape = property(lambda self: _inside(self)[1].shape)
        dtype = property(lambda self: _inside(self)[1].dtype)
        size = property(lambda self: _inside(self)[1].size)
        ndim = property(lambda self: _inside(self)[1].ndim)
        strides = property(lambda self: _inside(self)[1].strides)
        itemsize = property(lambda self: _inside(self)[1].itemsize)
        T = property(lambda self: kernel_view(*_transposed(self)))

    _NUMBERS = frozenset({int, float, bool, complex} | _NUMPY_NUMBERS)

    def _transposed(arr):
        k = _inside(arr)
        return k[0], k[1].T, k[2], k[3]

    def _inside(arr):
        """(launch, view, allocation, state key, origin, strides, shape, the allocation's itemsize, the
        allocation's elements one element covers) of a kernel array,
        while its launch runs. (Nothing else can hold one then: a kernel's code reaches no host object
        it could leave it in, and the launching thread waits for the kernel's threads.)"""
        entry = store.get(id(arr))  # removed by weakref.finalize when an array dies: an id here is this array's
        if entry is None:
            raise RuntimeError("this array belonged to a kernel launch that has ended")
        k = entry[1]
        if state["launch"] is not k[0]:
            fault(f"an array of kernel '{k[0].name}' was used after that launch ended (only its own threads may "
                  "use it, while it runs)")
            raise RuntimeError("an array of a kernel used outside that kernel")
        return k

    def _element(k, key):
        """A tuple of ints for one element; None for anything that makes a view."""
        shape = k[6]
        kind = type(key)
        if kind is int:
            if len(shape) == 1:
                return (key,)
        elif kind is tuple and len(key) == len(shape):
            for i in key:
                if type(i) is not int:
                    break
            else:
                return key  # the common case: plain ints, one per dimension
        idx = key if kind is tuple else (key,)
        if len(idx) == len(shape) and all(type(i) is int or isinstance(i, np.integer) and not isinstance(i, bool)
                                          for i in idx):
            return tuple(int(i) for i in idx)
        for i in idx:
            if not isinstance(i, (int, np.integer, slice)) or isinstance(i, bool):
                raise KernelRefused(f"a kernel indexes arrays with integers and slices, not {type(i).__name__}")
        return None

    def _flat(k, idx) -> int:
        """The element's flat index in its allocation; an index out of bounds is a fault."""
        offset = k[4]
        for i, n, s in zip(idx, k[6], k[5]):
            if i < 0:
                i += n
            if not 0 <= i < n:
                launch, view, rec = k[0], k[1], k[2]
                line = frame(2).f_lineno
                me = who(launch)
                by = f"{thread_words(launch, me[0])} of " if me is not None else ""
                fault(f"{by}kernel '{launch.name}' accessed {rec.name} out of bounds at line {line}: index "
                      f"{idx if len(idx) > 1 else idx[0]} of an array of shape {view.shape}")
                raise IndexError(f"index {i} is out of bounds for axis of size {n} (line {line})")
            offset += i * s
        return offset // k[7]

    def kernel_view(launch, view, rec, state_key):
        k = object.__new__(KernelArray)
        origin = view.__array_interface__["data"][0] - rec.address  # bytes from the allocation's start
        span = max(1, view.itemsize // rec.base.itemsize)  # the allocation's elements one of the view's covers
        register(k, (launch, view, rec, state_key, origin, view.strides, view.shape, rec.base.itemsize, span))
        return k

    def covered(k, flat: int, kind: str, line: int) -> None:
        """An access through a view of a wider type (a uint64 view of float16, a complex64 view of
        float32) is an access to each element of the allocation it covers: each is checked, not
        only the first, so that no read of another thread's value hides in the upper part."""
        launch, rec, state_key = k[0], k[2], k[3]
        for f in range(flat, flat + k[8]):
            if kind in "ra" and rec.written is not None and not rec.written[f]:
                fault(f"kernel '{launch.name}' read element {f} of {rec.name} at line {line} before any thread "
                      "wrote it (on a GPU it holds whatever was there before)")
            if state_key is not None:
                check(launch, rec, state_key, f, kind, line)

    # ------------------------------------------------------------------ making arrays
    def device_array(shape=None, dtype=np.float64, strides=None, order="C", stream=0):
        base = np.empty(_ints(shape), dtype=_plain_dtype(dtype), order=_order(order))
        line = _caller_line()
        return handle(base, Allocation(base.reshape(-1, order="A"), f"the array made at line {line}", "global",
                                       False))

    def device_array_like(ary, stream=0):
        src = _view(ary) if isinstance(ary, DeviceArray) else _host_view(ary) if isinstance(ary, HostArray) \
            else np.asarray(ary)
        return device_array(src.shape, src.dtype)

    def to_device(obj, stream=0, copy=True, to=None):
        if to is not None:
            to.copy_to_device(obj, stream=stream)
            return to
        _host("write", "host access to a device array (to_device)")
        base = np.ascontiguousarray(_plain_copy(obj))
        line = _caller_line()
        return handle(base, Allocation(base.reshape(-1), f"the array copied to the device at line {line}", "global",
                                       True))

    def _caller_line() -> int:
        f = sys._getframe(2)
        return f.f_lineno if f is not None else 0

    def grader_array(view: np.ndarray, name: str, fresh: bool = False) -> DeviceArray:
        """One of the grader's buffers (an argument of the exercise), as the learner's code receives it.
        ``fresh``: an output the call must write before it reads (it starts with the grader's poison,
        which on a GPU would be whatever the memory held)."""
        return handle(view, Allocation(view.reshape(-1), f"'{name}'", "global", not fresh))

    # ------------------------------------------------------------------ launches
    stock_call = kmod.FakeCUDAKernel.__call__
    checker = KernelCheck(lambda obj: obj.fn if type(obj) is kmod.FakeCUDAKernel else None,
                          {kernelapi.FakeCUDAModule, kmod.FakeCUDAModule if hasattr(kmod, "FakeCUDAModule") else
                           kernelapi.FakeCUDAModule})

    def to_kernel(launch, value, where: str):
        if isinstance(value, DeviceArray):
            view, rec = _rec_pair(value)
            return kernel_view(launch, view, rec, id(rec))
        if type(value) in _NUMBERS:  # exactly: a subclass's methods would run on the host inside the kernel
            return value
        if type(value) is tuple:
            return tuple(to_kernel(launch, v, where) for v in value)
        if isinstance(value, sim_da.FakeCUDAArray):  # the stock simulator's device array (a notebook's own)
            view = vars(value)["_ary"]
            rec = Allocation(view, f"{where} (a device array)", "global", True)
            return kernel_view(launch, view, rec, id(rec))
        if isinstance(value, np.ndarray):
            read_forbidden, write_forbidden = host_rules()
            if guarded() and (read_forbidden or write_forbidden):
                raise refuse(f"a NumPy array on the host as {where} of a kernel (it is copied to and from the "
                             "device around the launch)")
            rec = Allocation(value.reshape(-1, order="A") if value.flags.contiguous else value, f"{where} (a host array)",
                             "global", True)
            return kernel_view(launch, value, rec, id(rec))
        raise KernelRefused(f"{where} of kernel '{launch.name}' is a {type(value).__name__}: a kernel takes device "
                            "arrays, numbers and tuples of them")

    def launch_graded(self, *args):
        # The launch runs on a copy of the kernel object: its attributes (fn, extensions) are the
        # learner's to change, the copy's are not. Launch extensions (prepare_args) would run learner
        # code on the host with the kernel's arrays in hand.
        k = object.__new__(kmod.FakeCUDAKernel)
        k.__dict__.update(vars(self))
        name = getattr(k.fn, "__name__", "kernel")
        if k.__dict__.get("extensions"):
            raise KernelRefused(f"kernel '{name}' has launch extensions (.extensions): a graded launch runs the "
                                "kernel alone")
        k.extensions = []
        why = checker.problem(k.fn, f"kernel '{name}'")
        if why:
            raise KernelRefused(why)
        from numba.cuda.errors import normalize_kernel_dimensions

        grid, block = normalize_kernel_dimensions(k.grid_dim, k.block_dim)
        launch = Launch(name, grid, block)
        launch.stream = streams.key(streams.of_kernel.get(self, 0))
        if launch.stream is None:  # the legacy default stream waits for every stream
            streams.settle(every=True)
        kargs = [to_kernel(launch, a, f"argument {i + 1}") for i, a in enumerate(args)]
        scope = getattr(k.fn, "__globals__", None)
        printing = kernel_print is not None and type(scope) is dict and "print" not in scope
        if printing:
            scope["print"] = kernel_print
        outer = state["launch"]
        state["launch"] = launch
        before = faults[0]
        try:
            return stock_call(k, *kargs)
        except BaseException as exc:
            # An exception out of a kernel fails the graded call whatever the host code does with it
            # (its text could carry the kernel's data to the host; on a GPU a kernel raises nothing).
            # One the walls raised after keeping a fault of their own says nothing new.
            if faults[0] == before:
                fault(f"kernel '{name}' stopped with {type(exc).__name__}: {str(exc)[:300]}")
            raise
        finally:
            launch.alive = False
            state["launch"] = outer
            launch.states.clear()
            launch.shared.clear()
            if printing and scope.get("print") is kernel_print:
                del scope["print"]

    def call(self, *args):
        if self._device or kmod._kernel_context is not None:
            return stock_call(self, *args)
        if guarded() or any(isinstance(a, DeviceArray) for a in args):
            return launch_graded(self, *args)
        return stock_call(self, *args)

    call.__name__ = "__call__"
    kmod.FakeCUDAKernel.__call__ = call

    # streams: a launch's, and what orders work across them (see Streams)
    stock_configure = kmod.FakeCUDAKernel.__getitem__

    def configure(self, configuration):
        out = stock_configure(self, configuration)
        streams.of_kernel[self] = configuration[2] if type(configuration) is tuple and len(configuration) > 2 else 0
        return out

    kmod.FakeCUDAKernel.__getitem__ = configure
    from numba.cuda.simulator import api as sim_api

    stream_cls, event_cls = sim_api.stream, sim_api.Event
    streams.default = stream_cls()
    stock_sync, stock_auto = stream_cls.synchronize, stream_cls.auto_synchronize

    def stream_synchronize(self):
        streams.settle(streams.key(self))
        return stock_sync(self)

    def auto_synchronize(self):
        import contextlib

        @contextlib.contextmanager
        def block():
            try:
                yield
            finally:
                streams.settle(streams.key(self))
        return block()

    stream_cls.synchronize, stream_cls.auto_synchronize = stream_synchronize, auto_synchronize

    def event_record(self, stream=0):
        streams.of_event[self] = streams.key(stream)

    def event_wait(self, stream=0):  # what the event's stream did up to now is ordered before the waiter
        if self in streams.of_event:
            streams.settle(streams.of_event[self], every=streams.of_event[self] is None)

    event_cls.record, event_cls.wait, event_cls.synchronize = event_record, event_wait, event_wait

    def synchronize():
        streams.settle(every=True)

    def default_stream():
        return streams.default

    _replace_everywhere(sim_api.synchronize, synchronize)
    for module in list(sys.modules.values()):  # the default streams' names (each is the stream class there)
        d = getattr(module, "__dict__", None)
        if isinstance(d, dict):
            for name in ("default_stream", "legacy_default_stream", "per_thread_default_stream"):
                if d.get(name) is stream_cls:
                    d[name] = default_stream

    # shared, local and constant arrays inside a graded launch
    stock_local = kernelapi.FakeCUDALocal.array
    stock_const = kernelapi.FakeCUDAConst.array_like

    def shared_array(self, shape, dtype, alignment=None):
        # FakeCUDAShared.array's own work, repeated: it names an allocation by its caller's line, and
        # called from here every allocation would be this line's (one array for all of them)
        launch = state["launch"]
        from numba.cuda.np import numpy_support
        from numba.cuda import types as ntypes

        if alignment is not None:
            raise RuntimeError("Array alignment is not supported in cudasim")
        if isinstance(dtype, ntypes.Type):
            dtype = numpy_support.as_dtype(dtype)
        dtype = np.dtype(dtype)
        caller = sys._getframe(1)
        if shape == 0:  # dynamic shared memory: every such array of a block is the same bytes
            site = ("dynamic", dtype.str)
            base = np.frombuffer(self._dynshared.data, dtype=dtype, count=self._dynshared_size // dtype.itemsize)
            if launch is not None:  # its views of every dtype share one record of bytes: a race across them shows
                b = current_thread().blockIdx
                block = b.x + launch.grid[0] * (b.y + launch.grid[1] * b.z)
                key = (block, site)
                arr = launch.shared.get(key)
                if arr is None:  # the block's threads run side by side: the first one's setdefault wins
                    rec = launch.shared.get((block, "dynamic bytes"))
                    if rec is None:
                        rec = launch.shared.setdefault((block, "dynamic bytes"), Allocation(
                            np.frombuffer(self._dynshared.data, dtype=np.uint8), "dynamic shared memory", "shared",
                            False))
                    arr = launch.shared.setdefault(key, kernel_view(launch, base, rec, id(rec)))
                return arr
        else:
            # one array per call of cuda.shared.array in the code (two on one line are two arrays)
            site = (caller.f_code.co_filename, caller.f_lineno, _instruction(caller.f_code, caller.f_lasti))
            base = self._allocations.get(site)
            if base is None:
                base = self._allocations[site] = np.empty(shape, dtype)
        if launch is None:  # a launch outside grading (a notebook's own): the stock simulator's array,
            plain = state["plain_shared"]  # as a memory tracer wraps it (memtrace, outside grading)
            return base if plain is None else plain(base)
        b = current_thread().blockIdx
        key = (b.x + launch.grid[0] * (b.y + launch.grid[1] * b.z), site)
        arr = launch.shared.get(key)
        if arr is None:
            # The block's threads run side by side and may all find no array: one setdefault wins, and
            # every thread gets its array (two threads with arrays of their own saw each other's writes
            # as missing, under load: a flag thread 0 wrote read as uninitialised)
            name = "dynamic shared memory" if shape == 0 else f"the shared array of line {caller.f_lineno}"
            rec = Allocation(base.reshape(-1), name, "shared", False)
            arr = launch.shared.setdefault(key, kernel_view(launch, base, rec, id(rec)))
        return arr

    def local_array(self, shape, dtype, alignment=None):
        base = stock_local(self, shape, dtype, alignment)
        # A thread's own array (no other thread sees it, nothing is copied in): NumPy's element access at
        # NumPy's speed, and none of NumPy's array maths (no ufunc, operator or NumPy function takes it)
        return base if state["launch"] is None else base.view(LocalArray)

    def const_array(self, ary):
        launch = state["launch"]
        if launch is None:
            return stock_const(self, ary)
        base = np.array(ary)
        base.flags.writeable = False
        return kernel_view(launch, base, Allocation(base.reshape(-1), "a constant array", "const", True), None)

    def wrap_plain_shared(fn) -> None:
        state["plain_shared"] = fn

    # memtrace leaves this in place: a graded launch's arrays report through tap, another's through fn
    shared_array._grader_plain_shared = wrap_plain_shared
    kernelapi.FakeCUDAShared.array = shared_array
    kernelapi.FakeCUDALocal.array = local_array
    kernelapi.FakeCUDAConst.array_like = const_array

    # atomics on kernel arrays: one locked read-modify-write, checked as an atomic access
    def atomic(op):
        stock = getattr(kernelapi.FakeCUDAAtomic, op)

        def method(self, array, index, *vals):
            if not isinstance(array, KernelArray):
                return stock(self, array, index, *vals)
            k = _inside(array)
            launch, view, rec, state_key = k[0], k[1], k[2], k[3]
            line = frame(1).f_lineno
            if op == "compare_and_swap":  # (array, old, val): element 0
                idx, vals = (0,) * view.ndim, (index, *vals)
            else:
                idx = _element(k, index)
                if idx is None:
                    raise KernelRefused(f"line {line}: cuda.atomic.{op} takes one element's index")
            flat = _flat(k, idx)
            if k[8] > 1:
                covered(k, flat, "w" if op == "exch" else "a", line)
            else:
                if rec.written is not None and not rec.written[flat] and op != "exch":
                    fault(f"kernel '{launch.name}' updated element {flat} of {rec.name} with cuda.atomic.{op} at "
                          f"line {line} before any thread wrote it (the update reads it first: on a GPU it holds "
                          "whatever was there before)")
                if state_key is not None:
                    check(launch, rec, state_key, flat, "a", line)
            with atomic_lock:
                old = view[idx]
                view[idx] = _ATOMIC[op](view.dtype.type, old, *vals)
            if rec.written is not None:
                rec.written[flat:flat + k[8]] = b"\1" * k[8]
            if state["tap"] is not None:
                state["tap"](array, view, idx, 2, frame(1), rec.space == "shared")
            return old

        method.__name__ = op
        return method

    for op in _ATOMIC:
        if hasattr(kernelapi.FakeCUDAAtomic, op):
            setattr(kernelapi.FakeCUDAAtomic, op, atomic(op))

    stock_fence = kernelapi.FakeCUDAModule.threadfence

    def threadfence(self):
        launch = state["launch"]
        if launch is not None:
            me = who(launch)
            if me is not None:
                tick(launch, me[0], me[1], "f")
        return stock_fence(self)

    kernelapi.FakeCUDAModule.threadfence = threadfence
    kernelapi.FakeCUDAModule.threadfence_system = threadfence

    # the cuda module's allocation functions, under every name a module holds them by
    import numba.cuda as cuda_module

    def mapped_array(shape=None, dtype=np.float64, strides=None, order="C", stream=0, portable=False, wc=False):
        # a function of its own: the guard refuses it by identity where device_array stays allowed
        return device_array(shape, dtype, strides, order, stream)

    for name, new in (("device_array", device_array), ("device_array_like", device_array_like),
                      ("to_device", to_device), ("mapped_array", mapped_array)) if allocators else ():
        _replace_everywhere(getattr(sim_da, name), new)
        setattr(cuda_module, name, new)

    class Memory:
        """What the runner uses."""
        array = staticmethod(grader_array)
        host_array = staticmethod(host_handle)  # an input left on the host
        Device = DeviceArray

        @staticmethod
        def tap(fn) -> None:
            """Have ``fn`` see every access of a kernel array (a memory tracer), or stop (None)."""
            state["tap"] = fn

        @staticmethod
        def problem() -> str:
            """The faults found since the last call ('' if none), then forgets them."""
            out = found[0] + (f" (and {len(found) - 1} more finding(s) of this call)" if len(found) > 1 else "") \
                if found else ""
            found.clear()
            return out

    return Memory


def _ints(values) -> tuple:
    """A shape or axes as plain ints (each through __index__, which sees no array)."""
    if isinstance(values, (int, np.integer)):
        return (operator.index(values),)
    return tuple(operator.index(v) for v in values)


def _order(order) -> str:
    if order not in ("C", "F", "A"):
        raise ValueError("order is 'C', 'F' or 'A'")
    return order


def _plain_dtype(dtype) -> np.dtype:
    """A NumPy dtype of numbers, nothing else (a type whose hooks NumPy would call is refused)."""
    if isinstance(dtype, type) and issubclass(dtype, np.ndarray):
        raise TypeError("a device array views its memory as a NumPy dtype (float32, int32, ...), not as a class")
    d = np.dtype(dtype)
    if d.hasobject or type(d).__module__ != "numpy.dtypes" or d.kind not in "biufc" or d.fields is not None \
            or d.subdtype is not None:
        raise TypeError("a device array views its memory as a NumPy dtype of numbers (float32, int32, ...)")
    return d


def _plain_key(key):
    """An index of integers, slices, Ellipsis and None, each made plain (NumPy sees no learner object)."""
    if isinstance(key, tuple):
        return tuple(_plain_key(k) for k in key)
    if key is None or key is Ellipsis:
        return key
    if isinstance(key, slice):
        return slice(*(None if v is None else operator.index(v) for v in (key.start, key.stop, key.step)))
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        return operator.index(key)
    raise TypeError("a device array is indexed with integers and slices")


def _numba_type(view: np.ndarray):
    """The Numba type of an array with ``view``'s dtype, dimensions and layout."""
    from numba.cuda import types as ntypes
    from numba.cuda.np import numpy_support

    layout = "C" if view.flags.c_contiguous else "F" if view.flags.f_contiguous else "A"
    return ntypes.Array(numpy_support.from_dtype(view.dtype), view.ndim, layout)


class LocalArray(np.ndarray):
    """A kernel thread's local array (cuda.local.array) in a graded launch: elements and views only."""
    __array_ufunc__ = None

    def __array_function__(self, func, types, args, kwargs):
        raise KernelRefused(f"NumPy's {getattr(func, '__name__', 'functions')} on a kernel's local array (a GPU "
                            "kernel works on its elements one by one)")


def _replace_everywhere(old, new) -> None:
    """Every module attribute that is ``old`` becomes ``new`` (numba.cuda re-exports the simulator's)."""
    for module in list(sys.modules.values()):
        d = getattr(module, "__dict__", None)
        if not isinstance(d, dict):
            continue
        for k, v in list(d.items()):
            if v is old:
                d[k] = new


def _cas(t, old, expected, val):
    return t(val) if old == expected else old


# cuda.atomic.* as (element type, old value, arguments) -> new value
_ATOMIC = {
    "add": lambda t, old, v: t(old + v), "sub": lambda t, old, v: t(old - v),
    "and_": lambda t, old, v: t(old & v), "or_": lambda t, old, v: t(old | v), "xor": lambda t, old, v: t(old ^ v),
    "inc": lambda t, old, v: t(0) if old >= v else t(old + 1),
    "dec": lambda t, old, v: t(v) if old == 0 or old > v else t(old - 1),
    "exch": lambda t, old, v: t(v), "max": lambda t, old, v: t(max(old, v)), "min": lambda t, old, v: t(min(old, v)),
    "nanmax": lambda t, old, v: t(np.fmax(old, v)), "nanmin": lambda t, old, v: t(np.fmin(old, v)),
    "compare_and_swap": _cas, "cas": _cas,
}
