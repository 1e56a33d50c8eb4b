"""The ``%%gpu`` cell magic: a cell that needs a GPU runs on one and explains itself without one.

A notebook marks such a cell with a first line like::

    %%gpu the copy kernel's bandwidth against the GPU's peak

With a GPU (or GPUs, for ``%%gpu --gpus 2 ...``) the cell body runs as if the line were not
there, and its errors are the cell's errors. Without one it prints a single line saying what
the cell shows on a GPU and where its stored output from a GPU run can be read. The skip is in
the notebook itself, so Run All works the same in Jupyter, JupyterLab, Colab, nbclient and nbval.
"""
from __future__ import annotations

import ast
import linecache
import os
import re
from pathlib import PurePosixPath

SITE_URL = "https://open-gpu-course.github.io/gpu-course/"
USAGE = "%%gpu [--gpus N] what the cell shows on a GPU"


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


def _notebook_path(shell) -> str | None:
    """The running notebook's path where the front end tells the kernel (JupyterLab does; Colab does not)."""
    return shell.user_ns.get("__session__") or os.environ.get("JPY_SESSION_NAME") or None


def skip_message(gpus_needed: int, what: str, gpus_here: int, notebook: str | None) -> str:
    need = "a GPU" if gpus_needed == 1 else f"{gpus_needed} GPUs"
    here = "none here" if gpus_here == 0 else f"{gpus_here} here"
    shows = f": {what}" if what else ""
    return f"Skipped, needs {need} ({here}). On a GPU this cell shows{shows or ' its result'}; " \
           f"its output from a GPU run is on {page_url(notebook)}"


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
        print(skip_message(gpus_needed, what, gpus_here, _notebook_path(shell)))
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
