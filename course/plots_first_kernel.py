"""Figures of the chapter *Your first kernel*, drawn at the page's width (7.5 inches, text of 9 points or more)."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np


def threads_of_a_launch(block_ids, thread_ids, threads_per_block, blocks):
    """One cell per thread of a 1D launch: colour = block, number = threadIdx.x, hatched = idle thread."""
    colors = plt.get_cmap("tab10").colors
    n = len(block_ids)
    total = blocks * threads_per_block
    idle = total - n
    fig, ax = plt.subplots(figsize=(7.5, 2.3), layout="constrained")
    for i in range(n):
        ax.add_patch(plt.Rectangle((i, 0), 1, 1, facecolor=colors[block_ids[i]], edgecolor="white"))
        ax.text(i + 0.5, 0.5, str(thread_ids[i]), ha="center", va="center", fontsize=9, color="white")
    last = blocks - 1  # the idle threads come from the launch configuration; they wrote nothing
    for k in range(idle):
        x = n + k
        ax.add_patch(plt.Rectangle((x, 0), 1, 1, facecolor="white", edgecolor=(*colors[last], 0.35),
                                   hatch="///", linewidth=0.8))
        ax.text(x + 0.5, 0.5, str(threads_per_block - idle + k), ha="center", va="center", fontsize=9,
                color="black", bbox=dict(facecolor="white", edgecolor="none", pad=0.5))
    for blk in range(blocks):
        ax.text(blk * threads_per_block + threads_per_block / 2, 1.12, f"block {blk}", ha="center",
                va="bottom", color=colors[blk], fontsize=10)
    ax.axvline(n, color="black", linestyle="--", linewidth=1)
    ax.text(n + 0.3, 1.38, "i = n", va="center", fontsize=9)
    ticks = np.arange(0, total, threads_per_block // 2)
    ax.set_xticks(ticks + 0.5, labels=[str(t) for t in ticks])
    ax.set_xlim(0, total)
    ax.set_ylim(0, 1.5)
    ax.set_yticks([])
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.set_xlabel("global index i = blockIdx.x * blockDim.x + threadIdx.x")
    ax.set_title("One cell per thread: color = block, number = threadIdx.x, hatched = idle", fontsize=10)
    return fig
