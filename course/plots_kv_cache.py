"""Figure of the lab *KV cache*: a slot table beside the pool of slots it points into."""
from __future__ import annotations

import numpy as np


def slot_table_and_pool(table, lengths, num_slots):
    """Left: ``table[b, t]``, one row per sequence; right: the pool, each used slot coloured by its owner."""
    import matplotlib.pyplot as plt

    n_seq, t_max = table.shape
    colors = plt.cm.tab10(np.arange(n_seq))
    per_row = (num_slots + 1) // 2
    fig, (left, right) = plt.subplots(1, 2, figsize=(7.5, 2.8), gridspec_kw={"width_ratios": [t_max, per_row]})
    for b in range(n_seq):
        for t in range(t_max):
            s = table[b, t]
            face = colors[b] if s >= 0 else (0.92, 0.92, 0.92, 1.0)
            left.add_patch(plt.Rectangle((t, b), 1, 1, facecolor=face, edgecolor="white"))
            left.text(t + 0.5, b + 0.5, str(s), ha="center", va="center", fontsize=9)
    left.set_xlim(0, t_max)
    left.set_ylim(n_seq, 0)
    left.set_xticks(np.arange(t_max) + 0.5, [str(t) for t in range(t_max)])
    left.set_yticks(np.arange(n_seq) + 0.5, [f"b={b} (len {n})" for b, n in enumerate(lengths)], fontsize=9)
    left.set_xlabel("token position t")
    left.set_title("slot_table[b, t] (-1: past the length)", fontsize=10)
    owner = {int(table[b, t]): (b, t) for b in range(n_seq) for t in range(lengths[b])}
    for s in range(num_slots):
        x, y = s % per_row, s // per_row
        b_t = owner.get(s)
        right.add_patch(plt.Rectangle((x, y), 1, 1, facecolor=colors[b_t[0]] if b_t else "white",
                                      edgecolor="black", linewidth=0.5))
        right.text(x + 0.5, y + 0.3, str(s), ha="center", va="center", fontsize=9)
        right.text(x + 0.5, y + 0.7, f"t{b_t[1]}" if b_t else "-", ha="center", va="center", fontsize=9)
    right.set_xlim(0, per_row)
    right.set_ylim(2, 0)
    right.axis("off")
    right.set_title("the pool: slot number, and the token it holds", fontsize=10)
    plt.tight_layout()
    plt.show()
