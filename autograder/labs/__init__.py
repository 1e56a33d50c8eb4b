"""The lab specs, one module per lab, named like the lab's folder under ``labs/``."""
from __future__ import annotations

import importlib
import pkgutil

from ..spec import Lab


def lab_names() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def get_lab(name: str) -> Lab:
    if name not in lab_names():
        raise KeyError(f"unknown lab {name!r}; labs: {', '.join(lab_names())}")
    return importlib.import_module(f"{__name__}.{name}").LAB
