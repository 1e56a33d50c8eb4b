"""Figures of the chapter *GEMV and GEMM*: one step of a tiled GEMM, and which outputs a thread owns.

Each function draws one figure at the page's width (7.5 inches) and returns it;
the notebook shows it with ``plt.show()``.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import ListedColormap


def tiled_gemm_step(tiles, bi, bj, step):
    """A, B and C as ``tiles`` x ``tiles`` grids of tiles: the strips block (bi, bj) walks along k,
    the tiles it loads at ``step`` (dark), and the tile of C it computes."""
    fig, axes = plt.subplots(1, 3, figsize=(7.5, 3.6))
    panels = [
        ("A (m x k)", [((bi, s), "#fdd9b5") for s in range(tiles)] + [((bi, step), "tab:orange")]),
        ("B (k x n)", [((s, bj), "#c6dbef") for s in range(tiles)] + [((step, bj), "tab:blue")]),
        ("C (m x n)", [((bi, bj), "tab:green")]),
    ]
    for ax, (title, cells) in zip(axes, panels):
        for r in range(tiles):
            for c in range(tiles):
                ax.add_patch(plt.Rectangle((c, r), 1, 1, facecolor="white", edgecolor="#bbbbbb"))
        for (r, c), color in cells:
            ax.add_patch(plt.Rectangle((c, r), 1, 1, facecolor=color, edgecolor="#555555"))
        ax.set_xlim(0, tiles)
        ax.set_ylim(tiles, 0)
        ax.set_aspect("equal")
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(title)
    axes[0].set_xlabel(f"the block's strip of rows; dark: the tile loaded at step {step}")
    axes[1].set_xlabel(f"the block's strip of columns; dark: the tile loaded at step {step}")
    axes[2].set_xlabel("the tile of C this block computes")
    fig.suptitle("One step of a tiled GEMM: a tile of A and a tile of B in shared memory serve the whole block")
    fig.tight_layout()
    return fig


def thread_outputs(owner, shown, per_thread, zoom=48, stride=16):
    """A block's tile of C, coloured by which of the ``shown`` threads owns each output
    (``owner``: -1 for none, else the index in ``shown``), whole and its top-left ``zoom`` corner."""
    colors = ["tab:blue", "tab:orange", "tab:green"][: len(shown)]
    cmap = ListedColormap(["#f2f2f2"] + colors)
    rows, cols = owner.shape
    fig, (ax_full, ax_zoom) = plt.subplots(1, 2, figsize=(7.5, 3.6))
    for ax, size in ((ax_full, rows), (ax_zoom, zoom)):
        ax.imshow(owner[:size, :size], cmap=cmap, vmin=-1, vmax=len(colors) - 1, interpolation="nearest",
                  extent=(0, size, size, 0))
        ax.set_xlabel("column of the block's tile of C")
        ax.set_ylabel("row of the tile")
    for edge in np.arange(0, zoom + 1, stride):     # the sub-tiles the threads interleave over
        ax_zoom.axhline(edge, color="black", linewidth=0.6)
        ax_zoom.axvline(edge, color="black", linewidth=0.6)
    ax_full.set_title(f"the whole {rows} x {cols} tile")
    ax_zoom.set_title(f"its top-left {zoom} x {zoom} corner")
    fig.legend([plt.Rectangle((0, 0), 1, 1, color=c) for c in colors],
               [f"thread tx={tx}, ty={ty}" for tx, ty in shown], loc="lower center", ncol=len(shown))
    tm, tn = per_thread
    fig.suptitle(f"Each thread owns {tm} x {tn} outputs of the tile, {stride} rows and {stride} columns apart")
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig
