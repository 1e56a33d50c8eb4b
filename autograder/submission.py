"""Turn a submission file into the code the grader runs, and check it statically.

From a notebook only the answer cells (cell metadata ``autograder.answer``) are
taken, after the lab's declared setup; IPython magics and shell escapes are
commented out. A ``.py`` file is taken whole, split at its cell markers. Nothing here
executes learner code.

Everything here is linear in the size of the file (one parse of each cell, one walk of
each statement a check reads), and the grader runs it for each submission in a process of
its own with limits on time and memory (``load_and_check_bounded``): a file that is too
large or too deeply nested for the checks costs its own grade, with a message, and the
rest of the class is graded.
"""
from __future__ import annotations

import _string
import ast
import fnmatch
import json
import os
import re
import signal
import stat
import subprocess
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path

ANSWER_KEY = "autograder"

# What one submission may be, for the loader and the static checks. Far above any honest answer
# (a lab's solution is under 20 KB of code); the AST of the worst 256 KB of code takes ~0.2 GB.
MAX_FILE_BYTES = 32 << 20  # a notebook with its outputs and pictures
MAX_CODE_CHARS = 256 << 10  # the code graded: the answer cells, or the .py file
MAX_CELLS = 2000  # answer cells, or parts of a .py between cell markers
# The process that loads and checks one submission (load_and_check_bounded).
CHECK_SECONDS = 30.0
CHECK_MEMORY_BYTES = 1536 << 20


class Unusable(Exception):
    """Why a file cannot be graded at all: its message is the submission's, for every exercise."""


def _size(n: int) -> str:
    return f"{n >> 20} MB" if n >= 1 << 20 else f"{n >> 10} KB"


def too_large(name: str, why: str) -> str:
    return f"your file {name} is too large for the grader's checks: {why}"


def too_deep(name: str, why: str) -> str:
    return f"your file {name} is too deeply nested for the grader's checks: {why}"


def too_large_or_deep(name: str, why: str) -> str:
    return f"your file {name} is too large or too deeply nested for the grader's checks: {why}"


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
    code: str  # every cell that parses, joined: for reading, not for the static checks (see program)
    filename: str
    answers: dict[str, str]  # exercise name -> its answer cell(s), for per-exercise checks
    problem: str = ""  # why the file could not be read, if it could not
    cells: list[Cell] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)  # notebook-only lines left out, for the feedback
    unparsed: set[str] = field(default_factory=set)  # exercises whose own cell does not parse
    notes: list[str] = field(default_factory=list)  # malformed parts of the file, left out
    program: Program | None = field(default=None, repr=False, compare=False)  # the cells that parse, for the checks

    def as_json(self) -> dict:
        return {"code": self.code, "filename": self.filename, "answers": self.answers, "problem": self.problem,
                "cells": [asdict(c) for c in self.cells], "ignored": self.ignored,
                "unparsed": sorted(self.unparsed, key=str), "notes": self.notes}

    @classmethod
    def from_json(cls, d: dict) -> Source:
        return cls(str(d["code"]), str(d["filename"]), dict(d["answers"]), str(d["problem"]),
                   [Cell(**c) for c in d["cells"]], list(d["ignored"]), set(d["unparsed"]), list(d["notes"]))


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
        return _call_name(stmt.value) in ("checker", "autograder.checker", "course.setup")
    if isinstance(stmt, ast.Import):
        return all(a.name.split(".")[0] in NOTEBOOK_ONLY_MODULES for a in stmt.names)
    if isinstance(stmt, ast.ImportFrom):
        return (stmt.module or "").split(".")[0] in NOTEBOOK_ONLY_MODULES and not stmt.level
    return False


def _parse(code: str) -> ast.Module | None:
    """The code's tree, or None where it does not parse (running it reports the error). Input
    nested too deeply for Python's parser raises RecursionError or MemoryError: see Unusable."""
    try:
        return ast.parse(code)
    except (SyntaxError, ValueError):
        return None


_PARSER_NEWLINE = re.compile(r"\r\n|\r|\n")  # what ends a line for Python's parser (not a form feed)


def _drop_from(code: str, tree: ast.Module) -> tuple[str, list[str], list[ast.stmt]]:
    """``drop_notebook_only`` on a parsed cell: the code, the lines left out, the statements kept.
    A statement that shares a line with another (``x = 1; check(f)``) stays: blanking its line
    would drop the other."""
    lines = _PARSER_NEWLINE.split(code)  # numbered as the parser numbers them
    dropped, kept = [], []
    body = tree.body
    for k, stmt in enumerate(body):
        first, last = stmt.lineno - 1, (stmt.end_lineno or stmt.lineno) - 1
        alone = (k == 0 or (body[k - 1].end_lineno or 0) - 1 < first) and \
                (k + 1 == len(body) or body[k + 1].lineno - 1 > last)
        if not (alone and _notebook_only(stmt)):
            kept.append(stmt)
            continue
        dropped.append(lines[first].strip())
        lines[first] = "pass  # left out for grading (only for the notebook)"
        for j in range(first + 1, last + 1):
            lines[j] = ""
    return ("\n".join(lines) if dropped else code), dropped, kept


def drop_notebook_only(code: str) -> tuple[str, list[str]]:
    """The code with notebook-only top-level lines replaced by ``pass`` (line numbers stay), and
    those lines. Code that does not parse is returned as it is: running it reports the error."""
    tree = _parse(code)
    if tree is None:
        return code, []
    code, dropped, _ = _drop_from(code, tree)
    return code, dropped


_PY_CELL_MARK = ("# %%", "# In[")  # how Jupyter, VS Code and Spyder mark cells in a .py
# Blank lines padded before a .py's cells, in all, per character of the file (and a floor): within
# it every cell's line numbers are the file's own; a file of thousands of cells would otherwise
# grow with the square of its length.
PAD_PER_CHAR, PAD_FLOOR = 4, 1 << 20


def _py_parts(text: str) -> list[list[str]]:
    """A .py file's lines, split before each cell marker that follows some code."""
    parts, current, has_code = [], [], False
    for line in text.splitlines(keepends=True):
        if has_code and line.lstrip().startswith(_PY_CELL_MARK):
            parts.append(current)
            current, has_code = [], False
        current.append(line)
        has_code = has_code or bool(line.strip())
    parts.append(current)
    return parts


def _py_cells(text: str, filename: str) -> list[Cell]:
    """A .py file's parts: split at cell markers where it has them, else the whole file (which
    answers no exercise by name: where it fails, every exercise does). Which exercise a part
    answers is read when it is parsed (``_prepare``)."""
    parts = _py_parts(text)
    if len(parts) == 1:
        return [Cell(text, filename, None)]
    if len(parts) > MAX_CELLS:
        raise Unusable(too_large(filename, f"it has {len(parts)} cells (# %% markers); the grader takes at most "
                                           f"{MAX_CELLS}"))
    cells, line, pad_left = [], 1, PAD_PER_CHAR * len(text) + PAD_FLOOR
    for k, part in enumerate(parts, 1):
        if line - 1 <= pad_left:  # blank lines first, so that line numbers in messages are the file's own
            pad_left -= line - 1
            cells.append(Cell("\n" * (line - 1) + "".join(part), f"{filename} (cell {k}, from line {line})", None))
        else:
            cells.append(Cell("".join(part), f"{filename} (cell {k}, its line 1 is line {line} of the file)", None))
        line += len(part)
    return cells


def defined_names(code: str) -> list[str]:
    """The names a cell defines at top level; for code that does not parse, its lines that
    start with a def, a class or an assignment."""
    tree = _parse(code)
    if tree is not None:
        return sorted(_top_level(tree))
    found = re.findall(r"^(?:(?:def|class)[ \t]+(\w+)|(\w+)[ \t]*=[^=])", code, re.M)
    return sorted({a or b for a, b in found})


# --------------------------------------------------------------------------- reading the file
def _read_text(path: Path, limit: int, hint: str = "") -> str:
    """The file's text: a regular file (not a pipe or a device, which could be endless) of at
    most ``limit`` bytes, in UTF-8 (a byte-order mark is allowed, as Python allows it)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise Unusable(f"could not read {path.name}: it is not a regular file")
        with open(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise Unusable(too_large(path.name, f"it holds more than {_size(limit)}, the most the grader takes{hint}"))
    return data.decode("utf-8-sig")


def _json_kind(value) -> str:
    kinds = {dict: "an object", list: "an array", str: "a string", bool: "true or false", type(None): "null"}
    return kinds.get(type(value), "a number")


def _not_a_notebook(name: str, nb) -> str:
    if isinstance(nb, dict) and "worksheets" in nb:
        return (f"{name} is a notebook of an old format (nbformat {nb.get('nbformat')!r:.10}): open it in "
                "Jupyter and save it again")
    what = "it has no list of cells" if isinstance(nb, dict) else f"it is {_json_kind(nb)} in JSON, not an object"
    return f"{name} is not a valid notebook: {what}"


_SURROGATE = re.compile("[\ud800-\udfff]")  # JSON can spell them; no Python source (UTF-8) can hold one


def _cell_text(source) -> tuple[str, str]:
    """A cell's source as text, and what was wrong with it ("" if nothing)."""
    if isinstance(source, str):
        text, problem = source, ""
    elif isinstance(source, list):
        text = "".join(x for x in source if isinstance(x, str))
        texts = all(isinstance(x, str) for x in source)
        problem = "" if texts else "parts of its source that are not text were left out"
    else:
        text, problem = "", f"its source is {_json_kind(source)} in JSON, not text: it was read as empty"
    if _SURROGATE.search(text):
        text = _SURROGATE.sub("\ufffd", text)
        problem = problem or "characters that are not valid Unicode were replaced by U+FFFD"
    return text, problem


class _Notes(list):
    """Notes on malformed cells: the first few in words, the rest counted (a file can hold millions)."""
    MOST = 5

    def __init__(self) -> None:
        super().__init__()
        self.more = 0

    def add(self, note: str) -> None:
        if len(self) < self.MOST:
            self.append(note)
        else:
            self.more += 1

    def summary(self) -> list[str]:
        return list(self) + ([f"and {self.more} more malformed cells"] if self.more else [])


def _notebook_cells(text: str, name: str) -> tuple[list[Cell], list[str]]:
    """A notebook's answer cells, and notes on the malformed cells left out or read in part."""
    try:
        nb = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise Unusable(f"{name} is not a valid notebook: {str(exc)[:200]}") from None
    raw = nb.get("cells") if isinstance(nb, dict) else None
    if not isinstance(raw, list):
        raise Unusable(_not_a_notebook(name, nb))
    cells, notes, seen = [], _Notes(), Counter()
    for k, cell in enumerate(raw, 1):
        if not isinstance(cell, dict):
            notes.add(f"cell {k} is not a notebook cell (it is {_json_kind(cell)} in JSON): left out")
            continue
        exercise = answer_of(cell)
        if cell.get("cell_type") != "code" or not exercise:
            continue
        seen[exercise] += 1
        label = f"the answer cell for {exercise}" + (f" (its part {seen[exercise]})" if seen[exercise] > 1 else "")
        src, problem = _cell_text(cell.get("source", ""))
        if problem:
            notes.add(f"{label}: {problem}")
        cells.append(Cell(strip_magics(src), label, exercise))
        if len(cells) > MAX_CELLS:
            raise Unusable(too_large(name, f"it has more than {MAX_CELLS} answer cells"))
    if not cells:
        raise Unusable(f"{name} has no answer cells (were they deleted or copied into new cells? answers must "
                       "stay in the marked cells)")
    return cells, notes.summary()


def _cells_of(path: Path) -> tuple[list[Cell], list[str], bool]:
    """The file's cells, notes on its malformed parts, and whether its cells answer the exercises
    whose functions they define (the parts of a .py split at cell markers)."""
    if path.suffix == ".py":
        cells = _py_cells(_read_text(path, MAX_CODE_CHARS), path.name)
        return cells, [], len(cells) > 1
    if path.suffix != ".ipynb":
        raise Unusable(f"{path.name}: submissions must be .ipynb or .py files")
    text = _read_text(path, MAX_FILE_BYTES, hint=" (clear the notebook's outputs and save it again)")
    cells, notes = _notebook_cells(text, path.name)
    code = sum(len(c.code) for c in cells)
    if code > MAX_CODE_CHARS:
        raise Unusable(too_large(path.name, f"its answer cells hold {_size(code)} of code; the grader takes at "
                                            f"most {_size(MAX_CODE_CHARS)}"))
    return cells, notes, False


def _one_line(text: str) -> str:
    return " ".join(text.splitlines())


def _prepare(cells: list[Cell], exercises, by_definition: bool) -> Source:
    """Parse each cell once: the notebook-only lines left out, the names it defines, the exercise a
    .py part answers (``by_definition``: the first exercise whose function it defines), and the
    statements of the cells that parse, for the static checks."""
    ignored, parsed, answers, unparsed, body, labels = [], [], {}, set(), [], {}
    for cell in cells:
        tree = _parse(cell.code)
        if tree is None:
            cell.defines = defined_names(cell.code)
        else:
            cell.code, dropped, kept = _drop_from(cell.code, tree)
            cell.defines = sorted(_top_level(ast.Module(body=kept, type_ignores=[])))
            ignored += [f"{cell.filename}: {line}" for line in dropped]
            body += kept
            labels.update((id(stmt), cell.filename) for stmt in kept)
        if by_definition:
            cell.exercise = next((name for name in exercises or () if name in cell.defines), None)
        if tree is None:
            unparsed.add(cell.exercise)  # reported, with its line, when the cell is run
        else:
            parsed.append(f"# --- {_one_line(cell.filename)}\n{cell.code}\n")
        if cell.exercise:
            answers.setdefault(cell.exercise, []).append(cell.code + "\n")
    return Source("\n".join(parsed), "", {k: "".join(v) for k, v in answers.items()}, cells=cells, ignored=ignored,
                  unparsed=unparsed, program=Program(ast.Module(body=body, type_ignores=[]), labels))


def load(path: Path, exercises=()) -> Source:
    """The submission's cells. ``exercises`` (names) tells which part of a .py answers which. A file
    that cannot be graded is a Source whose ``problem`` says why; this never raises on its content."""
    path = Path(path)
    try:
        cells, notes, by_definition = _cells_of(path)
        src = _prepare(cells, exercises, by_definition)
    except Unusable as exc:
        return Source("", path.name, {}, str(exc))
    except (OSError, UnicodeDecodeError) as exc:
        return Source("", path.name, {}, f"could not read {path.name}: {exc}")
    except RecursionError:
        return Source("", path.name, {}, too_deep(path.name, "Python's parser gave up on it (RecursionError); "
                                                             "split the most nested expression"))
    except MemoryError:
        return Source("", path.name, {}, too_large_or_deep(path.name, "Python's parser ran out of memory on it"))
    src.filename, src.notes = path.name, notes
    return src


# --------------------------------------------------------------------------- static checks
def _aliases(tree: ast.AST) -> dict[str, str | None]:
    """Local names bound by imports, mapped to the dotted names they stand for (None: a module name
    too long to check, which each of many names imported from it would repeat)."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                names[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module:
            short = len(node.module) <= MAX_NAME_CHARS
            for a in node.names:
                names[a.asname or a.name] = f"{node.module}.{a.name}" if short else None
    return names


def setup_aliases(setup: str) -> dict[str, str | None]:
    """The names a lab's set-up code imports (``cuda`` for ``from numba import cuda``): an answer that
    uses them without an import of its own is read through them, as it runs."""
    tree = _parse(setup) if setup else None
    return {} if tree is None else _aliases(tree)


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


# A dotted name longer than this is no library's API: it is reported, not matched (matching names
# as long as the file, once per use, would make the check quadratic).
MAX_NAME_CHARS = 400
# Builtin classes whose one positional class pattern matches the subject itself (``case int(n)``).
SELF_MATCHING = {"bool", "bytearray", "bytes", "dict", "float", "frozenset", "int", "list", "set", "str", "tuple"}
FORMAT_METHODS = ("format", "format_map")


def _bound_names(tree: ast.AST) -> Counter:
    """How many times each name is bound anywhere in the code (assigned, defined, imported, a
    parameter, a pattern's capture); a star import counts as binding every name ("*")."""
    bound = Counter()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bound[node.id] += 1
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound[node.name] += 1
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.arg):
            bound[node.arg] += 1
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            bound[node.name] += 1
        elif isinstance(node, ast.MatchMapping) and node.rest:
            bound[node.rest] += 1
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound[node.name] += 1
    return bound


def _literal_names(node: ast.AST) -> list[str] | None:
    """The strings of a literal tuple or list of strings, else None."""
    if isinstance(node, (ast.Tuple, ast.List)) and all(
            isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
        return [e.value for e in node.elts]
    return None


def _match_args(stmt: ast.stmt) -> list[str] | None:
    """The names of ``__match_args__ = ("a", "b")``, for an assignment of that literal form."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
            and stmt.targets[0].id == "__match_args__":
        return _literal_names(stmt.value)
    return None


def _template_attributes(template: str, depth: int = 0) -> list[str] | None:
    """The attributes a str.format template's replacement fields read ("{0.a[k].b}" reads a and b,
    its format spec's nested fields too); None where the template cannot be read, which formatting
    it would also find."""
    found = []
    try:
        for _, name, spec, _ in _string.formatter_parser(template):
            if name is None:
                continue
            _, rest = _string.formatter_field_name_split(name)
            found += [key for is_attr, key in rest if is_attr]
            if spec and "{" in spec:
                nested = _template_attributes(spec, depth + 1) if depth < 2 else None
                if nested is None:
                    return None
                found += nested
    except ValueError:
        return None
    return found


def _implicit_attributes(node: ast.AST) -> tuple[list[str], str]:
    """Attributes a node reads without naming them in an attribute node, and how it reads them:
    a class pattern's keywords, the names of a class's ``__match_args__`` (its positional patterns
    read them), the fields of a literal str.format template."""
    if isinstance(node, ast.MatchClass):
        return list(node.kwd_attrs), "in a class pattern"
    if isinstance(node, ast.Assign):
        return _match_args(node) or [], "in __match_args__"
    if isinstance(node, ast.Attribute) and node.attr in FORMAT_METHODS and isinstance(node.value, ast.Constant) \
            and isinstance(node.value.value, str):
        return _template_attributes(node.value.value) or [], "in a format template"
    return [], ""


class Program:
    """The code the static checks read, parsed once, with what the checks need from it, each found
    in one walk: the checks stay linear in the size of the code. ``labels``: the cell of each
    top-level statement (by id), for messages."""

    def __init__(self, tree: ast.Module, labels: dict[int, str] | None = None, setup: str = "") -> None:
        self.tree, self.labels = tree, labels or {}
        self.preset = setup_aliases(setup)  # names the lab's set-up binds before this code runs

    @classmethod
    def of(cls, code: str | ast.Module | Program, setup: str = "") -> Program | None:
        """A Program for code given as text, a tree or a Program; None for text that does not parse.
        ``setup``: the code the grader runs first (the lab's set-up), whose imports the code may use
        without importing them itself."""
        if isinstance(code, Program):
            if setup:
                code.preset = setup_aliases(setup)
                code.__dict__.pop("aliases", None)
            return code
        if isinstance(code, ast.Module):
            return cls(code, setup=setup)
        tree = _parse(code)
        return None if tree is None else cls(tree, setup=setup)

    @cached_property
    def defs(self) -> dict[str, list[ast.AST]]:
        return _top_level(self.tree)

    @cached_property
    def aliases(self) -> dict[str, str | None]:
        return self.preset | _aliases(self.tree)  # the code's own imports win

    @cached_property
    def bound(self) -> Counter:
        return _bound_names(self.tree)

    @cached_property
    def own_private(self) -> set[str]:
        """Private attributes the code itself defines (self._cache = ..., def _helper): its own,
        allowed on self/cls."""
        own = set()
        for n in ast.walk(self.tree):
            if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
                own.add(n.attr)
            elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                own.add(n.name)
        return own

    @cached_property
    def pattern_classes(self) -> set[str]:
        """The code's own classes whose positional class patterns the check can read: a top-level
        class bound once, with no base but object, no metaclass, no decorator, and a literal
        ``__match_args__`` in its body (whose names are checked where the class is)."""
        plain = set()
        for node in self.tree.body:
            if isinstance(node, ast.ClassDef) and self.bound[node.name] == 1 and not node.keywords \
                    and not node.decorator_list and all(self.is_builtin(b, "object") for b in node.bases) \
                    and any(_match_args(stmt) is not None for stmt in node.body):
                plain.add(node.name)
        return plain

    def is_builtin(self, node: ast.AST, *names: str) -> bool:
        """A name of one of these builtins, which the code does not rebind."""
        return isinstance(node, ast.Name) and node.id in names and not self.bound[node.id] and not self.bound["*"]

    def reachable(self, root: str) -> list[ast.AST]:
        """Everything the exercise's function can reach: the module-level functions, classes and
        assigned objects it names, and what they name in turn (methods and nested code included).
        Each statement is walked once, however many names it binds or reach it."""
        defs = self.defs
        if root not in defs:
            return list(self.tree.body)
        seen, walked, todo, out = set(), set(), [root], []
        while todo:
            name = todo.pop()
            if name in seen or name not in defs:
                continue
            seen.add(name)
            for node in defs[name]:
                if id(node) in walked:
                    continue
                walked.add(id(node))
                out.append(node)
                todo += [sub.id for sub in ast.walk(node)
                         if isinstance(sub, ast.Name) and sub.id in defs and sub.id not in seen]
        return out

    def where(self, scope: ast.AST, node: ast.AST) -> str:
        """A node's place for messages: "line 3", and the cell where the code has several."""
        line = getattr(node, "lineno", "?")
        label = self.labels.get(id(scope))
        return f"line {line} of {label}" if label else f"line {line}"


def _resolved(dotted: str, aliases: dict[str, str | None]) -> str | None:
    """A dotted name with its first part read through the imports; None if too long to check."""
    head, _, rest = dotted.partition(".")
    base = aliases.get(head, head)
    if base is None or len(base) + len(rest) > MAX_NAME_CHARS:
        return None
    return base + ("." + rest if rest else "")


def _names_used(scope: ast.AST, aliases: dict[str, str | None]):
    """(dotted name, node) for each name the scope uses; the name is None where too long to check."""
    # Only whole dotted names count: in cupy.cuda.runtime.memcpy, the prefix cupy.cuda is no use of its own.
    prefixes = {id(n.value) for n in ast.walk(scope) if isinstance(n, ast.Attribute)}
    for node in ast.walk(scope):
        if isinstance(node, (ast.Attribute, ast.Name)) and id(node) not in prefixes:
            d = _dotted(node)
            if d:
                yield _resolved(d, aliases), node
        elif isinstance(node, ast.Import):
            yield from ((a.name if len(a.name) <= MAX_NAME_CHARS else None, node) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            mod = node.module
            if mod and len(mod) > MAX_NAME_CHARS:
                yield None, node
            else:
                yield from ((f"{mod}.{a.name}" if mod else a.name, node) for a in node.names)
        elif isinstance(node, (ast.BinOp, ast.AugAssign)) and isinstance(node.op, ast.MatMult):
            yield "operator.matmul", node  # a @ b: a library matrix product on arrays
        # a class pattern's keywords, __match_args__, a template's fields: attributes of an unknown object
        yield from (("?." + attr, node) for attr in _implicit_attributes(node)[0])


def _forbidden(name: str, deny: list[str], allow: list[str]) -> bool:
    hit = any(fnmatch.fnmatch(name, pat) or (pat.startswith("*.") and name.endswith(pat[1:])) for pat in deny)
    return hit and not any(fnmatch.fnmatch(name, ok) for ok in allow)


def forbidden_uses(code: str | ast.Module | Program, function: str, patterns, setup: str = "") -> list[str]:
    """Dotted names in the function (and what it calls) that match a forbidden pattern; ``setup``:
    the lab's set-up code, whose imports the code may use unimported."""
    if not patterns:
        return []
    prog = Program.of(code, setup)
    if prog is None:
        return []  # reported when the code is run
    deny = [p for p in patterns if not p.startswith("!")]
    allow = [p[1:] for p in patterns if p.startswith("!")]
    found = set()
    for scope in prog.reachable(function):
        for name, node in _names_used(scope, prog.aliases):
            if name is None:
                found.add(f"a dotted name too long to check ({prog.where(scope, node)})")
            elif _forbidden(name, deny, allow):
                found.add(f"{name} ({prog.where(scope, node)})")
    return sorted(found)


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
# Modules that other modules hold as attributes (dataclasses.inspect, typing.sys, numba.core.serialize):
# reached that way as well as imported. (Not names as common as a module's types, code or string.)
MODULE_ATTRIBUTES = DYNAMIC_MODULES - {"types", "code", "string", "signal", "socket", "logging", "timeit",
                                       "concurrent", "course"}
# The labs' libraries, reached as another module's attribute (torch.library.torch is torch itself,
# triton.runtime.interpreter.np is NumPy): under the name of an allowed module, a forbidden one. Graded
# code imports a library under its own name, where the exercise's rules see it.
HELD_LIBRARIES = {"torch", "triton", "numba", "numpy", "np", "cupy", "cupyx", "scipy", "llvmlite", "jax",
                  "tensorflow", "pandas"}
# Attributes that reach stack frames, code and closures (and from there, everything).
INTROSPECTION = {"f_back", "f_globals", "f_locals", "f_builtins", "f_code", "tb_frame", "tb_next", "gi_frame",
                 "gi_code", "cr_frame", "ag_frame", "cell_contents", "co_consts", "co_code"}
# A library's own machinery: its compiler's front end (numba.core.compiler.run_frontend builds a function's IR,
# closure values included), the serialiser it carries (numba's cloudpickle). It reads any function's closure
# and globals for its caller, in code the guards trust. Graded code uses a library's public API.
LIBRARY_INTERNALS = {"cloudpickle", "serialize", "core", "compiler", "interpreter", "bytecode", "ir", "ir_utils",
                     "typeinfer", "misc", "simulator", "cudadrv"}


def _module_problem(dotted: str) -> bool:
    """An import graded code may not make: a module that reaches frames, code or reflection, under
    any package (numba.cloudpickle as well as pickle), or a private module of a library (numpy._core)."""
    if dotted == "__future__":
        return False
    parts = dotted.split(".")
    return parts[0] in DYNAMIC_MODULES or any(p in MODULE_ATTRIBUTES or p in LIBRARY_INTERNALS or p in HELD_LIBRARIES
                                              or p.startswith("_") for p in parts[1:]) or parts[0].startswith("_")


DUNDERS_ALLOWED = {"__init__", "__name__", "__doc__", "__len__", "__call__", "__repr__", "__str__"}


def _attribute_problem(attr: str, private_ok: bool = False) -> str:
    """Why reading this attribute is refused ("" if it is not): special attributes, introspection,
    and private ones (``private_ok``: the code's own, on self or cls)."""
    if attr.startswith("__") and attr.endswith("__") and attr not in DUNDERS_ALLOWED:
        return f".{attr}"
    if attr in INTROSPECTION:
        return f".{attr}"
    if attr in MODULE_ATTRIBUTES or attr in LIBRARY_INTERNALS:
        return f".{attr}, a module graded code may not use"
    if attr in HELD_LIBRARIES:
        return f".{attr}, a module held by another module (import a library under its own name)"
    if attr.startswith("_") and not attr.startswith("__") and not private_ok:
        return f".{attr}, a private attribute"
    return ""


def _pattern_problem(node: ast.MatchClass, prog: Program) -> str:
    """Positional class patterns read the attributes the class names in ``__match_args__``: allowed
    where the check knows them (a builtin that matches the subject itself, or the code's own plain
    class, whose names are checked there)."""
    if not node.patterns:
        return ""
    if prog.is_builtin(node.cls, *SELF_MATCHING) and len(node.patterns) == 1:
        return ""
    if isinstance(node.cls, ast.Name) and node.cls.id in prog.pattern_classes:
        return ""
    cls = _dotted(node.cls) or "a class"
    return (f"a positional class pattern on {cls}, whose attributes the check cannot see: name them "
            f"(case {cls}(attribute=...))")


def _construct_problems(node: ast.AST, prog: Program, match_args_ok: set[int]) -> list[str]:
    """What in one node graded code may not use (see static_problems)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in DYNAMIC_CALLS:
        return [f"{node.func.id}()"]
    if isinstance(node, ast.Name) and node.id in DYNAMIC_CALLS:
        return [node.id]  # f = getattr; f(obj, name): the same call by another name
    if isinstance(node, ast.Name) and node.id in ("__builtins__", "__import__", "__loader__", "__spec__"):
        return [node.id]
    if isinstance(node, ast.Import):
        return [f"import {a.name[:80]}" for a in node.names if _module_problem(a.name)]
    if isinstance(node, ast.ImportFrom):
        found = []
        if _module_problem(node.module or "") or node.level:
            found.append(f"from {'.' * min(node.level, 3)}{(node.module or '')[:80]} import")
        # e.g. `from rlcompleter import __main__`, `from numpy.core import _ufunc_reconstruct`: a module's
        # dunders and private names are no library API (the private ones read attributes for their caller)
        return found + [f"from {(node.module or '')[:80]} import {a.name[:80]}" for a in node.names
                        if a.name.startswith("_") and a.name not in DUNDERS_ALLOWED
                        or a.name in LIBRARY_INTERNALS or a.name in MODULE_ATTRIBUTES  # from dataclasses import inspect
                        or a.name in HELD_LIBRARIES and node.module]  # from torch.library import torch
    found = []
    if isinstance(node, ast.Attribute):
        owner = node.value.id if isinstance(node.value, ast.Name) else ""
        found.append(_attribute_problem(node.attr, owner in ("self", "cls") and node.attr in prog.own_private))
        literal = isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
        if node.attr in FORMAT_METHODS and not literal:
            found.append(f".{node.attr} on a template that is not a string literal (str.format reads the "
                         "attributes its fields name)")
        elif node.attr in FORMAT_METHODS and _template_attributes(node.value.value) is None:
            found.append(f".{node.attr} on a template the check cannot read")
    elif isinstance(node, ast.MatchClass):
        found.append(_pattern_problem(node, prog))
    elif isinstance(node, ast.Assign) and _match_args(node) is not None:
        match_args_ok.add(id(node.targets[0]))
    elif isinstance(node, ast.Name) and node.id == "__match_args__" and not isinstance(node.ctx, ast.Load) \
            and id(node) not in match_args_ok:
        found.append("__match_args__ that is not a literal tuple of names")
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "__match_args__":
        found.append("__match_args__ that is not a literal tuple of names")
    attrs, how = _implicit_attributes(node)
    found += [f"{p}, {how}" for p in map(_attribute_problem, attrs) if p]
    return [f for f in found if f]


def static_problems(code: str | ast.Module | Program, patterns, policy: bool = False,
                    setup: str = "") -> list[str]:
    """Dynamic constructs anywhere in the graded code, for exercises that forbid calls. All of it, not
    only what the exercise's function names: code reaches code without naming it (a decorator or a
    class's __init_subclass__ that registers it, a list it was appended to at load)."""
    if not patterns or policy:
        return []
    prog = Program.of(code, setup)
    if prog is None:
        return []
    found, match_args_ok = set(), set()
    for stmt in prog.tree.body:
        for node in ast.walk(stmt):
            found.update(f"{p} ({prog.where(stmt, node)})" for p in _construct_problems(node, prog, match_args_ok))
    return sorted(found)


# --------------------------------------------------------------------------- loading and checking, bounded
MAX_LISTED = 12  # problems named in one exercise's message


def _listed(items: list[str]) -> str:
    more = len(items) - MAX_LISTED
    return ", ".join(items[:MAX_LISTED]) + (f" and {more} more" if more > 0 else "")


def static_verdicts(src: Source, rules: dict[str, tuple], setup: str = "") -> dict[str, tuple[str, str]]:
    """Per exercise (``rules``: name -> (forbidden patterns, policy)), why the static checks refuse
    its code, as (reason code, message); exercises whose own cell does not parse are left to the
    runner, which reports the line. ``setup``: the lab's set-up code, run before the answer."""
    prog = Program.of(src.program or src.code, setup)
    if prog is None:
        return {}
    verdicts, constructs = {}, None  # the whole code's constructs: walked once, for every exercise with rules
    for name, (patterns, policy) in rules.items():
        if name in src.unparsed:
            continue
        used = forbidden_uses(prog, name, patterns)
        if used:
            verdicts[name] = ("forbidden_call", "uses calls this exercise forbids: " + _listed(used))
            continue
        if not patterns or policy:
            continue
        if constructs is None:
            constructs = static_problems(prog, patterns)
        if constructs:
            verdicts[name] = ("forbidden_construct",
                              "uses a construct graded code may not use here: " + _listed(constructs))
    return verdicts


@dataclass
class Checked:
    """A submission loaded and checked statically: its source, and the static verdicts by exercise."""
    source: Source
    static: dict[str, tuple[str, str]] = field(default_factory=dict)


def load_and_check(path: Path, exercises, rules: dict[str, tuple], setup: str = "") -> Checked:
    """``load`` and ``static_verdicts``, in this process and without limits (see the bounded one)."""
    src = load(path, exercises)
    if src.problem:
        return Checked(src)
    try:
        return Checked(src, static_verdicts(src, rules, setup))
    except RecursionError:
        return Checked(Source("", src.filename, {}, too_deep(src.filename, "the static checks gave up on it")))
    except MemoryError:
        return Checked(Source("", src.filename, {}, too_large(src.filename, "the static checks ran out of memory")))


# The child: this file loaded on its own (not the autograder package, which imports the labs and
# NumPy), in an isolated interpreter without site-packages.
_CHILD = ("import importlib.util, sys\n"
          "spec = importlib.util.spec_from_file_location('autograder_submission_child', sys.argv[1])\n"
          "module = importlib.util.module_from_spec(spec)\n"
          "sys.modules[spec.name] = module\n"
          "spec.loader.exec_module(module)\n"
          "module.child_main()\n")


def load_and_check_bounded(path: Path, exercises, rules: dict[str, tuple], *, setup: str = "",
                           seconds: float = CHECK_SECONDS, memory_bytes: int = CHECK_MEMORY_BYTES) -> Checked:
    """``load_and_check`` in a process of its own, limited to ``seconds`` (wall clock and CPU) and
    ``memory_bytes`` of address space: whatever the file holds, the grader's own process spends
    neither time nor memory on it, and Python's parser failing on it (even by crashing) costs this
    submission alone. A file over the limits is a Checked whose source has a problem."""
    path = Path(path)
    request = {"path": os.path.abspath(path), "exercises": list(exercises), "seconds": seconds, "memory": memory_bytes,
               "rules": {name: [list(patterns), bool(policy)] for name, (patterns, policy) in rules.items()},
               "setup": setup}
    cmd = [sys.executable, "-I", "-S", "-X", "utf8", "-c", _CHILD, str(Path(__file__).resolve())]
    try:
        proc = subprocess.run(cmd, input=json.dumps(request).encode(), capture_output=True, timeout=seconds,
                              env={}, cwd="/")
    except subprocess.TimeoutExpired:
        return _refused(path, too_large(path.name, f"they did not finish within {seconds:g} s"))
    if proc.returncode != 0:
        return _refused(path, _child_failure(path.name, proc.returncode, seconds))
    try:
        reply = json.loads(proc.stdout)
        return Checked(Source.from_json(reply["source"]),
                       {str(k): (str(v[0]), str(v[1])) for k, v in reply["static"].items()})
    except (ValueError, KeyError, TypeError, IndexError):
        return _refused(path, f"the grader's checks of {path.name} answered nonsense; please tell your instructor")


def _refused(path: Path, problem: str) -> Checked:
    return Checked(Source("", path.name, {}, problem))


OUT_OF_MEMORY = 3  # the child's exit status when a MemoryError escapes


def _child_failure(name: str, returncode: int, seconds: float) -> str:
    if returncode == -signal.SIGXCPU:
        return too_large(name, f"they took more than {seconds:g} s of CPU time")
    if returncode in (OUT_OF_MEMORY, -signal.SIGABRT):  # SIGABRT: Python's fatal error when memory runs out
        return too_large(name, "they ran out of memory")
    if returncode == -signal.SIGKILL:
        return too_large(name, "they were stopped, over their time or memory")
    if returncode in (-signal.SIGSEGV, -signal.SIGBUS):
        return too_deep(name, "Python's parser crashed on it")
    return f"the grader's checks of {name} failed (exit status {returncode}); please tell your instructor"


def child_main() -> None:
    """The checking process: one request on stdin, one Checked on stdout, within the request's limits."""
    import resource

    def limit(kind: int, soft: int, hard: int) -> None:  # never above a limit the grader already has
        cap = resource.getrlimit(kind)[1]
        if cap != resource.RLIM_INFINITY:
            soft, hard = min(soft, cap), min(hard, cap)
        resource.setrlimit(kind, (soft, hard))

    request = json.loads(sys.stdin.buffer.read())
    memory, seconds = int(request["memory"]), max(1, int(request["seconds"]))
    limit(resource.RLIMIT_AS, memory, memory)
    limit(resource.RLIMIT_CPU, seconds, seconds + 1)
    limit(resource.RLIMIT_CORE, 0, 0)
    rules = {name: (tuple(patterns), policy) for name, (patterns, policy) in request["rules"].items()}
    try:
        checked = load_and_check(Path(request["path"]), request["exercises"], rules, str(request.get("setup", "")))
        reply = json.dumps({"source": checked.source.as_json(), "static": checked.static}).encode()
    except MemoryError:
        sys.exit(OUT_OF_MEMORY)
    sys.stdout.buffer.write(reply)
