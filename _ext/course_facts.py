"""Sphinx extension of the course site: facts about the course, computed from the project at build time.

Pages use them as MyST substitutions, ``{{ chapters }}`` for example, so no page types a number
that the project already holds:

- ``chapters``, ``labs``: how many chapters and labs _toc.yml lists (a lab's solution is no lab);
- ``solutions_part``: the caption of the part that holds the labs' worked solutions;
- ``python``: the oldest Python the package supports (pyproject.toml's ``requires-python``);
- ``release``: the git tag the notebooks' first cell installs on Colab (course.install.release_tag);
- ``extras_by_part``: a table of the extras each part's notebooks ask ``course.setup()`` for.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

try:
    import tomllib
except ImportError:  # Python 3.10, where Sphinx itself requires tomli
    import tomli as tomllib

from course.install import release_tag

SETUP = re.compile(r"^MODE = course\.setup\((?:extras=(\[[^\]]*\]))?", re.M)


def toc_parts(root: Path) -> list[tuple[str, list[str]]]:
    """(caption, pages in reading order) for each part of _toc.yml."""
    toc = yaml.safe_load((root / "_toc.yml").read_text(encoding="utf-8"))
    parts = []
    for part in toc.get("parts", []):
        files: list[str] = []

        def walk(entries):
            for e in entries or []:
                if "file" in e:
                    files.append(e["file"])
                walk(e.get("sections"))

        walk(part.get("chapters"))
        parts.append((part.get("caption", ""), files))
    return parts


def is_lab(page: str) -> bool:
    """labs/<lab>/<lab>: a lab as the learner gets it, not its worked solution."""
    return re.fullmatch(r"labs/(\w+)/\1", page) is not None


def notebook_extras(path: Path) -> list[str]:
    """The extras a notebook's first code cell passes to ``course.setup()``."""
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] == "code":
            source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            m = SETUP.search(source)
            return json.loads(m.group(1)) if m and m.group(1) else []
    return []


def fewest(extras: set[str], defined: dict[str, list[str]]) -> list[str]:
    """``extras`` without those another of them already installs (triton brings torch)."""
    return sorted(e for e in extras
                  if not any(o != e and set(defined[e]) <= set(defined[o]) for o in extras))


def extras_table(root: Path, defined: dict[str, list[str]]) -> str:
    rows = ["| Part | Extras its notebooks need |", "| --- | --- |"]
    for caption, pages in toc_parts(root):
        notebooks = [root / f"{p}.ipynb" for p in pages
                     if p.startswith("chapters/") or is_lab(p)]
        notebooks = [n for n in notebooks if n.exists()]
        if not notebooks:
            continue
        needed = set().union(*(notebook_extras(n) for n in notebooks))
        rows.append(f"| {caption} | {', '.join(f'`{e}`' for e in fewest(needed, defined)) or 'none'} |")
    return "\n".join(rows)


def facts(root: Path) -> dict[str, str]:
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    pages = [p for _, files in toc_parts(root) for p in files]
    solutions = next(caption for caption, files in toc_parts(root)
                     if files and all(f == "solutions" or "/solutions/" in f for f in files))
    python = re.fullmatch(r">=\s*([\d.]+)", project["requires-python"].strip())
    return {
        "chapters": str(sum(p.startswith("chapters/") for p in pages)),
        "labs": str(sum(is_lab(p) for p in pages)),
        "solutions_part": solutions,
        "python": python.group(1),
        "release": release_tag(project["version"]),
        "extras_by_part": extras_table(root, project["optional-dependencies"]),
    }


def add_substitutions(app, config) -> None:
    config.myst_substitutions = {**(config.myst_substitutions or {}), **facts(Path(app.srcdir))}


def setup(app):
    app.connect("config-inited", add_substitutions)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
