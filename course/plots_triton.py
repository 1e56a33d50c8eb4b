"""Figures of the chapter *Triton*: programs and masks, Triton's random numbers, a softmax sweep.

Each function draws one figure at the page's width (7.5 inches) and returns it;
the notebook shows it with ``plt.show()``.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Patch


def programs_and_masks(owner, n, block):
    """Which program wrote each element of a vector of ``n`` (``owner``: program id per element),
    with the lanes the mask switched off drawn past the end of the vector."""
    programs = int(np.max(owner)) + 1
    lanes = programs * block
    fig, ax = plt.subplots(figsize=(7.5, 2.2))
    cmap = plt.get_cmap("tab10")
    for i in range(lanes):
        inside = i < n
        color = cmap(int(owner[i]) % 10) if inside else "white"
        ax.add_patch(plt.Rectangle((i, 0), 1, 1, facecolor=color, edgecolor="black", linewidth=0.5,
                                   hatch=None if inside else "////"))
    for p in range(programs):
        ax.text(p * block + block / 2, 1.25, f"program {p}: offsets {p * block} to {(p + 1) * block - 1}",
                ha="center", va="bottom", fontsize=9)
    ax.plot([n, n], [-0.2, 1.1], color="black", linewidth=2)
    ax.text(n, -0.3, f"n = {n}", ha="center", va="top", fontsize=9)
    ax.set_xlim(0, lanes)
    ax.set_ylim(-0.9, 1.9)
    ax.axis("off")
    ax.legend(handles=[Patch(facecolor="white", edgecolor="black", hatch="////",
                             label="mask False: no load, no store")],
              loc="lower left", fontsize=9, frameon=False, bbox_to_anchor=(0.0, -0.15))
    ax.set_title(f"A vector of {n} elements, blocks of {block}: {programs} programs", fontsize=10)
    fig.tight_layout()
    return fig


def rand_histogram(values, bins=32):
    """The values of ``tl.rand`` against the flat density of a uniform distribution on [0, 1)."""
    fig, ax = plt.subplots(figsize=(7.5, 3.0))
    ax.hist(values, bins=bins, range=(0, 1), density=True, color="tab:blue", alpha=0.75,
            label=f"{len(values):,} values of tl.rand")
    ax.axhline(1.0, color="black", linestyle="--", linewidth=1, label="uniform density")
    ax.set_xlabel("value")
    ax.set_ylabel("density")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.4)
    ax.legend(loc="upper center", fontsize=9, ncol=2)
    ax.set_title("One random number per offset, uniform on [0, 1)", fontsize=10)
    fig.tight_layout()
    return fig


def softmax_sweep(cols, gbps, copy_gbps):
    """Effective bandwidth (``gbps``: name -> one value per row length in ``cols``) against the
    row length, with the copy's bandwidth as the ceiling."""
    fig, ax = plt.subplots(figsize=(7.5, 4.0))
    for (name, values), style in zip(gbps.items(), ("o-", "s-", "^-", "x--")):
        ax.semilogx(cols, values, style, base=2, label=name)
    ax.axhline(copy_gbps, color="black", linestyle="--", linewidth=1, label="device-to-device copy")
    ax.set_xticks(cols, labels=[f"{c:,}" for c in cols])
    ax.set_xlabel("columns per row (the matrix holds the same number of values at every length)")
    ax.set_ylabel("GB/s (read once + write once)")
    ax.set_ylim(0, 1.1 * copy_gbps)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right", fontsize=9)
    ax.set_title("Softmax bandwidth against the row length", fontsize=10)
    fig.tight_layout()
    return fig
