"""``autograder report DIR``: what an instructor acts on, from a graded folder.

- ``report.html``: one self-contained page (plots embedded): per exercise, the scores and how
  many failed for each reason (the reason the grader recorded, never one read from a message); on a GPU, a speed leaderboard and the distribution of speed
  ratios; per student, each exercise's score, failure reason and first failing case.
- ``report.md``: the summary tables, for a terminal or an issue.
- ``scores.png`` and ``speed.png``: the plots, beside them.

Everything is read back from the results.json files (``read_results``), so a report of an old
folder works too (its failures, which carry no reason code, show as "other"). Names shown are the
submissions' folder names, never a path on this machine. A simulator run is shown out of the points
it could grade, with the GPU-only points pending, not lost.
"""
from __future__ import annotations

import base64
import html
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .outcome import REASONS, checked_reason
from .results import atomic_write, exercise_scores, md_unescape, pending_points, read_results
from .spec import Lab

_FAIL_ROW = re.compile(r"^\| (.*?) \| \*\*FAIL\*\* \| (.*) \|$")  # a case table's failed row (results.case_table)


def reason_label(test: dict) -> str:
    """The label of the reason the grader recorded with a failed correctness test. A test written
    before reason codes has none: "other", never a label guessed from its message, which can hold
    the learner's own words."""
    return REASONS[checked_reason((test.get("extra_data") or {}).get("reason"), False)]


def first_failure(output: str) -> str:
    """The first failing case of a test's output, in either form the grader writes."""
    for line in output.splitlines():
        m = _FAIL_ROW.match(line)
        if m:
            return md_unescape(f"{m.group(1)}: {m.group(2)}").rstrip(": ")
        if line.startswith("FAIL "):
            return line[5:]
    return ""


@dataclass
class Outcome:
    """One student's exercise, as the report shows it."""
    score: float
    passed: bool
    reason: str = ""  # why correctness was lost ("" when it was not), or why it is pending
    first_case: str = ""
    message: str = ""
    pending: bool = False  # its correctness waits for the course's GPU run: not lost

    @property
    def shade(self) -> str:
        return "na" if self.pending or self.reason == "not graded" else "bad" if self.reason else "ok"


def outcomes(result: dict, lab: Lab) -> dict[str, Outcome]:
    per = exercise_scores(result)
    pending = pending_points(result, lab)
    found = {}
    for ex in lab.exercises:
        tests = [t for t in result.get("tests", []) if isinstance(t, dict)
                 and (t.get("extra_data") or {}).get("exercise") == ex.name]
        correct = next((t for t in tests if t["extra_data"].get("part") == "correctness"), None)
        out = Outcome(per.get(ex.name, 0.0), False)
        if correct is None:
            out.pending = f"{ex.name}/correctness" in pending
            out.reason = "pending: needs a GPU" if out.pending else "not graded"
        elif float(correct.get("score", 0)) >= float(correct.get("max_score", 0)) - 1e-9:
            out.passed = True
        else:
            text = str(correct.get("output", ""))
            out.message = md_unescape(text.split("\n\n")[0].splitlines()[0]) if text.strip() else ""
            out.first_case = next(filter(None, (first_failure(str(t.get("output", ""))) for t in tests)), "")
            out.reason = reason_label(correct)
        found[ex.name] = out
    return found


def pending_per_exercise(results: dict[str, dict], lab: Lab) -> dict[str, dict[str, float]]:
    """Per submission, per exercise: the points pending a GPU run (a simulator run's GPU-only parts)."""
    found = {}
    for name, res in results.items():
        per: dict[str, float] = {}
        for part, points in pending_points(res, lab).items():
            ex = part.split("/")[0]
            per[ex] = per.get(ex, 0.0) + points
        found[name] = per
    return found


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


def leaderboard(results: dict[str, dict], lab: Lab) -> dict[str, list[tuple[str, float, float]]]:
    """Per timed exercise: (submission, speed ratio, median seconds), fastest first."""
    board: dict[str, list[tuple[str, float, float]]] = {}
    for name, res in results.items():
        for t in res.get("tests", []):
            extra = t.get("extra_data") or {}
            timing = extra.get("timing") or {}
            if extra.get("part") == "speed" and timing.get("measured") and timing.get("ratio") is not None:
                board.setdefault(extra["exercise"], []).append((name, float(timing["ratio"]),
                                                                float(timing.get("median_s", float("nan")))))
    order = [e.name for e in lab.exercises]
    return {ex: sorted(rows, key=lambda r: -r[1]) for ex, rows in sorted(board.items(), key=lambda kv: order.index(kv[0])
                                                                         if kv[0] in order else len(order))}


def _plots(out_dir: Path, lab: Lab, results, scores, ratios, most: dict[str, float]) -> tuple[Path, Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(lab.exercises)
    fig, axes = plt.subplots(1, n, figsize=(3.2 * n, 2.8), squeeze=False)
    for ax, ex in zip(axes[0], lab.exercises):
        top = most[ex.name] or ex.max_points  # an exercise all pending a GPU: its full range
        ax.hist(scores[ex.name], bins=np.linspace(0, top, 9), color="#4477aa", edgecolor="white")
        ax.set_title(ex.name, fontsize=9)
        ax.set_xlabel(f"points (of {top:g})")
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
    return scores_png, speed_png


def write_report(out_dir: Path, lab: Lab, top: int = 10) -> list[Path]:
    out_dir = Path(out_dir)
    results, scores, ratios, totals = collect(out_dir, lab)
    pending = pending_per_exercise(results, lab)
    # Each submission's exercise out of what its mode could grade (a simulator run: no GPU-only parts)
    gradable = {ex.name: [ex.max_points - pending[name].get(ex.name, 0.0) for name in results] for ex in lab.exercises}
    most = {name: max(g, default=0.0) for name, g in gradable.items()}
    scores_png, speed_png = _plots(out_dir, lab, results, scores, ratios, most)
    per_student = {name: outcomes(res, lab) for name, res in results.items()}
    counts = {ex.name: Counter(o[ex.name].reason for o in per_student.values() if o[ex.name].reason
                               and not o[ex.name].pending) for ex in lab.exercises}
    board = leaderboard(results, lab)
    any_pending = any(pending.values())

    summary = [("exercise", "max", "mean", "median", "full marks", "median speed ratio",
                *(["pending (GPU run)"] if any_pending else []))]
    for ex in lab.exercises:
        v = np.array(scores[ex.name] or [0.0])
        graded = [(s, g) for s, g in zip(scores[ex.name], gradable[ex.name]) if g > 0]
        full = f"{sum(1 for s, g in graded if np.isclose(s, g))}/{len(graded)}" if graded else "-"
        r = f"{np.median(ratios[ex.name]):.2f}" if ratios[ex.name] else "-"
        summary.append((ex.name, f"{most[ex.name]:g}", f"{v.mean():.2f}", f"{np.median(v):.2f}", full, r,
                        *([f"{ex.max_points - most[ex.name]:g}"] if any_pending else [])))
    reasons = [("exercise", "reason", "submissions")] + [
        (ex, why, str(k)) for ex, c in counts.items() for why, k in c.most_common()]
    fastest = [("exercise", "rank", "submission", "speed ratio", "median time (us)")] + [
        (ex, str(i), name, f"{ratio:.2f}", f"{sec * 1e6:.1f}")
        for ex, rows in board.items() for i, (name, ratio, sec) in enumerate(rows[:top], 1)]
    t = np.array(totals or [0.0])
    total_line = f"Total: mean {t.mean():.2f}, median {np.median(t):.2f} of {lab.max_points:g}."
    if any_pending:
        out_of = max(lab.max_points - sum(p.values()) for p in pending.values())
        parts = sorted({part for res in results.values() for part in pending_points(res, lab)},
                       key=lambda p: ([e.name for e in lab.exercises].index(p.split("/")[0]), p))
        total_line = (f"Total: mean {t.mean():.2f}, median {np.median(t):.2f} of {out_of:g} (simulator mode; "
                      f"{lab.max_points - out_of:g} pending the course's GPU run, not lost: "
                      f"{', '.join(p.replace('/', ' ') for p in parts)}).")

    def md_table(rows) -> list[str]:
        cells = [[str(c).replace("|", "\\|") for c in row] for row in rows]
        return ["| " + " | ".join(cells[0]) + " |", "|" + "---|" * len(cells[0]),
                *("| " + " | ".join(r) + " |" for r in cells[1:])]

    lines = [f"# {lab.title}: grading report", "", f"{len(results)} submissions graded.", "",
             *md_table(summary), "", total_line, "", "## Why correctness was lost", ""]
    lines += md_table(reasons) if len(reasons) > 1 else ["No exercise lost its correctness points."]
    lines += ["", "## Speed leaderboard (GPU)", ""]
    lines += md_table(fastest) if len(fastest) > 1 else ["No submission was timed on a GPU."]
    lines += ["", "![scores](scores.png)", "", "![speed](speed.png)", "",
              "Per student: report.html.", ""]
    md = out_dir / "report.md"
    atomic_write(md, "\n".join(lines))

    students = [("submission", "total", *(ex.name for ex in lab.exercises))]
    for name, per in per_student.items():
        row = [name, f"{float(results[name].get('score', 0)):g}"]
        for ex in lab.exercises:
            o = per[ex.name]
            row.append((f"{o.score:g}", o.reason, o.first_case or o.message, o.shade))
        students.append(tuple(row))
    page = _html(lab, len(results), total_line, summary, reasons, fastest, students,
                 {"scores": scores_png, "speed": speed_png})
    html_path = out_dir / "report.html"
    atomic_write(html_path, page)
    return [md, html_path, scores_png, speed_png]


def _html(lab: Lab, n: int, total_line: str, summary, reasons, fastest, students, images: dict[str, Path]) -> str:
    e = html.escape

    def table(rows, cls="") -> str:
        head = "".join(f"<th>{e(str(c))}</th>" for c in rows[0])
        body = []
        for row in rows[1:]:
            cells = []
            for c in row:
                if isinstance(c, tuple):  # a student's exercise: score, reason, first failing case, shade
                    score, why, case, kind = c
                    cells.append(f"<td class='{kind}'><b>{e(score)}</b>"
                                 + (f"<br><span class=why>{e(why)}</span>" if why else "")
                                 + (f"<br><small>{e(case[:300])}</small>" if case else "") + "</td>")
                else:
                    cells.append(f"<td>{e(str(c))}</td>")
            body.append("<tr>" + "".join(cells) + "</tr>")
        return f"<table class='{cls}'><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"

    def image(path: Path, alt: str) -> str:
        data = base64.b64encode(path.read_bytes()).decode()
        return f"<img alt='{e(alt)}' src='data:image/png;base64,{data}'>"

    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>{e(lab.title)}: grading report</title>",
        "<style>body{font-family:sans-serif;margin:2em;max-width:80em}table{border-collapse:collapse;margin:1em 0}"
        "td,th{border:1px solid #ccc;padding:.3em .5em;vertical-align:top;text-align:left}"
        "td.bad{background:#fdecea}td.ok{background:#eef7ee}td.na{background:#f4f4f4}.why{color:#a00}td.na .why{color:#555}small{color:#555}"
        "img{max-width:100%}</style></head><body>",
        f"<h1>{e(lab.title)}: grading report</h1><p>{n} submissions graded. {e(total_line)}</p>",
        table(summary), image(images["scores"], "score per exercise"),
        "<h2>Why correctness was lost</h2>",
        table(reasons) if len(reasons) > 1 else "<p>No exercise lost its correctness points.</p>",
        "<h2>Speed on the GPU</h2>",
        table(fastest) if len(fastest) > 1 else "<p>No submission was timed on a GPU (simulator mode, or none "
                                                "correct): no leaderboard.</p>",
        image(images["speed"], "speed ratio distribution"),
        "<h2>Per student</h2><p>Each exercise: points, why correctness was lost, and the first failing case "
        "(or the grader's message).</p>",
        table(students, "students"),
        "</body></html>",
    ]
    return "\n".join(parts)
