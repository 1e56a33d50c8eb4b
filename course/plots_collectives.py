"""Figures of the chapter *Collectives* and its lab: each rank's buffers before and after a collective,
and a ring all-reduce's buffers step by step."""
from __future__ import annotations

import numpy as np

_COLORS = {"A": "#8ecae6", "B": "#ffb703", "C": "#90be6d", "D": "#f4a6c1", "Σ": "#c9b6f2"}


def _buffers(ax, state, k, title):
    # state[r] = list of k labels (None = empty slot); one column per rank, one row per chunk.
    from matplotlib.patches import Rectangle

    for r, slots in enumerate(state):
        for j, label in enumerate(slots):
            face = "white" if label is None else _COLORS[label[0]]
            ax.add_patch(Rectangle((r, k - 1 - j), 0.92, 0.92, facecolor=face, edgecolor="0.3"))
            if label:
                ax.text(r + 0.46, k - 1 - j + 0.46, label, ha="center", va="center", fontsize=10)
    ax.set_xlim(-0.1, k); ax.set_ylim(-0.1, k)
    ax.set_xticks([r + 0.46 for r in range(k)], [f"rank {r}" for r in range(k)], fontsize=9)
    ax.set_yticks([]); ax.set_title(title, fontsize=10)
    for side in ax.spines.values():
        side.set_visible(False)


def before_and_after(collectives, k):
    """One row per collective: the k ranks' buffers before (left) and after (right).

    ``collectives`` maps a name to (before, after); each is a list per rank of k chunk labels
    ("A0", "Σ1", ... coloured by their first letter) or None for an empty slot.
    """
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(collectives), 2, figsize=(7.5, 2.2 * len(collectives)))
    for row, (name, (before, after)) in zip(axes, collectives.items()):
        _buffers(row[0], before, k, f"{name}: before")
        _buffers(row[1], after, k, f"{name}: after")
    fig.tight_layout()
    plt.show()


def ring_all_reduce_steps(snaps, moves, k):
    """The k ranks' buffers at the start and after each step of a ring all-reduce.

    ``snaps[s][r][j]`` is the set of ranks whose chunk j rank r holds the sum of after s steps;
    ``moves[s]`` lists the (sender, receiver, chunk) of step s (empty for the start). A received
    chunk is outlined in red.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    letters = "ABCD"[:k]

    def label(contributors):
        return "Σ" if len(contributors) == k else "".join(letters[r] for r in sorted(contributors))

    fig, axes = plt.subplots(4, 2, figsize=(7.5, 10))
    steps = ["start"] + [f"reduce-scatter step {s}" for s in range(k - 1)] + [f"all-gather step {s}" for s in range(k - 1)]
    for ax, snap, sends, title in zip(axes.flat, snaps, moves, steps):
        state = [[label(snap[r][j]) for j in range(k)] for r in range(k)]
        _buffers(ax, state, k, title)            # coloured by the first contributor, or as a full sum
        for r, dst, c in sends:                  # outline the chunk each rank received in this step
            ax.add_patch(Rectangle((dst, k - 1 - c), 0.92, 0.92, fill=False, edgecolor="red", lw=2.5))
        if sends:
            pairs = [f"{r}→{dst}: chunk {c}" for r, dst, c in sends]
            ax.set_xlabel("sent: " + ", ".join(pairs[:2]) + ",\n" + ", ".join(pairs[2:]), fontsize=9)
    axes.flat[-1].axis("off")
    axes.flat[-1].text(0.0, 0.5, f"columns: ranks; rows: chunks 0-{k - 1}\nletters: whose data the chunk holds\n"
                       "Σ: the sum over all four ranks\nred outline: received in this step", fontsize=10, va="center")
    fig.tight_layout()
    plt.show()


def ring_steps(states, k):
    """Each rank's k chunks after every step of a ring all-reduce, one panel per step.

    ``states[s]`` is the (k, k) array of buffers after s steps, where rank r started with 2**r
    everywhere, so the bits of a value say which ranks' values it holds.
    """
    import matplotlib.pyplot as plt

    def ranks_in(value, chunk):
        # The ranks whose 2^r make up value, in ring order from the chunk's first rank.
        bits = int(value)
        return [r for r in ((chunk + i) % k for i in range(k)) if bits >> r & 1]

    fig, axes = plt.subplots(2, 4, figsize=(7.5, 4.5))
    for ax, (steps, state) in zip(axes.flat, enumerate(states)):
        for r in range(k):
            for c in range(k):
                who = ranks_in(state[r, c], c)
                shade = plt.cm.Blues(0.15 + 0.7 * (len(who) - 1) / (k - 1))
                full = len(who) == k
                ax.add_patch(plt.Rectangle((c, r), 1, 1, facecolor=shade, edgecolor="black" if full else "white",
                                           linewidth=2.5 if full else 1))
                ax.text(c + 0.5, r + 0.5, "all" if full else "+".join(map(str, who)), ha="center",
                        va="center", fontsize=9, color="white" if len(who) > 2 else "black")
        ax.set_xlim(0, k); ax.set_ylim(k, 0)
        ax.set_xticks(np.arange(k) + 0.5, [f"c{c}" for c in range(k)], fontsize=9)
        ax.set_yticks(np.arange(k) + 0.5, [f"r{r}" for r in range(k)], fontsize=9)
        if steps == 0:
            ax.set_title("start", fontsize=9)
        elif steps <= k - 1:
            ax.set_title(f"reduce-scatter\nstep {steps - 1}", fontsize=9)
        else:
            ax.set_title(f"all-gather\nstep {steps - k}", fontsize=9)
    axes.flat[-1].axis("off")
    axes.flat[-1].text(0.0, 0.5, "rows: ranks r;\ncolumns: chunks c;\ntext: the ranks\nadded in;\n"
                       "all, framed:\nthe sum of\nall ranks", fontsize=9, va="center")
    plt.tight_layout()
    plt.show()
