"""Sphinx extension of the course site: a lab's worked solution says what it is and stays out of search.

The instructor notebook labs/<lab>/solutions/<lab>.ipynb opens with the lab's own title
("Lab 5: reduction"). On the site its page is titled "Solution to Lab 5: reduction" (heading,
browser tab, navigation), and search leaves it out, so a search for a lab's topic finds the
lab and the chapters, never the answers.
"""
from __future__ import annotations

import re

from docutils import nodes

SOLUTION_DOC = re.compile(r"^labs/(?P<lab>[^/]+)/solutions/(?P=lab)$")
TITLE_PREFIX = "Solution to "


def is_solution(docname: str) -> bool:
    return bool(SOLUTION_DOC.match(docname))


def mark_solution(app, doctree: nodes.document) -> None:
    docname = app.env.docname
    if not is_solution(docname):
        return
    title = doctree.next_node(nodes.title)  # the notebook's one top-level heading
    if title is not None and not title.astext().startswith(TITLE_PREFIX):
        title.insert(0, nodes.Text(TITLE_PREFIX))
    # Sphinx's per-page switch (file-wide metadata `nosearch`): the page is indexed without its words.
    app.env.metadata[docname]["nosearch"] = True


def setup(app):
    # Before Sphinx's own collectors (priority 500) read the page's title.
    app.connect("doctree-read", mark_solution, priority=400)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
