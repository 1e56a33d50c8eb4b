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
"""
from __future__ import annotations

import numpy as np


def install(*, adopt, is_learner_code, learner_frame, refuse, learner_line):
    """``adopt(code)``: count a code object as learner code; ``is_learner_code(code)``;
    ``learner_frame(depth)``: whether the frame ``depth`` above the caller is learner code (looking
    through the standard library); ``refuse(what)``: the exception for a forbidden use;
    ``learner_line()``: the line of learner code running now."""
    import builtins

    import triton.language as tl
    from triton.runtime import interpreter as ti

    getattr = builtins.getattr  # noqa: A001 - as it is now: the guards may later put a stand-in in builtins

    found: list[str] = []
    launches: list[dict] = []  # a stack: the running launch's {"name", "ranges"}

    def fault(message: str) -> None:
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

    # ------------------------------------------------------------------ blocks
    for cls in (tl.core.tensor, getattr(tl.core, "tensor_descriptor_base", None)):
        if cls is not None:
            _hide_data(cls, learner_frame, refuse)

    stock_patch = ti._patch_lang_tensor

    def patch_lang_tensor(tensor, scope) -> None:
        stock_patch(tensor, scope)
        shown_repr, shown_str = tensor.__repr__, tensor.__str__

        def text(shown):
            def method(self):
                if learner_frame(1):
                    shape = [getattr(d, "value", d) for d in self.shape]  # constexpr sizes, as ints
                    return f"<Triton block of {self.dtype}, shape {shape}>"
                return shown(self)
            return method

        scope.set_attr(tensor, "__repr__", text(shown_repr))
        scope.set_attr(tensor, "__str__", text(shown_str))

    ti._patch_lang_tensor = patch_lang_tensor

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
        addrs = np.asarray(ptrs, dtype=np.uint64)
        if mask is not None:
            addrs = addrs[np.broadcast_to(np.asarray(mask, dtype=bool), addrs.shape)]
        addrs = addrs.ravel()
        if addrs.size == 0:
            return
        inside = np.zeros(addrs.shape, dtype=bool)
        for lo, hi, _ in (launch["ranges"] if launch else ()):
            inside |= (addrs >= lo) & (addrs + np.uint64(size) <= hi)
        if inside.all():
            return
        bad = int(addrs[~inside][0])
        where = _nearest(bad, size, launch["ranges"] if launch else [])
        line = learner_line()
        fault(f"kernel '{launch['name'] if launch else '?'}' {verb} memory outside its arrays at line {line}: "
              f"{where}. On a GPU this is an out-of-bounds access (check the mask)")
        raise IndexError(f"out-of-bounds {verb[:-1]} at line {line}: {where}")

    ti._interpreter = Memory()

    stock_call = ti.GridExecutor.__call__

    def call(self, *args, **kwargs):
        names = list(self.arg_names)
        ranges = []
        for name, value in [*zip(names, args), *kwargs.items()]:
            _ranges(value, name, ranges)
        launches.append({"name": getattr(self.fn, "__name__", "kernel"), "ranges": ranges})
        try:
            return stock_call(self, *args, **kwargs)
        finally:
            launches.pop()

    ti.GridExecutor.__call__ = call

    class Guard:
        @staticmethod
        def problem() -> str:
            out = "; ".join(found)
            found.clear()
            return out

    return Guard


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
