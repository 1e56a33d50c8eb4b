"""Figures of the chapter *Tensor Cores*: which lane holds which element of an ``mma`` fragment,
which shared-memory banks ``ldmatrix`` reads, how copies and maths overlap in a pipeline, the GEMM
steps against cuBLAS, and the error of each input format as k grows.

Each function draws one figure at the page's width (7.5 inches) and returns it;
the notebook shows it with ``plt.show()``.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np


def fragment_layout(owners: dict[str, np.ndarray]):
    """The A (16 x 16), B (16 x 8) and C (16 x 8) fragments of ``mma.m16n8k16``: each element shows
    the lane that holds it, colored by the lane's group (lane // 4)."""
    fig, axes = plt.subplots(1, 3, figsize=(7.5, 4.2), gridspec_kw={"width_ratios": [16, 8, 8]})
    cmap = plt.get_cmap("tab10")
    titles = {"A": "A: 16 x 16 (rows m, columns k)", "B": "B: 16 x 8 (rows k, columns n)",
              "C": "C and D: 16 x 8 (float)"}
    for ax, key in zip(axes, ("A", "B", "C")):
        grid = owners[key]
        rows, cols = grid.shape
        for r in range(rows):
            for c in range(cols):
                lane = int(grid[r, c])
                ax.add_patch(plt.Rectangle((c, r), 1, 1, facecolor=cmap(lane // 4), alpha=0.35 + 0.15 * (lane % 4),
                                           edgecolor="white", linewidth=0.5))
                ax.text(c + 0.5, r + 0.5, str(lane), ha="center", va="center", fontsize=5.5)
        ax.set_xlim(0, cols)
        ax.set_ylim(rows, 0)
        ax.set_aspect("equal")
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(titles[key], fontsize=9)
    fig.suptitle("mma.m16n8k16: the lane holding each element (color: the lane's group, lane // 4)", fontsize=10)
    fig.tight_layout()
    return fig


def _bank_group(r: int, stride: int, swizzle: bool, c: int = 0) -> int:
    """The 16-byte group of banks (0-7) where chunk c of row r starts, rows ``stride`` bytes apart;
    swizzled as ``tile_offset`` in ``GEMM_SOURCE`` does: chunk c of row r at c XOR (r mod 8), or for
    64-byte rows, which share a 128-byte line in pairs, at c XOR (r / 2 mod 4)."""
    if swizzle:
        shift, mask = (1, 3) if stride == 64 else (0, 7)
        return (r * stride // 16 + (c ^ ((r >> shift) & mask))) % 8
    return (r * stride // 16 + c) % 8


def ldmatrix_banks(row_bytes: dict[str, int | tuple[int, bool]], rows: int = 8):
    """For each layout (label -> bytes between rows, or (bytes, swizzled)), the 16-byte group of
    banks (0-7 of a 128-byte line) that each of the 8 rows of one ``ldmatrix`` 8 x 8 matrix starts
    in. Rows that share a group are read one after another (a bank conflict)."""
    fig, axes = plt.subplots(1, len(row_bytes), figsize=(max(7.5, 3.4 * len(row_bytes)), 2.9), sharey=True)
    axes = np.atleast_1d(axes)
    for ax, (label, layout) in zip(axes, row_bytes.items()):
        stride, swizzle = layout if isinstance(layout, tuple) else (layout, False)
        groups = [_bank_group(r, stride, swizzle) for r in range(rows)]
        load = np.bincount(groups, minlength=8)
        for r, g in enumerate(groups):
            ax.add_patch(plt.Rectangle((g, r), 1, 1, facecolor="tab:red" if load[g] > 1 else "tab:green",
                                       alpha=0.7, edgecolor="white"))
            ax.text(g + 0.5, r + 0.5, f"row {r}", ha="center", va="center", fontsize=7)
        ax.set_xlim(0, 8)
        ax.set_ylim(rows, 0)
        ax.set_xticks(np.arange(8) + 0.5, [str(g) for g in range(8)], fontsize=8)
        ax.set_yticks([])
        ax.set_xlabel("16-byte group of banks (4 banks each)", fontsize=8)
        ax.set_title(f"{label}: rows {stride} bytes apart\n{load.max()} row(s) per group: "
                     f"{load.max()} pass(es)", fontsize=9)
    fig.suptitle("One 8 x 8 matrix of ldmatrix: 8 rows of 16 bytes each, read from shared memory", fontsize=10)
    fig.tight_layout()
    return fig


def pipeline_timeline(tiles: int = 6, copy: float = 1.5, compute: float = 1.0):
    """A schematic of the k-loop: with one buffer, each tile's copy and its maths take turns; with a
    ring of stages the copy of tile k + s - 1 runs while tile k is multiplied. ``copy`` and
    ``compute`` are the two durations, in units of one tile's maths."""
    fig, axes = plt.subplots(3, 1, figsize=(7.5, 3.9), sharex=True)
    for ax, stages in zip(axes, (1, 2, 3)):
        math_end: list[float] = []
        for k in range(tiles):
            # tile k's buffer is free once tile k - stages has been multiplied
            start = 0.0 if k < stages else math_end[k - stages]
            h = 0.9 / stages  # copies in flight together share the lane, one slot per stage
            y = 1.05 + (k % stages) * h
            ax.add_patch(plt.Rectangle((start, y), copy, h, facecolor="tab:orange", edgecolor="white"))
            ax.text(start + copy / 2, y + h / 2, f"copy {k}", ha="center", va="center", fontsize=7)
            m0 = max(math_end[-1] if math_end else 0.0, start + copy)  # after tile k - 1, once k has landed
            math_end.append(m0 + compute)
            ax.add_patch(plt.Rectangle((m0, 0.05), compute, 0.8, facecolor="tab:blue", edgecolor="white"))
            ax.text(m0 + compute / 2, 0.45, f"mma {k}", ha="center", va="center", fontsize=7, color="white")
        done = math_end[-1]
        ax.set_ylim(0, 2)
        ax.set_yticks([0.45, 1.45], ["Tensor Cores", "cp.async"], fontsize=8)
        ax.set_title(f"{stages} stage{'s' * (stages > 1)}: {tiles} k-tiles done at t = {done:.1f}", fontsize=9)
    axes[-1].set_xlim(0, tiles * (copy + compute) + 0.5)
    axes[-1].set_xlabel("time (one tile's maths = 1)")
    fig.tight_layout()
    return fig


def gemm_steps(tflops: dict[str, float], cublas_tflops: float, title: str):
    """Each kernel's TFLOP/s as a bar, with cuBLAS's as a line and each bar's share of it."""
    fig, ax = plt.subplots(figsize=(7.5, 0.45 * len(tflops) + 2.0))
    labels = list(tflops)
    values = [tflops[k] for k in labels]
    ax.barh(labels, values, color="tab:blue")
    ax.axvline(cublas_tflops, color="black", linestyle="--", linewidth=1, label="cuBLAS (torch.matmul)")
    for y, v in enumerate(values):
        ax.text(v, y, f" {v / cublas_tflops:.0%}", va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("TFLOP/s (share of cuBLAS at the bar's end)")
    ax.set_title(title, fontsize=10)
    ax.set_xlim(0, 1.15 * max(values + [cublas_tflops]))
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def error_vs_k(ks, errors: dict[str, list[float]], title: str):
    """The largest error against float64, relative to the largest |C|, for each format as k grows."""
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    for (label, errs), marker in zip(errors.items(), "osD^v"):
        ax.plot(ks, errs, marker=marker, label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("k (length of each dot product)")
    ax.set_ylabel("max |C - C64| / max |C64|")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
