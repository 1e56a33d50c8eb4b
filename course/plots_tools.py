"""Figures of the chapter *Tools*: the roofline drawn from Nsight Compute's counters."""
from __future__ import annotations

import matplotlib.pyplot as plt

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
