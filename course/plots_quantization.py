"""Figures of the chapter *Quantization*: codes used, per-row error, time against batch size.

Each function draws one figure from measured or computed data and returns it; the notebook shows it.
"""
from __future__ import annotations

import numpy as np


def code_histograms(q_sym, q_asym, zero_point):
    """The int8 codes of symmetric quantization beside the uint8 codes of asymmetric, log counts."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(7.5, 3.4), sharey=True)
    axes[0].hist(np.asarray(q_sym).ravel().astype(int), bins=np.arange(-128, 129), color="tab:blue")
    axes[0].set_xlim(-128, 128)
    axes[0].set_title("symmetric int8: the negative codes are wasted")
    axes[1].hist(np.asarray(q_asym).ravel().astype(int), bins=np.arange(0, 257), color="tab:green")
    axes[1].set_xlim(0, 256)
    axes[1].set_title(f"asymmetric uint8 (zero point {zero_point}): codes across the whole range")
    for ax in axes:
        ax.set_xlabel("code")
        ax.set_yscale("log")
    axes[0].set_ylabel("values (log)")
    fig.tight_layout()
    return fig


def row_errors(per_tensor, per_row, outlier_row, gain):
    """Relative RMS error of each row with one scale for the tensor and with a scale per row."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    ax.semilogy(per_tensor, ".", color="tab:red", markersize=3, label="one scale for the tensor")
    ax.semilogy(per_row, ".", color="tab:blue", markersize=3, label="a scale per row")
    ax.axvline(outlier_row, color="gray", linewidth=0.8, linestyle="--")
    ax.set_xlabel("row")
    ax.set_ylabel("relative RMS error of the row (log)")
    ax.set_title(f"Row {outlier_row} scaled by {gain:g}: one scale coarsens every other row")
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return fig


COLORS = {"float16, cuBLAS": "tab:gray", "int8, our kernel": "tab:blue", "int8, dequantize + cuBLAS": "tab:orange"}


def times_against_batch(sweep, batches, fp16_floor_us, int8_floor_us, title):
    """Left: time per call of each path against the batch, with each format's bytes at the copy
    bandwidth (dotted); right: float16 time over each int8 path's time.

    ``sweep[path][batch]`` is a time in seconds; the floors hold one time in us per batch.
    """
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_r) = plt.subplots(1, 2, figsize=(7.5, 4))
    for label, points in sweep.items():
        bs = sorted(points)
        ax_t.loglog(bs, [points[b] * 1e6 for b in bs], "o-", color=COLORS[label], label=label)
        if label != "float16, cuBLAS":
            ax_r.semilogx(bs, [sweep["float16, cuBLAS"][b] / points[b] for b in bs], "o-",
                          color=COLORS[label], label=label)
    bs = np.asarray(batches)
    ax_t.loglog(bs, fp16_floor_us, ":", color="tab:gray", label="float16 bytes at the copy bandwidth")
    ax_t.loglog(bs, int8_floor_us, ":", color="tab:blue", label="int8 bytes at the copy bandwidth")
    ax_t.set_xlabel("batch B (vectors per call)")
    ax_t.set_ylabel("time per call (us)")
    ax_t.set_title(title)
    ax_r.axhline(1.0, color="black", linewidth=0.8)
    ax_r.axhline(2.0, color="tab:blue", linewidth=0.8, linestyle=":")
    ax_r.set_xlabel("batch B (vectors per call)")
    ax_r.set_ylabel("float16 time / int8 time")
    ax_r.set_title("Above 1 int8 weights pay; the dotted line is the bytes' factor of 2")
    for ax in (ax_t, ax_r):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=9)
    fig.tight_layout()
    return fig
