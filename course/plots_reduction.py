"""Figures of the chapter *Reduction*: which threads add at each level of a tree, and a warp's shuffles.

Each function draws one figure at the page's width (7.5 inches, labels of 9 points or more)
and returns it; the notebook shows it with ``plt.show()``.
"""
from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import ListedColormap

WARP = 32
IDLE = "#e6e6e6"  # a thread that does not add at this level


def tree_rules(rules, strides, block, small=16):
    """Top row: the adds of each level on ``small`` slots (arrows: slot t + s into slot t).
    Bottom row: which of ``block`` threads add at each level, with the warps' boundaries.

    ``rules`` is a list of (title, rule) with rule(t, s) true where thread t adds at stride s;
    ``strides(rule, width)`` gives the stride of each level, first level first.
    """
    fig, axes = plt.subplots(2, len(rules), figsize=(7.5, 4.3), gridspec_kw={"height_ratios": [1, 1.1]})
    for col, (title, rule) in enumerate(rules):
        ax = axes[0, col]
        for level, s in enumerate(strides(rule, small)):
            for t in range(small):
                working = rule(t, s)
                ax.add_patch(plt.Rectangle((t, level), 0.9, 0.6, facecolor="tab:blue" if working else IDLE))
                if working:
                    ax.annotate("", xy=(t + 0.45, level + 0.3), xytext=(t + s + 0.45, level + 0.3),
                                arrowprops=dict(arrowstyle="->", color="tab:red", lw=1,
                                                connectionstyle="arc3,rad=0.35"))
            ax.text(-0.4, level + 0.3, f"s = {s}", ha="right", va="center", fontsize=9)
        ax.set_xlim(-2.2, small)
        ax.set_ylim(len(strides(rule, small)) - 0.2, -0.5)
        ax.set_xticks(np.arange(small) + 0.45, labels=[str(t) for t in range(small)], fontsize=9)
        ax.set_yticks([])
        ax.set_xlabel("slot t of the shared array (thread t)")
        ax.set_title(f"{title}: {small} slots")

        ax = axes[1, col]
        levels = strides(rule, block)
        picture = np.array([[rule(t, s) for t in range(block)] for s in levels], dtype=float)
        ax.imshow(picture, aspect="auto", cmap=ListedColormap([IDLE, "tab:blue"]), vmin=0, vmax=1,
                  interpolation="nearest")
        for w in range(1, block // WARP):
            ax.axvline(w * WARP - 0.5, color="tab:red", linewidth=1, linestyle="--")
        ax.set_yticks(range(int(math.log2(block))), labels=[f"s = {s}" for s in levels], fontsize=9)
        ax.set_xticks([w * WARP + WARP // 2 for w in range(block // WARP)],
                      labels=[f"warp {w}" for w in range(block // WARP)], fontsize=9)
        ax.set_title(f"{title}: all {block} threads (blue = adds at this level)")
    fig.tight_layout()
    return fig


def warp_shuffle_steps(deltas=(16, 8, 4, 2, 1)):
    """The five shfl_down_sync steps of a warp sum: lane + delta sends to lane; grey lanes no longer count."""
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    for row, delta in enumerate(deltas):
        for lane in range(WARP):
            # Before this step, the values of lanes below 2 * delta still matter; lanes below delta receive.
            ax.plot(lane, row, "o", color="tab:blue" if lane < 2 * delta else "#cccccc", markersize=5)
            if lane < delta:
                ax.annotate("", xy=(lane, row + 0.93), xytext=(lane + delta, row),
                            arrowprops=dict(arrowstyle="->", color="tab:red", lw=0.8))
                ax.annotate("", xy=(lane, row + 0.93), xytext=(lane, row),
                            arrowprops=dict(arrowstyle="->", color="tab:blue", lw=0.8))
        ax.text(-1.2, row + 0.5, f"delta = {delta}", ha="right", va="center", fontsize=9)
    ax.plot(0, len(deltas), "o", color="tab:green", markersize=8)
    ax.text(0.6, len(deltas), "lane 0: the warp's sum", va="center", fontsize=9)
    ax.set_xlim(-5.5, WARP)
    ax.set_ylim(len(deltas) + 0.4, -0.4)
    ax.set_xticks(range(0, WARP, 2))
    ax.set_yticks([])
    ax.set_xlabel("lane")
    ax.set_title("Summing a warp with shfl_down_sync (grey: values that no longer reach lane 0)")
    return fig
