"""What grading writes: results.json per submission (Gradescope's format), grades.csv, and
the grader's own record of what it graded (``.autograder.json``).

Every write goes to a temporary file that is renamed into place, so a crash or a kill never
leaves a half-written file. grades.csv is rebuilt from the results.json of the submissions
the record lists, each checked before use: a file that appears in the folder by other means
(or a results.json that is not the grader's) never reaches the gradebook.
"""
from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from pathlib import Path

import hashlib
import math
import re

from .outcome import SubmissionResult
from .spec import Lab

RECORD = ".autograder.json"
PENDING_COLUMN = "pending (GPU run)"  # points only a GPU can grade, in what a simulator run exports

# A cell a spreadsheet would run as a formula starts so (OWASP's CSV-injection rule); a plain number
# that starts with a sign is still a number.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def spreadsheet_cell(value) -> str:
    """A CSV cell that Excel, LibreOffice and Google Sheets read as the text or number it is, never as
    a formula: text that starts as a formula does gets a leading single quote (shown as part of the
    text), numbers stay numbers. Every CSV the course writes goes through csv_text, which uses this."""
    text = str(value)
    if text.startswith(_FORMULA_START) and not _NUMBER.fullmatch(text):
        return "'" + text
    return text


def csv_text(rows) -> str:
    """Rows as CSV text, every cell through spreadsheet_cell (roster cells and names are not ours)."""
    buf = io.StringIO()
    w = csv.writer(buf)
    for row in rows:
        w.writerow([spreadsheet_cell(c) for c in row])
    return buf.getvalue()


def atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# Where the detailed case list of a correctness test shows on Gradescope. "visible": in the test
# itself; anything else ("after_due_date", "after_published", "hidden"): in a test of its own, of
# no points, with that visibility, so the score stays visible (a hidden test that carries points
# hides the total from the student).
CASE_VISIBILITIES = ("visible", "after_due_date", "after_published", "hidden")


# What Markdown (and the HTML it allows) would act on in a failure's message, which carries the
# learner's own words (an exception's text): links and images ([ ]), tags and autolinks (< >),
# entities (&), headings (#, and a line of = or - under text), emphasis (*) and tables (|). Escaped,
# the words show as written, never as the grader's own formatting.
_MD_ACTIVE = re.compile(r"[\\\[\]<>&#*|]|^(?=[=-]+ *$)", re.MULTILINE)
_MD_ESCAPED = re.compile(r"\\([\\\[\]<>&#*|=-])")


def md_escape(text: str) -> str:
    """Text shown as written where Gradescope renders Markdown."""
    return _MD_ACTIVE.sub(lambda m: "\\" + m.group(0), text)


def md_unescape(text: str) -> str:
    """The text md_escape was given."""
    return _MD_ESCAPED.sub(r"\1", text)


def _md(text: str) -> str:
    """Text in a Markdown table cell: escaped, and no line breaks to break the row."""
    return md_escape(text.replace("\n", " "))


def case_table(cases: list[str]) -> str:
    """The case lines the judge writes ("pass n=31 (max abs err 2e-07)", "FAIL n=1023 (...): why")
    as a Markdown table: Gradescope renders it when the test's output_format is "md"."""
    rows = ["| case | result | detail |", "|---|---|---|"]
    for line in cases:
        verdict, _, rest = line.partition(" ")
        # the case ends where its detail starts: "n=1023 (max abs err nan): ..." or "n=1: why"
        cut = min((k for k in (rest.find(" ("), rest.find(": ")) if k >= 0), default=len(rest))
        case, detail = rest[:cut], rest[cut:].removeprefix(":")
        shown = "pass" if verdict.lower() == "pass" else "**FAIL**" if verdict.upper() == "FAIL" else _md(verdict)
        rows.append(f"| {_md(case)} | {shown} | {_md(detail.strip())} |")
    return "\n".join(rows)


def _not_gradable_here(res: SubmissionResult, lab: Lab | None) -> dict[str, str]:
    """Parts that simulator mode cannot grade, {"exercise/part": why}: an exercise that needs a
    GPU, and the speed of a kernel (a policy exercise's speed is simulated, so it is graded).
    They carry no points here; listing them as failed tests would show a red failure for what
    the student did not get wrong."""
    if res.mode != "simulator" or lab is None:
        return {}
    skipped = {}
    for e in res.exercises:
        try:
            spec = lab.exercise(e.name)
        except KeyError:
            continue
        if spec.gpu_only and e.score == 0:
            skipped[f"{e.name}/correctness"] = "needs a GPU"
            if e.max_speed:
                skipped[f"{e.name}/speed"] = "needs a GPU"
        elif e.max_speed and spec.simulate is None and e.speed == 0:
            skipped[f"{e.name}/speed"] = "kernel speed is timed on a GPU only"
    return skipped


def not_graded_note(skipped: dict[str, str]) -> str:
    """The line of a result's output that names the parts left out for want of a GPU."""
    if not skipped:
        return ""
    parts = ", ".join(f"{k.replace('/', ' ')} ({why})" for k, why in skipped.items())
    return f"\n{NOT_GRADED}{parts}. These parts are not failures; the course's GPU run grades them."


NOT_GRADED = "Not graded here, for want of a GPU: "


def pending_here(res: SubmissionResult, lab: Lab | None) -> dict[str, float]:
    """The points of the parts simulator mode could not grade ({"exercise/part": points}): pending
    the course's GPU run, not lost."""
    maxima = {f"{e.name}/{part}": most for e in res.exercises
              for part, most in (("correctness", e.max_correctness), ("speed", e.max_speed))}
    return {part: maxima[part] for part in _not_gradable_here(res, lab) if maxima.get(part)}


def part_points(lab: Lab, part: str) -> float:
    """The points of an "exercise/part" of the lab (correctness or speed); 0 for a part it lacks."""
    name, _, kind = part.partition("/")
    try:
        ex = lab.exercise(name)
    except KeyError:
        return 0.0
    return float(ex.points if kind == "correctness" else ex.speed.points if kind == "speed" and ex.speed else 0.0)


def pending_points(result: dict, lab: Lab) -> dict[str, float]:
    """The parts of a results.json that simulator mode could not grade, with their points: pending the
    course's GPU run, not lost. Read from the record of what was left out ("not_graded"), so folders
    graded before this was written read the same; empty for a GPU run."""
    extra = result.get("extra_data") if isinstance(result.get("extra_data"), dict) else {}
    if extra.get("mode") != "simulator" or not isinstance(extra.get("not_graded"), dict):
        return {}
    return {part: part_points(lab, part) for part in extra["not_graded"] if part_points(lab, part)}


def score_headline(score: float, max_score: float, pending: float, mode: str) -> str:
    """The first line of a result: out of the points graded here, with what waits for a GPU said apart."""
    if pending <= 0:
        return f"{score:g} of {max_score:g} points ({mode} mode)"
    return (f"{score:g} of {max_score - pending:g} points graded so far ({mode} mode); {pending:g} more, for "
            f"parts only a GPU can grade, are pending the course's GPU run (not lost)")


def result_headline(result: dict) -> str:
    """score_headline for a results.json as gradescope_json writes it."""
    extra = result.get("extra_data") or {}
    return score_headline(float(result.get("score", 0)), float(extra.get("max_score", 0)),
                          sum((extra.get("pending") or {}).values()), str(extra.get("mode")))


def gradescope_json(res: SubmissionResult, *, cases: str = "visible", lab: Lab | None = None) -> dict:
    """A submission's result as Gradescope's results.json. ``cases``: the visibility of the
    detailed case lists (CASE_VISIBILITIES). ``extra_data`` carries what the gradebook and the
    report read back (exercise, part, timing, flags per test)."""
    if cases not in CASE_VISIBILITIES:
        raise ValueError(f"cases visibility must be one of {', '.join(CASE_VISIBILITIES)}, not {cases!r}")
    if lab is None:
        from .labs import get_lab

        try:
            lab = get_lab(res.lab)
        except KeyError:
            lab = None
    skipped = _not_gradable_here(res, lab)
    pending = pending_here(res, lab)
    tests = []
    leaderboard = []
    for i, e in enumerate(res.exercises, 1):
        table = case_table(e.cases) if e.cases else ""
        if f"{e.name}/correctness" not in skipped:
            if table and cases != "visible":
                failed = sum(1 for c in e.cases if c.upper().startswith("FAIL"))
                shown = f"{len(e.cases) - failed} of {len(e.cases)} cases passed; the cases are listed " \
                        f"in test {i}.3 ({cases.replace('_', ' ')})."
            else:
                shown = table
            profile = e.profile or {}
            traced = (f"\n\n```\n{profile['text']}\n```" if profile.get("text") else
                      f"\n\nProfile: {profile['error']}" if profile.get("error") else "")
            tests.append({
                "name": f"{e.name}: correctness ({e.title})",
                "number": f"{i}.1",
                "score": e.correctness,
                "max_score": e.max_correctness,
                "status": "passed" if e.passed else "failed",
                "output": (md_escape(e.message) + ("\n\n" + shown if shown else "") + traced).strip(),
                "output_format": "md",
                "tags": [e.name, "correctness"],
                "visibility": "visible",
                "extra_data": {"exercise": e.name, "part": "correctness", "reason": e.reason,
                               **({"profile": e.profile} if e.profile else {})},
            })
        if e.max_speed and f"{e.name}/speed" not in skipped:
            t = e.timing or {}
            lines = []
            if t.get("measured"):
                lines.append(f"median {t['median_s'] * 1e6:.1f} us over {t['reps']} runs")
                if t.get("ratio") is not None:
                    lines.append(f"{t['ratio']:.2f}x the speed of the reference kernel "
                                 f"({t['baseline_median_s'] * 1e6:.1f} us)")
                    leaderboard += [{"name": f"{e.name} speed ratio", "value": round(float(t["ratio"]), 3),
                                     "order": "desc"},
                                    {"name": f"{e.name} time (us)", "value": round(t["median_s"] * 1e6, 2),
                                     "order": "asc"}]
                if t.get("gbps") is not None:
                    lines.append(f"{t['gbps']:.0f} GB/s, {t['pct_of_copy']:.0f}% of this GPU's copy bandwidth")
            elif t.get("summary"):  # a policy exercise: the ratio comes from simulation
                lines.append(t["summary"])
            elif not e.passed:
                lines.append("not timed: correctness must pass first")
            lines += [f"flag: {f}" for f in e.flags]
            tests.append({
                "name": f"{e.name}: speed",
                "number": f"{i}.2",
                "score": e.speed,
                "max_score": e.max_speed,
                "status": "passed" if e.speed >= e.max_speed else "failed",
                "output": "\n".join(lines),
                "output_format": "text",
                "tags": [e.name, "speed"],
                "visibility": "visible",
                "extra_data": {"exercise": e.name, "part": "speed", "timing": t, "flags": e.flags},
            })
        if table and cases != "visible" and f"{e.name}/correctness" not in skipped:
            tests.append({
                "name": f"{e.name}: the cases", "number": f"{i}.3", "score": 0.0, "max_score": 0.0,
                "output": table, "output_format": "md", "tags": [e.name, "cases"], "visibility": cases,
                "extra_data": {"exercise": e.name, "part": "cases"},
            })
    notes = "".join(f"\n{n}" for n in res.notes) + not_graded_note(skipped)
    result = {
        "score": res.score,
        "execution_time": round(res.seconds, 2),
        "output": (res.problem or score_headline(res.score, res.max_score, sum(pending.values()), res.mode)) + notes,
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
        "extra_data": {"submission": res.submission, "lab": res.lab, "mode": res.mode,
                       "max_score": res.max_score, "printed_tail": res.log_tail[-2000:], "notes": res.notes,
                       "not_graded": skipped, "pending": pending},
    }
    if leaderboard:
        result["leaderboard"] = leaderboard
    return result


def write_result(out_dir: Path, name: str, res: SubmissionResult) -> None:
    atomic_write(out_dir / name / "results.json", json.dumps(gradescope_json(res), indent=2))


def digest(path: Path) -> str:
    """The content of a submission, for resuming: a changed file is graded again."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_record(out_dir: Path) -> dict:
    """The grader's record: {name: {"source": file name, "sha256": ..., "exercises": [...]}}."""
    try:
        data = json.loads((Path(out_dir) / RECORD).read_text())
    except (OSError, ValueError):
        return {}
    subs = data.get("submissions") if isinstance(data, dict) else None
    return {str(k): v for k, v in subs.items() if isinstance(v, dict)} if isinstance(subs, dict) else {}


def write_record(out_dir: Path, lab: Lab, record: dict, shard: dict | None = None) -> None:
    """``shard`` (grading with --shard): {"index": I, "count": N, "names": every submission of the
    shard}, so that a merge can tell a finished shard from a missing or interrupted one."""
    data = {"lab": lab.name, "submissions": record}
    if shard is None:
        shard = read_shard(out_dir)
    if shard is not None:
        data["shard"] = shard
    atomic_write(Path(out_dir) / RECORD, json.dumps(data, indent=1))


def read_shard(out_dir: Path) -> dict | None:
    """What a shard folder's record says about its shard, or None (not a shard, or no record)."""
    try:
        data = json.loads((Path(out_dir) / RECORD).read_text())
    except (OSError, ValueError):
        return None
    shard = data.get("shard") if isinstance(data, dict) else None
    return shard if isinstance(shard, dict) else None


def valid_result(result, lab: Lab) -> bool:
    """A results.json as this grader writes it: numbers where numbers go, within the maxima."""
    if not isinstance(result, dict) or not isinstance(result.get("tests"), list):
        return False
    try:
        total = float(result["score"])
        parts = 0.0
        for t in result["tests"]:
            score, most = float(t["score"]), float(t["max_score"])
            if not (math.isfinite(score) and math.isfinite(most) and 0 <= score <= most + 1e-9):
                return False
            parts += score
    except (KeyError, TypeError, ValueError):
        return False
    return math.isfinite(total) and abs(total - parts) < 1e-6 and total <= lab.max_points + 1e-9


def read_results(out_dir: Path, lab: Lab | None = None, names=None) -> dict[str, dict]:
    """The results.json of the graded submissions (those the record lists, or ``names``); any
    that is missing or malformed is left out."""
    out_dir = Path(out_dir)
    if names is None:
        names = read_record(out_dir)
    found = {}
    for name in sorted(names):
        path = out_dir / name / "results.json"
        try:
            result = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if lab is None or valid_result(result, lab):
            found[name] = result
    return found


def exercise_scores(result: dict) -> dict[str, float]:
    scores: dict[str, float] = {}
    for t in result.get("tests", []):
        extra = t.get("extra_data") if isinstance(t, dict) else None
        ex = extra.get("exercise") if isinstance(extra, dict) else None
        if isinstance(ex, str):
            try:
                scores[ex] = round(scores.get(ex, 0.0) + float(t.get("score", 0)), 2)
            except (TypeError, ValueError):
                continue
    return scores


def write_gradebook(out_dir: Path, lab: Lab) -> Path:
    """grades.csv: a row per graded submission. A simulator run's "max" is what could be graded there,
    and a PENDING_COLUMN holds the points only a GPU can grade (a GPU run's columns are as ever)."""
    names = [e.name for e in lab.exercises]
    results = read_results(out_dir, lab)
    pending = {sub: sum(pending_points(result, lab).values()) for sub, result in results.items()}
    with_pending = any(pending.values())
    rows = [["submission", *names, "total", "max", *([PENDING_COLUMN] if with_pending else []), "flags"]]
    for sub, result in results.items():
        scores = exercise_scores(result)
        flags = sum(len(t.get("extra_data", {}).get("flags", []) or []) for t in result.get("tests", [])
                    if isinstance(t.get("extra_data"), dict))
        rows.append([sub, *[f"{scores.get(n, 0.0):g}" for n in names], f"{float(result.get('score', 0)):g}",
                     f"{lab.max_points - pending[sub]:g}", *([f"{pending[sub]:g}"] if with_pending else []), flags])
    path = Path(out_dir) / "grades.csv"
    atomic_write(path, csv_text(rows))
    return path
