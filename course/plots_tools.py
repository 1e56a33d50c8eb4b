"""Figures of the chapter *Tools*: the roofline drawn from Nsight Compute's counters, and which
element each thread of a warp touched (from the simulator's trace)."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from . import roofline


def measured_roofline(ceilings, points, title: str):
    """Place each measured kernel on the FP32 roofline.

    ``points``: (label, flops, dram_bytes, seconds), all read from the counters. A kernel with no
    counted floating-point instruction (or no DRAM traffic) has no place on a log scale; it is
    left out, and its label returned. Returns (axes, labels left out).
    """
    kernels = [roofline.Kernel(label, flops, nbytes, seconds) for label, flops, nbytes, seconds in points
               if flops > 0 and nbytes > 0 and seconds > 0]
    left_out = [label for label, flops, nbytes, seconds in points if not (flops > 0 and nbytes > 0 and seconds > 0)]
    _, ax = plt.subplots(figsize=(7.5, 4.5))
    roofline.plot(ceilings, kernels, ax=ax, title=title, intensity_range=(1 / 16, 4096), tensor=False,
                  labels="legend")
    ax.legend(loc="lower right", fontsize=9)
    ax.set_xlabel("FLOPs counted / DRAM bytes counted (FLOP/byte)")
    ax.set_ylabel("FLOPs counted / duration (GFLOP/s)")
    return ax, left_out


def warp_access_map(lanes, others, origin, title: str):
    """One warp's access, from ``memtrace.warp_window``: each element it touched coloured by the
    lane (thread 0-31 of the warp) that touched it, elements other threads touched in grey. A
    coalesced access is one run along a row; a strided one runs down a column."""
    rows, cols = lanes.shape
    fig, ax = plt.subplots(figsize=(7.5, max(1.6, min(4.5, 0.9 + 0.22 * rows))))
    ax.imshow(np.where(others, 0.85, 1.0), cmap="gray", vmin=0, vmax=1, aspect="equal",
              extent=(-0.5, cols - 0.5, rows - 0.5, -0.5))
    shown = np.ma.masked_less(lanes, 0)
    image = ax.imshow(shown, cmap="viridis", vmin=0, vmax=31, aspect="equal",
                      extent=(-0.5, cols - 0.5, rows - 0.5, -0.5))
    fig.colorbar(image, ax=ax, label="lane of the warp", fraction=0.04, pad=0.02)
    r0, c0 = origin
    ax.set_xlabel(f"column (from {c0})", fontsize=9)
    ax.set_ylabel(f"row (from {r0})", fontsize=9)
    ax.set_title(title, fontsize=10)
    ax.tick_params(labelsize=9)
    fig.tight_layout()
    return fig
