"""Figures of the chapter *FlashAttention*: the blocks a causal program visits, and TFLOP/s against
the sequence length.

Each function draws one figure at the page's width (7.5 inches) and returns it;
the notebook shows it with ``plt.show()``.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import Patch

VISIT_COLORS = {"full": "tab:blue", "diagonal": "tab:orange", "skipped": "white"}


def causal_blocks(kinds):
    """The tiles of the score matrix, ``kinds[i][j]`` for query block i and key block j: "full"
    (every score kept, no mask), "diagonal" (computed, then masked) or "skipped" (never visited)."""
    rows, cols = len(kinds), len(kinds[0])
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    for i in range(rows):
        for j in range(cols):
            kind = kinds[i][j]
            ax.add_patch(plt.Rectangle((j, rows - 1 - i), 1, 1, facecolor=VISIT_COLORS[kind], edgecolor="black",
                                       linewidth=0.6, hatch="////" if kind == "skipped" else None))
    for i in range(rows):
        ax.text(-0.2, rows - 0.5 - i, f"program {i}", ha="right", va="center", fontsize=8)
    ax.set_xlim(-2.2, cols)
    ax.set_ylim(0, rows + 0.6)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.text(cols / 2, rows + 0.15, "key blocks  \u2192", ha="center", va="bottom", fontsize=9)
    ax.legend(handles=[Patch(facecolor=VISIT_COLORS["full"], edgecolor="black", label="left of the diagonal: no mask"),
                       Patch(facecolor=VISIT_COLORS["diagonal"], edgecolor="black", label="on the diagonal: masked"),
                       Patch(facecolor="white", edgecolor="black", hatch="////", label="never loaded")],
              loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=9, frameon=False)
    ax.set_title("Causal attention: the tiles of S each program visits", fontsize=10)
    fig.tight_layout()
    return fig


def tflops_sweep(lengths, tflops, peak=None):
    """TFLOP/s (``tflops``: label -> one value per sequence length, None where not measured) against
    the sequence length, with the tensor cores' measured peak as a dashed line when given."""
    fig, ax = plt.subplots(figsize=(7.5, 4.0))
    styles = {"causal": "--", "full": "-"}
    for label, values in tflops.items():
        points = [(n, t) for n, t in zip(lengths, values) if t is not None]
        if not points:
            continue
        style = styles["causal"] if "causal" in label else styles["full"]
        ax.plot([n for n, _ in points], [t for _, t in points], style, marker="o", label=label)
    if peak:
        ax.axhline(peak, color="black", linestyle=":", linewidth=1, label="matrix product (cuBLAS), same dtype")
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(lengths), [f"{n:,}" for n in lengths])
    ax.set_xlabel("tokens per sequence (queries = keys)")
    ax.set_ylabel("TFLOP/s (causal: half the work counted)")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title("Attention's forward pass at prefill shapes", fontsize=10)
    fig.tight_layout()
    return fig
