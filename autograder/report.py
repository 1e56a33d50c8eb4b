"""``autograder report DIR``: what an instructor acts on, from a graded folder.

- ``report.html``: one self-contained page (plots embedded): per exercise, the scores and how
  many failed for each reason; on a GPU, a speed leaderboard and the distribution of speed
  ratios; per student, each exercise's score, failure reason and first failing case.
- ``report.md``: the summary tables, for a terminal or an issue.
- ``scores.png`` and ``speed.png``: the plots, beside them.

Everything is read back from the results.json files (``read_results``), so a report of an old
folder works too. Names shown are the submissions' folder names, never a path on this machine.
"""
from __future__ import annotations

import base64
import html
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .results import atomic_write, exercise_scores, read_results
from .spec import Lab

# Why an exercise lost its correctness points, read from the grader's message: first match wins
# (the more specific patterns come first: "never set" also says "elements wrong").
REASONS = (
    ("needs a GPU", r"needs a GPU|not graded in simulator"),
    ("grader failure", r"the grader failed|autograder failed"),
    ("no usable file", r"No \.ipynb or \.py|is empty|not a valid notebook|no answer cells|could not read|"
                       r"must be \.ipynb|Several files could be"),
    ("syntax error", r"SyntaxError|IndentationError"),
    ("forbidden call", r"forbids"),
    ("forbidden construct", r"may not use"),
    ("time limit", r"did not finish within"),
    ("memory limit", r"of host memory"),
    ("too much output", r"printed more than"),
    ("missing function", r"no function named|not defined"),
    ("wrong signature", r"must take"),
    ("import failed", r"ModuleNotFoundError|ImportError|No module named"),
    ("out-of-bounds access", r"IndexError|out of bounds|guard element"),
    ("input modified", r"was modified"),
    ("elements never written", r"never set|never written"),
    ("memory not freed", r"not freed|leak|still page-locked|unlock"),
    ("barrier misuse", r"barrier"),
    ("exception", r"raised \w+|\w+Error\b"),
    ("wrong values", r"elements wrong|max abs err|expected"),
)
_FAIL_ROW = re.compile(r"^\| (.*?) \| \*\*FAIL\*\* \| (.*) \|$")  # a case table's failed row (results.case_table)


def reason(message: str) -> str:
    for label, pattern in REASONS:
        if re.search(pattern, message):
            return label
    return "other"


def first_failure(output: str) -> str:
    """The first failing case of a test's output, in either form the grader writes."""
    for line in output.splitlines():
        m = _FAIL_ROW.match(line)
        if m:
            return f"{m.group(1)}: {m.group(2)}".replace("\\|", "|").rstrip(": ")
        if line.startswith("FAIL "):
            return line[5:]
    return ""


@dataclass
class Outcome:
    """One student's exercise, as the report shows it."""
    score: float
    passed: bool
    reason: str = ""  # why correctness was lost ("" when it was not)
    first_case: str = ""
    message: str = ""


def outcomes(result: dict, lab: Lab) -> dict[str, Outcome]:
    per = exercise_scores(result)
    skipped = (result.get("extra_data") or {}).get("not_graded") or {}
    found = {}
    for ex in lab.exercises:
        tests = [t for t in result.get("tests", []) if isinstance(t, dict)
                 and (t.get("extra_data") or {}).get("exercise") == ex.name]
        correct = next((t for t in tests if t["extra_data"].get("part") == "correctness"), None)
        out = Outcome(per.get(ex.name, 0.0), False)
        if correct is None:
            why = skipped.get(f"{ex.name}/correctness")
            out.reason = why if why else "not graded"
        elif float(correct.get("score", 0)) >= float(correct.get("max_score", 0)) - 1e-9:
            out.passed = True
        else:
            text = str(correct.get("output", ""))
            out.message = text.split("\n\n")[0].splitlines()[0] if text.strip() else ""
            out.first_case = next(filter(None, (first_failure(str(t.get("output", ""))) for t in tests)), "")
            # "5 of 8 cases correct" says no reason: the first failing case does
            out.reason = reason(text.split("\n\n")[0] or text)
            if out.reason == "other" and out.first_case:
                out.reason = reason(out.first_case)
        found[ex.name] = out
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


def _plots(out_dir: Path, lab: Lab, results, scores, ratios) -> tuple[Path, Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(lab.exercises)
    fig, axes = plt.subplots(1, n, figsize=(3.2 * n, 2.8), squeeze=False)
    for ax, ex in zip(axes[0], lab.exercises):
        ax.hist(scores[ex.name], bins=np.linspace(0, ex.max_points, 9), color="#4477aa", edgecolor="white")
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
    return scores_png, speed_png


def write_report(out_dir: Path, lab: Lab, top: int = 10) -> list[Path]:
    out_dir = Path(out_dir)
    results, scores, ratios, totals = collect(out_dir, lab)
    scores_png, speed_png = _plots(out_dir, lab, results, scores, ratios)
    per_student = {name: outcomes(res, lab) for name, res in results.items()}
    counts = {ex.name: Counter(o[ex.name].reason for o in per_student.values() if o[ex.name].reason)
              for ex in lab.exercises}
    board = leaderboard(results, lab)

    summary = [("exercise", "max", "mean", "median", "full marks", "median speed ratio")]
    for ex in lab.exercises:
        v = np.array(scores[ex.name] or [0.0])
        full = int(np.sum(np.isclose(v, ex.max_points)))
        r = f"{np.median(ratios[ex.name]):.2f}" if ratios[ex.name] else "-"
        summary.append((ex.name, f"{ex.max_points:g}", f"{v.mean():.2f}", f"{np.median(v):.2f}",
                        f"{full}/{len(scores[ex.name])}", r))
    reasons = [("exercise", "reason", "submissions")] + [
        (ex, why, str(k)) for ex, c in counts.items() for why, k in c.most_common()]
    fastest = [("exercise", "rank", "submission", "speed ratio", "median time (us)")] + [
        (ex, str(i), name, f"{ratio:.2f}", f"{sec * 1e6:.1f}")
        for ex, rows in board.items() for i, (name, ratio, sec) in enumerate(rows[:top], 1)]
    t = np.array(totals or [0.0])
    total_line = f"Total: mean {t.mean():.2f}, median {np.median(t):.2f} of {lab.max_points:g}."

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
            row.append((f"{o.score:g}", o.reason, o.first_case or o.message))
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
                if isinstance(c, tuple):  # a student's exercise: score, reason, first failing case
                    score, why, case = c
                    kind = "na" if why in ("needs a GPU", "not graded") else "bad" if why else "ok"
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
        "td.bad{background:#fdecea}td.ok{background:#eef7ee}td.na{background:#f4f4f4}.why{color:#a00}small{color:#555}"
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
