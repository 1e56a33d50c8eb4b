"""``autograder report DIR``: the class at a glance, as plots and a Markdown table."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .results import atomic_write, exercise_scores, read_results
from .spec import Lab


def collect(out_dir: Path, lab: Lab):
    results = read_results(out_dir, lab)
    scores = {e.name: [] for e in lab.exercises}
    ratios = {e.name: [] for e in lab.exercises}
    totals = []
    for res in results.values():
        per = exercise_scores(res)
        for e in lab.exercises:
            scores[e.name].append(per.get(e.name, 0.0))
        for t in res.get("tests", []):
            timing = t.get("extra_data", {}).get("timing") or {}
            if timing.get("ratio") is not None:
                ratios[t["extra_data"]["exercise"]].append(timing["ratio"])
        totals.append(float(res.get("score", 0.0)))
    return results, scores, ratios, totals


def write_report(out_dir: Path, lab: Lab) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    results, scores, ratios, totals = collect(out_dir, lab)
    n = len(lab.exercises)
    fig, axes = plt.subplots(1, n, figsize=(3.2 * n, 2.8), squeeze=False)
    for ax, ex in zip(axes[0], lab.exercises):
        vals = scores[ex.name]
        bins = np.linspace(0, ex.max_points, 9)
        ax.hist(vals, bins=bins, color="#4477aa", edgecolor="white")
        ax.set_title(ex.name, fontsize=9)
        ax.set_xlabel(f"points (of {ex.max_points:g})")
    axes[0][0].set_ylabel("submissions")
    fig.suptitle(f"{lab.title}: score per exercise ({len(results)} submissions)")
    fig.tight_layout()
    scores_png = out_dir / "scores.png"
    fig.savefig(scores_png, dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 3))
    timed = [(name, r) for name, r in ratios.items() if r]
    if timed:
        ax.hist([r for _, r in timed], bins=20, label=[name for name, _ in timed], stacked=True)
        ax.axvline(1.0, color="black", lw=1, ls="--")
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no timed submissions (simulator mode, or none correct)", ha="center", va="center")
    ax.set_xlabel("speed ratio: reference time / submission time (higher is faster)")
    ax.set_ylabel("submissions")
    fig.tight_layout()
    speed_png = out_dir / "speed.png"
    fig.savefig(speed_png, dpi=120)
    plt.close(fig)

    lines = [f"# {lab.title}: grading report", "", f"{len(results)} submissions graded.", "",
             "| exercise | max | mean | median | full marks | median speed ratio |",
             "|---|---:|---:|---:|---:|---:|"]
    for ex in lab.exercises:
        v = np.array(scores[ex.name] or [0.0])
        full = int(np.sum(np.isclose(v, ex.max_points)))
        r = f"{np.median(ratios[ex.name]):.2f}" if ratios[ex.name] else "-"
        lines.append(f"| {ex.name} | {ex.max_points:g} | {v.mean():.2f} | {np.median(v):.2f} | "
                     f"{full}/{len(scores[ex.name])} | {r} |")
    t = np.array(totals or [0.0])
    lines += ["", f"Total: mean {t.mean():.2f}, median {np.median(t):.2f} of {lab.max_points:g}.", "",
              "![scores](scores.png)", "", "![speed](speed.png)", ""]
    md = out_dir / "report.md"
    atomic_write(md, "\n".join(lines))
    return [md, scores_png, speed_png]
