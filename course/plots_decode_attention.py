"""Figures of the chapter *Decode attention at memory speed*: programs per SM with and without
split-K, the share of the copy against the batch size, and bandwidth against the sequence length.

Each function draws one figure at the page's width (7.5 inches) and returns it;
the notebook shows it with ``plt.show()``.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.ticker import FuncFormatter, NullFormatter


def _plain_log_ticks(axis):
    """Tick labels as plain numbers on a log axis (no 10^k in mathtext), minor ticks unlabelled."""
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def programs_per_sm(batches, programs, sms):
    """Programs per SM (``programs``: label -> one count per batch size in ``batches``) on a log
    scale, with the line at one program per SM below which SMs sit idle."""
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    for (label, counts), style in zip(programs.items(), ("o-", "s-", "^-")):
        ax.loglog(batches, [c / sms for c in counts], style, base=2, label=label)
    ax.axhline(1.0, color="black", linestyle="--", linewidth=1, label=f"one program per SM ({sms} SMs)")
    ax.fill_between([batches[0], batches[-1]], 1e-3, 1.0, color="tab:red", alpha=0.08)
    ax.set_xticks(batches, labels=[str(b) for b in batches])
    ax.xaxis.set_minor_formatter(NullFormatter())
    _plain_log_ticks(ax.yaxis)
    ax.set_ylim(min(c / sms for counts in programs.values() for c in counts) / 2,
                2 * max(c / sms for counts in programs.values() for c in counts))
    ax.set_xlabel("sequences in the batch (the same number of tokens in all)")
    ax.set_ylabel("programs per SM")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize=9)
    ax.set_title("Programs of one decode step against the GPU's SMs (shaded: SMs left idle)", fontsize=10)
    fig.tight_layout()
    return fig


def share_of_copy_by_batch(batches, shares):
    """% of the copy bandwidth (``shares``: label -> one value per batch size in ``batches``)."""
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    for (label, values), style in zip(shares.items(), ("o-", "s-", "^-")):
        ax.semilogx(batches, values, style, base=2, label=label)
    ax.axhline(100, color="black", linestyle="--", linewidth=1, label="device-to-device copy")
    ax.set_xticks(batches, labels=[str(b) for b in batches])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_ylim(0, 110)
    ax.set_xlabel("sequences in the batch (the same keys and values at every point)")
    ax.set_ylabel("% of the copy bandwidth")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right", fontsize=9)
    ax.set_title("Decode attention: one program per (sequence, KV head) against split-K", fontsize=10)
    fig.tight_layout()
    return fig


def bandwidth_by_length(lengths, gbps, copy_gbps):
    """GB/s of keys and values read (``gbps``: label -> one value per length in ``lengths``, None
    where not measured) against the sequence length, with the copy as the ceiling."""
    fig, ax = plt.subplots(figsize=(7.5, 4.0))
    for (label, values), style in zip(gbps.items(), ("o-", "s--", "^-", "x-", "d-")):
        points = [(n, g) for n, g in zip(lengths, values) if g is not None]
        if points:
            ax.semilogx(*zip(*points), style, base=2, label=label)
    ax.axhline(copy_gbps, color="black", linestyle="--", linewidth=1, label="device-to-device copy")
    ax.set_xticks(lengths, labels=[f"{n:,}" for n in lengths])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_ylim(0, 1.1 * copy_gbps)
    ax.set_xlabel("tokens per sequence (the batch is fixed)")
    ax.set_ylabel("GB/s of keys and values read")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right", fontsize=9)
    ax.set_title("Decode attention against the sequence length", fontsize=10)
    fig.tight_layout()
    return fig
