"""Figures of the chapter *Parallelism* and the lab *Tensor parallel*: pipeline schedules as Gantt
charts, and how attention's weights split over ranks by heads."""
from __future__ import annotations

import numpy as np


def _schedule(ax, sim, p, title):
    # One row per stage; forward passes blue, backward passes orange, micro-batch numbers inside.
    import matplotlib.pyplot as plt

    for s, op, i, start, end in sim["events"]:
        ax.broken_barh([(start, end - start)], (s - 0.4, 0.8),
                       facecolors="tab:blue" if op == "F" else "tab:orange", edgecolors="white")
        ax.text((start + end) / 2, s, str(i), ha="center", va="center", fontsize=9, color="white")
    ax.set_yticks(range(p), [f"stage {s}" for s in range(p)])
    ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color="tab:blue", label="forward"),
                       plt.Rectangle((0, 0), 1, 1, color="tab:orange", label="backward")],
              fontsize=9, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.invert_yaxis()
    ax.set_title(f"{title}: makespan {sim['makespan']:.0f}, bubble {sim['bubble']:.1%},\n"
                 f"peak micro-batches in flight per stage {sim['peak_in_flight']}", fontsize=9)


def pipeline_schedules(sims, p):
    """GPipe's and 1F1B's schedules (from ``course.parallel.schedule``), one Gantt chart each."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 1, figsize=(7.5, 5.5), sharex=True)
    _schedule(axes[0], sims["gpipe"], p, "GPipe")
    _schedule(axes[1], sims["1f1b"], p, "1F1B")
    axes[1].set_xlabel("time (forward pass of one micro-batch on one stage = 1)")
    plt.tight_layout()
    plt.show()


def attention_split(n_heads=8, n_kv_heads=4, K=2, head_dim=4):
    """wq, wk, wv split by rows and wo by columns over K ranks, and which query head reads which
    key/value head, coloured by the rank that holds them."""
    import matplotlib.pyplot as plt

    d, kv = n_heads * head_dim, n_kv_heads * head_dim
    hq, hkv = n_heads // K, n_kv_heads // K
    colors = plt.cm.Set2(np.arange(K))
    fig, axes = plt.subplots(2, 3, figsize=(7.5, 6.2))
    # (title, rows, cols, rank of each row or column, split along, label)
    panels = [("wq (D, D)", d, d, np.arange(d) // (hq * head_dim), "rows", "q heads"),
              ("wk (KVH*hd, D)", kv, d, np.arange(kv) // (hkv * head_dim), "rows", "kv heads"),
              ("wv (KVH*hd, D)", kv, d, np.arange(kv) // (hkv * head_dim), "rows", "kv heads"),
              ("wo (D, D)", d, d, np.arange(d) // (hq * head_dim), "cols", "q heads")]
    for ax, (title, rows, cols, rank_of, axis, label) in zip(axes.flat, panels):
        img = colors[rank_of][:, None, :] * np.ones((1, cols, 1)) if axis == "rows" else \
            colors[rank_of][None, :, :] * np.ones((rows, 1, 1))
        ax.imshow(img, aspect="equal", interpolation="nearest", extent=(0, cols, rows, 0))
        n_lines = rows if axis == "rows" else cols
        for b in range(head_dim, n_lines, head_dim):  # thin lines between heads
            (ax.axhline if axis == "rows" else ax.axvline)(b, color="white", lw=0.8)
        per = hq if label == "q heads" else hkv
        for r in range(K):  # name each rank's block by the heads it holds
            mid = (r + 0.5) * per * head_dim
            text = f"rank {r}\n{label} {r * per}-{(r + 1) * per - 1}"
            xy = (cols / 2, mid) if axis == "rows" else (mid, rows / 2)
            ax.text(*xy, text, ha="center", va="center", fontsize=9)
        ax.set_title(f"{title}:\n{'rows' if axis == 'rows' else 'columns'} by rank", fontsize=9)
        ax.set_xlim(0, d); ax.set_ylim(d, 0)  # every panel on the same scale
        ax.set_xticks([]); ax.set_yticks([])
        ax.set_xlabel("in_features (D)", fontsize=9)
        for side in ("top", "right", "bottom", "left"):
            ax.spines[side].set_visible(False)
    # Last panels: which query head reads which key/value head, coloured by the rank that runs both.
    axes.flat[5].axis("off")
    ax = axes.flat[4]
    group = n_heads // n_kv_heads
    for h in range(n_heads):
        r = h // hq
        ax.add_patch(plt.Rectangle((0, h), 1, 0.8, color=colors[r]))
        ax.text(0.5, h + 0.4, f"q{h}", ha="center", va="center", fontsize=9)
        j = h // group
        ax.plot([1, 2], [h + 0.4, j * group + group / 2 - 0.1], color=colors[r], lw=1.5)
    for j in range(n_kv_heads):
        r = j // hkv
        ax.add_patch(plt.Rectangle((2, j * group + group / 2 - 0.5), 1, 0.8, color=colors[r]))
        ax.text(2.5, j * group + group / 2 - 0.1, f"kv{j}", ha="center", va="center", fontsize=9)
    ax.set_xlim(-0.2, 3.2); ax.set_ylim(n_heads, -0.2); ax.axis("off")
    ax.set_title("query head -> key/value head", fontsize=9)
    plt.tight_layout()
    plt.show()
