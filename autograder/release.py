"""Make student notebooks from instructor notebooks, as nbgrader's release does.

In code cells, every region between ``### BEGIN SOLUTION`` and ``### END SOLUTION``
becomes a stub that raises ``NotImplementedError``; in markdown cells it becomes
"YOUR ANSWER HERE", and relative links are rewritten for the release's folder. The outputs of
the GPU run stay on the cells before the first answer (they cannot depend on it); later cells lose
theirs. Execution counts and the GPU-run stamp are removed.
The student notebook is generated, never edited: a test regenerates it and fails on
any difference.
"""
from __future__ import annotations

import ast
import copy
import json
import posixpath
import re
from pathlib import Path

BEGIN = re.compile(r"^(\s*)### BEGIN SOLUTION\s*$")
END = re.compile(r"^\s*### END SOLUTION\s*$")


def strip_solutions(source: str, code: bool) -> str:
    out, inside = [], False
    for line in source.splitlines():
        m = BEGIN.match(line)
        if m and not inside:
            inside = True
            indent = m.group(1)
            if code:
                out += [f"{indent}# YOUR CODE HERE", f'{indent}raise NotImplementedError("write your answer here")']
            else:
                out.append(f"{indent}YOUR ANSWER HERE")
            continue
        if END.match(line) and inside:
            inside = False
            continue
        if not inside:
            out.append(line)
    if inside:
        raise ValueError("a '### BEGIN SOLUTION' has no matching '### END SOLUTION'")
    return "\n".join(out)


# On the site a lab's page is its release: the outputs of the GPU run up to the first answer, none
# after. The executed solution is a page of the book's last part, captioned SOLUTIONS_PART in
# _toc.yml, so that "Next" from a lab leads on to the next chapter. The note under each release's
# title links to it, with a warning.
SOLUTIONS_PART = "Solutions: runs on a GPU"


def solution_link(lab: str) -> str:
    """The solution notebook, relative to the release: labs/<lab>/solutions/<lab>.ipynb."""
    return f"solutions/{lab}.ipynb"


def release_note(lab: str) -> str:
    return (
        "> **The outputs shown come from a run on a GPU and stop at your first answer: the rest appear "
        "as you run the notebook.** It is the lab as you "
        f"receive it, with your answers still to write. [Its worked solution]({solution_link(lab)}), with "
        f"the outputs of a run on a GPU, is in the book's last part, *{SOLUTIONS_PART}*. It gives every "
        "answer away: open it after you have tried the exercises."
    )


# A relative link in markdown: ](../../../chapters/13_serving.ipynb) or ](figure.png#part).
RELATIVE_LINK = re.compile(
    r"\]\((?P<target>\.\.?/[^)\s#]*|[^):\s#/][^):\s#]*\.(?:ipynb|md|png|svg|jpe?g))(?P<anchor>#[^)\s]*)?\)")


def relink(source: str) -> str:
    """Links written from labs/<lab>/solutions/, rewritten for the release one folder up."""
    return RELATIVE_LINK.sub(
        lambda m: f"]({posixpath.normpath(posixpath.join('solutions', m['target']))}{m['anchor'] or ''})", source)


def student_notebook(nb: dict, lab: str) -> dict:
    nb = copy.deepcopy(nb)
    answered = False  # a cell with an answer removed was seen: later outputs may show it
    for cell in nb["cells"]:
        src = cell.get("source", "")
        src = "".join(src) if isinstance(src, list) else src
        cell["source"] = strip_solutions(src, cell["cell_type"] == "code")
        answered = answered or (cell["cell_type"] == "code" and cell["source"] != src)
        if cell["cell_type"] == "markdown":
            cell["source"] = relink(cell["source"])
        if cell["cell_type"] == "code":
            if answered:
                cell["outputs"] = []
            cell["execution_count"] = None
            for out in cell.get("outputs", []):
                if "execution_count" in out:  # an execute_result's
                    out["execution_count"] = None
        cell.get("metadata", {}).pop("execution", None)
        # a figure's label is the solution page's: the same name twice in the book is a build warning
        cell.get("metadata", {}).get("mystnb", {}).get("figure", {}).pop("name", None)
    nb["cells"].insert(1, {"cell_type": "markdown", "id": "release-note", "metadata": {}, "source": release_note(lab)})
    # Only what a fresh notebook carries: executing the source must not change the release.
    meta = nb.get("metadata", {})
    nb["metadata"] = {k: meta[k] for k in ("kernelspec",) if k in meta}
    nb["metadata"]["language_info"] = {"name": "python"}
    return nb


def dumps(nb: dict) -> str:
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def student_path(source: Path) -> Path:
    """labs/<lab>/solutions/<lab>.ipynb -> labs/<lab>/<lab>.ipynb"""
    return source.parent.parent / source.name


def solution_notebooks(root: Path) -> list[Path]:
    return sorted(Path(root).glob("labs/*/solutions/*.ipynb"))


def release(source: Path) -> Path:
    nb = json.loads(Path(source).read_text(encoding="utf-8"))
    target = student_path(Path(source))
    target.write_text(dumps(student_notebook(nb, target.stem)), encoding="utf-8")
    write_setup_cells(Path(source).resolve().parents[3])
    return target


# --------------------------------------------------------------------------- the set-up cells, for grading
# A lab's set-up cell (the first code cell: MODE = course.setup(), the imports, the checker) defines
# names that answer cells may use, as in the notebook. The grader never runs the learner's copy of
# it: it runs what it can of the instructor's, kept in the grader's package (the notebooks are not),
# with MODE as course.setup() returns it in the grading mode.
SETUP_CELLS = Path(__file__).resolve().parent / "labs" / "_setup_cells.py"
SETUP_CELLS_HEAD = (
    '"""Each lab\'s set-up cell, as its solution notebook (labs/<lab>/solutions/<lab>.ipynb) has it: written by\n'
    "`autograder release`, never edited (a test regenerates it and fails on any difference). Grading defines the\n"
    'names these cells define that it can (spec.Lab.grading_setup, release.setup_names)."""\n\n'
)


def _calls_course_setup(source: str) -> bool:
    from .submission import strip_magics

    try:
        tree = ast.parse(strip_magics(source))
    except SyntaxError:
        return False
    return any(isinstance(n, ast.Call) and ast.unparse(n.func) == "course.setup" for n in ast.walk(tree))


def setup_cell(nb: dict) -> str:
    """The notebook's set-up cells: its code cells up to the one that calls course.setup(), if one
    does before the first answer cell; else none."""
    from .submission import answer_of

    sources = []
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        if answer_of(cell):
            return ""
        src = cell.get("source", "")
        sources.append("".join(src) if isinstance(src, list) else src)
        if _calls_course_setup(sources[-1]):
            return "\n".join(sources)
    return ""


def setup_cells_module(root: Path) -> str:
    """The text of autograder/labs/_setup_cells.py for the solution notebooks under ``root``."""
    entries = []
    for path in solution_notebooks(root):
        source = setup_cell(json.loads(path.read_text(encoding="utf-8")))
        lines = "".join(f"        {line!r}\n" for line in source.splitlines(keepends=True)) or "        ''\n"
        entries.append(f"    {path.stem!r}: (\n{lines}    ),\n")
    return SETUP_CELLS_HEAD + "SETUP_CELLS = {\n" + "".join(entries) + "}\n"


def write_setup_cells(root: Path) -> Path:
    text = setup_cells_module(root)
    if not SETUP_CELLS.exists() or SETUP_CELLS.read_text(encoding="utf-8") != text:
        SETUP_CELLS.write_text(text, encoding="utf-8")
    return SETUP_CELLS


# Modules whose names the grader never defines: the course's own helpers and the checker (not in the
# sandbox), IPython, and plots (no answer draws; importing them in every runner would cost seconds).
NOT_FOR_GRADING = {"autograder", "course", "IPython", "matplotlib"}


def _setup_value(stmt: ast.stmt) -> bool:
    """MODE = course.setup(...)."""
    return isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call) \
        and ast.unparse(stmt.value.func) == "course.setup" and all(isinstance(t, ast.Name) for t in stmt.targets)


def _imported(stmt: ast.stmt) -> list[str]:
    """The top-level packages an import statement loads."""
    if isinstance(stmt, ast.Import):
        return [a.name.split(".")[0] for a in stmt.names]
    if isinstance(stmt, ast.ImportFrom):
        return [(stmt.module or "").split(".")[0]]
    return []


def _gradable(stmt: ast.stmt, defined: set[str]) -> list[str] | None:
    """The names a set-up statement binds, if the grader can run it: an import of a library, or an
    assignment to names computed only from names already defined (and builtins); else None."""
    import builtins

    if isinstance(stmt, ast.Import):
        if any(m in NOT_FOR_GRADING for m in _imported(stmt)):
            return None
        return [(a.asname or a.name).split(".")[0] for a in stmt.names]
    if isinstance(stmt, ast.ImportFrom):
        if stmt.level or _imported(stmt)[0] in NOT_FOR_GRADING:
            return None
        return [a.asname or a.name for a in stmt.names if a.name != "*"] or None
    if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        if not all(isinstance(t, ast.Name) for t in targets):
            return None
        read = {n.id for n in ast.walk(stmt.value) if isinstance(n, ast.Name)}
        return [t.id for t in targets] if read <= defined | set(dir(builtins)) else None
    return None


def _guarded(stmt: ast.stmt) -> str:
    """A set-up statement as grading runs it: on its own (a library missing from an exercise's runner
    leaves its names undefined, nothing else), and an import of a library outside the standard one
    only where the runner has loaded it already (for the lab's setup or the exercise): grading loads
    no library for a name an answer may not use."""
    import sys

    body = ast.unparse(stmt).replace("\n", "\n    ")
    text = f"try:\n    {body}\nexcept Exception:\n    pass"
    libraries = sorted({m for m in _imported(stmt) if m not in sys.stdlib_module_names})
    if libraries:
        loaded = " and ".join(f"{m!r} in __import__('sys').modules" for m in libraries)
        text = f"if {loaded}:\n    " + text.replace("\n", "\n    ")
    return text


def setup_names(cell: str, mode: str) -> str:
    """What grading runs of a lab's set-up cell, after the lab's setup and before the answer cells
    (``mode``: "gpu" or "simulator"): MODE as course.setup() returns it, the cell's imports of
    libraries and the values it computes from them. The course's helpers, the checker and plots
    stay the notebook's."""
    from .submission import strip_magics

    if not cell:
        return ""
    defined, out = set(), []
    for stmt in ast.parse(strip_magics(cell)).body:
        if _setup_value(stmt):
            names = [t.id for t in stmt.targets]
            out += [f"{name} = {mode!r}" for name in names]
            defined.update(names)
            continue
        names = _gradable(stmt, defined)
        if names is not None:
            out.append(_guarded(stmt))
            defined.update(names)
    return "# what grading defines of the lab's set-up cell, as in the notebook\n" + "\n".join(out) + "\n"
