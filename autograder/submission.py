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


def answer_of(cell: dict) -> str | None:
    meta = cell.get("metadata", {}).get(ANSWER_KEY, {})
    return meta.get("answer") if isinstance(meta, dict) else None


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
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return Source("", path.name, {}, f"could not read {path.name}: {exc}")
    if path.suffix == ".py":
        return Source(text, path.name, {})
    if path.suffix != ".ipynb":
        return Source("", path.name, {}, f"{path.name}: submissions must be .ipynb or .py files")
    try:
        nb = json.loads(text)
        cells = nb["cells"]
    except (ValueError, KeyError, TypeError) as exc:
        return Source("", path.name, {}, f"{path.name} is not a valid notebook: {exc}")
    parts, answers = [], {}
    for i, cell in enumerate(cells):
        name = answer_of(cell)
        if cell.get("cell_type") != "code" or not name:
            continue
        src = cell.get("source", "")
        src = "".join(src) if isinstance(src, list) else str(src)
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


def _reachable(tree: ast.Module, root: str) -> list[ast.AST]:
    """The top-level function named root and every top-level function it refers to."""
    defs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    if root not in defs:
        return [tree]
    seen, todo, out = set(), [root], []
    while todo:
        name = todo.pop()
        if name in seen or name not in defs:
            continue
        seen.add(name)
        out.append(defs[name])
        for node in ast.walk(defs[name]):
            if isinstance(node, ast.Name) and node.id in defs:
                todo.append(node.id)
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
