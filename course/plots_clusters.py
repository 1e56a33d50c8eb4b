"""Figures of the chapter *Thread-block clusters and distributed shared memory*.

Each function draws one figure at the page's width (7.5 inches, labels of 9 points or more) and
returns it; the notebook shows it with ``plt.show()``.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

COLORS = plt.get_cmap("tab10").colors
VERSION_STYLE = {"global atomics": ("black", "o", "--"), "shared, per block": ("tab:gray", "s", ":")}


def _cluster_color(c: int):
    return COLORS[c % len(COLORS)]


def clusters_and_neighbours(rank_of, neighbour_rank, cluster: int):
    """A row of blocks, colored by cluster and labeled with their rank in it; an arrow from each
    block to the neighbour whose shared memory it read (``neighbour_rank[b]``: that block's rank)."""
    blocks = len(rank_of)
    fig, ax = plt.subplots(figsize=(7.5, 2.2))
    for b in range(blocks):
        c = b // cluster
        ax.add_patch(plt.Rectangle((b, 0), 0.85, 0.85, facecolor=_cluster_color(c), alpha=0.35,
                                   edgecolor=_cluster_color(c)))
        ax.text(b + 0.42, 0.55, f"{b}", ha="center", va="center", fontsize=9)
        ax.text(b + 0.42, 0.22, f"r{rank_of[b]}", ha="center", va="center", fontsize=9, color="0.25")
        target = c * cluster + int(neighbour_rank[b])
        if target != b:
            ax.annotate("", xy=(target + 0.42, 0.9), xytext=(b + 0.42, 0.9),
                        arrowprops=dict(arrowstyle="->", color=_cluster_color(c), lw=1.2,
                                        connectionstyle="arc3,rad=-0.5"))
    for c in range(-(-blocks // cluster)):
        ax.text(c * cluster + cluster / 2 - 0.08, -0.3, f"cluster {c}", ha="center", va="center", fontsize=9)
    ax.set_xlim(-0.3, blocks + 0.1)
    ax.set_ylim(-0.55, 2.0)
    ax.axis("off")
    ax.set_title(f"{blocks} blocks in clusters of {cluster}: block index, rank (r) in its cluster, "
                 "and the neighbour each block reads", fontsize=10)
    fig.tight_layout()
    return fig


def bins_over_cluster(nbins: int = 24, cluster: int = 4):
    """Top: bins 0 .. nbins - 1, colored by the block of the cluster that holds them (bin v in block
    v % cluster). Bottom: each block's shared array, slot s holding bin s * cluster + rank."""
    slots = -(-nbins // cluster)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7.5, 3.2), gridspec_kw={"height_ratios": [1, 1.6]})
    for v in range(nbins):
        owner = v % cluster
        top.add_patch(plt.Rectangle((v, 0), 0.9, 0.9, facecolor=_cluster_color(owner), alpha=0.45))
        top.text(v + 0.45, 0.45, str(v), ha="center", va="center", fontsize=9)
    top.set_xlim(-0.2, nbins)
    top.set_ylim(-0.2, 1.1)
    top.axis("off")
    top.set_title(f"the histogram's {nbins} bins; color: the block of the cluster that holds the bin", fontsize=10)
    gap = 1.0
    for r in range(cluster):
        x0 = r * (slots + gap)
        for s in range(slots):
            v = s * cluster + r
            face = _cluster_color(r) if v < nbins else "white"
            bottom.add_patch(plt.Rectangle((x0 + s, 0), 0.9, 0.9, facecolor=face, alpha=0.45, edgecolor="0.6"))
            if v < nbins:
                bottom.text(x0 + s + 0.45, 0.45, str(v), ha="center", va="center", fontsize=9)
        bottom.text(x0 + slots / 2, -0.45, f"rank {r}", ha="center", fontsize=9)
    bottom.set_xlim(-0.2, cluster * (slots + gap))
    bottom.set_ylim(-0.8, 1.1)
    bottom.axis("off")
    bottom.set_title("each block's shared memory: slot s holds bin s × cluster size + rank", fontsize=10)
    fig.tight_layout()
    return fig


def histogram_speeds(results: dict[str, dict[int, dict[str, float | None]]], n: int):
    """Values counted per second against the number of bins, one panel per input distribution.
    ``results[distribution][nbins][version]`` is seconds per histogram of ``n`` values (None: does
    not fit)."""
    fig, axes = plt.subplots(1, len(results), figsize=(7.5, 4.0), sharey=True)
    axes = np.atleast_1d(axes)
    for ax, (dist, by_bins) in zip(axes, results.items()):
        bins = sorted(by_bins)
        versions = list(next(iter(by_bins.values())))
        for k, name in enumerate(versions):
            pts = [(b, n / by_bins[b][name] / 1e9) for b in bins if by_bins[b].get(name)]
            if not pts:
                continue
            color, marker, style = VERSION_STYLE.get(name, (COLORS[k % len(COLORS)], "^", "-"))
            ax.plot(*zip(*pts), marker=marker, linestyle=style, color=color, label=name)
        ax.set_xscale("log", base=2)
        ax.set_xticks(bins, labels=[f"{b:,}" for b in bins], fontsize=9)
        ax.set_xlabel("bins", fontsize=9)
        ax.set_title(f"{dist} values", fontsize=10)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("billions of values\ncounted per second", fontsize=9)
    legend = {}
    for ax in axes:
        for h, label in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(label, h)
    fig.legend(list(legend.values()), list(legend), fontsize=9, loc="lower center", ncol=3, frameon=False)
    fig.tight_layout(rect=(0, 0.16, 1, 1))
    return fig


def cluster_size_sweep(hist_seconds: dict[int, float | None], n_values: int, nbins: int,
                       row_seconds: dict[int, float | None], row_bytes: int, copy_gbps: float):
    """Left: the histogram of ``n_values`` values over ``nbins`` bins, values per second against the
    cluster size. Right: the row sums' read bandwidth against the cluster size, with the copy."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(7.5, 3.2))
    sizes = sorted(c for c, t in hist_seconds.items() if t)
    left.bar([str(c) for c in sizes], [n_values / hist_seconds[c] / 1e9 for c in sizes], color="tab:blue")
    left.set_xlabel("blocks per cluster", fontsize=9)
    left.set_ylabel("billions of values per second", fontsize=9)
    left.set_title(f"histogram, {nbins:,} bins", fontsize=10)
    sizes = sorted(c for c, t in row_seconds.items() if t)
    right.bar([str(c) for c in sizes], [row_bytes / row_seconds[c] / 1e9 for c in sizes], color="tab:green")
    right.axhline(copy_gbps / 2, color="black", linestyle="--", lw=1)
    right.text(0, copy_gbps / 2, " copy's read rate", va="bottom", fontsize=9)
    right.set_xlabel("blocks per cluster (one cluster per row)", fontsize=9)
    right.set_ylabel("GB/s read", fontsize=9)
    right.set_title("row sums", fontsize=10)
    for ax in (left, right):
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return fig
