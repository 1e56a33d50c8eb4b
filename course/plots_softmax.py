"""Figures of the chapter *Softmax*: the online softmax along one row, and a bandwidth sweep.

Each function draws one figure at the page's width (7.5 inches) and returns it;
the notebook shows it with ``plt.show()``.
"""
from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np


def online_walk(x, maxima, sums, jumps, d_final):
    """Top: a row's values and the running maximum. Bottom: the running sum relative to it,
    marked where a new maximum rescaled it, against the two-pass sum ``d_final``."""
    fig, (ax_m, ax_d) = plt.subplots(2, 1, figsize=(7.5, 4.1), sharex=True)
    ax_m.plot(x, "o", markersize=4, color="tab:gray", label="x_j")
    ax_m.step(range(len(maxima)), maxima, where="post", color="tab:red", label="running maximum m_j")
    ax_m.set_ylabel("value")
    ax_m.legend(loc="upper left")
    ax_d.plot(sums, "o-", markersize=3, label="d_j: sum so far, relative to m_j")
    ax_d.plot(jumps, np.asarray(sums)[jumps], "v", color="tab:red", markersize=7,
              label="new maximum: old sum rescaled")
    ax_d.axhline(d_final, color="black", linestyle="--", linewidth=1, label="two-pass sum of exp(x - max)")
    ax_d.set_xlabel("element j")
    ax_d.set_ylabel("d_j")
    ax_d.legend(loc="lower right")
    fig.suptitle("The online softmax along one row")
    fig.tight_layout()
    return fig


STYLES = {"block, 3 passes": "o-", "block, online": "s-", "warp per row": "^-", "warp, registers": "v-",
          "block, registers": "P-", "CuPy composition": "d-", "torch.softmax": "x--"}


def bandwidth_sweep(cols, gbps, copy_gbps, total_floats):
    """Effective bandwidth of each softmax (``gbps``: name -> one value per row length in ``cols``,
    NaN where it did not run) against the row length, with the copy and the 8-trip bound."""
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    for name, values in gbps.items():
        ax.plot(cols, values, STYLES.get(name, "o-"), label=name)
    ax.axhline(copy_gbps, color="black", linestyle="--", linewidth=1, label="device-to-device copy")
    ax.axhline(copy_gbps * 2 / 8, color="tab:red", linestyle=":", linewidth=1,
               label="bound for 8 trips through memory (the composition)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(cols, labels=[f"$2^{{{int(math.log2(c))}}}$" for c in cols])
    ax.set_xlabel(f"row length (columns); the matrix always holds $2^{{{int(math.log2(total_floats))}}}$ floats")
    ax.set_ylabel("effective bandwidth (GB/s)")
    ax.set_ylim(0, 1.1 * max(copy_gbps, np.nanmax([np.nanmax(v) for v in gbps.values()])))
    ax.set_title(f"Softmax of a {4 * total_floats / 2**20:.0f} MiB matrix: bandwidth against row length")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=9)
    fig.tight_layout()
    return fig
