"""Problem sizes that fit the GPU in hand, and the hardware a cell needs.

A chapter states its preferred size and the smaller ones it accepts; the first that fits
``device.memory_budget()`` (80% of the free device memory) is used, so a notebook written on a
141 GB GPU still runs on a 16 GB one. Cells that need newer hardware ask ``has_compute_capability``.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

from . import device


def largest_that_fits(candidates: Iterable[int], bytes_of: Callable[[int], float],
                      budget: int | None = None) -> int:
    """The first of ``candidates`` (largest first) whose ``bytes_of(size)`` fits the budget.

    Falls back to the last (smallest) candidate when none fits, so a cell still runs.
    """
    sizes = list(candidates)
    if not sizes:
        raise ValueError("largest_that_fits needs at least one candidate size")
    budget = device.memory_budget() if budget is None else budget
    return next((s for s in sizes if bytes_of(s) <= budget), sizes[-1])


def compute_capability() -> tuple[int, int]:
    """(major, minor) of the current GPU; (0, 0) in simulator mode."""
    if device.MODE != "gpu":
        return (0, 0)
    from numba import cuda

    return tuple(cuda.get_current_device().compute_capability)


def has_compute_capability(needed: tuple[int, int], what: str) -> bool:
    """True when the GPU is at least ``needed``; otherwise print one line saying what is skipped and why."""
    cc = compute_capability()
    if cc >= tuple(needed):
        return True
    print(f"{what} needs compute capability {needed[0]}.{needed[1]} or newer; "
          f"this GPU has {cc[0]}.{cc[1]}, so it is skipped here.")
    return False
