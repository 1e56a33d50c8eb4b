"""Capacity, the figure of merit of the scheduling labs (Lab 12 batching, Lab 17
inflight_batching): the highest arrival rate at which a policy still meets its service
objective, found on one trace played faster and faster.

The rates form a geometric ladder. A policy is tried at the lightest rate, then at the heaviest,
then by bisection between the last rate within the objective and the first over it; the
capacity is interpolated between those two rungs. The labs say what "within" means (a p99
latency bound, a share of requests on time); this module holds the search and the verdict.
"""
from __future__ import annotations

import hashlib
import math
from typing import Callable, Mapping, Sequence

import numpy as np

from .spec import Assessment


_OF_REFERENCE: dict = {}


def of_reference(cases, measure: Callable):
    """``measure(cases)`` for the reference policy, once per set of cases in this process: a judge
    grades a class with one seed, so every submission meets the same cases, and the reference's
    capacity on them (its whole simulation, half a policy exercise's grading) is the same."""
    h = hashlib.sha256()
    for params, inputs in cases:
        h.update(repr(sorted(params.items())).encode())
        for name in sorted(inputs):
            value = np.ascontiguousarray(inputs[name])
            h.update(f"{name} {value.dtype} {value.shape}".encode() + value.tobytes())
    key = (getattr(measure, "__module__", ""), getattr(measure, "__qualname__", ""), h.hexdigest())
    if key not in _OF_REFERENCE:
        if len(_OF_REFERENCE) > 16:
            _OF_REFERENCE.clear()
        _OF_REFERENCE[key] = measure(cases)
    return _OF_REFERENCE[key]


def ladder(low: float, high: float, step: float) -> np.ndarray:
    """Rates from ``low`` up to at most ``high``, each ``step`` times the last."""
    return low * step ** np.arange(int(np.log(high / low) / np.log(step)) + 1)


def search(rungs: int, within: Callable[[int], bool]) -> None:
    """Call ``within(rung)`` for the lightest rung, then the heaviest, then bisect between
    them: the values of ``within`` grow worse with the rate, so the calls end at the last rung
    within. ``within`` records what it ran; the order of its calls is the record's order."""
    lo, hi = 0, rungs - 1
    if within(lo) and not within(hi):
        while hi - lo > 1:  # invariant: lo within, hi over
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if within(mid) else (lo, mid)


def crossing(rates: np.ndarray, step: float, values: Mapping[int, float], limit: float,
             ceiling: float = math.inf) -> float:
    """The rate where ``values`` (by rung, worse when larger) crosses ``limit``: interpolated
    between the highest rung within the limit and the rung above it, or that rung's rate when
    the rung above was not run, or ran into ``ceiling`` (a run stopped early). 0 when the
    lightest rung is over the limit."""
    if not values.get(0, math.inf) <= limit:
        return 0.0
    k = max(j for j, v in values.items() if v <= limit)
    above = values.get(k + 1)
    if above is None or not above < ceiling:
        return float(rates[k])
    frac = (limit - values[k]) / (above - values[k])
    return float(rates[k] * step ** frac)


def geometric_mean(capacities: Sequence[float]) -> float:
    """Over the traces; 0 when any trace's capacity is 0."""
    return float(np.exp(np.mean(np.log(capacities)))) if all(c > 0 for c in capacities) else 0.0


def verdict(cases: Sequence, lines: list[str], passed_message: str, ratio: float | None,
            summary: str) -> Assessment:
    """The Assessment of a policy from one "pass ..." or "FAIL ..." line per case."""
    passed = all(line.startswith("pass") for line in lines)
    failed = sum(not line.startswith("pass") for line in lines)
    message = passed_message if passed else f"{failed} of {len(cases)} traces failed"
    return Assessment(passed, lines, message, ratio, summary if passed and ratio is not None else "")
