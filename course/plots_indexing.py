"""Figures of the chapter *Thread indexing*: which thread wrote which element, and two speed sweeps.

Each function draws one figure at the page's width (7.5 inches, labels of 9 points or more)
and returns it; the notebook shows it with ``plt.show()``.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Patch, Rectangle

PALETTE = plt.get_cmap("Set3").colors  # light colours, so that black numbers stay readable
WIDTH = 7.5  # inches: the page's width
FONT = 9  # points: the smallest text in a figure


def _block_colour(block_id: int):
    return PALETTE[int(block_id) % len(PALETTE)]


def draw_cells(ax, block_ids, labels, grid, block, fontsize=FONT):
    """One square per thread of a 2D (x, y) launch: coloured by block where an element exists,
    hatched where the thread has no element. Thick lines mark the blocks."""
    rows, cols = block_ids.shape
    width, height = grid[0] * block[0], grid[1] * block[1]
    for r in range(height):
        for c in range(width):
            if r < rows and c < cols:
                ax.add_patch(Rectangle((c, r), 1, 1, facecolor=_block_colour(block_ids[r, c]),
                                       edgecolor="white", linewidth=1))
                ax.text(c + 0.5, r + 0.5, labels[r][c], ha="center", va="center", fontsize=fontsize)
            else:
                ax.add_patch(Rectangle((c, r), 1, 1, facecolor="white", edgecolor="0.8",
                                       hatch="///", linewidth=0.5))
    for gy in range(grid[1]):
        for gx in range(grid[0]):
            ax.add_patch(Rectangle((gx * block[0], gy * block[1]), block[0], block[1],
                                   fill=False, edgecolor="0.2", linewidth=2))
    ax.set_xlim(-0.1, width + 0.1)
    ax.set_ylim(height + 0.1, -0.1)  # row 0 at the top, as NumPy prints it
    ax.set_aspect("equal")
    ax.set_xticks(np.arange(width) + 0.5, labels=[str(i) for i in range(width)], fontsize=FONT)
    ax.set_yticks(np.arange(height) + 0.5, labels=[str(i) for i in range(height)], fontsize=FONT)
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)


def _block_handles(grid):
    """Colour patches labelled with blockIdx (x[, y[, z]]), in block-id order."""
    gx, gy, gz = (tuple(grid) + (1, 1))[:3]
    handles = []
    for bid in range(gx * gy * gz):
        bx, by, bz = bid % gx, (bid // gx) % gy, bid // (gx * gy)
        label = str(bx) if gy == gz == 1 else f"({bx}, {by})" if gz == 1 else f"({bx}, {by}, {bz})"
        handles.append(Patch(facecolor=_block_colour(bid), edgecolor="0.2", label=label))
    return handles


def _legend(fig, grid, ncol=1):
    fig.legend(handles=_block_handles(grid), loc="outside right center", ncol=ncol, fontsize=FONT,
               title="blockIdx", title_fontsize=FONT + 1, frameon=False)


def thread_map_1d(block_ids, thread_ids, launch):
    """1D launch: one row of squares, numbered with threadIdx.x."""
    grid, block = launch["grid"], launch["block"]
    fig, ax = plt.subplots(figsize=(WIDTH, 1.9), layout="constrained")
    draw_cells(ax, block_ids[0], [[str(t) for t in thread_ids[0, 0]]], grid, block)
    ax.set_yticks([])
    ax.set_xlabel("x = blockIdx.x * blockDim.x + threadIdx.x")
    ax.set_title(f"1D: grid {grid[0]}, blocks of {block[0]} threads. Number = threadIdx.x", fontsize=10)
    _legend(fig, grid)
    return fig


def thread_map_2d(block_ids, thread_ids, launch):
    """2D launch over a matrix, row 0 at the top, numbered with (threadIdx.x, threadIdx.y)."""
    grid, block = launch["grid"], launch["block"]
    bx = block[0]
    labels = [[f"{t % bx},{t // bx}" for t in row] for row in thread_ids[0]]
    rows, cols = block_ids.shape[1:]
    fig, ax = plt.subplots(figsize=(WIDTH, 4.2), layout="constrained")
    draw_cells(ax, block_ids[0], labels, grid, block)
    ax.set_xlabel("x = column")
    ax.set_ylabel("y = row")
    ax.set_title(f"2D: grid {grid[:2]}, blocks {block[:2]} on a {rows} x {cols} matrix.\n"
                 "Numbers = threadIdx.x, threadIdx.y", fontsize=10)
    _legend(fig, grid)
    return fig


def thread_map_3d(block_ids, global_ids, launch):
    """3D launch: one panel per z (two by two), numbered with the global id."""
    grid, block = launch["grid"], launch["block"]
    depth = block_ids.shape[0]
    ncols = 2
    nrows = -(-depth // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(WIDTH, 4.5), layout="constrained", squeeze=False)
    bz = block[2]
    for z, ax in enumerate(axes.flat):
        if z >= depth:
            ax.set_visible(False)
            continue
        draw_cells(ax, block_ids[z], [[str(g) for g in row] for row in global_ids[z]], grid, block)
        ax.set_title(f"z = {z}: blockIdx.z = {z // bz}, threadIdx.z = {z % bz}", fontsize=FONT)
    fig.suptitle(f"3D: grid {grid}, blocks {block}, one panel per z. Number = global id", fontsize=10)
    _legend(fig, grid)
    return fig


def grid_stride_map(s_block, s_x, s_y, grid, block):
    """A 2D grid-stride loop: which block and which thread (col0, row0) visited each element."""
    rows, cols = s_block.shape
    stride = (grid[0] * block[0], grid[1] * block[1])
    fig, ax = plt.subplots(figsize=(WIDTH, 4.6), layout="constrained")
    for r in range(rows):
        for c in range(cols):
            ax.add_patch(Rectangle((c, r), 1, 1, facecolor=_block_colour(s_block[r, c]),
                                   edgecolor="white", linewidth=1))
            ax.text(c + 0.5, r + 0.5, f"{s_x[r, c]},{s_y[r, c]}", ha="center", va="center", fontsize=FONT)
    for k in range(1, -(-cols // stride[0])):  # where the grid starts its next step
        ax.axvline(k * stride[0], color="0.2", linewidth=2, linestyle="--")
    for k in range(1, -(-rows // stride[1])):
        ax.axhline(k * stride[1], color="0.2", linewidth=2, linestyle="--")
    ax.set_xlim(0, cols)
    ax.set_ylim(rows, 0)
    ax.set_aspect("equal")
    ax.set_xticks(np.arange(cols) + 0.5, labels=[str(i) for i in range(cols)], fontsize=FONT)
    ax.set_yticks(np.arange(rows) + 0.5, labels=[str(i) for i in range(rows)], fontsize=FONT)
    ax.tick_params(length=0)
    ax.set_xlabel("column")
    ax.set_ylabel("row")
    ax.set_title(f"Grid {tuple(grid)} of blocks {tuple(block)} on a {rows} x {cols} matrix.\n"
                 "Numbers = (col0, row0) of the thread; dashed = one step of the grid", fontsize=10)
    _legend(fig, tuple(grid) + (1,))
    return fig


def block_shape_bandwidth(shapes, bandwidth, copy_bw, rows, cols):
    """Effective bandwidth of a 2D matrix add against the block shape, one line per mapping."""
    fig, ax = plt.subplots(figsize=(WIDTH, 4.2), layout="constrained")
    bxs = [bx for bx, _ in shapes]
    for (label, values), marker in zip(bandwidth.items(), ("o-", "s--")):
        ax.plot(bxs, values, marker, label=label)
    ax.axhline(copy_bw, color="black", linestyle=":", label="device-to-device copy")
    ax.set_xscale("log", base=2)
    ax.set_xticks(bxs, labels=[f"{bx}x{by}" for bx, by in shapes], fontsize=FONT)
    ax.set_xlabel("block shape blockDim.x x blockDim.y (256 threads)")
    ax.set_ylabel("effective bandwidth (GB/s)")
    ax.set_ylim(0, copy_bw * 1.25)
    ax.set_title(f"2D matrix add, {rows} x {cols} float32")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper center", ncol=3, fontsize=FONT, frameon=False)
    return fig


def grid_size_bandwidth(grid_blocks, bw_strided, bw_per_element, per_element_blocks, copy_bw, wave, n):
    """Effective bandwidth of a grid-stride vector add against the number of blocks in the grid."""
    fig, ax = plt.subplots(figsize=(WIDTH, 4.2), layout="constrained")
    ax.semilogx(grid_blocks, bw_strided, "o-", label="grid-stride loop, fixed grid")
    ax.axhline(bw_per_element, color="tab:orange", linestyle="--",
               label=f"one thread per element ({per_element_blocks:,} blocks)")
    ax.axhline(copy_bw, color="black", linestyle=":", label="device-to-device copy")
    ax.axvline(wave, color="0.5", linewidth=1)
    ax.text(wave * 1.08, copy_bw * 0.05, "one wave", color="0.4")
    ax.set_xlabel("blocks in the grid (256 threads each)")
    ax.set_ylabel("effective bandwidth (GB/s)")
    ax.set_ylim(0, copy_bw * 1.3)
    ax.set_title(f"Vector add, n = {n:,} float32")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper left", fontsize=FONT, frameon=False)
    return fig
