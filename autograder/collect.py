"""Which files a grading run takes, and the name each gets in the output folder.

A name is the file's path below the folder it was found in, without its suffix, with ``/`` as
``__`` (``sec1/mallory.ipynb`` is ``sec1__mallory``): the same file gets the same name in every
run, whatever else the folder holds, and the name leads back to the file. Where characters had to
be replaced (or two files would share a name), a short hash of the path keeps names apart.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

SUFFIXES = (".ipynb", ".py")
MAX_NAME = 80


@dataclass
class Collected:
    files: list[tuple[Path, str]] = field(default_factory=list)  # (path, path as the instructor gave it)
    skipped: list[str] = field(default_factory=list)  # "path: why", for the run's report


def safe_name(stem: str) -> str:
    """Letters, digits, '-' and '_' only (no dots, so no '..' and no name of the grader's own
    files, such as grades.csv)."""
    return re.sub(r"[^A-Za-z0-9_-]+", "_", stem).strip("_-")[:MAX_NAME] or "submission"


def shown_name(name: str) -> str:
    """A file name as text: bytes that are not UTF-8 (Python keeps them as lone surrogates, which no
    UTF-8 file can hold) become U+FFFD."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:8]  # a name need not be UTF-8


def submission_names(files) -> dict[str, Path]:
    """A folder name per submission. ``files``: paths, or (path, relative path) pairs."""
    pairs = [(f, f.name) if isinstance(f, Path) else (Path(f[0]), str(f[1])) for f in files]
    rels = [rel for _, rel in pairs]
    entries = []
    for path, rel in pairs:
        stem = rel[: -len(Path(rel).suffix)] if Path(rel).suffix else rel
        base = safe_name(stem.replace("/", "__"))
        exact = base.replace("__", "/") == stem  # the name alone leads back to the file
        # Two files given by the same relative path (x.py from two folders): their full paths differ.
        key = rel if rels.count(rel) == 1 else str(path.resolve())
        entries.append((base, exact, key, path))
    counts: dict[str, int] = {}
    for base, *_ in entries:
        counts[base] = counts.get(base, 0) + 1
    names: dict[str, Path] = {}
    for base, exact, key, path in sorted(entries, key=lambda e: e[2]):
        name = base if exact and counts[base] == 1 else f"{base[:MAX_NAME - 9]}-{_short_hash(key)}"
        names[name] = path
    return names


def collect(items: list[str]) -> Collected:
    """The submissions among ``items`` (files, or folders searched to any depth). Hidden files and
    folders (such as .ipynb_checkpoints) and files of other kinds are skipped, and listed."""
    found = Collected()
    for item in items:
        p = Path(item)
        if p.is_dir():
            for q in sorted(p.rglob("*")):
                rel = q.relative_to(p).as_posix()
                if any(part.startswith(".") for part in q.relative_to(p).parts):
                    if q.is_file():
                        found.skipped.append(f"{q}: hidden (a checkpoint or system file)")
                    continue
                if not q.is_file():
                    continue
                if q.suffix not in SUFFIXES:
                    found.skipped.append(f"{q}: not a notebook or .py file")
                    continue
                found.files.append((q, rel))
        elif p.is_file():
            if p.suffix not in SUFFIXES:
                found.skipped.append(f"{p}: not a notebook or .py file")
            else:
                found.files.append((p, p.name))
        else:
            raise FileNotFoundError(f"no such submission: {item}")
    return found
