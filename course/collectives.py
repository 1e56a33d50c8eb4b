"""Collectives: the ring's cost model, nccl-tests' bandwidths, and a sweep to run on real ranks.

The chapter *Collectives and NCCL* and Lab 14 use this module.

Cost model (``bw`` in bytes/s, sizes in bytes, ``k`` ranks):

- a chain broadcast sends the whole message down ``k - 1`` links one after the other;
- a pipelined broadcast cuts it into ``chunks`` pieces that follow each other down the chain;
- a ring all-reduce is a reduce-scatter then an all-gather, ``2(k-1)`` steps of ``n/k`` bytes,
  each step costing a latency ``alpha`` on top of its transfer.

Bandwidths as nccl-tests reports them (its document ``doc/PERFORMANCE.md``):
``algbw = S / t`` and ``busbw = algbw * bus_factor(op, k)``.

``sweep`` is a worker for :func:`course.dist.launch`::

    results = dist.launch("course.collectives:sweep", nprocs=2, op="all_reduce",
                          sizes=[1 << 10, 1 << 20])
"""
from __future__ import annotations

import math
from typing import Iterable, Sequence

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all")

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30


# --------------------------------------------------------------------------- bandwidths
def bus_factor(op: str, k: int) -> float:
    """algbw -> busbw correction of nccl-tests (doc/PERFORMANCE.md, "Summary"):
    all_reduce 2(k-1)/k; all_gather, reduce_scatter, all_to_all (k-1)/k; broadcast, reduce 1."""
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    if op == "all_reduce":
        return 2 * (k - 1) / k
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (k - 1) / k
    if op in ("broadcast", "reduce"):
        return 1.0
    raise ValueError(f"unknown collective {op!r}; known: {', '.join(OPS)}")


# --------------------------------------------------------------------------- cost model
def chain_broadcast_time(n_bytes: float, k: int, bw: float) -> float:
    """Seconds to broadcast n bytes down a chain of k ranks, whole message per hop: (k-1) n / bw."""
    return (k - 1) * n_bytes / bw


def pipelined_broadcast_time(n_bytes: float, k: int, bw: float, chunks: int) -> float:
    """Chain broadcast with the message cut into S = chunks pieces that follow each other:
    the first piece needs k-1 hops, the other S-1 arrive one hop-time apart, each hop n/(S bw):
    (S + k - 2) n / (S bw), which tends to n / bw as S grows."""
    if chunks < 1:
        raise ValueError(f"chunks must be at least 1, got {chunks}")
    if k < 2:
        return 0.0
    return n_bytes * (chunks + k - 2) / (chunks * bw)


def ring_allreduce_time(n_bytes: float, k: int, bw: float, alpha: float = 0.0) -> float:
    """Ring all-reduce of n bytes on k ranks: 2(k-1) steps, each moving n/k bytes per rank and
    costing alpha seconds of latency: 2(k-1) alpha + 2(k-1)/k * n / bw."""
    if k < 2:
        return 0.0
    return 2 * (k - 1) * alpha + 2 * (k - 1) / k * n_bytes / bw


def fit_ring(sizes_bytes: Sequence[float], seconds: Sequence[float], k: int) -> tuple[float, float]:
    """Least-squares fit of ``ring_allreduce_time(n, k, bw, alpha)`` to measured times.

    The model is linear in (alpha, 1/bw). Each equation is divided by its measured time, so the
    fit minimises relative errors: small sizes (which pin alpha) weigh as much as large ones
    (which pin bw). Returns (alpha in s, bw in bytes/s); alpha is at least 0.
    """
    import numpy as np

    n = np.asarray(sizes_bytes, dtype=np.float64)
    t = np.asarray(seconds, dtype=np.float64)
    if n.shape != t.shape or n.size < 2:
        raise ValueError("need at least two (size, time) pairs of equal length")
    if k < 2:
        raise ValueError("a ring needs k >= 2")
    if np.any(t <= 0):
        raise ValueError("times must be positive")
    a = np.stack([np.full_like(n, 2.0 * (k - 1)), 2.0 * (k - 1) / k * n], axis=1) / t[:, None]
    b = np.ones_like(t)
    # Non-negative least squares on two unknowns: the unconstrained solution if both are >= 0,
    # otherwise the better of the two one-unknown fits.
    candidates = []
    (alpha, inv_bw), *_ = np.linalg.lstsq(a, b, rcond=None)
    if alpha >= 0 and inv_bw >= 0:
        candidates.append((alpha, inv_bw))
    for col in (0, 1):
        x = max(0.0, float(np.dot(a[:, col], b) / np.dot(a[:, col], a[:, col])))
        candidates.append((x, 0.0) if col == 0 else (0.0, x))
    alpha, inv_bw = min(candidates, key=lambda c: float(np.sum((a @ np.array(c) - b) ** 2)))
    if inv_bw <= 0:
        raise ValueError("the fit found no bandwidth term: do the times grow with the size?")
    return float(alpha), float(1.0 / inv_bw)


# --------------------------------------------------------------------------- measuring
def _elements(op: str, n_bytes: int, k: int, itemsize: int = 4) -> int:
    """Elements of the buffer the size refers to, rounded down to a multiple of k (at least k),
    so that it splits evenly into k chunks."""
    per = max(1, n_bytes // (itemsize * k))
    return per * k


def _pattern(n: int, device, offset: float = 0.0):
    """Small exact integers in float32, different at every position, so a misplaced chunk shows."""
    import torch

    return (torch.arange(n, device=device, dtype=torch.int64) % 251).to(torch.float32) + offset


def _collective(op: str, rank, n: int):
    """Buffers for one collective of n elements (the size nccl-tests counts) and a function that
    runs it. Returns (run, check): check() runs it once on fresh data and raises AssertionError
    with a clear message if any rank's result is wrong."""
    import torch
    import torch.distributed as dist

    k, r, dev = rank.world, rank.rank, rank.device
    m = n // k  # the per-rank chunk
    # torch 2.13 renamed these two (same arguments); older versions have only the first names.
    all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

    if op == "all_reduce":          # S = the buffer, in and out
        buf = torch.empty(n, device=dev)
        run = lambda: dist.all_reduce(buf)

        def check():
            buf.copy_(_pattern(n, dev, r))
            run()
            want = k * _pattern(n, dev) + k * (k - 1) / 2
            return buf, want
    elif op == "all_gather":        # S = the gathered output; each rank sends S/k
        inp, out = torch.empty(m, device=dev), torch.empty(n, device=dev)
        run = lambda: all_gather(out, inp)

        def check():
            inp.copy_(_pattern(m, dev, 1000 * r))
            run()
            want = torch.cat([_pattern(m, dev, 1000 * j) for j in range(k)])
            return out, want
    elif op == "reduce_scatter":    # S = the input; each rank receives S/k
        inp, out = torch.empty(n, device=dev), torch.empty(m, device=dev)
        run = lambda: reduce_scatter(out, inp)

        def check():
            inp.copy_(_pattern(n, dev, r))
            run()
            want = (k * _pattern(n, dev) + k * (k - 1) / 2)[r * m:(r + 1) * m]
            return out, want
    elif op == "broadcast":         # S = the buffer; root 0
        buf = torch.empty(n, device=dev)
        run = lambda: dist.broadcast(buf, src=0)

        def check():
            buf.copy_(_pattern(n, dev, 7) if r == 0 else torch.zeros(n, device=dev))
            run()
            return buf, _pattern(n, dev, 7)
    elif op == "reduce":            # S = the buffer; root 0 (only its result is defined)
        buf = torch.empty(n, device=dev)
        run = lambda: dist.reduce(buf, dst=0)

        def check():
            buf.copy_(_pattern(n, dev, r))
            run()
            if r != 0:
                return None, None
            return buf, k * _pattern(n, dev) + k * (k - 1) / 2
    elif op == "all_to_all":        # S = the send buffer of one rank (= its receive buffer)
        inp, out = torch.empty(n, device=dev), torch.empty(n, device=dev)
        run = lambda: dist.all_to_all_single(out, inp)

        def check():
            # chunk j of rank r carries the tag 1000 (r k + j); rank r must receive chunk r of every rank
            inp.copy_(torch.cat([_pattern(m, dev, 1000 * (r * k + j)) for j in range(k)]))
            run()
            want = torch.cat([_pattern(m, dev, 1000 * (j * k + r)) for j in range(k)])
            return out, want
    else:
        raise ValueError(f"unknown collective {op!r}; known: {', '.join(OPS)}")

    def checked():
        got, want = check()
        rank.sync()
        if got is not None and not torch.equal(got, want):
            bad = int((got != want).sum())
            raise AssertionError(f"{op} of {n * 4} bytes on {k} ranks ({rank.backend}): rank {r} holds a wrong "
                                 f"result in {bad} of {got.numel()} elements")

    return run, checked


def sweep(rank, op: str | Iterable[str] = "all_reduce",
          sizes: Sequence[int] = (KIB, 64 * KIB, MIB, 16 * MIB, 256 * MIB),
          iters: int = 20, warmup: int = 5, bytes_per_size: int = 2 * GIB, min_iters: int = 3) -> list[dict]:
    """Time collectives on every rank of the group; a worker for ``course.dist.launch``.

    ``op`` is one collective name or a list of them (one launch, several sweeps). ``sizes`` are in
    bytes of float32 data, counted as nccl-tests counts them (doc/PERFORMANCE.md): the buffer for
    all_reduce, broadcast and reduce; the whole gathered output for all_gather; the whole input for
    reduce_scatter; one rank's send buffer for all_to_all. Each size is rounded down to a multiple
    of 4 k bytes (at least 4 k) so it splits into k chunks; the rounded size is reported.

    Per size: one run on fresh data, checked on every rank (AssertionError if wrong); then
    ``course.dist.time_per_call`` over ``iters`` calls after ``warmup``. Large sizes get fewer
    calls: about ``bytes_per_size`` bytes in all, and at least ``min_iters``.

    Returns a list of dicts {"op", "bytes", "seconds", "algbw", "busbw"} (bandwidths in bytes/s),
    the same on every rank. An op the backend lacks is left out, with a message on rank 0.
    """
    import torch

    from .dist import time_per_call

    ops = [op] if isinstance(op, str) else list(op)
    for name in ops:
        bus_factor(name, 2)  # unknown names fail here, before any work
    k = rank.world
    results = []
    for name in ops:
        for size in sizes:
            n = _elements(name, int(size), k)
            run, check = _collective(name, rank, n)
            try:
                check()
            except (RuntimeError, NotImplementedError) as e:
                if rank.on_gpu:  # under NCCL every op exists: a failure is a real error
                    raise
                if rank.rank == 0:  # gloo in some versions lacks an op (e.g. reduce_scatter)
                    print(f"skipping {name} on {rank.backend}: {str(e).splitlines()[0]}", flush=True)
                break
            nbytes = n * 4
            n_iters = max(min_iters, min(iters, bytes_per_size // max(nbytes, 1)))
            n_warm = max(1, min(warmup, n_iters))
            seconds = time_per_call(rank, run, iters=n_iters, warmup=n_warm)
            algbw = nbytes / seconds
            results.append({"op": name, "bytes": nbytes, "seconds": seconds, "algbw": algbw,
                            "busbw": algbw * bus_factor(name, k)})
            del run, check
        if rank.on_gpu:
            torch.cuda.empty_cache()  # give the largest buffers back before the next op
    return results
