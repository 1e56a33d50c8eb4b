"""Sphinx extension of the course site: each ``%%gpu`` cell carries the id its skip line links to.

Without a GPU a ``%%gpu`` cell prints a link to its stored output, ``page.html#gpu-<hash>``
(course/gpu_cells.py). The kernel computes the id from the cell's text; this puts the same id
on the cell, read from the notebook itself, so the link opens the page at that cell.
"""
from __future__ import annotations

import json
from pathlib import Path

from docutils import nodes

from course.gpu_cells import anchor, split_source


def add_anchors(app, doctree: nodes.document) -> None:
    path = Path(app.env.doc2path(app.env.docname))
    if path.suffix != ".ipynb":
        return
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    for node in doctree.findall(nodes.container):
        if node.get("nb_element") != "cell_code":  # MyST-NB's container of one code cell
            continue
        source = cells[node["cell_index"]]["source"]
        parts = split_source("".join(source) if isinstance(source, list) else source)
        if parts is not None:
            node["ids"].append(anchor(*parts))
            doctree.set_id(node)  # registers the id: two cells with the same text fail the build


def setup(app):
    app.connect("doctree-read", add_anchors)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
