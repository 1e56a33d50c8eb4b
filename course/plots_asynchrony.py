"""Figures of the chapter *Asynchrony*: a timeline of a pipeline's engines, and its total time.

``draw_timeline`` draws into an axis the notebook made; ``pipeline_totals`` draws one figure at
the page's width (7.5 inches) and returns it. The notebook shows them with ``plt.show()``.
"""
from __future__ import annotations

import matplotlib.pyplot as plt

ROWS = {"copy in": 2, "kernel": 1, "copy out": 0}   # the engine's row, from the bottom
ROW_LABELS = ["copy out (D2H)", "kernels (SMs)", "copy in (H2D)"]


def draw_timeline(ax, ops, title, unit):
    """One row per engine, one bar per operation (chunk, stream, stage, start, end),
    colored by stream and labelled with its chunk; returns the total time."""
    colors = plt.get_cmap("tab10").colors
    total = max(op[4] for op in ops)
    for c, s, stage, start, end in ops:
        ax.barh(ROWS[stage], end - start, left=start, height=0.7, color=colors[s % 10],
                edgecolor="white", linewidth=0.6)
        if end - start > total / 45:                 # label only the bars wide enough to hold it
            ax.text((start + end) / 2, ROWS[stage], str(c), ha="center", va="center", fontsize=9, color="white")
    n_streams = max(op[1] for op in ops) + 1
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[s % 10]) for s in range(n_streams)]
    ax.legend(handles, [f"stream {s}" for s in range(n_streams)], loc="upper left",
              bbox_to_anchor=(1.01, 1), fontsize=9)
    ax.set_yticks([0, 1, 2], labels=ROW_LABELS)
    ax.set_ylim(-0.6, 2.6)
    ax.set_title(f"{title}: {total:.3g} {unit} in total")
    ax.grid(True, axis="x", alpha=0.3)
    return total


def pipeline_totals(stream_counts, measured_ms, model_ms, bound_ms, pageable_ms):
    """The pipeline's total time for each number of streams (bars), the model (line), the bound
    set by the busiest stage, and the 4-stream run from pageable memory."""
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    ax.bar(stream_counts, measured_ms, width=0.5, color="tab:blue", label="measured")
    ax.plot(stream_counts, model_ms, "o--", color="black", label="model (previous section)")
    ax.axhline(bound_ms, color="tab:red", linestyle=":", label="largest stage total (bound)")
    ax.axhline(pageable_ms, color="tab:gray", linestyle="-.", label="4 streams, pageable")
    ax.set_xticks(stream_counts)
    ax.set_xlabel("streams")
    ax.set_ylabel("total time (ms)")
    ax.set_ylim(0, max(list(measured_ms) + [pageable_ms]) * 1.15)
    ax.set_title("Pipeline total: measured and modelled")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=9)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    return fig
