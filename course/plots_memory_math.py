"""Figures of the chapter *Memory math*: step time against tokens, KV cache against context, largest batch.

Each function draws one figure from measured or computed data and returns it; the notebook shows it.
"""
from __future__ import annotations

import numpy as np

GIB = 2**30


def step_time_roofline(T, memory_floor, compute_floor, t_star):
    """Left: the floors of one step's time against the tokens T it holds; right: the tokens per second."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(7.5, 3.6))
    floor = np.maximum(memory_floor, compute_floor)
    ax[0].loglog(T, memory_floor * 1e3, "--", label="read the weights (bandwidth)")
    ax[0].loglog(T, compute_floor * 1e3, "--", label="2P FLOPs per token (peak)")
    ax[0].loglog(T, floor * 1e3, "k", lw=2, label="floor of the step time")
    ax[0].axvline(t_star, color="gray", lw=0.8)
    ax[0].set(xlabel="tokens in one step T", ylabel="ms per step", title="Llama 2 7B, bf16, H200 datasheet")
    ax[0].legend(fontsize=9)
    ax[1].loglog(T, T / floor, "k", lw=2)
    ax[1].axvline(t_star, color="gray", lw=0.8)
    ax[1].set(xlabel="tokens in one step T", ylabel="tokens per second (ceiling)",
              title="throughput grows with T until T*")
    fig.tight_layout()
    return fig


def kv_cache_against_context(seq, models, capacity_bytes, batches=(1, 8, 64)):
    """One panel per model: the bf16 KV cache of ``batches`` sequences against the context length.

    ``models`` maps a name to (config, kv_cache_bytes(batch, seq), weight bytes).
    """
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(models), figsize=(7.5, 4), sharey=True)
    for ax, (name, (c, cache_bytes, weights)) in zip(np.atleast_1d(axes), models.items()):
        for batch in batches:
            ax.loglog(seq, cache_bytes(batch, seq) / GIB, label=f"KV cache, b={batch}")
        ax.axhline(weights / GIB, color="k", ls="--", label="bf16 weights")
        ax.axhline(capacity_bytes / GIB, color="r", ls=":", label="H200 capacity")
        ax.axvline(c.max_seq, color="gray", lw=0.8)
        ax.set(xlabel="context length s (tokens)", title=f"Llama 2 {name}, bf16 cache")
    first = np.atleast_1d(axes)[0]
    first.set_ylabel("GiB")
    first.legend(fontsize=9)
    fig.tight_layout()
    return fig


def largest_batch(contexts, batches, reserve):
    """One panel per GPU: the largest batch that fits against the context, per model and weight type.

    ``batches[gpu][(model, weight_label)]`` holds one batch per context (NaN where none fits).
    """
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(batches), figsize=(7.5, 4), sharey=True)
    for ax, (gpu_name, curves) in zip(np.atleast_1d(axes), batches.items()):
        colors = {}
        for (model, weights), b in curves.items():
            color = colors.setdefault(model, f"C{len(colors)}")
            ax.loglog(contexts, b, "-" if weights == "bf16" else "--", color=color,
                      label=f"{model}, {weights} weights")
        ax.axvline(4096, color="gray", lw=0.8)
        ax.set(xlabel="context length per sequence", title=f"{gpu_name}, bf16 KV cache, {reserve:.0%} reserve")
    np.atleast_1d(axes)[0].set_ylabel("largest batch that fits")
    np.atleast_1d(axes)[-1].legend(fontsize=9)
    fig.tight_layout()
    return fig
