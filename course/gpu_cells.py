"""The ``%%gpu`` cell magic: a cell that needs a GPU runs on one and explains itself without one.

A notebook marks such a cell with a first line like::

    %%gpu the copy kernel's bandwidth against the GPU's peak

With a GPU (or GPUs, for ``%%gpu --gpus 2 ...``) the cell body runs as if the line were not
there, and its errors are the cell's errors. Without one it prints a single line saying what
the cell shows on a GPU and where its stored output from a GPU run can be read. The skip is in
the notebook itself, so Run All works the same in Jupyter, JupyterLab, Colab, nbclient and nbval.

The link names the page and the cell: ``page.html#gpu-<hash>``. The anchor is a hash of the
cell's own text, so the kernel computes it in any front end (Colab never tells the kernel which
notebook runs). The site puts the same id on the cell (_ext/gpu_anchors.py), and
``gpu_outputs.json``, beside this file, says which page holds each anchor's stored output:
``python -m course.gpu_cells`` rewrites it from the notebooks.
"""
from __future__ import annotations

import ast
import functools
import hashlib
import json
import linecache
import os
import re
from pathlib import Path, PurePosixPath

SITE_URL = "https://open-gpu-course.github.io/gpu-course/"
USAGE = "%%gpu [--gpus N] what the cell shows on a GPU"
INDEX = Path(__file__).with_name("gpu_outputs.json")  # anchor -> page with the cell's stored output


def parse_line(line: str) -> tuple[int, str]:
    """(GPUs the cell needs, what it shows) from the magic's line."""
    m = re.fullmatch(r"\s*(?:--gpus[= ](\d+)\s*)?(.*?)\s*", line)
    if m is None:  # pragma: no cover - the pattern matches any line
        raise ValueError(f"usage: {USAGE}")
    return int(m.group(1) or 1), m.group(2)


def page_url(notebook: str | None) -> str:
    """The site page that stores this notebook's GPU outputs (a student lab's is its solution's)."""
    if not notebook:
        return SITE_URL
    parts = PurePosixPath(str(notebook).replace(os.sep, "/")).parts
    for top in ("chapters", "labs"):
        if top in parts:
            rel = PurePosixPath(*parts[len(parts) - parts[::-1].index(top) - 1:])
            break
    else:
        return SITE_URL
    if rel.parts[0] == "labs" and len(rel.parts) == 3:  # labs/<lab>/<lab>.ipynb, the student release
        rel = rel.parent / "solutions" / rel.name
    return SITE_URL + str(rel.with_suffix(".html"))


def split_source(source: str) -> tuple[str, str] | None:
    """(the magic's line, the body) of a ``%%gpu`` cell's source, as IPython hands them to the magic;
    None for any other cell."""
    first, _, body = source.partition("\n")
    m = re.fullmatch(r"%%gpu(?:\s+(.*))?", first.rstrip())
    return (m.group(1) or "", body) if m else None


def anchor(line: str, body: str) -> str:
    """The cell's id on the site, from its text alone. Whitespace at the ends does not count:
    IPython adds a newline to the body, and the line's spacing may vary."""
    text = " ".join(line.split()) + "\n" + body.replace("\r\n", "\n").rstrip()
    return "gpu-" + hashlib.sha256(text.encode()).hexdigest()[:10]


@functools.lru_cache(maxsize=1)
def _pages() -> dict[str, str]:
    return json.loads(INDEX.read_text(encoding="utf-8")) if INDEX.exists() else {}


def output_url(line: str, body: str, notebook: str | None = None) -> str:
    """Where this cell's stored GPU output is: its page and the cell's anchor. A cell the learner
    edited has an anchor of its own, not on the site: then the notebook's page, where known."""
    cell = anchor(line, body)
    page = _pages().get(cell)
    return f"{SITE_URL}{page}.html#{cell}" if page else page_url(notebook)


def build_index(root: Path | None = None) -> dict[str, str]:
    """Anchor -> page, for every ``%%gpu`` cell of the pages that store GPU outputs (chapters and
    lab solutions; a student lab's cells are its solution's, so they find the solution's page)."""
    from .notebooks import ROOT, _source, executed_notebooks, read

    root = Path(root or ROOT)
    index: dict[str, str] = {}
    for path in executed_notebooks(root):
        page = path.relative_to(root).with_suffix("").as_posix()
        for cell in read(path)["cells"]:
            parts = split_source(_source(cell)) if cell["cell_type"] == "code" else None
            if parts is None:
                continue
            key = anchor(*parts)
            if key in index:  # one link could lead to only one of them
                raise ValueError(f"{page} and {index[key]} have a %%gpu cell with the same text ({key}): "
                                 "make its line say how they differ")
            index[key] = page
    return dict(sorted(index.items()))


def write_index(root: Path | None = None) -> Path:
    INDEX.write_text(json.dumps(build_index(root), indent=0) + "\n", encoding="utf-8")
    _pages.cache_clear()
    return INDEX


def _notebook_path(shell) -> str | None:
    """The running notebook's path where the front end tells the kernel (JupyterLab does; Colab does not)."""
    return shell.user_ns.get("__session__") or os.environ.get("JPY_SESSION_NAME") or None


def skip_message(gpus_needed: int, what: str, gpus_here: int, url: str) -> str:
    need = "a GPU" if gpus_needed == 1 else f"{gpus_needed} GPUs"
    here = "none here" if gpus_here == 0 else f"{gpus_here} here"
    shows = f": {what}" if what else ""
    return f"Skipped, needs {need} ({here}). On a GPU this cell shows{shows or ' its result'}; " \
           f"its output from a GPU run is on {url}"


def run_body(shell, body: str):
    """Run the cell body in the notebook's namespace; return the last expression's value, as a cell would."""
    source = shell.transform_cell(body)  # so %magics and !commands inside still work
    # The source goes into linecache under a name of its own, as IPython does for every cell:
    # inspect.getsource then finds the functions the cell defines (course.dist ships them to
    # other processes by their source), and tracebacks show the cell's lines.
    global _cells_run
    _cells_run += 1
    filename = f"<gpu cell {_cells_run}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    tree = ast.parse(source, filename=filename)
    last = None
    shown = not source.rstrip().endswith(";")  # a trailing ";" hides the value, as in any cell
    if shown and tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    exec(compile(tree, filename, "exec"), shell.user_ns)
    if last is not None:
        return eval(compile(last, filename, "eval"), shell.user_ns)
    return None


_cells_run = 0


def gpu_magic(line: str, cell: str):
    from IPython import get_ipython

    from . import device

    shell = get_ipython()
    gpus_needed, what = parse_line(line)
    gpus_here = device.gpu_count() if device.MODE == "gpu" else 0
    if gpus_here < gpus_needed:
        url = output_url(line, cell, _notebook_path(shell))
        print(skip_message(gpus_needed, what, gpus_here, url))
        return None
    return run_body(shell, cell)


def register() -> bool:
    """Make ``%%gpu`` available in the running IPython kernel; False outside IPython."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None:
        return False
    shell.register_magic_function(gpu_magic, magic_kind="cell", magic_name="gpu")
    return True


if __name__ == "__main__":
    print(f"wrote {write_index()}")
