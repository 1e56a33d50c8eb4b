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
    return target
