"""Figures of the lab *Batching*: the engine's cost fit, p99 against the arrival rate, and
latency distributions.

Each function draws one figure from measured or simulated data and returns it; the notebook
shows it with ``plt.show()``.
"""
from __future__ import annotations

import numpy as np


def cost_fit(grid, seconds, t0, t_token):
    """Time of one forward pass against the padded tokens b x L, one colour per L, with the
    fit t0 + t_token x (``grid``: the (b, L) pairs, ``seconds``: one time per pair)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for L in sorted({L for _, L in grid}):
        pts = [(b * LL, s * 1e3) for (b, LL), s in zip(grid, seconds) if LL == L]
        ax.plot(*zip(*pts), "o", label=f"L = {L}")
    xs = np.linspace(0, max(b * L for b, L in grid), 50)
    ax.plot(xs, (t0 + t_token * xs) * 1e3, "k-", lw=1, label="fit")
    ax.set_xlabel("padded tokens in the batch (b x L)")
    ax.set_ylabel("one forward pass (ms)")
    ax.set_title("The engine's cost: a fixed part plus a part per padded token")
    ax.legend(fontsize=9)
    return fig


def p99_curves(rates, curves, bound_s):
    """p99 latency of each policy against the arrival rate, log-log, with the latency bound."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    top = 4 * bound_s * 1e3
    for name, c in curves.items():
        # A p99 far past the bound (or a run stopped once 1% missed it) is drawn off the top.
        ax.plot(rates, np.minimum(np.asarray(c) * 1e3, 2 * top), "o-", ms=3, label=name)
    ax.axhline(bound_s * 1e3, color="k", ls="--", lw=1, label="latency bound")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(top=top)
    ax.xaxis.set_major_formatter(plt.ScalarFormatter())
    ax.xaxis.set_minor_formatter(plt.NullFormatter())
    ax.set_xlabel("arrival rate (requests/s)")
    ax.set_ylabel("p99 latency (ms)")
    ax.set_title("Where each policy's p99 crosses the bound is its capacity")
    ax.legend(fontsize=9)
    return fig


def latency_cdf(latencies_s, bound_s, rate):
    """Share of requests answered within each latency, one curve per policy
    (``latencies_s[name]``: its latencies in seconds), with the bound and the 99% line."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for name, lat_s in latencies_s.items():
        lat = np.sort(np.asarray(lat_s)) * 1e3
        ax.plot(lat, np.arange(1, lat.size + 1) / lat.size, label=name)
    ax.axvline(bound_s * 1e3, color="k", ls="--", lw=1, label="latency bound")
    ax.axhline(0.99, color="gray", ls=":", lw=1)
    ax.set_xscale("log")
    ax.set_xlabel("request latency (ms)")
    ax.set_ylabel("share of requests answered within")
    ax.set_title(f"The real server at {rate:.0f} requests/s")
    ax.legend(fontsize=9)
    return fig
