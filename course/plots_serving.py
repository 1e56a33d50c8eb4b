"""Figures of the chapter *Serving*: cost against batch size, a load sweep, decode-slot occupancy."""
from __future__ import annotations

import numpy as np


def cost_curve(batches, seconds, t0, t1, title):
    """Time per batch and per request against the batch size, with the fit t(b) = t0 + t1 b."""
    import matplotlib.pyplot as plt

    b = np.asarray(batches, dtype=float)
    t = np.asarray(seconds, dtype=float)
    fit_b = np.geomspace(b[0], b[-1], 100)
    fig, (left, right) = plt.subplots(1, 2, figsize=(7.5, 3.6))
    left.loglog(b, t * 1e3, "o", label="measured")
    left.loglog(fit_b, (t0 + t1 * fit_b) * 1e3, "--", label=f"{t0 * 1e3:.2f} ms + {t1 * 1e3:.3f} ms x b")
    left.set_ylabel("time per batch (ms)")
    left.set_title("per batch: nearly flat ...", fontsize=10)
    right.loglog(b, t / b * 1e3, "o", label="measured")
    right.loglog(fit_b, (t0 / fit_b + t1) * 1e3, "--", label="t0 / b + t1")
    right.axhline(t1 * 1e3, color="gray", linewidth=1, label=f"floor t1 = {t1 * 1e3:.3f} ms")
    right.set_ylabel("time per request (ms)")
    right.set_title("... so per request it falls", fontsize=10)
    for ax in (left, right):
        ax.set_xlabel("batch size b")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=9)
    fig.suptitle(title, fontsize=10)
    plt.tight_layout()
    plt.show()


def load_sweep(results, best, bound_s, title):
    """p99 (large markers) and p50 (small) against achieved throughput, one marker per run.

    ``results`` maps a configuration's name to its runs (dicts with throughput, p50, p99, ok).
    A run that met the bound is filled, one over it is open; a thin line joins the runs that met
    it in order of throughput, and a star marks the best of them.
    """
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for (name, runs), color in zip(results.items(), ["tab:red", "tab:blue"]):
        passed = sorted((p for p in runs if p["ok"]), key=lambda p: p["throughput"])
        failed = [p for p in runs if not p["ok"]]
        ax.loglog([p["throughput"] for p in passed], [p["p99"] * 1e3 for p in passed], "o-", color=color,
                  linewidth=1, label=f"{name}: p99, within the bound")
        ax.loglog([p["throughput"] for p in failed], [p["p99"] * 1e3 for p in failed], "o", color=color,
                  markerfacecolor="none", label=f"{name}: p99, over the bound")
        ax.loglog([p["throughput"] for p in runs], [p["p50"] * 1e3 for p in runs], ".", color=color, alpha=0.6,
                  label=f"{name}: p50")
        top = max(passed, key=lambda p: p["throughput"])
        ax.loglog(top["throughput"], top["p99"] * 1e3, "*", color=color, markersize=14,
                  label=f"{name}: best, {best[name]:,.0f} requests/s")
    ax.axhline(bound_s * 1e3, color="black", linestyle="--", label=f"p99 bound, {bound_s * 1e3:.0f} ms")
    ax.set_xlabel("achieved throughput (requests/s)")
    ax.set_ylabel("latency (ms)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=9, loc="upper left")
    plt.tight_layout()
    plt.show()


def occupancy(runs, slots, title):
    """Rows doing useful work in each decode step over time; ticks under the axis are prefill calls."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    for (name, run), color, level in zip(runs.items(), ["tab:red", "tab:blue"], [-0.6, -1.2]):
        times, used = zip(*[(t, rows) for t, rows, kind in run["calls"] if kind == "decode"])
        ax.step(times, used, where="pre", color=color, label=f"{name}: decode steps, done at {run['seconds']:.2f} s")
        prefills = [t for t, _, kind in run["calls"] if kind == "prefill"]
        ax.plot(prefills, [level] * len(prefills), "|", color=color, markersize=8, label=f"{name}: prefill calls")
    ax.axhline(slots, color="black", linestyle="--", linewidth=1, label=f"{slots} slots")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("rows doing useful work")
    ax.set_ylim(-1.8, slots * 1.1)
    ax.set_yticks(range(0, slots + 1, max(1, slots // 4)))  # the ticks below 0 are prefill calls
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=9)
    plt.tight_layout()
    plt.show()
