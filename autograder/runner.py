"""The sandboxed side of grading: load a submission, map the judge's memory, call its functions.

This file is the only part of the grader a submission's process holds (the sandbox shows it
as ``/grader/runner.py``; the rest of the grader and the lab references are not there). It
imports nothing from the grader. Everything in this process belongs to the learner's code,
which can read or replace any of it, so nothing it reports decides a grade: the judge owns
the buffers, poisons and reads them itself, and times the calls with its own clock.

What it does for the grade besides calling functions is to make forbidden routes fail:
while learner code runs, forbidden library functions raise (however they were reached),
device arrays refuse host access where the exercise forbids host computation, and an audit
hook refuses the ways code could take these guards apart (building code at run time,
ctypes, the garbage collector's object lists, stack frames). The judge's static check of
the source is the other half of this. In the CUDA simulator, barriers are held to a GPU's
rule (``StrictBarriers``): a call whose kernel lets threads of a block skip a
``cuda.syncthreads()`` the others wait at fails, as it may hang or read stale data on a GPU.

Messages are length-prefixed JSON; file descriptors of shared memory travel beside them.
"""
from __future__ import annotations

import contextlib
import json
import mmap
import os
import socket
import struct
import sys
import threading
import types

# The reflection builtins as they are at import: the guards may put stand-ins for them in builtins
# (REFLECTION), and the runner's own code (the audit hook among it) must not call those.
getattr, setattr, vars = getattr, setattr, vars  # noqa: A001, PLW0127 - module globals, on purpose
_real_getattr = getattr

MAX_IN = 64 << 20  # bytes of one message from the judge (cases can be long lists)
TEXT = 2000  # characters of an error message sent back
CELL_NAMES: set[str] = set()  # the submission's cells, as messages name them


# --------------------------------------------------------------------------- messages
class Channel:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.fds: list[int] = []

    def send(self, obj) -> None:
        data = json.dumps(obj).encode()
        self.sock.sendall(struct.pack("<I", len(data)) + data)

    def _exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk, fds, _, _ = socket.recv_fds(self.sock, min(n - len(buf), 1 << 20), 16)
            self.fds.extend(fds)
            if not chunk:
                raise EOFError("the judge closed the connection")
            buf += chunk
        return bytes(buf)

    def recv(self):
        (n,) = struct.unpack("<I", self._exact(4))
        if n > MAX_IN:
            raise ValueError("message too large")
        return json.loads(self._exact(n))

    def take_fd(self) -> int:
        return self.fds.pop(0)


def _library_file(filename: str) -> bool:
    """A file of the standard library, of an installed package or of the grader (see _see_through)."""
    return filename.startswith(_STDLIB + _SITE_ROOTS + _GRADER_DIRS) or filename.startswith("<frozen")


def _is_learners(code, code_ids=None) -> bool:
    """Whether a code object is the learner's: registered as such (in ``code_ids``, by default the
    guard's), or in a notebook's check() (where nothing is registered) made outside the libraries and
    the grader (whose modules, sent as source, are "<grader ...>")."""
    code_ids = GUARD.code_ids if code_ids is None else code_ids
    if code_ids:
        return id(code) in code_ids
    return not (_library_file(code.co_filename) or code.co_filename.startswith("<grader "))


def learner_traceback(exc: BaseException, code_ids: set) -> str:
    """The exception with only the frames in the learner's code (they cannot act on ours).
    In a notebook (no code set), the learner's frames are those outside the libraries."""
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        if _is_learners(tb.tb_frame.f_code, code_ids):
            frames.append(tb)
        tb = tb.tb_next
    lines = []
    for t in frames[-4:]:
        import linecache

        line = linecache.getline(t.tb_frame.f_code.co_filename, t.tb_lineno).strip()
        where = t.tb_frame.f_code.co_filename
        where = f"{where}, " if where in CELL_NAMES else ""
        lines.append(f"  {where}line {t.tb_lineno}, in {t.tb_frame.f_code.co_name}: {line}")
    head = f"{type(exc).__name__}: {exc}".strip()
    return "\n".join(([head] + lines) if lines else [head])[:TEXT]


class FromFailedCell:
    """Stands for a name that a cell which failed would have defined: using it says which cell to fix."""

    def __init__(self, name: str, cell: str) -> None:
        self._message = f"{name} is defined in {cell}, which failed (see that exercise's message): fix that cell first"

    def _fail(self, *args, **kwargs):
        raise NameError(self._message)

    __call__ = __getitem__ = _fail

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        self._fail()


# --------------------------------------------------------------------------- the guard
class ForbiddenCall(Exception):
    """A call the exercise forbids. Raised where the call is made, so it cannot give a result."""


_IN_HOOK = threading.local()


class _CodeSet:
    """Code objects by identity, nested ones included (kept alive, so that their ids stay theirs)."""

    def __init__(self) -> None:
        self.ids: set[int] = set()
        self.codes: list = []

    def add_code(self, code) -> None:
        todo = [code]
        while todo:
            c = todo.pop()
            if id(c) not in self.ids:
                self.ids.add(id(c))
                self.codes.append(c)
                todo.extend(k for k in c.co_consts if hasattr(k, "co_code"))


class Guard:
    """Which code is the learner's (by code object), and the rules of the exercise running now.

    ``rules``: {"deny": [patterns], "allow": [patterns], "host_data": bool, "array_math": bool,
    "methods": [method patterns]} as the judge computed them from the exercise's forbidden list.
    """

    def __init__(self) -> None:
        learner = _CodeSet()
        self.code_ids, self.add_code = learner.ids, learner.add_code
        self.rules: dict = {}
        self.exercise = ""
        self.active = False  # learner code may run (load or a call)
        self.debug = False  # refusals say where they came from (GRADER_DEBUG_REFUSALS)
        # the runner's stand-ins for array methods, once they let a call through: what the library
        # does below them is its own (CuPy's compiled fill calls numpy.asarray with no frame between)
        self.library_acts: set[int] = set()

    def caller_is_learner(self, depth: int = 2, transparent=None, through_runner: bool = True) -> bool:
        """Whether the code that made this call is the learner's. Frames of the standard library
        (and of ``transparent`` packages) act for whoever called them, so they are looked through:
        a forbidden call handed to functools, timeit or traceback is still the learner's.
        ``through_runner``: the runner's own frames act for their caller too (its stand-ins for
        library functions); not for the reflection builtins, which the runner itself uses."""
        try:
            f = sys._getframe(depth)
        except ValueError:
            return False
        code_ids, library_acts = self.code_ids, self.library_acts
        # Whether each code object acts for its caller, remembered: libraries make reflection calls from
        # deep stacks (jinja2 compiling torch's templates), and each call walks them.
        acts = _ACTS_FOR_CALLER.get(transparent)
        if acts is None:
            acts = _ACTS_FOR_CALLER[transparent] = {}
        # the guard's own stand-ins (a wrapped numpy.array that NumPy calls) act for their caller too
        while f is not None:
            code = f.f_code
            if id(code) in code_ids:
                return True
            through = acts.get(code)
            if through is None:
                through = acts[code] = _acts_for_caller(code, transparent)
            if not (through or through_runner and code.co_filename == _RUNNER_FILE):
                return False
            if code.co_name == "<module>" or id(code) in library_acts:
                return False  # a module of the library being imported: what it does is its own
            f = f.f_back
        return False

    def denied(self, full: str) -> bool:
        import fnmatch

        if not self.active:
            return False
        deny = self.rules.get("deny", ())
        allow = self.rules.get("allow", ())
        hit = any(fnmatch.fnmatchcase(full, p) or (p.startswith("*.") and full.endswith(p[1:])) for p in deny)
        return hit and not any(fnmatch.fnmatchcase(full, a) for a in allow)

    def refuse(self, what: str) -> ForbiddenCall:
        said = f"called {what}, which exercise '{self.exercise}' forbids"
        if self.debug:  # GRADER_DEBUG_REFUSALS: where the refused call came from, for the grader's developers
            import traceback

            said += "\n" + "".join(traceback.format_stack(limit=10)[:-1])
        return ForbiddenCall(said)


GUARD = Guard()


def _stdlib_roots() -> tuple[str, ...]:
    import sysconfig

    paths = sysconfig.get_paths()
    roots = {paths["stdlib"], paths["platstdlib"]}
    return tuple(r.rstrip(os.sep) + os.sep for r in roots if r)


def _site_roots() -> tuple[str, ...]:
    """This interpreter's own folders of installed packages (as written and resolved): a folder that
    only calls itself site-packages (one a submission made under /tmp) is none of them."""
    import site
    import sysconfig

    paths = sysconfig.get_paths()
    roots = {paths["purelib"], paths["platlib"], *site.getsitepackages()}
    return tuple({p.rstrip(os.sep) + os.sep for r in roots if r for p in (r, os.path.realpath(r))})


_STDLIB = _stdlib_roots()
_SITE_ROOTS = _site_roots()
_RUNNER_FILE = __file__
# The grader's own folder, and the course's beside it (a notebook's check() runs the runner in-process).
_GRADER_DIRS = tuple(os.path.join(d, "") for d in {os.path.dirname(os.path.abspath(__file__)),
                                                     os.path.join(os.path.dirname(os.path.dirname(
                                                         os.path.abspath(__file__))), "course")})


_CODEGEN = tuple(os.sep + n for n in ("collections" + os.sep + "__init__.py", "dataclasses.py", "typing.py",
                                       "enum.py"))


def _library_code(event: str, args, frame) -> bool:
    """Code the import system is compiling or running from a file of the standard library or of an
    installed package: a module being imported. Judged by the file the import system's loader
    reads, not by the name the code calls its file (a .pyc written to /tmp may give any)."""
    if event == "exec" and (not args or id(args[0]) in GUARD.code_ids):
        return False
    while frame is not None:  # the loader's frame: exec_module or get_code, in the import system's own code
        if frame.f_code.co_filename.startswith("<frozen importlib._bootstrap_external"):
            path = getattr(frame.f_locals.get("self"), "path", None)
            if isinstance(path, str):
                real = os.path.realpath(path)
                if event == "compile" and (len(args) < 2 or args[1] != path):
                    return False  # compiling other source than the file being imported
                return real.startswith(_STDLIB + _SITE_ROOTS) and os.path.isfile(real)
        frame = frame.f_back
    return False


def _codegen(frame, event: str, args) -> bool:
    """The standard library's own code generation: namedtuple, dataclasses and enum build code from
    identifiers they have checked. typing compiles a forward reference's string, which may be any
    expression (a string annotation read by typing.get_type_hints): there only a dotted name of public
    names passes (Optional["Node"], "np.ndarray"), and the code it became."""
    name = frame.f_code.co_filename if frame is not None else ""
    if not (name.endswith(_CODEGEN) and name.startswith(_STDLIB)):
        return False
    if not name.endswith(os.sep + "typing.py"):
        return True
    what = args[0] if args else None
    if event == "compile":
        what = what.decode("utf-8", "replace") if isinstance(what, bytes) else what
        return isinstance(what, str) and all(p.isidentifier() and not p.startswith("_") for p in what.split("."))
    return hasattr(what, "co_names") and not any(n.startswith("_") for n in what.co_names) and \
        not any(hasattr(c, "co_code") for c in what.co_consts)


# Installed packages whose code may act on its own: the libraries the labs are written against and
# those they call into. Default deny: every other package's frames (a template engine, an expression
# evaluator) act for whoever called them, as the standard library's do, so that no call is laundered
# through them; so does code made at run time ("<template>", "<string>"), whose caller is on the stack.
# (The import hooks that .pth files install, _numba_cuda_redirector, _distutils_hack and an editable
# install's finder, act for the import system.)
_TRUSTED_PACKAGES = frozenset({"numpy", "numba", "numba_cuda", "llvmlite", "cupy", "cupyx", "cupy_backends",
                               "fastrlock", "torch", "torchgen", "functorch", "triton", "cuda", "nvidia",
                               "_numba_cuda_redirector", "_distutils_hack"})


_GRADER_CODE = _CodeSet()  # the grader's modules sent as source (_grader_module): code made at run time, but ours


def _acts_for_caller(code, packages=None) -> bool:
    """A frame running ``code`` acts for whoever called it (see _see_through), unless it is the grader's."""
    return id(code) not in _GRADER_CODE.ids and _see_through(code.co_filename, packages)


_ACTS_FOR_CALLER: dict = {}  # packages looked through -> {code object: _acts_for_caller(code)}
_SEEN_THROUGH: dict = {}  # (file name, packages) -> _see_through's answer: the guards ask on every frame they walk


def _see_through(filename: str, packages=None) -> bool:
    """A frame that acts for its caller: of the standard library, of code made at run time, of an
    installed package not in _TRUSTED_PACKAGES, or of one of ``packages`` (trusted or not). The answer
    depends on the file alone, and libraries walk deep stacks of reflection calls (jinja2 compiling
    torch's templates), so it is remembered."""
    key = (filename, packages)
    try:
        return _SEEN_THROUGH[key]
    except KeyError:
        found = _SEEN_THROUGH[key] = _file_sees_through(filename, packages)
        return found
    except TypeError:  # packages given as a set or list
        return _file_sees_through(filename, packages)


def _file_sees_through(filename: str, packages=None) -> bool:
    if filename.startswith("<frozen"):
        return True
    for root in _SITE_ROOTS:  # before the standard library's: a system Python's site-packages lies inside it
        if filename.startswith(root):
            top = filename[len(root):].split(os.sep, 1)[0].removesuffix(".py")
            trusted = top in _TRUSTED_PACKAGES or top.startswith("__editable__")
            return not trusted or bool(packages) and top in packages
    if filename.startswith(_STDLIB):
        return True
    return not filename.startswith(_GRADER_DIRS)  # only the grader's own files act on their own

# Audit events that learner code may not raise while it runs: they build code the guard
# does not know, load native code, or reach objects and frames the guard relies on.
_DENIED_EVENTS = {
    "compile", "exec", "code.__new__", "function.__new__", "sys._getframe", "sys._current_frames",
    "sys.setprofile", "sys.settrace", "sys.addaudithook", "gc.get_objects", "gc.get_referrers",
    "gc.get_referents", "ctypes.dlopen", "ctypes.dlsym", "ctypes.dlsym/handle", "ctypes.cdata",
    "ctypes.addressof", "ctypes.string_at", "ctypes.wstring_at", "ctypes.call_function",
    "ctypes.cdata/buffer", "ctypes.create_string_buffer", "object.__setattr__", "object.__delattr__",
    "object.__getattr__", "builtins.input", "cpython.run_command",
}
# Attributes that hand out stack frames (from which every object of the process is reachable).
_FRAME_ATTRIBUTES = {"gi_frame", "cr_frame", "ag_frame", "tb_frame", "f_back"}


def _audit(event: str, args) -> None:
    if event not in _DENIED_EVENTS or getattr(_IN_HOOK, "on", False):
        return
    if event == "object.__getattr__" and (args[1] if len(args) > 1 else "") not in _FRAME_ATTRIBUTES:
        return  # first, and cheaply: every frame's f_code read raises this event (the guards read it all the time)
    _IN_HOOK.on = True
    try:
        if not GUARD.active:
            return
        # The frame doing it, looking through the standard library: ours (the guards themselves)
        # and installed libraries' are fine.
        if event in ("sys._getframe", "sys._current_frames"):
            # Only the learner's own call: the standard library reads its caller's module name
            # this way (namedtuple, warnings); the modules that hand frames out are refused by
            # the static check.
            f = sys._getframe(1)
            if f is None or id(f.f_code) not in GUARD.code_ids:
                return
        elif not GUARD.caller_is_learner(2):
            return
        if _codegen(sys._getframe(1), event, args):
            return  # namedtuple, dataclass and the like build their classes from checked names
        if event in ("compile", "exec") and _library_code(event, args, sys._getframe(1)):
            return  # importing a module of the standard library or of an installed package
        if event == "object.__getattr__" and (args[1] if len(args) > 1 else "") not in _FRAME_ATTRIBUTES:
            return  # only the attributes that hand out stack frames
        if event in ("object.__setattr__", "object.__delattr__"):
            target = args[0] if args else None
            # Learner classes and functions are the learner's to change; nothing else is.
            code = getattr(target, "__code__", None)
            if code is not None and id(code) in GUARD.code_ids:
                return
            if isinstance(target, type) and getattr(target, "__module__", "") == "submission":
                return
        raise RuntimeError(f"{event} is not allowed in graded code")
    finally:
        _IN_HOOK.on = False


# The reflection builtins: generic access to any attribute, namespace or code. Graded code that may
# not build names at run time may not reach these by any route (an alias, a module's `builtins`
# attribute, a match pattern, a standard-library helper that calls them for it): with any of them,
# every object of the process is one attribute away.
# (exec, eval and compile are the audit hook's: it refuses them to learner code however reached.)
REFLECTION = ("builtins.getattr", "builtins.setattr", "builtins.delattr", "builtins.vars", "builtins.globals",
              "builtins.locals", "operator.attrgetter", "operator.methodcaller")  # these two: classes
# The standard library's readers of closures, members and frames: with them, a method of an object the
# learner holds hands over what its closure holds (the simulator's own memory).
# (Not its frame readers, currentframe and stack: a stand-in would hand out its own frame, and they go
# through sys._getframe, which the audit hook refuses to learner callers.)
INTROSPECTION_CALLS = ("inspect.getclosurevars", "inspect.getmembers", "inspect.getmembers_static",
                       "inspect.getattr_static", "inspect.getgeneratorlocals", "inspect.getcoroutinelocals")
# Those that read the caller's own frame when called with no argument (vars(), globals(), locals()).
_FRAME_READERS = {"builtins.vars": "f_locals", "builtins.globals": "f_globals", "builtins.locals": "f_locals"}


# Standard-library modules whose code calls the reflection builtins with names of its own, on the
# objects it is given (functools.wraps copying __name__, dataclasses reading fields, enum, typing, and
# importlib setting a new module's attributes):
# what they do is theirs. Other standard-library code (string.Formatter.get_field, copy, pydoc) acts
# for whoever called it, so a learner cannot have it read attributes by names of the learner's.
_REFLECTION_HELPERS = tuple(os.sep + n for n in ("functools.py", "dataclasses.py", "typing.py", "enum.py", "abc.py",
                                                  "contextlib.py", "warnings.py", "weakref.py",
                                                  "collections" + os.sep + "__init__.py"))


def _reflection_helper(frame) -> bool:
    """The frame that called a reflection builtin is one of _REFLECTION_HELPERS."""
    name = frame.f_code.co_filename if frame is not None else ""
    return (name.endswith(_REFLECTION_HELPERS) and name.startswith(_STDLIB)) or name.startswith("<frozen importlib")


def _names_its_own(code, args: tuple) -> bool:
    """A standard-library call like getattr(exception, 'errno', None): the attribute's name is a literal
    of the library's own code (pathlib, tempfile), not one a learner handed it (string.Formatter's
    getattr(obj, name) takes the name from the format string the learner wrote)."""
    return len(args) >= 2 and type(args[1]) is str and args[1] in code.co_consts


def _wrap_reflection(obj, full: str):
    """A stand-in for a reflection builtin: refuses learner callers, however the call was reached (the
    standard library's frames act for their caller; the runner's own do not: it uses these itself)."""
    guard = GUARD
    frame_attr = _FRAME_READERS.get(full)
    library: set = set()  # code objects of callers that are neither the learner's nor the standard library's

    def wrapper(*a, **k):
        if guard.active:
            f = sys._getframe(1)
            code = f.f_code
            if code not in library:  # libraries call these all the time: one frame and a set lookup for them
                if id(code) in guard.code_ids or (not _reflection_helper(f) and _acts_for_caller(code)
                                                  and not _names_its_own(code, a)):
                    if guard.caller_is_learner(2, through_runner=False) and guard.denied(full):
                        raise guard.refuse(full)
                elif not _reflection_helper(f):
                    library.add(code)
        if frame_attr is not None and not a and not k:
            return _real_getattr(sys._getframe(1), frame_attr)  # the caller's frame, as the builtin reads it
        return obj(*a, **k)

    wrapper.__name__ = getattr(obj, "__name__", "wrapper")
    wrapper.__qualname__ = getattr(obj, "__qualname__", wrapper.__name__)
    wrapper.__doc__ = getattr(obj, "__doc__", None)
    return wrapper


def _reflection_class(cls, full: str):
    """A stand-in for operator.attrgetter or methodcaller (classes: torch's compiler registers them as
    such): making one refuses learner callers; what it makes is the real object."""
    guard = GUARD

    def __new__(_, *args, **kwargs):
        if guard.active and guard.caller_is_learner(2, through_runner=False) and guard.denied(full):
            raise guard.refuse(full)
        return cls(*args, **kwargs)

    return type(cls.__name__, (), {"__new__": __new__, "__module__": cls.__module__, "__doc__": cls.__doc__})


def _wrap_callable(obj, full: str):
    """A stand-in for a library callable: refuses calls made directly from learner code."""
    if full in REFLECTION:
        return _reflection_class(obj, full) if isinstance(obj, type) else _wrap_reflection(obj, full)
    guard = GUARD

    def check():
        if guard.active and guard.caller_is_learner(3) and guard.denied(full):
            raise guard.refuse(full)

    if type(obj).__name__ == "ufunc" or hasattr(obj, "reduce") and hasattr(obj, "nin"):
        class UfuncProxy:
            __slots__ = ()

            def __call__(self, *a, **k):
                check()
                return obj(*a, **k)

            def __getattr__(self, name):
                attr = getattr(obj, name)
                if callable(attr) and name in ("reduce", "accumulate", "reduceat", "outer", "at"):
                    def method(*a, **k):
                        if guard.active and guard.caller_is_learner(2) and guard.denied(full):
                            raise guard.refuse(f"{full}.{name}")
                        return attr(*a, **k)
                    return method
                return attr

            def __repr__(self):
                return repr(obj)

        return UfuncProxy()

    def wrapper(*a, **k):
        check()
        return obj(*a, **k)

    wrapper.__name__ = getattr(obj, "__name__", "wrapper")
    wrapper.__qualname__ = getattr(obj, "__qualname__", wrapper.__name__)
    wrapper.__doc__ = getattr(obj, "__doc__", None)
    wrapper.__wrapped_by_grader__ = obj
    return wrapper


def install_function_guards(patterns: list[str]) -> int:
    """Replace every module attribute that is (or aliases) a forbidden callable by a guard.

    Patterns are dotted fnmatch patterns ("numpy.*", "cupy.sum", "numba.cuda.to_device"); the
    objects they name are found, then every module that holds one of them under any name
    gets the guard instead, so no import path or alias reaches the original."""
    import fnmatch
    import types

    plain = (types.FunctionType, types.BuiltinFunctionType)
    targets: dict[int, tuple[object, str]] = {}
    for pat in patterns:
        if pat.startswith("*.") or pat.startswith("!"):
            continue  # methods: handled on the array classes
        mod_name, _, attr_pat = pat.rpartition(".")
        mod = sys.modules.get(mod_name)
        if mod is None:
            continue
        for a in list(vars(mod)):
            if a.startswith("_") or not fnmatch.fnmatchcase(a, attr_pat):
                continue
            obj = vars(mod)[a]
            is_ufunc = type(obj).__name__ == "ufunc"
            # type(obj), not isinstance: isinstance reads obj.__class__, and some module attributes
            # warn on any attribute read (torch.distributed.reduce_op's FutureWarning).
            if issubclass(type(obj), plain) or is_ufunc or type(obj).__name__ in ("_ArrayFunctionDispatcher",) \
                    or f"{mod_name}.{a}" in REFLECTION:
                targets.setdefault(id(obj), (obj, f"{mod_name}.{a}"))
    if not targets:
        return 0
    made: dict[int, object] = {}
    count = 0
    for mod_name, mod in list(sys.modules.items()):
        d = getattr(mod, "__dict__", None)
        if not isinstance(d, dict) or mod_name == __name__:
            continue
        for a, v in list(d.items()):
            t = targets.get(id(v))
            if t is None or t[0] is not v:
                continue
            if id(v) not in made:
                made[id(v)] = _wrap_callable(v, t[1])
            try:
                d[a] = made[id(v)]
                count += 1
            except (TypeError, AttributeError):
                continue
    return count


# Attributes of a device array a learner may use on the host: its shape and type, views.
_METADATA = {"shape", "dtype", "size", "ndim", "strides", "nbytes", "itemsize", "T", "flags", "stream",
             "gpu_data", "device_ctypes_pointer", "alloc_size", "is_c_contiguous", "is_f_contiguous",
             "__cuda_array_interface__", "_numba_type_", "reshape", "ravel", "view", "transpose", "bind",
             "split", "get_ipc_handle", "data", "__class__", "__len__", "_dummy", "_default_stream"}
_ARITH = ("__add__", "__radd__", "__iadd__", "__sub__", "__rsub__", "__isub__", "__mul__", "__rmul__",
          "__imul__", "__truediv__", "__rtruediv__", "__itruediv__", "__floordiv__", "__rfloordiv__",
          "__mod__", "__pow__", "__rpow__", "__matmul__", "__rmatmul__", "__neg__", "__abs__", "__eq__",
          "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__and__", "__or__", "__xor__", "__invert__",
          "__array__", "__array_ufunc__", "__array_function__", "__float__", "__int__", "__bool__",
          "__iter__", "__contains__")


def _in_sim_kernel() -> bool:
    k = sys.modules.get("numba.cuda.simulator.kernel")
    return bool(getattr(k, "_kernel_context", None)) if k is not None else False


def guard_numba_arrays(simulator: bool) -> None:
    """Host access to device arrays refuses learner callers where the exercise forbids it:
    reading (copies to the host, element reads, arithmetic, printing) and writing (copies from
    the host, element writes). Views (slices, reshapes) stay allowed. In the simulator arrays
    are host memory: the same access is allowed only inside a kernel."""
    guard = GUARD

    def blocked(kind: str) -> bool:
        # NumPy's Python code is looked through too: np.asarray or np.ma reading an array acts for
        # whoever called them.
        # Inside a simulated kernel first: it is cheap, and kernels make every element access here.
        return guard.active and guard.rules.get(f"host_{kind}") and not _in_sim_kernel() \
            and guard.caller_is_learner(3, ("numpy",))

    def patch(cls, name, kind):
        orig = cls.__dict__.get(name)
        if orig is None:
            return

        def method(self, *a, **k):
            if blocked(kind):
                raise guard.refuse(f"host access to a device array ({name})")
            return orig(self, *a, **k)

        method.__name__ = name
        setattr(cls, name, method)

    def patch_getitem(cls, name, device_type):
        orig = cls.__dict__.get(name)
        if orig is None:
            return

        def getitem(self, *a, **k):
            out = orig(self, *a, **k)
            if not isinstance(out, device_type) and blocked("read"):
                raise guard.refuse(f"reading a device array element on the host ({name})")
            return out

        getitem.__name__ = name
        setattr(cls, name, getitem)

    if simulator:
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray as cls

        for name in ("copy_to_host", "__str__", "__repr__", *[n for n in _ARITH if n in cls.__dict__]):
            patch(cls, name, "read")
        for name in ("copy_to_device", "__setitem__"):
            patch(cls, name, "write")
        patch_getitem(cls, "__getitem__", cls)
        getattr_orig = cls.__getattr__

        def __getattr__(self, attrname):
            if attrname not in _METADATA and blocked("read"):
                raise guard.refuse(f"host access to a device array (.{attrname})")
            return getattr_orig(self, attrname)

        cls.__getattr__ = __getattr__

        def _get(self):
            if blocked("read"):
                raise guard.refuse("host access to a device array (._ary)")
            return self.__dict__["_ary"]

        def _set(self, value):
            self.__dict__["_ary"] = value

        cls._ary = property(_get, _set)
    else:
        import numpy as np
        from numba.cuda.cudadrv import devicearray as da
        from numba.cuda.dispatcher import _LaunchConfiguration as launch_config

        launch = launch_config.__call__

        def guarded_launch(self, *args):
            # A host array as a kernel's argument: Numba copies it to the device and back around the
            # launch, on the learner's behalf, and the host then holds what the kernel put there.
            if guard.active and (guard.rules.get("host_read") or guard.rules.get("host_write")) \
                    and guard.caller_is_learner(2):
                for i, a in enumerate(args):
                    if any(isinstance(v, np.ndarray) and not isinstance(v, da.DeviceNDArrayBase)
                           for v in (a if isinstance(a, tuple) else (a,))):
                        raise guard.refuse(f"a NumPy array on the host as argument {i + 1} of a kernel (Numba "
                                           "copies it to and from the device around the launch)")
            return launch(self, *args)

        guarded_launch.__name__ = "__call__"
        launch_config.__call__ = guarded_launch
        for cls in (da.DeviceNDArrayBase, da.DeviceNDArray):
            for name in ("copy_to_host", "tolist", "__array__"):
                patch(cls, name, "read")
            for name in ("copy_to_device", "setitem", "__setitem__"):
                patch(cls, name, "write")
            for name in ("__getitem__", "getitem"):
                patch_getitem(cls, name, da.DeviceNDArrayBase)


# What a Triton answer may still ask of torch itself: a tensor's shape and layout, views of it,
# its address (what Triton's launcher reads), and empty tensors to write into.
TORCH_KEPT = {"__get__", "numel", "size", "dim", "stride", "data_ptr", "is_contiguous", "element_size",
              "storage_offset", "view", "reshape", "__getitem__", "__len__", "empty", "empty_like", "is_cuda"}


def torch_math_mode():
    """A torch function mode that refuses torch's functions, tensor methods and operators to
    learner callers (a Triton exercise: the work is its kernel's); the exercise's allowed names
    and TORCH_KEPT stay allowed, and Triton's own use of torch (its launcher, its interpreter)
    is not the learner's."""
    from torch.overrides import TorchFunctionMode

    guard = GUARD
    kept = TORCH_KEPT | {a.rsplit(".", 1)[-1] for a in guard.rules.get("allow", ()) if a.startswith("torch.")}

    class RefuseTensorMath(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            name = getattr(func, "__name__", "") or str(func)
            # torch's and NumPy's own frames act for whoever called them: torch.ops.aten.*,
            # torch.nn.functional.* and a tensor's __array__ inside numpy.asarray are the learner's
            # when learner code made the call
            if name not in kept and guard.active and guard.caller_is_learner(2, transparent=_TENSOR_LIBRARIES):
                raise guard.refuse(f"torch's {name} on tensors (here the Triton kernel does the work)")
            return func(*args, **(kwargs or {}))

    return RefuseTensorMath()


_TENSOR_LIBRARIES = ("torch", "numpy", "functorch")


class ModuleSeal:
    """The library modules the grader's own checks call are not the submission's to change.

    The entry exercises judge a registered operator with torch's own machinery (opcheck, fake
    tensors, AOT autograd, torch.compile), in the learner's process. When learner code starts, the
    seal records what those modules hold: every attribute's value, and each module's entry in
    sys.modules. An entry exercise refuses to run if any of it changed, by whatever route (an
    attribute set, setattr under another name, a module swapped in sys.modules): replacing
    torch.testing._internal.optests.opcheck, say. Modules' classes are left alone: libraries test
    them by exact type (Triton's jit does)."""

    PACKAGES = ("torch.library", "torch._library", "torch.testing._internal", "torch.autograd", "torch._ops",
                "torch._subclasses", "torch._functorch", "torch._higher_order_ops")

    def __init__(self) -> None:
        self.modules: dict = {}  # name -> (module, {attribute: value})

    def protect_all(self) -> None:
        for name, module in list(sys.modules.items()):
            if isinstance(module, types.ModuleType) and name.startswith(self.PACKAGES) \
                    and name.split(".")[0] == "torch":
                try:  # the code it holds (functions, classes, modules): torch's own counters and caches change
                    self.modules[name] = (module, {k: v for k, v in vars(module).items() if callable(v)
                                                   or isinstance(v, types.ModuleType)})
                except TypeError:
                    continue

    def changed(self, package: str = "torch") -> list[str]:
        """What was changed since the seal: 'module.attribute' names, and modules swapped in sys.modules."""
        found = []
        for name, (module, held) in self.modules.items():
            if sys.modules.get(name, module) is not module:
                found.append(name)
                continue
            now = vars(module)
            found += [f"{name}.{attr}" for attr, value in held.items() if attr not in now or now[attr] is not value]
        return found


def guard_torch_mode_switches() -> None:
    """The ways to run torch without the function mode above, refused to learner code while the
    guard is on: switching torch function modes off, popping them, and new threads (a mode
    holds in the thread that entered it only)."""
    import threading

    import torch

    guard = GUARD

    def refusing(owner, name: str, what: str):
        real = getattr(owner, name, None)
        if real is None or getattr(real, "_grader_guarded", False):
            return

        def guarded(*args, **kwargs):
            # learner code's own call only: torch switches its modes off and on itself, inside
            # handle_torch_function, for every mode it runs
            if guard.active and guard.rules.get("tensor_math") and guard.caller_is_learner(2):
                raise guard.refuse(what)
            return real(*args, **kwargs)

        guarded._grader_guarded = True
        setattr(owner, name, guarded)

    for name in ("DisableTorchFunction", "DisableTorchFunctionSubclass", "_pop_torch_function_stack",
                 "_set_torch_function_mode"):
        refusing(torch._C, name, f"torch._C.{name} (it would run torch without the grader's torch guard)")
    for name in ("_pop_mode", "_pop_mode_temporarily"):
        refusing(torch.overrides, name, f"torch.overrides.{name} (it would run torch without the grader's guard)")
    real_start = threading.Thread.start
    if not getattr(real_start, "_grader_guarded", False):
        def start(self, *args, **kwargs):
            if guard.active and guard.rules.get("tensor_math"):
                raise guard.refuse("a new thread (the grader's torch guard holds in your function's own thread)")
            return real_start(self, *args, **kwargs)

        start._grader_guarded = True
        threading.Thread.start = start
    import _thread

    for name in ("start_new_thread", "start_new", "start_joinable_thread"):
        refusing(_thread, name, "a new thread (the grader's torch guard holds in your function's own thread)")


def guarded_cupy_class(cp):
    """A CuPy array type whose methods and operators refuse learner callers where the exercise
    forbids them (CuPy's array maths where only raw kernels are allowed)."""
    import fnmatch

    guard = GUARD

    def refused(name: str) -> bool:
        if not (guard.active and guard.caller_is_learner(3)):
            return False
        if name in _ARITH or name == "__setitem__":
            return bool(guard.rules.get("array_math"))
        return any(fnmatch.fnmatchcase(name, p) for p in guard.rules.get("methods", ()))

    class DeviceArray(cp.ndarray):
        def __getitem__(self, key):
            out = cp.ndarray.__getitem__(self, key)
            return out.view(DeviceArray) if isinstance(out, cp.ndarray) and type(out) is not DeviceArray else out

    def make(name):
        orig = getattr(cp.ndarray, name)

        def method(self, *a, **k):
            if refused(name):
                raise guard.refuse(f"the array method {name}")
            return orig(self, *a, **k)

        method.__name__ = name
        guard.library_acts.add(id(method.__code__))  # one code for every method (held by cp.ndarray's subclass)
        return method

    for name in dir(cp.ndarray):
        if name in ("__getitem__", "__class__", "__init__", "__new__", "__init_subclass__", "__getattribute__",
                    "__setattr__", "__delattr__", "__dir__", "__reduce__", "__reduce_ex__", "__sizeof__",
                    "__subclasshook__", "__array_finalize__", "__cuda_array_interface__", "__dlpack__",
                    "__dlpack_device__", "__hash__", "__repr__", "__str__", "__format__", "__len__",
                    "__doc__", "__module__", "__dict__", "__weakref__", "__array_priority__"):
            continue
        attr = getattr(cp.ndarray, name, None)
        if callable(attr) and (name in _ARITH or name == "__setitem__" or not name.startswith("__")):
            try:
                setattr(DeviceArray, name, make(name))
            except (TypeError, AttributeError):
                continue
    return DeviceArray


# --------------------------------------------------------------------------- barriers in the simulator
class StrictBarriers:
    """The CUDA simulator's ``cuda.syncthreads()`` held to a GPU's rule: every thread of a block
    reaches the same barrier. The simulator itself releases a barrier once every thread still
    running waits at one, wherever each waits, and stops waiting for threads that returned, so
    a barrier inside a divergent ``if`` passes there, while on a GPU it may hang or read slots
    not yet written.

    Installed once per process, before learner code runs (``strict_barriers()``). Each block
    and each graded call (``problem()``) checks that it is still in place, and a barrier reached
    by a thread the scheduler did not make fails the launch; what it
    finds is kept here as well as raised, so code that catches the exception cannot hide it.

    A block's threads run in the launching thread, one at a time, each on a stack of its own (a
    greenlet), never as operating-system threads: a thread runs until it waits, at a barrier or a
    warp-wide operation, or ends; once no thread can run, the scheduler releases a warp whose
    lanes all wait at a warp operation, else checks the block's barrier and releases it. Switching
    stacks costs about a microsecond where handing the interpreter between threads cost tens: a
    kernel of 512 threads that meet 140 times at shuffles and barriers went from 2.7 s to 0.17 s,
    and a lane or a thread that never arrives is named at once instead of after a timeout.

    A kernel whose code names no barrier and no warp-wide operation (``independent_threads``)
    has threads that never wait for each other, so its threads run one after another without a
    stack each: one order a GPU may run them in, faster still. A barrier such a kernel reaches
    anyway (through a name the scan cannot see) fails the call with a message saying so.
    """

    def __init__(self) -> None:
        import threading as threading_module

        import numpy as np
        from numba.cuda.simulator import kernel, kernelapi
        from numba.cuda.simulator.kernelapi import Dim3

        self.found = ""  # the first divergence since the last problem()
        sim_dir = os.path.dirname(os.path.abspath(kernel.__file__)) + os.sep
        import greenlet

        manager = kernel.BlockManager
        barriers = self

        def site(frame) -> tuple[int, str]:
            """The line (and function) of learner code that called the barrier."""
            while frame is not None and frame.f_code.co_filename.startswith(sim_dir):
                frame = frame.f_back
            return (frame.f_lineno, frame.f_code.co_name) if frame is not None else (0, "?")

        def syncthreads(thread) -> None:  # Lane.syncthreads, which also notes where it waits
            if type(thread) is not Lane:  # the simulator's own threads: another block manager runs this launch
                barriers.found = barriers.found or barriers.TAMPERED
                raise BarrierDivergence(barriers.TAMPERED)
            thread.barrier_site = site(sys._getframe(1))
            # its accesses after this barrier are ordered after every thread's before it (sim_memory's race check)
            thread.grader_phase = getattr(thread, "grader_phase", 0) + 1
            thread.wait(Lane.BARRIER)

        def run(self, grid_point, *args) -> None:  # BlockManager.run, which checks each barrier
            if not barriers.intact():
                barriers.found = barriers.found or barriers.TAMPERED
                raise BarrierDivergence(barriers.TAMPERED)
            if independent_threads(self._f):
                return run_in_turn(self, grid_point, args)
            return run_cooperatively(self, grid_point, args)

        def run_cooperatively(self, grid_point, args) -> None:
            """The block's threads, each a greenlet switched to in turn from this one (see above)."""
            me = threading_module.get_ident()
            active = threading_module._active
            own = active.get(me)
            hub = greenlet.getcurrent()
            block_idx, dims, fn = Dim3(*grid_point), self._block_dim, self._f
            self.block_state = np.zeros(dims, dtype=np.bool_)  # syncthreads_count/_and/_or's votes

            def body(t):
                try:
                    fn(*args)
                except Exception as e:  # noqa: BLE001 - kept as the simulator keeps a thread's error
                    t.exception = (named(t, e), e.__traceback__)
                t.state = Lane.ENDED
                return t

            threads, warps = [], {}
            for k, point in enumerate(np.ndindex(*dims[::-1])):  # x fastest, as thread_id counts
                t = Lane(self, block_idx, Dim3(*point[::-1]), k, hub)
                t.greenlet = greenlet.greenlet(body, parent=hub)
                threads.append(t)
                warps.setdefault(k // 32, []).append(t)
            runnable = threads
            try:
                while True:
                    for t in runnable:
                        active[me] = t
                        came = t.greenlet.switch(t) if t.state == Lane.NEW else t.greenlet.switch()
                        _pose(active, me, own)
                        if t.exception is not None:
                            raise thread_error(t)
                        if came is not t or t.state not in (Lane.BARRIER, Lane.WARP, Lane.ENDED) or (
                                t.state == Lane.ENDED) != t.greenlet.dead:
                            # a stack switched to the scheduler some other way than by waiting
                            barriers.found = barriers.found or barriers.TAMPERED
                            raise BarrierDivergence(barriers.TAMPERED)
                    runnable = release_warps(warps)
                    if runnable:
                        continue
                    waiting = {t for t in threads if t.state == Lane.BARRIER}
                    if not waiting:
                        return
                    problem = divergence(grid_point, threads, waiting)
                    if problem:
                        barriers.found = barriers.found or problem
                        raise BarrierDivergence(problem)
                    runnable = sorted(waiting, key=lambda t: t.thread_id)
                    for t in runnable:
                        t.state = Lane.RUNNING
            except BaseException:  # the threads still waiting unwind now, not whenever they are collected
                _abort_lanes(threads, active, me, own)
                raise
            finally:
                _pose(active, me, own)

        def release_warps(warps: dict):
            """The lanes to run next: those of each warp (its lanes, by warp index) whose lanes all
            wait at a warp operation. Where only some do (the others ended or wait at the block's
            barrier), the waiting lanes run on to an error that says so, raised in their own code."""
            go, failed = [], []
            for warp, lanes in warps.items():
                at = [t for t in lanes if t.state == Lane.WARP]
                if not at:
                    continue
                if len(at) == len(lanes):
                    go += at
                else:
                    failed += at
            if failed:
                for t in failed:
                    t.state, t.pending = Lane.RUNNING, RuntimeError(
                        f"{t.warp_op}: not every lane of warp {t.thread_id // 32} reached it (a lane returned "
                        "early or took another branch); on a GPU the result would be undefined")
                return failed
            for t in go:
                t.state = Lane.RUNNING
            return go

        def run_in_turn(self, grid_point, args) -> None:
            """The block's threads one after another, each in this thread posing as it."""
            me = threading_module.get_ident()
            active = threading_module._active
            own = active.get(me)
            block_idx = Dim3(*grid_point)
            try:
                for k, point in enumerate(np.ndindex(*self._block_dim[::-1])):  # x fastest, as thread_id counts
                    t = InTurn(block_idx, Dim3(*point[::-1]), k)
                    active[me] = t
                    try:
                        self._f(*args)
                    except Exception as e:  # noqa: BLE001 - reported as the simulator reports a thread's error
                        if isinstance(e, InTurn.Barrier):  # kept, as a divergence is: a caught one still fails
                            barriers.found = barriers.found or str(e)
                            raise BarrierDivergence(str(e)) from None
                        t.exception = (named(t, e), e.__traceback__)
                        raise thread_error(t) from None
            finally:
                _pose(active, me, own)

        def named(t, e: BaseException) -> BaseException:
            """The error as the simulator words a thread's: its thread and block first."""
            where = f"tid={list(t.threadIdx)} ctaid={list(t.blockIdx)}"
            try:
                return type(e)(f"{where}: {e}" if str(e) else where)
            except Exception:  # noqa: BLE001 - an exception type that takes other arguments
                return e

        def thread_error(t) -> BaseException:
            """The error a thread raised, saying which thread of which block in the course's words
            (the simulator's own prefix is 'tid=[x, y, z] ctaid=[x, y, z]')."""
            exc, tb = t.exception
            prefix = f"tid={list(t.threadIdx)} ctaid={list(t.blockIdx)}"
            text = str(exc)
            if text.startswith(prefix):
                try:
                    exc = type(exc)(f"in thread {t.threadIdx} of block {t.blockIdx}" +
                                    (f": {text[len(prefix):].lstrip(': ')}" if text != prefix else ""))
                except Exception:  # noqa: BLE001 - an exception type that takes other arguments
                    pass
            return exc.with_traceback(tb)

        def divergence(block, threads, waiting) -> str:
            """'' when every thread of the block waits at the same barrier, else what went wrong."""
            first_site = next(iter(waiting)).barrier_site
            if len(waiting) == len(threads) and all(t.barrier_site == first_site for t in waiting):
                return ""
            gone = sorted((t for t in threads if t not in waiting), key=lambda t: t.thread_id)  # all ended cleanly
            sites: dict = {}
            for t in sorted(waiting, key=lambda t: t.thread_id):
                sites.setdefault(t.barrier_site, []).append(t)
            where = [f"{len(ts)} at line {line}, in {fn} ({who(ts)})" for (line, fn), ts in sites.items()]
            head = f"barrier divergence in block {tuple(int(v) for v in block)}: "
            if len(sites) > 1:
                return (head + "its threads wait at different cuda.syncthreads(): " + "; ".join(where[:3]) +
                        ". Every thread of a block must reach the same barrier: call it outside any if "
                        "that depends on the thread.")
            ((line, fn), ts), = sites.items()
            return (head + f"{len(ts)} of its {len(threads)} threads {'waits' if len(ts) == 1 else 'wait'} at "
                    f"the cuda.syncthreads() at line {line}, in {fn}, but {len(gone)} returned ({who(gone)}) and "
                    "never reach it. Every thread of a block must reach every barrier: let threads with nothing "
                    "to do skip the work, not the barrier.")

        def who(ts) -> str:
            return f"threadIdx {ts[0].threadIdx}" + (" and others" if len(ts) > 1 else "")

        Lane.syncthreads = kernel.BlockThread.syncthreads = syncthreads
        manager.run = run
        # What a launch goes through to reach the two methods above: each must stay as it is.
        self._expected = [(kernel, "BlockManager", manager), (manager, "run", run), (Lane, "syncthreads", syncthreads),
                          (kernel, "BlockThread", kernel.BlockThread), (kernel.BlockThread, "syncthreads", syncthreads),
                          (Lane, "wait", vars(Lane)["wait"]), (greenlet, "greenlet", greenlet.greenlet),
                          (kernel.FakeCUDAKernel, "__call__", vars(kernel.FakeCUDAKernel)["__call__"]),
                          (kernelapi.FakeCUDAModule, "syncthreads", vars(kernelapi.FakeCUDAModule)["syncthreads"]),
                          (kernelapi, "threading", threading_module),
                          (threading_module, "current_thread", threading_module.current_thread)]

    TAMPERED = "the CUDA simulator's barrier check was changed by the submission's code: it cannot be graded"

    def intact(self) -> bool:
        return all(vars(owner).get(name) is value for owner, name, value in self._expected)

    def expect(self, owner, name: str) -> None:
        """The grader's own later patch of something a launch goes through (sim_memory's launch):
        what is there now is what must stay."""
        self._expected = [(o, n, vars(o).get(n) if (o, n) == (owner, name) else v) for o, n, v in self._expected]

    def problem(self) -> str:
        """A divergence found since the last call (or a changed check), then forgets it."""
        found, self.found = self.found, ""
        return found or ("" if self.intact() else self.TAMPERED)


class BarrierDivergence(Exception):
    """Threads of one block did not all reach the same ``cuda.syncthreads()``."""


class Lane:
    """A simulated CUDA thread of a block run by ``StrictBarriers``' scheduler, on a greenlet of its
    own: what the simulator's ``cuda`` module reads from ``threading.current_thread()``, and where
    the thread waits (``wait`` switches to the scheduler until it releases the thread)."""

    NEW, RUNNING, BARRIER, WARP, ENDED = range(5)
    daemon = True

    def __init__(self, manager, block_idx, thread_idx, thread_id: int, hub) -> None:
        self._manager, self.blockIdx, self.threadIdx, self.thread_id, self.hub = (
            manager, block_idx, thread_idx, thread_id, hub)
        self.state, self.exception, self.abort, self.pending, self.greenlet = Lane.NEW, None, False, None, None
        self.barrier_site, self.warp_op = (0, "?"), ""

    @property
    def name(self) -> str:
        return f"CUDA thread {self.threadIdx} of block {self.blockIdx}"

    def is_alive(self) -> bool:
        return self.state != Lane.ENDED

    def wait(self, state: int) -> None:
        if self.abort:
            raise RuntimeError("abort flag set on syncthreads call")
        self.state = state
        self.hub.switch(self)
        if self.abort:
            raise RuntimeError("abort flag set on syncthreads clear")
        if self.pending is not None:  # the scheduler's word on this wait (a warp not every lane reached)
            error, self.pending = self.pending, None
            raise error

    def warp_wait(self, what: str) -> None:
        """Wait until every lane of this thread's warp waits at a warp operation (sim_warps)."""
        self.warp_op = what
        self.wait(Lane.WARP)

    def syncthreads(self) -> None:  # replaced by StrictBarriers, which notes where the thread waits
        raise RuntimeError("the grader's barriers are not installed")

    def _vote(self, value):
        import numpy as np

        state = self._manager.block_state
        state[self.threadIdx.x, self.threadIdx.y, self.threadIdx.z] = value
        self.syncthreads()
        votes = np.array(state)
        self.syncthreads()  # no thread votes again before every thread has read this vote
        return votes

    def syncthreads_count(self, value) -> int:
        return int(np.count_nonzero(self._vote(value)))

    def syncthreads_and(self, value) -> int:
        return 1 if np.all(self._vote(value)) else 0

    def syncthreads_or(self, value) -> int:
        return 1 if np.any(self._vote(value)) else 0


class InTurn:
    """A simulated CUDA thread run in turn by the launching thread (see ``StrictBarriers``): what
    the simulator's ``cuda`` module reads from ``threading.current_thread()``."""

    class Barrier(Exception):
        pass

    __slots__ = ("blockIdx", "threadIdx", "thread_id", "exception")
    daemon = True

    def __init__(self, block_idx, thread_idx, thread_id: int) -> None:
        self.blockIdx, self.threadIdx, self.thread_id, self.exception = block_idx, thread_idx, thread_id, None

    @property
    def name(self) -> str:
        return f"CUDA thread {self.threadIdx} of block {self.blockIdx}"

    def syncthreads(self, *_):
        raise InTurn.Barrier(
            "this kernel reached cuda.syncthreads() through a name the grader's simulator cannot see, so it "
            "ran the block's threads one by one: call cuda.syncthreads() (or the warp function) by its name")

    syncthreads_count = syncthreads_and = syncthreads_or = syncthreads

    def is_alive(self) -> bool:
        return True


# Names that make a kernel's threads wait for each other (barriers, warp-wide operations, grid
# groups), and names through which code could reach such a function without naming it.
_WAITS = {"syncthreads", "syncthreads_count", "syncthreads_and", "syncthreads_or", "syncwarp", "cg", "this_grid",
          "sync", "shfl_sync", "shfl_up_sync", "shfl_down_sync", "shfl_xor_sync", "all_sync", "any_sync",
          "eq_sync", "ballot_sync", "match_any_sync", "match_all_sync", "activemask", "lanemask_lt"}
_DYNAMIC = {"getattr", "eval", "exec", "compile", "globals", "vars", "locals", "__dict__", "__getattribute__",
            "__import__", "import_module", "current_thread", "threading", "_active", "Thread", "BlockThread"}
_INDEPENDENT: dict = {}


def independent_threads(fn) -> bool:
    """Whether no code a simulated kernel can reach by name (its own, nested functions, device
    functions and plain functions it calls) names a barrier, a warp-wide operation or a way to
    reach one unnamed. Anything the scan cannot follow counts as waiting."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return False
    known = _INDEPENDENT.get(code)
    if known is None:
        known = _INDEPENDENT[code] = _scan(fn, set())
    return known


def _scan(fn, seen: set) -> bool:
    import types

    fn = getattr(fn, "py_func", None) or getattr(fn, "fn", None) or fn  # a device function: its Python code
    code = getattr(fn, "__code__", None)
    if not isinstance(code, types.CodeType):
        return False
    if code in seen:
        return True
    seen.add(code)
    codes, names = [code], set()
    while codes:
        c = codes.pop()
        names |= set(c.co_names) | set(c.co_freevars)
        codes += [k for k in c.co_consts if isinstance(k, types.CodeType)]
    if names & (_WAITS | _DYNAMIC):
        return False
    scope = dict(getattr(fn, "__globals__", {}))
    for name, cell in zip(code.co_freevars, getattr(fn, "__closure__", None) or ()):
        try:
            scope[name] = cell.cell_contents
        except ValueError:  # not yet bound
            return False
    for name in names:
        obj = scope.get(name)
        if obj is None or isinstance(obj, (types.ModuleType, type, int, float, complex, bool, str, bytes)):
            continue
        if getattr(obj, "__name__", None) in _WAITS:
            return False
        if isinstance(obj, types.BuiltinFunctionType) or type(obj).__module__.startswith(("numpy", "numba.core")):
            continue
        if hasattr(obj, "__code__") or hasattr(obj, "py_func") or hasattr(getattr(obj, "fn", None), "__code__"):
            if not _scan(obj, seen):
                return False
            continue
        if callable(obj):  # an object whose call the scan cannot follow
            return False
    return True


def _abort_lanes(threads, active, me: int, own) -> None:
    """Stop every thread of a block still waiting, in its own code, as the simulator does on an
    error: each unwinds (its ``finally`` blocks run, posing as it) and a barrier it reaches then fails."""
    import greenlet

    for t in threads:
        t.abort = True
        if t.greenlet is not None and not t.greenlet.dead:
            active[me] = t
            try:
                t.greenlet.throw(greenlet.GreenletExit)
            except Exception:  # noqa: BLE001 - the block already failed: the first error is the one reported
                pass
    _pose(active, me, own)


def _pose(active: dict, me: int, thread) -> None:
    """What ``threading.current_thread()`` answers in this OS thread from now on."""
    if thread is None:
        active.pop(me, None)
    else:
        active[me] = thread


def _grader_module(source: str, name: str, given: dict | None = None) -> dict:
    """One of the grader's modules, sent as source (the sandbox holds no file of the grader): its
    namespace. ``given``: names it is handed before it runs."""
    namespace: dict = {"__name__": f"grader_{name}", **(given or {})}
    code = compile(source, f"<grader {name}>", "exec")
    _GRADER_CODE.add_code(code)
    exec(code, namespace)
    return namespace


# The exception classes of the entry modules: what an entry raises with one of them is the grader's
# sentence about the learner's registration, shown as it is (no frames: they would be the grader's).
ENTRY_VERDICTS: list = []
ENTRY_NAMES: set = set()  # the exercises whose functions are entries (in a notebook's check() too)


def entry_function(source: str, name: str, namespace: dict):
    """An entry exercise's function (``Exercise.entry``): the grader's code, built over the
    learner's namespace. It is grader code, so the guards judge only the learner code it calls.
    It is handed ``learner_traceback``: an exception with the learner's lines only."""
    module = _grader_module(source, f"entry_{name}",
                            {"learner_traceback": lambda exc: learner_traceback(exc, GUARD.code_ids),
                             "learner_code": _is_learners})
    verdict = module.get("OperatorProblem")
    if isinstance(verdict, type) and all(verdict is not v for v in ENTRY_VERDICTS):
        ENTRY_VERDICTS.append(verdict)
    ENTRY_NAMES.add(name)
    return module["entry"](namespace)


def _quiet_frame(depth: int = 0):
    """The frame ``depth`` above the function asking, without the audit hook's work (the walls ask on
    every element a kernel touches)."""
    hook = _IN_HOOK.__dict__
    was = hook.get("on", False)
    hook["on"] = True
    try:
        return sys._getframe(depth + 1)
    finally:
        hook["on"] = was


def _kernel_print():
    """The print a sandbox's kernels get: to the runner's own output (a copy of its stdout taken before
    learner code runs), where the learner's host code cannot catch it (contextlib.redirect_stdout)."""
    fd = os.dup(1)

    def kernel_print(*values, sep=" ", end="\n", **_):
        text = (sep if type(sep) is str else " ").join(str(v) for v in values) + (end if type(end) is str else "\n")
        try:
            os.write(fd, text.encode("utf-8", "replace"))
        except OSError:
            pass

    return kernel_print


def install_sim_memory(install, allocators: bool = True):
    """The simulator's device memory under the guard's rules (see sim_memory.install). Its launch
    goes through the simulator's kernel call, which the barrier check holds in place: the check
    is told the grader's own patch is the one to keep."""
    from numba.cuda.simulator import kernel as sim_kernel

    memory = install(guarded=lambda: GUARD.active,
                     host_rules=lambda: (bool(GUARD.rules.get("host_read")), bool(GUARD.rules.get("host_write"))),
                     refuse=GUARD.refuse, allocators=allocators, frame=_quiet_frame,
                     kernel_print=_kernel_print() if allocators else None,
                     kernel_thread=lambda t: type(t) is Lane or type(t) is InTurn)
    strict_barriers().expect(sim_kernel.FakeCUDAKernel, "__call__")
    return memory


def install_triton_guard(install, sandbox: bool = True):
    """Triton's interpreter under the guard (see triton_guard.install). ``sandbox``: a graded
    runner's (kernels print to its own output), not a notebook's check()."""

    def learner_line() -> int:
        """The line of learner code running now: its registered code, or in a notebook's check() (where
        nothing is registered) the first frame outside the libraries and the grader."""
        frames, f = [], sys._getframe(2)
        while f is not None:
            frames.append(f)
            f = f.f_back
        mine = next((f for f in frames if id(f.f_code) in GUARD.code_ids), None)
        if mine is None:
            mine = next((f for f in frames if not _library_file(f.f_code.co_filename)
                         and not f.f_code.co_filename.startswith("<grader")), None)
        return mine.f_lineno if mine is not None else 0

    return install(adopt=GUARD.add_code, is_learner_code=lambda code: code is not None and id(code) in GUARD.code_ids,
                   learner_frame=lambda depth: GUARD.active and GUARD.caller_is_learner(depth + 2),
                   refuse=GUARD.refuse, learner_line=learner_line, kernel_print=_kernel_print() if sandbox else None,
                   graded=lambda: GUARD.active)


_LEARNER_CALLBACK = object()  # learner_callback's code below: one code object for every closure


def _as_learners(fn):
    """A callable learner code hands a library to call back (a Triton heuristic or hook): it runs in a
    frame that counts as the learner's, so that what it does is judged as the learner's own call even
    where it is a C-level object (a functools.partial, a builtin) that makes no frame of its own, and
    the library that calls it is one the guards trust."""
    if fn is None or not callable(fn) or getattr(fn, "__code__", None) is _LEARNER_CALLBACK:
        return fn

    def learner_callback(*args, **kwargs):
        return fn(*args, **kwargs)

    return learner_callback


_LEARNER_CALLBACK = _as_learners(len).__code__


def guard_triton_callbacks() -> None:
    """Triton's heuristics, autotuner hooks and a kernel's pre-run hooks take callables from learner
    code: each runs as the learner's (see _as_learners)."""
    at = sys.modules.get("triton.runtime.autotuner")
    if at is None or getattr(at.Heuristics.__init__, "_grader", False):
        return
    GUARD.add_code(_LEARNER_CALLBACK)
    heuristics_init, autotuner_init, config_init = at.Heuristics.__init__, at.Autotuner.__init__, at.Config.__init__

    def heuristics(self, fn, arg_names, values, *args, **kwargs):
        heuristics_init(self, fn, arg_names, {k: _as_learners(v) for k, v in dict(values).items()}, *args, **kwargs)

    def autotuner(self, *args, **kwargs):  # (triton.autotune passes these by name; only those given are set)
        for name in ("pre_hook", "post_hook", "do_bench"):
            if kwargs.get(name) is not None:
                kwargs[name] = _as_learners(kwargs[name])
        if kwargs.get("prune_configs_by"):
            kwargs["prune_configs_by"] = {k: _as_learners(v) for k, v in dict(kwargs["prune_configs_by"]).items()}
        autotuner_init(self, *args, **kwargs)

    def config(self, *args, **kwargs):
        if len(args) > 5:  # (kwargs, num_warps, num_stages, num_ctas, maxnreg, pre_hook, ...)
            args = (*args[:5], _as_learners(args[5]), *args[6:])
        if kwargs.get("pre_hook") is not None:
            kwargs["pre_hook"] = _as_learners(kwargs["pre_hook"])
        config_init(self, *args, **kwargs)

    for cls, init in ((at.Heuristics, heuristics), (at.Autotuner, autotuner), (at.Config, config)):
        init._grader = True
        cls.__init__ = init
    # Pre-run hooks, however they were added (add_pre_run_hook, or appended to the list): wrapped as each
    # launch reads them, in the interpreter's GridExecutor and in a compiled kernel's run.
    interpreter = sys.modules.get("triton.runtime.interpreter")
    if interpreter is not None and hasattr(interpreter, "GridExecutor"):
        grid_init = interpreter.GridExecutor.__init__

        def grid_executor(self, fn, arg_names, grid, pre_run_hooks=(), *args, **kwargs):
            grid_init(self, fn, arg_names, grid, [_as_learners(h) for h in pre_run_hooks], *args, **kwargs)

        interpreter.GridExecutor.__init__ = grid_executor
    jit = sys.modules.get("triton.runtime.jit")
    if jit is not None and hasattr(jit.JITFunction, "run"):
        jit_run = jit.JITFunction.run

        def run(self, *args, **kwargs):
            hooks = self.__dict__.get("pre_run_hooks")
            if not hooks:
                return jit_run(self, *args, **kwargs)
            self.pre_run_hooks = [_as_learners(h) for h in hooks]
            try:
                return jit_run(self, *args, **kwargs)
            finally:
                self.pre_run_hooks = hooks

        jit.JITFunction.run = run


_BARRIERS: list = []


def strict_barriers() -> StrictBarriers:
    """The process's StrictBarriers, installed on first use."""
    if not _BARRIERS:
        _BARRIERS.append(StrictBarriers())
    return _BARRIERS[0]


# --------------------------------------------------------------------------- memory
class Memory:
    """The judge's shared memory, mapped here: device chunks (CUDA VMM, imported from a file
    descriptor) or host chunks (a memfd mapped with mmap)."""

    def __init__(self, gpu: bool) -> None:
        self.gpu = gpu
        self.chunks: dict[int, dict] = {}

    def map(self, cid: int, size: int, kind: str, fd: int) -> None:
        if kind == "host" or not self.gpu:
            buf = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            os.close(fd)
            self.chunks[cid] = {"kind": "host", "buf": buf, "size": size}
            return
        from cuda.bindings import driver as cu

        handle = _ok(cu.cuMemImportFromShareableHandle(
            fd, cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
        os.close(fd)
        ptr = int(_ok(cu.cuMemAddressReserve(size, 0, 0, 0)))
        _ok(cu.cuMemMap(ptr, size, 0, handle, 0))
        desc = cu.CUmemAccessDesc()
        desc.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        desc.location.id = _device_ordinal()
        desc.flags = cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        _ok(cu.cuMemSetAccess(ptr, size, [desc], 1))
        self.chunks[cid] = {"kind": "device", "ptr": ptr, "size": size, "handle": handle}

    def unmap(self, cid: int) -> None:
        c = self.chunks.pop(cid, None)
        if c is None:
            return
        if c["kind"] == "host":
            try:
                c["buf"].close()
            except BufferError:
                pass  # learner code still holds a view: the mapping goes with the process
            return
        from cuda.bindings import driver as cu

        cu.cuMemUnmap(c["ptr"], c["size"])
        cu.cuMemAddressFree(c["ptr"], c["size"])
        cu.cuMemRelease(c["handle"])

    def host_view(self, cid: int, offset: int, shape, dtype):
        import numpy as np

        c = self.chunks[cid]
        n = int(np.prod(shape)) if len(shape) else 1
        return np.frombuffer(c["buf"], dtype=dtype, count=n, offset=offset).reshape(shape)

    def device_ptr(self, cid: int, offset: int) -> int:
        return self.chunks[cid]["ptr"] + offset


def _ok(res):
    err = res[0]
    if int(err) != 0:
        raise RuntimeError(f"CUDA driver error {err!r}")
    return None if len(res) == 1 else (res[1] if len(res) == 2 else res[1:])


_ORDINAL = None


def _device_ordinal() -> int:
    global _ORDINAL
    if _ORDINAL is None:
        from cuda.bindings import driver as cu

        _ORDINAL = int(_ok(cu.cuCtxGetDevice()))
    return _ORDINAL


# --------------------------------------------------------------------------- the process
class Runner:
    def __init__(self, chan: Channel | None, job: dict, mem=None, functions: dict | None = None) -> None:
        self.chan = chan
        self.job = job
        self.gpu = job["mode"] == "gpu"
        self.mem = mem if mem is not None else Memory(self.gpu)
        self.local = mem is not None  # in the judge's own process (check() in a notebook)
        import types

        module = types.ModuleType("submission")  # a real module: dataclasses and pickling look it up
        sys.modules["submission"] = module
        self.namespace: dict = module.__dict__
        self.functions: dict = dict(functions or {})
        self.cupy_class = None
        self.sanitize = bool(job.get("sanitize"))
        self.pinned: list = []
        self.pending = ({}, "", None)
        self.guarded = not (job.get("trusted") or self.local)
        # Before any learner code runs: barriers the simulator would let diverge fail the call.
        self.barriers = None if self.gpu else strict_barriers()
        self.memtrace = None  # --profile: the grader's memory-access tracer (memtrace.py), loaded first
        self.sim_memory = None  # simulator: device arrays that expose nothing, every access checked (sim_memory.py)
        self.triton_guard = None  # Triton's interpreter under the same rules (triton_guard.py)
        self.entries: set = set()  # the exercises whose functions are the grader's (Exercise.entry)
        self.seal = None  # ModuleSeal: library modules learner code may not change

    def load_memtrace(self, source: str) -> None:
        """The judge's copy of memtrace.py, as a module of its own (the sandbox holds no other
        file of the grader). What it reports is only shown, never graded."""
        import types

        module = types.ModuleType("grader_memtrace")
        sys.modules["grader_memtrace"] = module  # dataclasses look their module up
        try:
            exec(compile(source, "<grader memtrace>", "exec"), module.__dict__)
        finally:
            del sys.modules["grader_memtrace"]
        self.memtrace = module

    # -- loading
    def load(self) -> dict:
        job = self.job
        import numpy  # noqa: F401
        from numba import cuda

        if self.gpu:
            cuda.current_context()  # creates the context before any learner code exists
            from cuda.bindings import driver  # noqa: F401
        libs = job.get("libraries", [])
        for lib in libs:  # imported now, so the guards can cover them
            try:
                __import__(lib)
            except Exception:  # noqa: BLE001 - a library missing here is reported when used
                pass
        if "triton" in sys.modules:
            import triton.runtime.autotuner  # noqa: F401 - its heuristics and hooks take learner callables
            import triton.runtime.jit  # noqa: F401 - so do a kernel's pre-run hooks

            with contextlib.suppress(ImportError):
                import triton.runtime.interpreter  # noqa: F401
            guard_triton_callbacks()
        if job.get("memtrace") and not self.gpu:
            self.load_memtrace(job["memtrace"])
        if job.get("sim_warps") and not self.gpu:
            # warp shuffles and syncwarp for Numba's simulator (the grader's sim_warps.py, sent as source)
            _grader_module(job["sim_warps"], "sim_warps")["patch_simulator"]()
        if job.get("sim_memory") and not self.gpu and not job.get("trusted"):
            # the learner's device arrays: opaque, element access from a kernel's own threads only, every
            # access checked for races and bounds (the grader's sim_memory.py, sent as source)
            self.sim_memory = install_sim_memory(_grader_module(job["sim_memory"], "sim_memory")["install"])
        if job.get("triton_compat") and not self.gpu and "triton" in sys.modules:
            # Triton's interpreter with NumPy 2.4 (the grader's triton_compat.py, sent as source)
            _grader_module(job["triton_compat"], "triton_compat")["patch_interpreter"]()
        if job.get("triton_guard") and not self.gpu and "triton" in sys.modules and not job.get("trusted"):
            # Triton's interpreter: the learner's rewritten kernels stay the learner's, blocks show no
            # data, loads and stores stay inside the launch's tensors (the grader's triton_guard.py)
            self.triton_guard = install_triton_guard(_grader_module(job["triton_guard"], "triton_guard")["install"])
        if job.get("trusted"):  # the lab's own reference implementations (never sandboxed)
            import importlib

            module = importlib.import_module(f"autograder.labs.{job['trusted']}")
            for ex in module.LAB.exercises:
                if ex.baseline is not None:
                    self.functions[ex.name] = ex.baseline
            self.functions["__null__"] = null_call(self.gpu)
            self.namespace = {}
            return {"ok": True}
        guard_numba_arrays(simulator=not self.gpu)
        if "cupy" in sys.modules and self.gpu:
            self.cupy_class = guarded_cupy_class(sys.modules["cupy"])
        install_function_guards(job.get("patterns", []))
        if "torch" in sys.modules:
            guard_torch_mode_switches()
        GUARD.rules = job.get("load_rules", {})
        GUARD.exercise = "(loading your code)"
        sys.addaudithook(_audit)
        if job.get("engine"):
            import types

            engine = types.ModuleType("engine")
            exec(compile(job["engine"], "<lab engine>", "exec"), engine.__dict__)
            self.namespace["engine"] = engine
        try:
            exec(compile(job.get("setup", ""), "<lab setup>", "exec"), self.namespace)
        except BaseException as exc:  # noqa: BLE001 - the lab's own setup: not the learner's fault
            return {"ok": False, "error": f"the lab's setup failed here: {type(exc).__name__}: {exc}"}
        # From here on the guards stay on: learner code can run at any time (a destructor, a
        # thread), and the guards judge the caller, not the moment.
        # Entry functions first: they bind the library functions they judge with before any
        # learner cell could replace them.
        for name, source in (job.get("entries") or {}).items():
            self.functions[name] = entry_function(source, name, self.namespace)
        self.entries = set(job.get("entries") or {})
        self.seal = ModuleSeal()
        if self.entries:
            self.seal.protect_all()
        if self.chan is not None:  # the libraries are in: the learner's time limit starts with the cells
            self.chan.send({"ready": "libraries"})
        GUARD.active = True
        return {"ok": True, "cell_errors": self.run_cells(job["cells"])}

    def run_cells(self, cells: list[dict]) -> list[dict]:
        """Run the submission's cells in order, each on its own: a cell that fails is reported
        (with its line) and the next one runs. What a failed cell would have defined raises, when
        used, an error that names that cell."""
        import linecache

        errors = []
        for cell in cells:
            name = cell["filename"]
            CELL_NAMES.add(name)
            linecache.cache[name] = (len(cell["code"]), None, cell["code"].splitlines(True), name)
            try:
                code = compile(cell["code"], name, "exec")
            except SyntaxError as exc:
                line = (exc.text or "").strip()
                error = f"{name}: SyntaxError at line {exc.lineno}: {exc.msg}" + (f": {line}" if line else "")
            except ValueError as exc:  # e.g. a null byte in the source
                error = f"{name} cannot be compiled: {exc}"
            else:
                GUARD.add_code(code)
                try:
                    exec(code, self.namespace)
                    continue
                except BaseException as exc:  # noqa: BLE001 - any failure is a grade
                    error = f"{name} failed when run: " + learner_traceback(exc, GUARD.code_ids)
            errors.append({"exercise": cell.get("exercise"), "cell": name, "error": error[:TEXT]})
            for defined in cell.get("defines", []):
                if defined not in self.namespace:
                    self.namespace[defined] = FromFailedCell(defined, name)
        return errors

    # -- arrays
    def build(self, desc: dict, backend: str, private: bool = False):
        """One argument as the function receives it, from the judge's description. ``private``
        (timed calls): host arrays are copied into memory of this process's own, pageable or
        page-locked, as a learner's own arrays would be (shared memory behaves differently)."""
        if desc["kind"] == "value":
            return decode_value(desc["value"])
        import numpy as np

        shape, dtype = tuple(desc["shape"]), np.dtype(desc["dtype"])
        where = desc.get("where", "device")
        if where in ("host", "pinned") or not self.gpu:
            view = self.mem.host_view(desc["chunk"], desc["offset"], shape, dtype)
            if private and self.gpu and where in ("host", "pinned"):
                if where == "host":
                    return np.array(view)
                from numba import cuda

                own = cuda.pinned_array(shape, dtype=dtype)
                own[...] = view
                return own
            if where == "pinned" and self.gpu:
                self._pin(view)
            if where in ("host", "pinned"):
                # in the simulator an object that uploads but does no host maths (on a GPU, NumPy's own)
                return view if self.sim_memory is None else self.sim_memory.host_array(view)
            if backend in ("torch", "triton"):
                import torch

                return torch.from_numpy(view)
            if self.sim_memory is not None:
                return self.sim_memory.array(view, desc.get("name") or "an argument", bool(desc.get("fresh")))
            from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

            return FakeCUDAArray(view)
        ptr = self.mem.device_ptr(desc["chunk"], desc["offset"])
        if backend == "cupy":
            import cupy as cp

            mem = cp.cuda.UnownedMemory(ptr, max(dtype.itemsize * int(np.prod(shape)), 1), self)
            arr = cp.ndarray(shape, dtype, cp.cuda.MemoryPointer(mem, 0))
            return arr.view(self.cupy_class) if self.cupy_class is not None else arr
        from numba import cuda

        iface = {"shape": shape, "typestr": dtype.str, "data": (ptr, False), "version": 3, "strides": None}
        arr = cuda.from_cuda_array_interface(iface, owner=None, sync=False)
        if backend in ("torch", "triton"):
            import torch

            return torch.as_tensor(arr, device="cuda")
        return arr

    def _pin(self, view) -> None:
        from cuda.bindings import driver as cu

        if view.nbytes and all(v.ctypes.data != view.ctypes.data for v in self.pinned):
            _ok(cu.cuMemHostRegister(view.ctypes.data, view.nbytes, 0))
            self.pinned.append(view)

    def _unpin(self) -> None:
        from cuda.bindings import driver as cu

        for v in self.pinned:
            cu.cuMemHostUnregister(v.ctypes.data)
        self.pinned = []

    def synchronize(self) -> None:
        if self.gpu:
            from cuda.bindings import driver as cu

            _ok(cu.cuCtxSynchronize())

    def function(self, name: str):
        fn = self.functions.get(name) or self.namespace.get(name)
        if fn is None or not callable(fn):
            raise LookupError(f"no function named '{name}' was defined")
        return fn

    def enter(self, msg: dict) -> None:
        GUARD.rules = msg.get("rules", {})
        GUARD.exercise = msg.get("exercise", "")

    def prepared(self, msg: dict):
        """(the exercise's function, '') ready to call under its rules, or (None, why not)."""
        try:
            fn = self.function(msg["exercise"])
        except LookupError as exc:
            return None, str(exc)
        changed = self.seal.changed() if msg["exercise"] in self.entries and self.seal is not None else []
        if changed:  # the entries judge with torch's own functions (opcheck, compile, autograd)
            return None, (f"the submission changed torch's own functions the grader checks with "
                          f"({', '.join(changed[:3])}): the operator cannot be checked")
        problem = signature_problem(fn, msg.get("names", []))
        if problem:
            return None, problem
        self.enter(msg)
        return fn, ""

    # -- one correctness call
    def call(self, msg: dict) -> dict:
        fn, problem = self.prepared(msg)
        if fn is None:
            return {"ok": False, "error": problem}
        faults: list[str] = []
        self.barrier_problem()  # forget what an earlier call left
        try:
            args = [self.build(d, msg["backend"]) for d in msg["args"]]
            private = self._private(args, msg) if self.sanitize and self.gpu else []
            for i, copy in private:
                args[i] = copy[0]
            leaks = _Leaks() if msg.get("check_leaks") and self.gpu else None
            tracer = self.memtrace.trace() if msg.get("profile") and self.memtrace is not None else None
            if tracer is not None:
                with tracer:
                    if self.sim_memory is not None:
                        self.sim_memory.tap(tracer.tap)
                    try:
                        self._run(fn, args, leaks)
                    finally:
                        if self.sim_memory is not None:
                            self.sim_memory.tap(None)
            elif msg.get("profile") == "nsight" and self.gpu:
                with _profiled_region(self):  # under Nsight Compute: only this call's kernels
                    self._run(fn, args, leaks)
            else:
                self._run(fn, args, leaks)
            self.synchronize()
            self._copy_back(private)
            problem = self.walls_problem()
            if problem:
                return {"ok": False, "error": problem}
            if leaks is not None and leaks.leaked():
                faults.append(f"leaked {leaks.leaked():,} bytes of device memory: every "
                              "cupy.cuda.runtime.malloc needs a matching free before the function returns")
            for i, d in enumerate(msg["args"]):
                if d.get("where") == "host" and self.gpu and _registered(args[i]):
                    faults.append(f"left the host array '{d.get('name', i)}' page-locked (registered): unregister "
                                  "it before returning (the cuda.pinned context manager does this for you)")
        except BaseException as exc:  # noqa: BLE001 - learner errors are grades
            return {"ok": False, "error": self.walls_problem() or self.describe(exc, msg)}
        finally:
            self._unpin()
        reply = {"ok": True, "faults": faults}
        if tracer is not None:
            try:
                reply["profile"] = self.memtrace.profile_of(tracer.report())
            except Exception as exc:  # noqa: BLE001 - a profile that fails is left out, the call stands
                reply["profile"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        return reply

    def walls_problem(self) -> str:
        """What the simulator's walls found in this call ('' if nothing): a barrier divergence first.
        Each wall is asked every time, so that nothing it found is left to a later call's verdict."""
        barrier, memory = self.barrier_problem(), self.memory_problem()
        return barrier or memory

    def barrier_problem(self) -> str:
        """A barrier divergence (simulator) since the last time asked, or ''."""
        return self.barriers.problem() if self.barriers is not None else ""

    def memory_problem(self) -> str:
        """A race, an out-of-bounds or uninitialised access, or an array used outside its kernel
        (simulator) since the last time asked, or ''."""
        found = [g.problem() for g in (self.sim_memory, self.triton_guard) if g is not None]
        return "; ".join(f for f in found if f)

    def _private(self, args, msg) -> list:
        """Under compute-sanitizer: each device array copied into an allocation of its exact
        size, so that the tool sees an access one element past the end."""
        from numba import cuda

        out = []
        for i, (a, d) in enumerate(zip(args, msg["args"])):
            if d["kind"] != "array" or d.get("where", "device") != "device" or not hasattr(a, "copy_to_host") \
                    and not hasattr(a, "data_ptr") and not hasattr(a, "__cuda_array_interface__"):
                continue
            shared = cuda.as_cuda_array(a)
            own = cuda.device_array(shared.shape, shared.dtype)
            own.copy_to_device(shared)
            if msg["backend"] == "cupy":
                import cupy as cp

                own_view = cp.asarray(own)
            elif msg["backend"] in ("torch", "triton"):
                import torch

                own_view = torch.as_tensor(own, device="cuda")
            else:
                own_view = own
            out.append((i, (own_view, own, shared)))
        return out

    @staticmethod
    def _copy_back(private) -> None:
        for _, (_, own, shared) in private:
            shared.copy_to_device(own)

    def _run(self, fn, args, leaks=None) -> None:
        with torch_math_mode() if GUARD.rules.get("tensor_math") else contextlib.nullcontext():
            if leaks is not None:
                with leaks:
                    fn(*args)
            else:
                fn(*args)

    def describe(self, exc: BaseException, msg: dict) -> str:
        names = ", ".join(msg.get("names", []))
        if isinstance(exc, ForbiddenCall) or any(type(exc) is v for v in ENTRY_VERDICTS):
            return str(exc)
        if msg.get("exercise") in ENTRY_NAMES:  # the grader's function called the learner's registration
            return f"{msg['exercise']}: your code raised " + learner_traceback(exc, GUARD.code_ids)
        return f"{msg['exercise']}({names}) raised " + learner_traceback(exc, GUARD.code_ids)

    # -- a policy decision
    def policy(self, msg: dict) -> dict:
        import operator

        fn, problem = self.prepared(msg)
        if fn is None:
            return {"ok": False, "error": problem}
        try:
            answer = fn(*[decode_value(a) for a in msg["args"]])
            try:
                if isinstance(answer, bool):
                    raise TypeError
                value = [int(k) for k in answer] if isinstance(answer, (list, tuple, range)) \
                    else operator.index(answer)
            except (TypeError, ValueError):
                raise TypeError(f"{msg['exercise']} must return an int or a list of ints, not {answer!r}"[:300]) from None
        except BaseException as exc:  # noqa: BLE001
            return {"ok": False, "error": self.describe(exc, msg)}
        return {"ok": True, "value": value}

    # -- a timed batch: calls queued behind the judge's flag, then this side's flags after them
    def queue(self, msg: dict) -> str:
        """Queue the calls (behind the GO flag when gated), then raise DONE; '' or an error."""
        from cuda.bindings import driver as cu

        self.enter(msg)
        seq = msg["seq"]
        flags = msg["flags"]
        go = self.mem.device_ptr(flags["chunk"], flags["go"])
        legacy = cu.CUstream(0)
        error = ""
        gated = msg.get("gated", True)
        fn = sets = None
        try:
            fn = self.function(msg["exercise"])
            sets = [[self.build(d, msg["backend"], private=True) for d in args] for args in msg["sets"]]
            _ok(cu.cuStreamWaitValue32(legacy, cu.CUdeviceptr(go), seq,
                                       cu.CUstreamWaitValue_flags.CU_STREAM_WAIT_VALUE_GEQ))
            if gated:
                for args in sets:
                    self._run(fn, args)
        except BaseException as exc:  # noqa: BLE001
            error = self.describe(exc, msg)
        if gated or error:
            self._done(msg)
        self.pending = (msg, error, None if (gated or error) else (fn, sets))
        return error

    def go_live(self) -> None:
        """Calls timed as launched (launch costs, copies from the host): wait here, on the host,
        for the judge's flag (the clock is running by then), then make them."""
        from cuda.bindings import driver as cu

        msg, error, live = self.pending
        if live is None:
            return
        fn, sets = live
        try:
            _ok(cu.cuStreamSynchronize(cu.CUstream(0)))  # returns once the GO flag is up
            for args in sets:
                self._run(fn, args)
        except BaseException as exc:  # noqa: BLE001
            error = self.describe(exc, msg)
        self._done(msg)
        self.pending = (msg, error, None)

    def _done(self, msg: dict) -> None:
        from cuda.bindings import driver as cu

        flags, seq, legacy = msg["flags"], msg["seq"], cu.CUstream(0)
        done = self.mem.device_ptr(flags["chunk"], flags["done"])
        _ok(cu.cuStreamWriteValue32(legacy, cu.CUdeviceptr(done), seq, 0))
        if self.local:  # in the judge's own process: no device-wide wait (the judge's stream waits too)
            synced = self.mem.device_ptr(flags["chunk"], flags["synced"])
            _ok(cu.cuStreamWriteValue32(legacy, cu.CUdeviceptr(synced), seq, 0))

    def finish(self) -> str:
        """Wait for the device (all streams), then raise SYNCED; '' or an error."""
        from cuda.bindings import driver as cu

        self.go_live()
        msg, error, _ = self.pending
        try:
            if self.local:
                _ok(cu.cuStreamSynchronize(cu.CUstream(0)))
            else:
                self.synchronize()
                flags = msg["flags"]
                synced = self.mem.device_ptr(flags["chunk"], flags["synced"])
                _ok(cu.cuStreamWriteValue32(cu.CUstream(0), cu.CUdeviceptr(synced), msg["seq"], 0))
                self.synchronize()
        except BaseException as exc:  # noqa: BLE001
            error = error or f"a CUDA error after the calls: {exc}"[:TEXT]
        finally:
            self._unpin()
        return error

    def warm(self, msg: dict) -> dict:
        """Calls before timing (compiling, loading modules): errors are reported, nothing checked."""
        try:
            fn = self.function(msg["exercise"])
            self.enter(msg)
            for args in msg["sets"]:
                for _ in range(msg.get("repeat", 1)):
                    self._run(fn, [self.build(d, msg["backend"]) for d in args])
            self.synchronize()
        except BaseException as exc:  # noqa: BLE001
            return {"ok": False, "error": self.describe(exc, msg)}
        finally:
            self._unpin()
        return {"ok": True}


def null_call(gpu: bool):
    """The grader's calibration call: one tiny kernel (the switch between processes is measured
    with it and subtracted from every timed batch)."""
    from numba import cuda

    @cuda.jit
    def null_kernel():
        pass

    def null():
        null_kernel[1, 1]()

    return null


@contextlib.contextmanager
def _profiled_region(runner):
    """The kernels launched inside are the ones a profiler started with --profile-from-start off
    profiles: everything before (loading, the judge's own work) is left out."""
    from cuda.bindings import driver as cu

    runner.synchronize()
    cu.cuProfilerStart()
    try:
        yield
    finally:
        try:
            runner.synchronize()
        finally:
            cu.cuProfilerStop()


class _Leaks:
    """Device memory taken with cupy.cuda.runtime.malloc during the call and not freed."""

    def __init__(self, runtime=None) -> None:
        if runtime is None:
            import cupy

            runtime = cupy.cuda.runtime
        self.rt = runtime
        self.live: dict[int, int] = {}
        self.saved: dict = {}

    def __enter__(self):
        rt, live = self.rt, self.live
        self.saved = {n: getattr(rt, n) for n in ("malloc", "mallocManaged", "free")}
        saved = self.saved

        def tracked(alloc):
            def wrapper(size, *a, **k):
                ptr = alloc(size, *a, **k)
                live[int(ptr)] = int(size)
                return ptr
            return wrapper

        def free(ptr):
            saved["free"](ptr)
            live.pop(int(ptr), None)

        rt.malloc, rt.mallocManaged, rt.free = tracked(saved["malloc"]), tracked(saved["mallocManaged"]), free
        return self

    def __exit__(self, *exc):
        for n, f in self.saved.items():
            setattr(self.rt, n, f)
        return False

    def leaked(self) -> int:
        return sum(self.live.values())


def _registered(arr) -> bool:
    """True if a host array was left page-locked; then unregister it."""
    try:
        import numpy as np

        if not isinstance(arr, np.ndarray) or arr.size == 0:
            return False
        from cuda.bindings import driver as cu

        err, _flags = cu.cuMemHostGetFlags(arr.ctypes.data)
        if int(err) != 0:
            return False
        cu.cuMemHostUnregister(arr.ctypes.data)
        return True
    except Exception:  # noqa: BLE001
        return False


def decode_value(v):
    """Values from the judge: JSON, with tuples marked so they arrive as tuples."""
    if isinstance(v, dict) and "__tuple__" in v:
        return tuple(decode_value(x) for x in v["__tuple__"])
    if isinstance(v, list):
        return [decode_value(x) for x in v]
    if isinstance(v, dict):
        return {k: decode_value(x) for k, x in v.items()}
    return v


def signature_problem(fn, names) -> str:
    """A plain-words message when fn cannot take the contract's arguments."""
    import inspect

    try:
        inspect.signature(fn).bind(*names)
    except TypeError:
        try:
            have = str(inspect.signature(fn))
        except (TypeError, ValueError):
            return ""
        return f"{getattr(fn, '__name__', 'the function')} must take ({', '.join(names)}); yours takes {have}"
    except ValueError:
        return ""
    return ""


def main(fd: int, uid: int) -> None:
    if os.getuid() == 0 and uid > 0:  # bubblewrap ran as root: become the sandbox's own user
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    chan = Channel(socket.socket(fileno=fd))
    job = chan.recv()
    GUARD.debug = bool(job.get("debug_refusals"))
    if job.get("debug_stacks"):  # the judge's GRADER_DEBUG_STACKS: stacks into the printed output
        import faulthandler

        faulthandler.dump_traceback_later(float(job["debug_stacks"]), repeat=True)
    # This file runs as __main__: `import __main__` (or a module that imports it) would hand learner
    # code the guards and the barrier check themselves. It gets an empty module instead.
    import types

    sys.modules["__main__"] = types.ModuleType("__main__")
    runner = Runner(chan, job)
    try:
        hello = runner.load()
    except BaseException as exc:  # noqa: BLE001 - the grader's side failed to start
        hello = {"ok": False, "error": f"the grading process could not start: {type(exc).__name__}: {exc}"[:TEXT]}
    chan.send(hello)
    if not hello.get("ok"):
        return
    while True:
        msg = chan.recv()
        op = msg.get("op")
        if op == "exit":
            return
        if op == "map":
            runner.mem.map(msg["chunk"], msg["size"], msg["kind"], chan.take_fd())
            chan.send({"ok": True})
        elif op == "unmap":
            for cid in msg["chunks"]:
                runner.mem.unmap(cid)
            chan.send({"ok": True})
        elif op == "call":
            chan.send(runner.call(msg))
        elif op == "policy":
            chan.send(runner.policy(msg))
        elif op == "warm":
            chan.send(runner.warm(msg))
        elif op == "batch":
            runner.queue(msg)
            chan.send({"queued": msg["seq"]})
            runner.go_live()
            error = runner.finish()
            chan.send({"finished": msg["seq"], "ok": not error, "error": error})


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 0)
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        # The simulator holds nothing that outlives the process (on a GPU, the driver and the tools that
        # watch it end with a normal exit): leave without tearing the interpreter down, a tenth of the
        # runner's own time, which a class graded in simulator mode pays per submission.
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - a stream the learner's code replaced or closed
                pass
        os._exit(0)
