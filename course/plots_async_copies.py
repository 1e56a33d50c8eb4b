"""Figures for the chapter *Asynchronous copies and pipelines*."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Patch


def pipeline_timeline(load: float = 3.0, compute: float = 2.0, tiles: int = 6, stages=(1, 2, 3)):
    """A schematic (not a measurement) of one block's copies and FMAs over time, following the
    chapter's loops. With 1 stage, the copy of tile i starts when the FMAs of tile i - 1 end.
    With s stages, tiles 0 to s - 2 are copied first, and the copy of tile i (i >= s - 1) is
    issued as the FMAs of tile i - s + 1 begin. A copy takes ``load`` time units, a tile's FMAs
    ``compute``; the FMAs of a tile start once its copy has landed and the previous tile is done.
    Returns the figure and, for each number of stages, when the last tile is done."""
    fig, axes = plt.subplots(len(stages), 1, figsize=(7.5, 1.0 + 1.2 * len(stages)), sharex=True)
    axes = np.atleast_1d(axes)
    ends = {}
    for ax, s in zip(axes, stages):
        lanes = max(s - 1, 1)                       # copies in flight at once
        copy_start, comp_start, comp_end = [], [], []
        for i in range(tiles):
            if s == 1:
                start = comp_end[i - 1] if i else 0.0
            else:
                start = comp_start[i - s + 1] if i >= s - 1 else 0.0
            copy_start.append(start)
            begin = max(start + load, comp_end[i - 1] if i else 0.0)
            comp_start.append(begin)
            comp_end.append(begin + compute)
        for i in range(tiles):
            y = 1.0 + 0.8 * (i % lanes)
            ax.broken_barh([(copy_start[i], load)], (y, 0.7), color="tab:orange", alpha=0.85)
            ax.text(copy_start[i] + load / 2, y + 0.35, str(i), ha="center", va="center", fontsize=8)
            ax.broken_barh([(comp_start[i], compute)], (0.1, 0.7), color="tab:blue")
            ax.text(comp_start[i] + compute / 2, 0.45, str(i), ha="center", va="center", color="white",
                    fontsize=8)
        ends[s] = comp_end[-1]
        ax.set_yticks([0.45] + [1.35 + 0.8 * j for j in range(lanes)],
                      labels=["FMAs"] + ["copies"] * lanes)
        ax.set_ylim(0, 1.2 + 0.8 * lanes)
        name = "1 stage: copy, wait, compute" if s == 1 else f"{s} stages: up to {s - 1} tile(s) in flight"
        ax.set_title(f"{name}; the last tile is done at t = {comp_end[-1]:g}", fontsize=10, loc="left")
        ax.grid(True, axis="x", alpha=0.3)
    axes[-1].set_xlabel(f"time (arbitrary units): a copy takes {load:g}, a tile's FMAs {compute:g}")
    fig.legend(handles=[Patch(color="tab:orange", label="copy of tile i in flight"),
                        Patch(color="tab:blue", label="FMAs on tile i")],
               loc="upper right", fontsize=8, ncol=2)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return fig, ends


def sgemm_steps(tflops: dict, cublas_label: str, title: str, highlight=()):
    """Horizontal bars: each SGEMM step's TFLOP/s, with cuBLAS as a dashed line and the share of it
    written at the end of each bar."""
    labels = [k for k in tflops if k != cublas_label]
    values = [tflops[k] for k in labels]
    fig, ax = plt.subplots(figsize=(7.5, 0.45 * len(labels) + 1.4))
    colors = ["tab:green" if k in highlight else ("tab:purple" if "cp.async" in k else "tab:blue")
              for k in labels]
    ax.barh(labels, values, color=colors)
    ref = tflops[cublas_label]
    ax.axvline(ref, color="black", linestyle="--", linewidth=1, label=f"{cublas_label}")
    ax.axvline(0.8 * ref, color="tab:gray", linestyle=":", linewidth=1.2, label="0.8 of it")
    for y, v in enumerate(values):
        ax.text(v, y, f" {v / ref:.2f}", va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("TFLOP/s")
    ax.set_xlim(0, 1.12 * max(values + [ref]))
    ax.set_title(title, fontsize=10)
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def stencil_bandwidth(gbps: dict, blocks_per_sm, copy_gbps: float, title: str):
    """One line per stencil variant: effective bandwidth against the blocks resident per SM."""
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    x = np.arange(len(blocks_per_sm))
    for label, values in gbps.items():
        style = "o--" if "registers" in label else "o-"
        ax.plot(x, values, style, label=label)
    ax.axhline(copy_gbps, color="black", linestyle="--", linewidth=1, label="device-to-device copy")
    ax.set_xticks(x, labels=[str(b) for b in blocks_per_sm])
    ax.set_xlabel("blocks of 256 threads walking the array, per SM")
    ax.set_ylabel("GB/s (bytes read + written / time)")
    ax.set_ylim(0, 1.1 * max(copy_gbps, max(max(v) for v in gbps.values())))
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return fig


def stage_sweep(ratio: dict, bks, stages, title: str):
    """A heat map of each build's share of cuBLAS: step along k (rows) by number of stages
    (columns); a missing build (too much shared memory, or no cp.async here) is left blank."""
    grid = np.array([[ratio.get((bk, s), np.nan) for s in stages] for bk in bks])
    fig, ax = plt.subplots(figsize=(6.0, 0.7 * len(bks) + 1.6))
    shown = ax.imshow(grid, cmap="viridis", aspect="auto")
    for i in range(len(bks)):
        for j in range(len(stages)):
            if np.isfinite(grid[i, j]):
                ax.text(j, i, f"{grid[i, j]:.2f}", ha="center", va="center", color="white", fontsize=9)
    ax.set_xticks(range(len(stages)), labels=[str(s) for s in stages])
    ax.set_yticks(range(len(bks)), labels=[str(b) for b in bks])
    ax.set_xlabel("stages (tiles of A and B in shared memory)")
    ax.set_ylabel("BK (step along k)")
    ax.set_title(title, fontsize=10)
    fig.colorbar(shown, ax=ax, label="share of cuBLAS")
    fig.tight_layout()
    return fig
