"""Triton's interpreter (TRITON_INTERPRET=1) as a graded run sees it: default deny.

In the interpreter a block is a NumPy array (``tensor.handle.data``), a pointer is a host
address, and a kernel is Python that the interpreter rewrites and compiles again from its source.
Each of these is a way around the kernel, so ``install()`` closes them once per process:

- **The learner's kernels stay the learner's.** The interpreter compiles a new code object for
  each kernel; it is adopted as learner code (``adopt``), so every run-time guard that judges the
  caller (forbidden calls, torch's function mode, the audit hook) judges the kernel's own lines.
- **Blocks expose no data to learner code.** A block's ``handle`` is refused to learner frames,
  whatever syntax reaches it (an attribute, getattr, a match pattern, a format field: each reads
  the attribute from the learner's frame), and its text shows the shape, not the values. Triton's
  own code reads them as before.
- **Memory is the launch's arguments, and only through Triton's loads and stores.** The
  interpreter's memory primitives refuse learner callers, and every address a load, store or
  atomic touches (in the lanes its mask lets through) must lie inside a tensor the launch was
  given. An access outside them (one element past the end under a mask of ``<=``, say) is a
  fault, kept (``problem()``) and raised before the memory is touched.
- **Programs race as on a GPU.** The interpreter runs a launch's programs one after another; a
  GPU runs them side by side. An element one program writes and another reads or writes, with
  no atomic of each between them (the first's after its access, the second's before its own), is
  a race (``Races``): a split-K sum stored with plain loads and stores is one.
"""
from __future__ import annotations

import bisect

import numpy as np


def install(*, adopt, is_learner_code, learner_frame, refuse, learner_line, kernel_print=None, graded=lambda: True):
    """``adopt(code)``: count a code object as learner code; ``is_learner_code(code)``;
    ``learner_frame(depth)``: whether the frame ``depth`` above the caller is learner code (looking
    through the standard library); ``graded()``: whether graded code is running now (its blocks'
    text and Triton's hooks into plain Python are closed to everyone while it does);
    ``refuse(what)``: the exception for a forbidden use;
    ``learner_line()``: the line of learner code running now; ``kernel_print``: the print kernels
    get (a sandbox's own output, which host code cannot catch as it can sys.stdout), or None."""
    import builtins

    import torch
    import triton.language as tl
    from triton.runtime import interpreter as ti

    global _TENSOR
    _TENSOR = torch.Tensor  # taken now: what sys.modules holds later, learner code may have replaced

    getattr = builtins.getattr  # noqa: A001 - as it is now: the guards may later put a stand-in in builtins

    found: list[str] = []
    launches: list[dict] = []  # a stack: the running launch's {"name", "ranges", "races"}

    faults = [0]  # how many fault() calls there have been (found keeps the first few)

    def fault(message: str) -> None:
        faults[0] += 1
        if message not in found and len(found) < 4:
            found.append(message)

    # ------------------------------------------------------------------ the learner's kernels
    stock_rewrite = ti.InterpretedFunction.rewrite

    def rewrite(self):
        fn = stock_rewrite(self)
        if is_learner_code(getattr(self.fn, "__code__", None)) and fn is not self.fn:
            adopt(fn.__code__)
        return fn

    ti.InterpretedFunction.rewrite = rewrite

    # ------------------------------------------------------------------ the interpreter's own code
    # Not the learner's to call: its functions, its classes (ReduceOps would hand a learner callback
    # a block's NumPy values) and its builder's methods, however they were reached.
    def refusing(fn, what: str):
        def guarded(*args, **kwargs):
            if learner_frame(1):
                raise refuse(f"Triton's interpreter's own {what} (a kernel is written in triton.language)")
            return fn(*args, **kwargs)

        guarded.__name__, guarded.__qualname__ = fn.__name__, getattr(fn, "__qualname__", fn.__name__)
        guarded.__wrapped_by_grader__ = fn
        return guarded

    for name, obj in list(vars(ti).items()):
        if name.startswith("__") or getattr(obj, "__module__", None) != ti.__name__:
            continue
        if isinstance(obj, type):
            for attr, member in list(vars(obj).items()):
                if obj.__name__ == "InterpreterBuilder" and callable(member) and not attr.startswith("__"):
                    setattr(obj, attr, refusing(member, f"builder method {attr}"))
            if name in ("ReduceOps", "ScanOps"):
                ti.__dict__[name] = refusing(obj, name)  # the interpreter makes them by this name only
        elif callable(obj) and type(obj).__name__ == "function" and name not in ("_patch_lang_tensor",):
            ti.__dict__[name] = refusing(obj, f"function {name}")

    if kernel_print is not None:  # tl.device_print and tl.static_print print with the interpreter module's print
        ti.__dict__["print"] = kernel_print

    # ------------------------------------------------------------------ blocks
    for cls in (tl.core.tensor, getattr(tl.core, "tensor_descriptor_base", None)):
        if cls is not None:
            _hide_data(cls, learner_frame, refuse)

    stock_patch = ti._patch_lang_tensor

    def patch_lang_tensor(tensor, scope) -> None:
        stock_patch(tensor, scope)
        shown_repr, shown_str = tensor.__repr__, tensor.__str__

        # Shape only while graded code runs, whoever asks: Triton's own code formats a block for
        # whoever holds one (a constexpr's repr, an f-string of an error), and the grader needs no
        # block's values as text.
        def text(shown):
            def method(self):
                if graded() or learner_frame(1):
                    shape = [getattr(d, "value", d) for d in self.shape]  # constexpr sizes, as ints
                    return f"<Triton block of {self.dtype}, shape {shape}>"
                return shown(self)
            return method

        scope.set_attr(tensor, "__repr__", text(shown_repr))
        scope.set_attr(tensor, "__str__", text(shown_str))

    ti._patch_lang_tensor = patch_lang_tensor

    # ------------------------------------------------------------------ constexpr functions
    # A ConstexprFunction calls plain Python from a kernel: at compile time on a GPU, but on live
    # blocks in the interpreter. In graded code only Triton's own run (tl.cdiv's helpers and the
    # like), however the class was reached (type() of one of Triton's) and whatever it wraps.
    import os
    import types

    import triton
    from triton.runtime import jit as triton_jit

    constexpr_function = getattr(triton_jit, "ConstexprFunction", None)  # Triton 3.5 and later
    triton_root = os.path.dirname(triton.__file__) + os.sep
    if constexpr_function is not None and not getattr(constexpr_function, "_grader_checked", False):
        stock_constexpr_call = constexpr_function.__call__

        def constexpr_call(self, *args, **kwargs):
            fn = vars(self).get("fn")
            if graded() and not (type(fn) is types.FunctionType
                                 and fn.__code__.co_filename.startswith(triton_root)):
                raise refuse("a constexpr_function of its own (plain Python run from a kernel; a kernel "
                             "computes with triton.language)")
            return stock_constexpr_call(self, *args, **kwargs)

        constexpr_function.__call__ = constexpr_call
        constexpr_function._grader_checked = True

    # ------------------------------------------------------------------ memory
    raw = ti._interpreter

    class Memory:
        """The interpreter's memory primitives, each checked (the C module's other names pass)."""

        def __getattr__(self, name):
            return getattr(raw, name)

        @staticmethod
        def load(ptrs, mask, other, dtype):
            _checked("reads", ptrs, mask, np.dtype(dtype).itemsize)
            return raw.load(ptrs, mask, other, dtype)

        @staticmethod
        def store(ptrs, value, mask):
            _checked("writes", ptrs, mask, np.asarray(value).dtype.itemsize)
            return raw.store(ptrs, value, mask)

        @staticmethod
        def atomic_rmw(op, ptrs, value, mask, sem):
            _checked("updates", ptrs, mask, np.asarray(value).dtype.itemsize)
            return raw.atomic_rmw(op, ptrs, value, mask, sem)

        @staticmethod
        def atomic_cas(ptrs, cmp, value, sem):
            _checked("updates", ptrs, None, np.asarray(cmp).dtype.itemsize)
            return raw.atomic_cas(ptrs, cmp, value, sem)

    def _checked(verb: str, ptrs, mask, size: int) -> None:
        if learner_frame(2):
            raise refuse("Triton's interpreter's memory functions (a kernel reads and writes with tl.load and "
                         "tl.store)")
        launch = launches[-1] if launches else None
        block = addrs = np.asarray(ptrs, dtype=np.uint64)
        if mask is not None:
            addrs = addrs[np.broadcast_to(np.asarray(mask, dtype=bool), addrs.shape)]
        addrs = addrs.ravel()
        if addrs.size == 0:
            return
        inside = np.zeros(addrs.shape, dtype=bool)
        for lo, hi, _ in (launch["ranges"] if launch else ()):
            inside |= (addrs >= lo) & (addrs + np.uint64(size) <= hi)
        if inside.all():
            if launch is not None:
                race = launch["races"].access(addrs, verb, ti.interpreter_builder.grid_idx)
                if race:
                    line = learner_line()
                    fault(f"a data race in kernel '{launch['name']}' at line {line}: {race}. On a GPU the programs "
                          "run side by side and the result would depend on timing (use tl.atomic_add, or a second "
                          "launch)")
                    raise RuntimeError(f"data race at line {line}: {race}")
            return
        bad = int(addrs[~inside][0])
        where = _nearest(bad, size, launch["ranges"] if launch else [])
        view = _view_note(where, launch["tensors"]) if launch else ""
        line = learner_line()
        # where the block walks a tensor's dimensions, the access in the tensor's own terms: past the
        # end of which dimension (a product's K-tile read without its mask along K, say)
        try:
            along = _along(block, mask, size, launch["tensors"], launch["ints"], verb) if launch else ""
        except Exception:  # noqa: BLE001 - words only: the fault stands without them
            along = ""
        fix = "mask the access along that dimension" if along else "make it contiguous" if view else "check the mask"
        fault(f"kernel '{launch['name'] if launch else '?'}' {verb} memory outside its arrays at line {line}: "
              f"{along or where + view}. On a GPU this is an out-of-bounds access ({fix})")
        raise IndexError(f"out-of-bounds {verb[:-1]} at line {line}: {where}")

    ti._interpreter = Memory()

    stock_call = ti.GridExecutor.__call__

    def call(self, *args, **kwargs):
        names = list(self.arg_names)
        ranges, tensors, ints = [], [], {}
        for name, value in [*zip(names, args), *kwargs.items()]:
            _ranges(value, name, ranges)
            _layout(value, name, tensors, ints)
        launches.append({"name": getattr(self.fn, "__name__", "kernel"), "ranges": ranges, "races": Races(ranges),
                         "tensors": tensors, "ints": ints})
        try:
            return stock_call(self, *args, **kwargs)
        finally:
            launches.pop()

    ti.GridExecutor.__call__ = call

    # ------------------------------------------------------------------ kernels a GPU could compile
    # The interpreter runs a kernel as Python: a list, a Python helper, int() of a block or a loop
    # over one would all run. Before a learner kernel runs, Triton's own front end compiles it for
    # the launch's argument types (as on a GPU, up to Triton's IR): what it refuses is refused here.
    stock_run = ti.InterpretedFunction.run
    compiled: dict = {}

    def run(self, *args, grid, warmup, **kwargs):
        raw = getattr(self, "fn", None)
        if not warmup and is_learner_code(getattr(raw, "__code__", None)):
            why = _front_end(raw, args, kwargs, compiled)
            if why:
                name = getattr(raw, "__name__", "kernel")
                fault(f"kernel '{name}' does not compile for a GPU: {why}")
                raise TypeError(f"kernel '{name}' does not compile for a GPU (Triton's compiler refuses it): {why}")
            before = faults[0]
            try:
                return stock_run(self, *args, grid=grid, warmup=warmup, **kwargs)
            except BaseException as exc:
                # fails the graded call whatever host code does with it: an exception's text (a failed
                # tl.device_assert's, say) could carry the kernel's data to the host; one the walls
                # raised after keeping a fault of their own says nothing new
                if faults[0] == before:
                    fault(f"kernel '{getattr(raw, '__name__', 'kernel')}' stopped with {type(exc).__name__}: "
                          f"{str(exc)[:300]}")
                raise
        return stock_run(self, *args, grid=grid, warmup=warmup, **kwargs)

    ti.InterpretedFunction.run = run

    # A device function's call patches triton.language for the interpreter and never puts it back
    # (a kernel's launch does): tl.core stayed the interpreter's after tl.max ran, and the front end
    # then failed on honest kernels. The call's patches are undone when it returns.
    stock_device_call = ti.InterpretedFunction.__call__
    patch_lang = ti._patch_lang

    def device_call(self, *args, **kwargs):
        scope = patch_lang(self.fn)
        try:
            return stock_device_call(self, *args, **kwargs)
        finally:
            scope.restore()

    ti.InterpretedFunction.__call__ = device_call

    class Guard:
        @staticmethod
        def problem() -> str:
            out = "; ".join(found)
            found.clear()
            return out

    return Guard


class Races:
    """Which program of a launch last wrote, and last read, each byte of its tensors, and when (a clock
    that each atomic advances); per program, the clocks of its atomics. Programs of one launch are
    unordered except by atomics: one's access comes before another's if the first program made an
    atomic after it and the second one later, before its own access. (An element is known by its
    first byte: accesses of one type meet there.)"""

    def __init__(self, ranges) -> None:
        self.ranges = [(int(lo), int(hi), name) for lo, hi, name in ranges]
        self.maps: dict[int, dict] = {}  # range index -> arrays by byte: writer, written, atomic, reader, read
        self.clock = 0
        self.programs: list[tuple] = []  # index -> grid point
        self.index: dict[tuple, int] = {}
        self.atomics: dict[int, list] = {}  # program index -> clocks of its atomics

    def _arrays(self, i: int) -> dict:
        if i not in self.maps:
            n = self.ranges[i][1] - self.ranges[i][0]
            self.maps[i] = {"writer": np.full(n, -1, np.int32), "written": np.zeros(n, np.int32),
                            "atomic": np.zeros(n, bool), "reader": np.full(n, -1, np.int32),
                            "read": np.zeros(n, np.int32)}
        return self.maps[i]

    def _ordered(self, first: int, at: int, then: int) -> bool:
        mine = self.atomics.get(first, [])
        k = bisect.bisect_left(mine, at + 1)  # the first program's first atomic after its access
        theirs = self.atomics.get(then, [])
        return k < len(mine) and bool(theirs) and theirs[-1] > mine[k]

    def access(self, addrs, verb: str, program) -> str:
        """Record one load ('reads'), store ('writes') or atomic ('updates'); '' or the race in words."""
        program = tuple(int(v) for v in program)
        me = self.index.setdefault(program, len(self.programs))
        if me == len(self.programs):
            self.programs.append(program)
        atomic = verb == "updates"
        if atomic:
            self.clock += 1
            self.atomics.setdefault(me, []).append(self.clock)
        for i, (lo, hi, name) in enumerate(self.ranges):
            sel = addrs[(addrs >= np.uint64(lo)) & (addrs < np.uint64(hi))]
            if sel.size == 0:
                continue
            off = (sel - np.uint64(lo)).astype(np.int64)
            m = self._arrays(i)
            w, r = m["writer"][off], m["reader"][off]
            # a read meets another program's write (a plain read, an atomic update too); a write meets
            # another program's write or read; two atomics never race
            clash = (w >= 0) & (w != me) & ~(m["atomic"][off] & atomic)
            if verb != "reads":
                clash |= (r >= 0) & (r != me)
            for j in np.flatnonzero(clash)[:8]:
                o, wrote = off[j], w[j] >= 0 and w[j] != me
                other, at = (int(w[j]), int(m["written"][o])) if wrote else (int(r[j]), int(m["read"][o]))
                if not self._ordered(other, at, me):
                    return (f"program {program} {verb} byte {o} of {name}, which program {self.programs[other]} "
                            f"{'wrote' if wrote else 'read'} with nothing ordering the two")
            if verb == "reads":
                m["reader"][off], m["read"][off] = me, self.clock
            else:
                m["writer"][off], m["written"][off], m["atomic"][off] = me, self.clock, atomic
                m["reader"][off] = -1
        return ""


def _front_end(raw, args, kwargs, cache: dict) -> str:
    """'' if Triton's front end compiles kernel ``raw`` for these arguments, else its error."""
    import inspect
    import types

    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDABackend
    from triton.compiler import ASTSource
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction, mangle_type

    def as_jit(fn, seen):
        """A JITFunction of ``fn`` whose globals hold JITFunctions where the interpreter's are."""
        fn = fn.fn if isinstance(fn, InterpretedFunction) else fn
        if fn not in seen:
            scope = dict(fn.__globals__)
            copy = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
            for attr in ("__annotations__", "__kwdefaults__", "__module__", "__qualname__", "__doc__"):
                setattr(copy, attr, getattr(fn, attr))
            seen[fn] = JITFunction(copy)
            for name, value in list(scope.items()):
                if isinstance(value, InterpretedFunction):
                    scope[name] = as_jit(value, seen)
        return seen[fn]

    try:
        jit = as_jit(raw, {})
        params = inspect.signature(raw).parameters
        bound = inspect.signature(raw).bind(*args, **{k: v for k, v in kwargs.items() if k in params})
        bound.apply_defaults()
        signature, constants = {}, {}
        for p, name in zip(jit.params, params):
            value = bound.arguments[name]
            if p.is_constexpr or value is None:
                signature[name], constants[name] = "constexpr", value
            else:
                signature[name] = mangle_type(value)
        key = (raw, tuple(signature.items()), repr(sorted(constants.items())))
        if key not in cache:
            target = GPUTarget("cuda", 80, 32)
            backend = CUDABackend(target)
            options = backend.parse_options({"enable_fp_fusion": True})
            from triton._C.libtriton import ir

            context = ir.context()
            ir.load_dialects(context)
            backend.load_dialects(context)
            # triton.language's own @jit functions (tl.sigmoid, tl.softmax) are the interpreter's too:
            # the front end sees JITFunctions of them while it compiles
            import sys

            swapped, seen = [], {}
            for module in [m for n, m in list(sys.modules.items()) if n.startswith("triton.language")]:
                for attr, value in list(vars(module).items()):
                    if isinstance(value, InterpretedFunction):
                        swapped.append((module, attr, value))
            try:
                for module, attr, value in swapped:
                    setattr(module, attr, as_jit(value, seen))
                ASTSource(jit, signature, constants).make_ir(target, options, backend.get_codegen_implementation(options),
                                                             backend.get_module_map(), context)
                cache[key] = ""
            except Exception as exc:  # noqa: BLE001 - Triton's CompilationError, or what the front end raised
                text = " ".join(str(exc).split())
                cache[key] = (text[:160] + " ... " + text[-400:] if len(text) > 600 else text) or type(exc).__name__
            finally:
                for module, attr, value in swapped:
                    setattr(module, attr, value)
        return cache[key]
    except Exception as exc:  # noqa: BLE001 - arguments no Triton kernel takes
        return f"its arguments are no Triton kernel's ({type(exc).__name__}: {str(exc)[:200]})"


def _ranges(value, name: str, out: list) -> None:
    """The memory a kernel argument gives the kernel: a tensor's whole allocation (as memcheck sees
    it on a GPU), for tuples and descriptors each tensor in them."""
    if isinstance(value, tuple):
        for i, v in enumerate(value):
            _ranges(v, f"{name}[{i}]", out)
        return
    base = getattr(value, "base", None)
    if base is not None and hasattr(base, "data_ptr") and not hasattr(value, "data_ptr"):
        _ranges(base, name, out)  # a tensor descriptor
        return
    if not hasattr(value, "untyped_storage"):
        return
    storage = value.untyped_storage()
    lo = int(storage.data_ptr())
    out.append((np.uint64(lo), np.uint64(lo + storage.nbytes()), f"'{name}'"))


_TENSOR = None  # torch.Tensor, once install() has run


def _layout(value, name: str, tensors: list, ints: dict) -> None:
    """A kernel argument as ``_along`` reads it: a tensor's name, data address, shape, strides and
    element size; an integer's name and value."""
    if type(value) is int:  # exactly: a subclass's methods would be the learner's code, run here
        ints[name] = value
        return
    if _TENSOR is None or type(value) is not _TENSOR:
        return
    try:
        tensors.append((name, int(value.data_ptr()), tuple(int(n) for n in value.shape),
                        tuple(int(s) for s in value.stride()), int(value.element_size())))
    except Exception:  # noqa: BLE001 - a tensor without strides (sparse): no layout to tell
        return


def _along(block, mask, size: int, tensors, ints, verb: str = "reads") -> str:
    """An access that left its tensor, in the tensor's terms ('' where it cannot be told): the block
    of addresses (one per lane) walks the dimensions of a tensor of two or more dimensions, one
    block axis per dimension with that dimension's stride, and its enabled lanes run past the end
    (or before the start) of one of them. The lanes of a K-tile read without its mask along K run
    past the end of a's dimension 1 (or b's dimension 0), most of them still inside the memory (the
    next row's), some beyond it."""
    done = {"reads": "read", "writes": "written"}.get(verb, "updated")
    addrs = np.asarray(block, dtype=np.uint64)
    nd = addrs.ndim
    if nd < 2 or addrs.size < 2:
        return ""
    on = np.ones(addrs.shape, bool) if mask is None else np.broadcast_to(np.asarray(mask, dtype=bool), addrs.shape)
    if not on.any():
        return ""
    p = addrs.astype(np.int64)
    origin = (0,) * nd
    steps = []
    for a in range(nd):
        step = [0] * nd
        step[a] = 1
        steps.append(int(p[tuple(step)] - p[origin]) if addrs.shape[a] > 1 else 0)
    grid = np.indices(addrs.shape)
    if not np.array_equal(p, p[origin] + sum(grid[a] * steps[a] for a in range(nd))):
        return ""  # not a block of one base plus one stride per axis
    for name, ptr, shape, strides, itemsize in tensors:
        if len(shape) != nd or itemsize != size or any(s <= 0 for s in strides) or 0 in shape:
            continue
        span = (sum((n - 1) * s for n, s in zip(shape, strides)) + 1) * size
        inside = on & (p >= ptr) & (p < ptr + span)
        if not inside.any():
            continue
        dims: dict[int, int] = {}  # block axis -> the tensor's dimension it walks
        for a, step in enumerate(steps):
            if step == 0:
                continue
            fits = [k for k in range(nd) if strides[k] * size == step and k not in dims.values()]
            fits.sort(key=lambda k: shape[k] == 1)
            if not fits:
                dims = {}
                break
            dims[a] = fits[0]
        if not dims:
            continue
        ref = tuple(int(i) for i in np.argwhere(inside)[0])  # the first enabled lane in the tensor's memory
        rest, index = (int(p[ref]) - ptr) // size, [0] * nd
        for k in sorted(range(nd), key=lambda k: -strides[k]):
            index[k], rest = divmod(rest, strides[k])
        if rest or any(not 0 <= i < n for i, n in zip(index, shape)):
            continue
        for a, k in sorted(dims.items(), key=lambda item: item[1]):
            at = index[k] + grid[a] - ref[a]
            out = on & ((at >= shape[k]) | (at < 0))
            if not out.any():
                continue
            past = bool((at[out] >= shape[k]).any())
            lo, hi = (int(at[out & (at >= shape[k])].min()), int(at[out].max())) if past \
                else (int(at[out].min()), int(at[out & (at < 0)].max()))
            named = [n for n, v in ints.items() if v == shape[k]]
            if len(named) > 1:  # a row-major tensor's row stride often equals a size
                named = [n for n in named if "stride" not in n.lower()]
            size_is = f"size {shape[k]}" + (f", the kernel's argument {named[0]}" if len(named) == 1 else
                                            f", the value of the kernel's arguments {', '.join(named[:-1])} and "
                                            f"{named[-1]}" if 1 < len(named) <= 3 else "")
            span_text = f"index {lo}" if lo == hi else f"indices {lo} to {hi}"
            return (f"'{name}' (shape {shape}) is {done} {'past the end' if past else 'before the start'} "
                    f"along its dimension {k} ({size_is}), at {span_text}")
    return ""


def _view_note(where: str, tensors) -> str:
    """Where the tensor an access left is a view that is not contiguous (a transposed or expanded
    tensor): a kernel that reads it as a flat array of its elements reads other memory."""
    for name, _, shape, strides, _ in tensors:
        if f"'{name}'" not in where:
            continue
        want, contiguous = 1, True
        for n, s in reversed(list(zip(shape, strides))):
            if n != 1 and s != want:
                contiguous = False
            want *= n
        if not contiguous:
            return (f" ('{name}' is a view that is not contiguous, shape {shape} with strides {strides}: a kernel "
                    f"that reads it as a flat array needs .contiguous() first)")
    return ""


def _nearest(addr: int, size: int, ranges) -> str:
    """An address outside every range, in words: how far past or before the nearest array."""
    best = None
    for lo, hi, name in ranges:
        lo, hi = int(lo), int(hi)
        gap = addr + size - hi if addr >= lo else lo - addr
        if best is None or gap < best[0]:
            best = (gap, name, addr >= lo, hi - lo)
    if best is None:
        return f"address {addr:#x}, and the launch was given no tensor"
    gap, name, after, _ = best
    if after:
        return f"{gap // size} element(s) past the end of {name}"
    return f"{-(-gap // size)} element(s) before the start of {name}"


def _hide_data(cls, learner_frame, refuse) -> None:
    """``handle`` of ``cls``'s instances, for everyone but learner code. (The instance's ``__dict__``
    still holds it: only syntax the static check refuses reaches a ``__dict__``: a dunder attribute,
    vars, getattr, a class pattern or a format field naming it.)"""
    dict_slot = next((vars(k)["__dict__"] for k in cls.__mro__ if "__dict__" in vars(k)), None)
    if dict_slot is None or getattr(cls, "_grader_hidden", False):
        return

    def get_handle(self):
        if learner_frame(1):
            raise refuse("a Triton block's handle (its values, as a NumPy array in the interpreter)")
        return dict_slot.__get__(self, type(self))["handle"]

    def set_handle(self, value):
        if learner_frame(1):
            raise refuse("setting a Triton block's handle")
        dict_slot.__get__(self, type(self))["handle"] = value

    cls.handle = property(get_handle, set_handle)
    cls._grader_hidden = True
