"""Turn a submission file into the code the grader runs, and check it statically.

From a notebook only the answer cells (cell metadata ``autograder.answer``) are
taken, after the lab's declared setup; IPython magics and shell escapes are
commented out. A ``.py`` file is taken whole. Nothing here executes learner code.
"""
from __future__ import annotations

import ast
import fnmatch
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

ANSWER_KEY = "autograder"


@dataclass
class Cell:
    """One piece of the submission that runs on its own: a notebook's answer cell, or a part of a
    .py file between cell markers. A cell that fails costs its own exercise, not the others."""
    code: str
    filename: str  # what messages call it, e.g. "the answer cell for saxpy"; line numbers count within it
    exercise: str | None  # the exercise it answers (None: a part of a .py that answers none by name)
    defines: list[str] = field(default_factory=list)  # its top-level names, so a failure can be traced

    def as_job(self) -> dict:
        return {"code": self.code, "filename": self.filename, "exercise": self.exercise, "defines": self.defines}


@dataclass
class Source:
    code: str  # every cell that parses, joined: for the static checks
    filename: str
    answers: dict[str, str]  # exercise name -> its answer cell(s), for per-exercise checks
    problem: str = ""  # why the file could not be read, if it could not
    cells: list[Cell] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)  # notebook-only lines left out, for the feedback
    unparsed: set[str] = field(default_factory=set)  # exercises whose own cell does not parse


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


# Lines that only make sense in the learner's notebook: the check() calls, the checker and the
# course's own setup. Left in an answer cell they would fail in the grader (which has no check);
# they are left out instead, as a notebook-only line.
NOTEBOOK_ONLY_CALLS = {"check", "checker", "course.setup", "setup", "display", "plt.show"}
NOTEBOOK_ONLY_MODULES = {"autograder", "course", "IPython"}


def _call_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call):
        return _dotted(node.func)
    return None


def _notebook_only(stmt: ast.stmt) -> bool:
    if isinstance(stmt, ast.Expr):
        return _call_name(stmt.value) in NOTEBOOK_ONLY_CALLS
    if isinstance(stmt, ast.Assign):
        return _call_name(stmt.value) in ("checker", "autograder.checker")
    if isinstance(stmt, ast.Import):
        return all(a.name.split(".")[0] in NOTEBOOK_ONLY_MODULES for a in stmt.names)
    if isinstance(stmt, ast.ImportFrom):
        return (stmt.module or "").split(".")[0] in NOTEBOOK_ONLY_MODULES and not stmt.level
    return False


def drop_notebook_only(code: str) -> tuple[str, list[str]]:
    """The code with notebook-only top-level lines replaced by ``pass`` (line numbers stay), and
    those lines. Code that does not parse is returned as it is: running it reports the error."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return code, []
    lines = code.split("\n")
    dropped = []
    for stmt in tree.body:
        if _notebook_only(stmt):
            first, last = stmt.lineno - 1, (stmt.end_lineno or stmt.lineno) - 1
            dropped.append(lines[first].strip())
            lines[first] = "pass  # left out for grading (only for the notebook)"
            for k in range(first + 1, last + 1):
                lines[k] = ""
    return "\n".join(lines), dropped


_PY_CELL_MARK = ("# %%", "# In[")  # how Jupyter, VS Code and Spyder mark cells in a .py


def _py_cells(text: str, filename: str, exercises) -> list[Cell]:
    """A .py file's parts: split at cell markers where it has them, else the whole file. A part
    answers the exercise whose function it defines."""
    parts, current = [], []
    for line in text.splitlines(keepends=True):
        if line.lstrip().startswith(_PY_CELL_MARK) and any(x.strip() for x in current):
            parts.append(current)
            current = []
        current.append(line)
    parts.append(current)
    if len(parts) == 1:
        return [Cell(text, filename, None)]
    cells, line = [], 1
    for k, part in enumerate(parts, 1):
        # Blank lines first, so that line numbers in messages are the file's own.
        code = "\n" * (line - 1) + "".join(part)
        cells.append(Cell(code, f"{filename} (cell {k}, from line {line})", _answers(code, exercises)))
        line += len(part)
    return cells


def defined_names(code: str) -> list[str]:
    """The names a cell defines at top level; for code that does not parse, its lines that
    start with a def, a class or an assignment."""
    try:
        return sorted(_top_level(ast.parse(code)))
    except (SyntaxError, ValueError):
        found = re.findall(r"^(?:(?:def|class)\s+(\w+)|(\w+)\s*=[^=])", code, re.M)
        return sorted({a or b for a, b in found})


def _answers(code: str, exercises) -> str | None:
    """The exercise whose function this code defines at top level."""
    defined = set(defined_names(code))
    return next((name for name in exercises or () if name in defined), None)


def load(path: Path, exercises=()) -> Source:
    """The submission's cells. ``exercises`` (names) tells which part of a .py answers which."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte-order mark is allowed, as Python allows it
    except (OSError, UnicodeDecodeError) as exc:
        return Source("", path.name, {}, f"could not read {path.name}: {exc}")
    if path.suffix == ".py":
        cells = _py_cells(text, path.name, exercises)
    elif path.suffix != ".ipynb":
        return Source("", path.name, {}, f"{path.name}: submissions must be .ipynb or .py files")
    else:
        try:
            nb = json.loads(text)
            raw = nb["cells"]
            if not isinstance(raw, list):
                raise TypeError("'cells' is not a list")
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            return Source("", path.name, {}, f"{path.name} is not a valid notebook: {str(exc)[:200]}")
        cells, seen = [], {}
        for cell in raw:
            name = answer_of(cell)
            if cell.get("cell_type") != "code" or not name:
                continue
            src = cell.get("source", "")
            src = "".join(x for x in src if isinstance(x, str)) if isinstance(src, list) else str(src)
            seen[name] = seen.get(name, 0) + 1
            label = f"the answer cell for {name}" + (f" (its part {seen[name]})" if seen[name] > 1 else "")
            cells.append(Cell(strip_magics(src), label, name))
        if not cells:
            return Source("", path.name, {}, f"{path.name} has no answer cells (were they deleted or copied "
                                             "into new cells? answers must stay in the marked cells)")
    ignored, parsed, answers, unparsed = [], [], {}, set()
    for cell in cells:
        cell.code, dropped = drop_notebook_only(cell.code)
        cell.defines = defined_names(cell.code)
        ignored += [f"{cell.filename}: {line}" for line in dropped]
        try:
            ast.parse(cell.code)
            parsed.append(f"# --- {cell.filename}\n{cell.code}\n")
        except (SyntaxError, ValueError):
            unparsed.add(cell.exercise)  # reported, with its line, when the cell is run
        if cell.exercise:
            answers[cell.exercise] = answers.get(cell.exercise, "") + cell.code + "\n"
    return Source("\n".join(parsed), path.name, answers, cells=cells, ignored=ignored, unparsed=unparsed)


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
    # private attributes the code itself defines (self._cache = ..., def _helper): its own, allowed on self/cls
    own_private = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)}
    own_private |= {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    for scope in scopes:
        for node in ast.walk(scope):
            line = getattr(node, "lineno", "?")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in DYNAMIC_CALLS:
                found.append(f"{node.func.id}() (line {line})")
            elif isinstance(node, ast.Name) and node.id in DYNAMIC_CALLS:
                found.append(f"{node.id} (line {line})")  # f = getattr; f(obj, name): the same call by another name
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
                elif a.startswith("_") and not a.startswith("__") and not (owner in ("self", "cls") and a in own_private):
                    found.append(f".{a}, a private attribute (line {line})")
    return sorted(set(found))
