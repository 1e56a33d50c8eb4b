"""Figures of the chapter *Memory access*: the sectors a warp's load fetches, and shared-memory banks.

Each function draws one figure at the page's width (7.5 inches, labels of 9 points or more)
from data the notebook computed with its own model, and returns it; the notebook shows it
with ``plt.show()``.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.patches import Rectangle


def strided_sectors(loads, span_sectors, sector=32, line=128, itemsize=4):
    """One row per stride: the sectors fetched (blue) and the values asked for (ticks).

    ``loads`` maps a stride to (byte addresses of the warp's values, the sectors they touch).
    """
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    for row, (addr, touched) in enumerate(loads.values()):
        fetched = set(np.asarray(touched).tolist())
        for sec in range(span_sectors):
            ax.add_patch(plt.Rectangle((sec, row + 0.15), 1, 0.7, linewidth=0.3, edgecolor="white",
                                       facecolor="tab:blue" if sec in fetched else "#eeeeee"))
        # A value's tick sits at its byte offset, measured in sectors.
        ax.plot(addr / sector + itemsize / sector / 2, np.full(len(addr), row + 0.5), "|", color="black",
                markersize=8)
    for x in range(0, span_sectors + 1, line // sector):
        ax.axvline(x, color="0.6", linewidth=0.6)
    ax.set_xlim(0, span_sectors)
    ax.set_ylim(len(loads), 0)
    ax.set_yticks(np.arange(len(loads)) + 0.5,
                  labels=[f"stride {s}: {len(touched)} sectors" for s, (_, touched) in loads.items()])
    ax.set_xlabel(f"memory, in {sector}-byte sectors (grey lines: {line}-byte cache lines)")
    ax.set_title("One warp's load of 32 float32 at different strides: values asked for (ticks), "
                 "sectors fetched (blue)")
    plt.tight_layout()
    return fig


def matrix_sectors(panels, sector_floats, shape):
    """One panel per access: values read or written (dark), the rest of their sectors (light).

    ``panels`` is a list of (title, picture, sectors) with picture 2 at a value, 1 elsewhere in its
    sectors, 0 elsewhere; ``shape`` is the (rows, cols) of the matrix named in the title.
    """
    cmap = ListedColormap(["white", "#9ecae1", "#08519c"])
    fig, axes = plt.subplots(1, len(panels), figsize=(7.5, 3.6))
    for ax, (title, picture, sectors) in zip(axes, panels):
        ax.imshow(picture, cmap=cmap, vmin=0, vmax=2, interpolation="nearest")
        for x_line in np.arange(0, picture.shape[1] + 1, sector_floats) - 0.5:
            ax.axvline(x_line, color="0.75", linewidth=0.6)
        ax.set_title(f"{title}\n{sectors} sectors for 32 values", fontsize=10)
        ax.set_xlabel("column")
        ax.set_ylabel("row")
    fig.suptitle(f"One warp's access on a {shape[0]} x {shape[1]} matrix: values (dark), "
                 "rest of the sectors fetched (light)")
    plt.tight_layout()
    return fig


def tile_banks(tile, widths, banks, passes):
    """The bank of every element of a tile x tile float32 tile whose rows hold ``width`` words, one
    panel per width; column 0 (what one warp reads) framed and numbered. ``passes[width]`` is how many
    passes the warp's read of column 0 takes."""
    fig, axes = plt.subplots(1, len(widths), figsize=(7.5, 3.7))
    bank_colors = plt.get_cmap("turbo", banks)
    for ax, width in zip(axes, widths):
        i, j = np.meshgrid(np.arange(tile), np.arange(width), indexing="ij")
        bank = (i * width + j) % banks
        picture = bank_colors(bank)[..., :3]
        if width > tile:
            picture[:, tile:] = 0.85                    # the padding column: never read or written
        ax.imshow(picture, interpolation="nearest")
        ax.add_patch(Rectangle((-0.5, -0.5), 1, tile, fill=False, edgecolor="black", linewidth=2))
        for row in range(tile):
            light = picture[row, 0].mean() > 0.5        # dark text on light colors, white on dark
            ax.text(0, row, str(bank[row, 0]), ha="center", va="center", fontsize=9,
                    color="black" if light else "white")
        n_banks, n_pass = len(set(bank[:, 0])), passes[width]
        ax.set_title(f"tile rows of {width} words: column 0 (framed) is in {n_banks} "
                     f"bank{'s' if n_banks > 1 else ''}\n"
                     f"-> {n_pass} pass{'es' if n_pass > 1 else ''} for the warp that reads it", fontsize=10)
        ax.set_xlabel("column j of the tile" + (" (grey: padding)" if width > tile else ""))
        ax.set_ylabel("row i of the tile")
    fig.suptitle(f"Bank of every element of a {tile} x {tile} float32 tile: color = (i * width + j) % {banks}; "
                 "numbers: bank of column 0")
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return fig
