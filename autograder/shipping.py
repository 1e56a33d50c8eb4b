"""The source of a learner's function and what it uses, to define it again in another process.

``check(fn, profile=True)`` on a GPU runs the function under Nsight Compute, which can only
profile a process it starts. So the function is sent as source: its own, that of the kernels
and functions it calls (found through the names its code uses, recursively), imports for the
modules and library objects it names, and simple constants by value. A name that cannot be
sent is listed in a comment; if the function needs it, the profiled run says so.
"""
from __future__ import annotations

import builtins
import dis
import inspect
import math
import sys
import textwrap
import types

SIMPLE = (int, float, bool, str, bytes, type(None), complex)
LIBRARIES = ("numpy", "math", "cmath", "numba", "numba.cuda", "cupy", "torch")


def _code_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def _stored_globals(code: types.CodeType) -> set[str]:
    """Globals the code assigns (``global cache; cache = ...``): a cache the function fills itself."""
    names = {i.argval for i in dis.get_instructions(code) if i.opname in ("STORE_GLOBAL", "DELETE_GLOBAL")}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _stored_globals(const)
    return names


def _python_function(obj):
    """The Python function behind a plain function or a Numba dispatcher, else None."""
    if isinstance(obj, types.FunctionType):
        return obj
    py = getattr(obj, "py_func", None)
    return py if isinstance(py, types.FunctionType) else None


def _simple(value) -> bool:
    if isinstance(value, SIMPLE):
        return True
    if type(value).__module__ == "numpy" and hasattr(value, "item") and getattr(value, "shape", None) == ():
        return isinstance(value.item(), SIMPLE)  # a NumPy scalar, such as numpy.float32(-inf)
    if isinstance(value, (tuple, frozenset, list, set)):
        return len(value) <= 10_000 and all(_simple(v) for v in value)
    if isinstance(value, dict):
        return len(value) <= 10_000 and all(_simple(k) and _simple(v) for k, v in value.items())
    return False


def _literal(value) -> str:
    """Python source that evaluates to ``value`` (a simple value, or a NumPy scalar)."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    if isinstance(value, complex) and not (math.isfinite(value.real) and math.isfinite(value.imag)):
        return f"complex({str(value)!r})"
    if type(value).__module__ == "numpy" and hasattr(value, "item") and hasattr(value, "dtype"):
        return f"numpy.{type(value).__name__}({_literal(value.item())})"
    if isinstance(value, (tuple, list, set, frozenset)):
        items = ", ".join(_literal(v) for v in value)
        if isinstance(value, tuple):
            return f"({items}{',' if len(value) == 1 else ''})"
        return {list: f"[{items}]", set: f"{{{items}}}" if value else "set()",
                frozenset: f"frozenset([{items}])"}[type(value)]
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_literal(k)}: {_literal(v)}" for k, v in value.items()) + "}"
    return repr(value)


def _importable(value, name: str) -> str | None:
    """An import line that gives ``value`` under ``name``, if a library holds it."""
    if isinstance(value, types.ModuleType):
        mod = value.__name__
        return f"import {mod}" if mod == name else f"import {mod} as {name}"
    module = getattr(value, "__module__", None)
    qual = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
    if module and module != "__main__" and qual and "<" not in qual and "." not in qual:
        lib = sys.modules.get(module)
        if lib is not None and getattr(lib, qual, None) is value:
            return f"from {module} import {qual}" + (f" as {name}" if qual != name else "")
    for lib_name in LIBRARIES:  # objects such as numba.float32 or numpy.float32 under their public name
        lib = sys.modules.get(lib_name)
        if lib is None:
            continue
        for attr in (name, qual):
            if attr and getattr(lib, attr, None) is value:
                return f"from {lib_name} import {attr}" + (f" as {name}" if attr != name else "")
    return None


def _raw_kernel(value, name: str) -> str | None:
    """CuPy's RawKernel and RawModule, built again from their source."""
    kind = type(value).__name__
    if type(value).__module__.startswith("cupy") and kind in ("RawKernel", "RawModule"):
        code, options = getattr(value, "code", None), tuple(getattr(value, "options", ()) or ())
        if not isinstance(code, str):
            return None
        if kind == "RawKernel":
            return f"{name} = cupy.RawKernel({code!r}, {value.name!r}, options={options!r})"
        return f"{name} = cupy.RawModule(code={code!r}, options={options!r})"
    return None


def source_of(fn) -> str:
    """Source defining ``fn`` (under its own name) and everything it was found to use."""
    imports: dict[str, str] = {}
    constants: dict[str, str] = {}
    functions: dict[str, str] = {}
    skipped: list[str] = []
    todo = [(getattr(fn, "__name__", None) or _python_function(fn).__name__, fn)]
    seen: set[int] = set()
    while todo:
        name, obj = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        py = _python_function(obj)
        if py is None:
            raise TypeError(f"cannot send {name!r} ({type(obj).__name__}) to another process: not a function")
        try:
            src = textwrap.dedent(inspect.getsource(py))
        except (OSError, TypeError):
            raise TypeError(f"the source of {name!r} cannot be found (was it defined with exec?)") from None
        functions[name] = src if py.__name__ == name else src + f"\n{name} = {py.__name__}\n"
        glob = py.__globals__
        closure = dict(zip(py.__code__.co_freevars, (c.cell_contents for c in (py.__closure__ or ()))))
        stored = _stored_globals(py.__code__)
        for used in sorted(_code_names(py.__code__) | set(closure)):
            if used in functions or used in imports or used in constants:
                continue
            if used in closure:
                value = closure[used]
            elif used in glob:
                value = glob[used]
            else:
                continue  # a builtin, or an attribute name
            if value is getattr(builtins, used, object()):
                continue
            if used in stored:  # its own cache: it starts empty in the new process, as in the notebook
                empty = type(value).__name__ + "()" if type(value) in (dict, list, set) else "None"
                constants[used] = f"{used} = {empty}  # filled by {name} when it runs"
                continue
            line = _importable(value, used)
            if line is not None and not (_python_function(value) and getattr(value, "__module__", "") == "__main__"):
                imports[used] = line
            elif _python_function(value) is not None:
                todo.append((used, value))
            elif _simple(value):
                constants[used] = f"{used} = {_literal(value)}"
                if "numpy." in constants[used]:
                    imports.setdefault("numpy", "import numpy")
            elif _raw_kernel(value, used):
                imports.setdefault("cupy", "import cupy")
                constants[used] = _raw_kernel(value, used)
            else:
                skipped.append(f"{used} ({type(value).__name__})")
    parts = list(dict.fromkeys(imports.values())) + list(constants.values()) + list(reversed(functions.values()))
    if skipped:
        parts.append("# not sent (the profiled run fails if the function needs them): " + ", ".join(skipped))
    return "\n\n".join(parts) + "\n"
