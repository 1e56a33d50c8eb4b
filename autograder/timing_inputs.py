"""The inputs an exercise is timed on, drawn on a background thread ahead of their use.

They depend only on the run's seed and the exercise, never on the submission. At the timing
size (hundreds of MB per set) drawing the pool and the float64 reference of its first set
takes seconds of host time per exercise, while the GPU side of grading mostly waits on the
runners. So the judge draws exercise i's pool while it grades exercise i's correctness cases,
and exercise i+1's while it times exercise i: the values are the same as drawn in line.
At most two exercises' pools are held in host memory at once.

A judge that grades submission after submission (``keep``) keeps the pools it drew, within a
share of the machine's memory: with one seed per run they are the same for every submission.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from .measure import reference64
from .spec import Exercise

POOL = 4  # input sets drawn from the secret seed for timing; every call refreshes one of them
_KEPT: dict = {}  # (seed, index, exercise) -> TimingPool, in a judge that grades many submissions
_KEEP_BYTES = [0]  # how many bytes of pools may be kept (0: none, as in check())
_DRAWING: dict = {}  # (seed, index, exercise) -> Future of a draw under way, which a second asker waits for
_LOCK = threading.Lock()


def keep(fraction: float = 0.25, most: int = 24 << 30) -> None:
    """Keep drawn pools for later submissions, up to ``fraction`` of physical memory."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        total = 8 << 30
    _KEEP_BYTES[0] = int(min(most, fraction * total))


def _nbytes(pool: "TimingPool") -> int:
    return sum(v.nbytes for s in pool.sets for v in s.values() if isinstance(v, np.ndarray)) + \
        sum(v.nbytes for v in pool.ref64.values() if isinstance(v, np.ndarray))


def _kept(key, make) -> "TimingPool":
    with _LOCK:
        pool = _KEPT.get(key)
    if pool is None:
        pool = make()
        with _LOCK:  # pools of other exercises may be kept by another thread meanwhile
            if _KEEP_BYTES[0] and sum(map(_nbytes, _KEPT.values())) + _nbytes(pool) <= _KEEP_BYTES[0]:
                for arrays in pool.sets + [pool.ref64]:  # shared by every later submission: never written
                    for v in arrays.values():
                        if isinstance(v, np.ndarray):
                            v.setflags(write=False)
                _KEPT[key] = pool
    return pool


@dataclass
class TimingPool:
    sets: list[dict[str, Any]]  # POOL input sets, as the exercise's inputs function returns them
    ref64: dict[str, np.ndarray]  # the float64 reference of sets[0], checked before timing


def draw(ex: Exercise, seed: int, index: int) -> TimingPool:
    """The pool exercise ``index`` of the lab is timed on, from the run's seed (kept by a judge
    that grades many submissions). A pool already being drawn, for a submission that has since
    ended, is waited for, never drawn a second time alongside."""
    key = (seed, index, ex.name)
    with _LOCK:
        drawing = _DRAWING.get(key)
        mine = drawing is None
        if mine:
            drawing = _DRAWING[key] = Future()
    if not mine:
        return drawing.result()
    try:
        pool = _kept(key, lambda: _draw(ex, seed, index))
        drawing.set_result(pool)
        return pool
    except BaseException as e:
        drawing.set_exception(e)
        raise
    finally:
        with _LOCK:
            del _DRAWING[key]


def _draw(ex: Exercise, seed: int, index: int) -> TimingPool:
    rng = np.random.default_rng([seed, index, 1])
    make = ex.timing_inputs or ex.inputs
    sets = [make(ex.timing_case, rng) for _ in range(POOL)]
    return TimingPool(sets, reference64(ex, sets[0]))


class Prefetch:
    """Pools drawn one exercise ahead. ``timed``: the (index, exercise) pairs that may be timed,
    in grading order; an exercise that fails its cases is never timed and its pool is dropped."""

    def __init__(self, timed: list[tuple[int, Exercise]], seed: int) -> None:
        self.timed, self.seed = timed, seed
        self.futures: dict[int, Future] = {}
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="timing-inputs") if timed else None

    def starting(self, index: int) -> None:
        """The judge starts grading exercise ``index``: draw its pool and the next one's."""
        if self.pool is None:
            return
        for i in [i for i in self.futures if i < index]:
            self.futures.pop(i).cancel()
        following = [(i, ex) for i, ex in self.timed if i >= index][:2]
        for i, ex in following:
            if i not in self.futures and (self.seed, i, ex.name) not in _KEPT:
                self.futures[i] = self.pool.submit(draw, ex, self.seed, i)

    def take(self, ex: Exercise, index: int) -> TimingPool:
        """Exercise ``index``'s pool, drawn here and now if it was not drawn ahead."""
        future = self.futures.pop(index, None)
        return future.result() if future is not None else draw(ex, self.seed, index)

    def close(self) -> None:
        if self.pool is not None:
            for f in self.futures.values():
                f.cancel()
            self.futures.clear()
            self.pool.shutdown(wait=False, cancel_futures=True)
