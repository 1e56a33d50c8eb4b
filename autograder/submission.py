"""Turn a submission file into the code the grader runs, and check it statically.

From a notebook only the answer cells (cell metadata ``autograder.answer``) are
taken, after the lab's declared setup; IPython magics and shell escapes are
commented out. A ``.py`` file is taken whole. Nothing here executes learner code.
"""
from __future__ import annotations

import ast
import fnmatch
import json
from dataclasses import dataclass
from pathlib import Path

ANSWER_KEY = "autograder"


@dataclass
class Source:
    code: str
    filename: str
    answers: dict[str, str]  # exercise name -> its answer cell(s), for per-exercise checks
    problem: str = ""  # why the file could not be read, if it could not


def answer_of(cell) -> str | None:
    """The exercise an answer cell belongs to, or None (also for metadata of the wrong shape)."""
    if not isinstance(cell, dict):
        return None
    meta = cell.get("metadata")
    meta = meta.get(ANSWER_KEY) if isinstance(meta, dict) else None
    name = meta.get("answer") if isinstance(meta, dict) else None
    return name if isinstance(name, str) and name.isidentifier() else None


def strip_magics(code: str) -> str:
    lines = []
    for line in code.splitlines():
        stripped = line.lstrip()
        if stripped.startswith(("%", "!")):
            line = line[: len(line) - len(stripped)] + "pass  # removed for grading: " + stripped
        lines.append(line)
    return "\n".join(lines)


def load(path: Path) -> Source:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte-order mark is allowed, as Python allows it
    except (OSError, UnicodeDecodeError) as exc:
        return Source("", path.name, {}, f"could not read {path.name}: {exc}")
    if path.suffix == ".py":
        return Source(text, path.name, {})
    if path.suffix != ".ipynb":
        return Source("", path.name, {}, f"{path.name}: submissions must be .ipynb or .py files")
    try:
        nb = json.loads(text)
        cells = nb["cells"]
        if not isinstance(cells, list):
            raise TypeError("'cells' is not a list")
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        return Source("", path.name, {}, f"{path.name} is not a valid notebook: {str(exc)[:200]}")
    parts, answers = [], {}
    for i, cell in enumerate(cells):
        name = answer_of(cell)
        if cell.get("cell_type") != "code" or not name:
            continue
        src = cell.get("source", "")
        src = "".join(x for x in src if isinstance(x, str)) if isinstance(src, list) else str(src)
        src = strip_magics(src)
        parts.append(f"# --- answer cell {i} ({name})\n{src}\n")
        answers[name] = answers.get(name, "") + src + "\n"
    if not parts:
        return Source("", path.name, {}, f"{path.name} has no answer cells (were they deleted or copied "
                                         "into new cells? answers must stay in the marked cells)")
    return Source("\n".join(parts), path.name, answers)


# --------------------------------------------------------------------------- static checks
def _aliases(tree: ast.AST) -> dict[str, str]:
    """Local names bound by imports, mapped to the dotted names they stand for."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                names[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                names[a.asname or a.name] = f"{node.module}.{a.name}"
    return names


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    if parts:  # e.g. a call result's attribute: f().copy_to_host
        parts.append("?")
        return ".".join(reversed(parts))
    return None


def _top_level(tree: ast.Module) -> dict[str, list[ast.AST]]:
    """Module-level names and the statements that bind them: functions, classes, and
    assignments (a helper can be a lambda, an alias or an object)."""
    defs: dict[str, list[ast.AST]] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defs.setdefault(node.name, []).append(node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        defs.setdefault(n.id, []).append(node)
    return defs


def _reachable(tree: ast.Module, root: str) -> list[ast.AST]:
    """Everything the exercise's function can reach: the module-level functions, classes and
    assigned objects it names, and what they name in turn (methods and nested code included)."""
    defs = _top_level(tree)
    if root not in defs:
        return [tree]
    seen, todo, out = set(), [root], []
    while todo:
        name = todo.pop()
        if name in seen or name not in defs:
            continue
        seen.add(name)
        for node in defs[name]:
            out.append(node)
            for sub in ast.walk(node):
                if isinstance(sub, ast.Name) and sub.id in defs:
                    todo.append(sub.id)
    return out


def forbidden_uses(code: str, function: str, patterns) -> list[str]:
    """Dotted names in the function (and what it calls) that match a forbidden pattern."""
    if not patterns:
        return []
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []  # reported when the code is run
    aliases = _aliases(tree)
    deny = [p for p in patterns if not p.startswith("!")]
    allow = [p[1:] for p in patterns if p.startswith("!")]
    found = []
    for scope in _reachable(tree, function):
        # Only whole dotted names count: in cupy.cuda.runtime.memcpy, the prefix cupy.cuda is no use of its own.
        prefixes = {id(n.value) for n in ast.walk(scope) if isinstance(n, ast.Attribute)}
        for node in ast.walk(scope):
            names = []
            if isinstance(node, (ast.Attribute, ast.Name)) and id(node) not in prefixes:
                d = _dotted(node)
                if d:
                    head, _, rest = d.partition(".")
                    full = aliases.get(head, head) + ("." + rest if rest else "")
                    names.append(full)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                mod = node.module if isinstance(node, ast.ImportFrom) else None
                names += [f"{mod}.{a.name}" if mod else a.name for a in node.names]
            elif isinstance(node, (ast.BinOp, ast.AugAssign)) and isinstance(node.op, ast.MatMult):
                names.append("operator.matmul")  # a @ b: a library matrix product on arrays
            for full in names:
                for pat in deny:
                    hit = fnmatch.fnmatch(full, pat) or (pat.startswith("*.") and full.endswith(pat[1:]))
                    if hit and not any(fnmatch.fnmatch(full, ok) for ok in allow):
                        line = getattr(node, "lineno", "?")
                        found.append(f"{full} (line {line})")
    return sorted(set(found))


# --------------------------------------------------------------------------- dynamic constructs
# Ways to reach a function without naming it, to build code at run time, or to reach the
# grader's guards inside the process. An exercise that forbids calls forbids these too (in
# the function, what it reaches, and module-level code, which runs when the code is loaded).
DYNAMIC_CALLS = {"exec", "eval", "compile", "__import__", "getattr", "setattr", "delattr", "globals", "locals",
                 "vars", "breakpoint"}
DYNAMIC_MODULES = {"importlib", "ctypes", "_ctypes", "gc", "sys", "inspect", "builtins", "types", "marshal",
                   "pickle", "threading", "_thread", "concurrent", "multiprocessing", "subprocess", "os", "operator",
                   "code", "codeop", "dis", "runpy", "pty", "signal", "socket", "cffi", "weakref", "copyreg",
                   "pkgutil", "string", "traceback", "logging", "timeit", "faulthandler", "tracemalloc", "pdb", "bdb",
                   "autograder", "course", "__main__"}
# Attributes that reach stack frames, code and closures (and from there, everything).
INTROSPECTION = {"f_back", "f_globals", "f_locals", "f_builtins", "f_code", "tb_frame", "tb_next", "gi_frame",
                 "gi_code", "cr_frame", "ag_frame", "cell_contents", "co_consts", "co_code"}
DUNDERS_ALLOWED = {"__init__", "__name__", "__doc__", "__len__", "__call__", "__repr__", "__str__"}


def static_problems(code: str, function: str, patterns, policy: bool = False) -> list[str]:
    """Dynamic constructs in the code an exercise runs, for exercises that forbid calls."""
    if not patterns or policy:
        return []
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    scopes = _reachable(tree, function)
    scopes += [n for n in tree.body if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    found = []
    for scope in scopes:
        for node in ast.walk(scope):
            line = getattr(node, "lineno", "?")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in DYNAMIC_CALLS:
                found.append(f"{node.func.id}() (line {line})")
            elif isinstance(node, ast.Name) and node.id in ("__builtins__", "__import__", "__loader__", "__spec__"):
                found.append(f"{node.id} (line {line})")
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] in DYNAMIC_MODULES:
                        found.append(f"import {a.name} (line {line})")
            elif isinstance(node, ast.ImportFrom):
                if (node.module or "").split(".")[0] in DYNAMIC_MODULES or node.level:
                    found.append(f"from {'.' * node.level}{node.module or ''} import (line {line})")
                # e.g. `from rlcompleter import __main__`: a module's dunders are no library API
                found += [f"from {node.module} import {a.name} (line {line})" for a in node.names
                          if a.name.startswith("__") and a.name not in DUNDERS_ALLOWED]
            elif isinstance(node, ast.Attribute):
                a = node.attr
                owner = node.value.id if isinstance(node.value, ast.Name) else ""
                if a.startswith("__") and a.endswith("__") and a not in DUNDERS_ALLOWED:
                    found.append(f".{a} (line {line})")
                elif a in INTROSPECTION:
                    found.append(f".{a} (line {line})")
                elif a.startswith("_") and not a.startswith("__") and owner not in ("self", "cls"):
                    found.append(f".{a}, a private attribute (line {line})")
    return sorted(set(found))
