"""Plots of the chapter *Custom operators for PyTorch*."""
from __future__ import annotations

import matplotlib.pyplot as plt


def model_times(forward_ms: dict[str, float], training_ms: dict[str, float], title: str = ""):
    """Two panels of horizontal bars: the forward pass and the training step of each version of the
    model, in milliseconds, with the eager PyTorch bar (the first of each) as a dashed reference line."""
    fig, axes = plt.subplots(1, 2, figsize=(7.5, 0.45 * max(len(forward_ms), len(training_ms)) + 1.6),
                             sharey=False)
    for ax, times, name in ((axes[0], forward_ms, "forward pass"), (axes[1], training_ms, "training step")):
        labels = list(times)[::-1]  # the first entry on top
        values = [times[k] for k in labels]
        colors = ["tab:gray" if k.startswith("PyTorch") else
                  "tab:purple" if k.startswith("torch.compile") else "tab:blue" for k in labels]
        bars = ax.barh(labels, values, color=colors)
        ax.bar_label(bars, [f"{v:.2f}" for v in values], padding=3, fontsize=8)
        ax.axvline(next(iter(times.values())), color="black", linestyle="--", linewidth=0.8)
        ax.set_xlabel("milliseconds")
        ax.set_title(name)
        ax.set_xlim(0, 1.18 * max(values))
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig
