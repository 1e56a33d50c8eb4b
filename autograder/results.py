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

from .outcome import SubmissionResult
from .spec import Lab

RECORD = ".autograder.json"


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


def gradescope_json(res: SubmissionResult) -> dict:
    tests = []
    for e in res.exercises:
        detail = "\n".join(e.cases)
        tests.append({
            "name": f"{e.name}: correctness ({e.title})",
            "score": e.correctness,
            "max_score": e.max_correctness,
            "status": "passed" if e.passed else "failed",
            "output": (e.message + ("\n" + detail if detail else "")).strip(),
            "visibility": "visible",
            "extra_data": {"exercise": e.name, "part": "correctness"},
        })
        if e.max_speed:
            t = e.timing or {}
            lines = []
            if t.get("measured"):
                lines.append(f"median {t['median_s'] * 1e6:.1f} us over {t['reps']} runs")
                if t.get("ratio") is not None:
                    lines.append(f"{t['ratio']:.2f}x the speed of the reference kernel "
                                 f"({t['baseline_median_s'] * 1e6:.1f} us)")
                if t.get("gbps") is not None:
                    lines.append(f"{t['gbps']:.0f} GB/s, {t['pct_of_copy']:.0f}% of this GPU's copy bandwidth")
            elif t.get("summary"):  # a policy exercise: the ratio comes from simulation
                lines.append(t["summary"])
            elif not e.passed:
                lines.append("not timed: correctness must pass first")
            lines += [f"flag: {f}" for f in e.flags]
            tests.append({
                "name": f"{e.name}: speed",
                "score": e.speed,
                "max_score": e.max_speed,
                "status": "passed" if e.speed >= e.max_speed else "failed",
                "output": "\n".join(lines),
                "visibility": "visible",
                "extra_data": {"exercise": e.name, "part": "speed", "timing": t, "flags": e.flags},
            })
    notes = "".join(f"\n{n}" for n in res.notes)
    return {
        "score": res.score,
        "execution_time": round(res.seconds, 2),
        "output": (res.problem or f"{res.score:g} of {res.max_score:g} points ({res.mode} mode)") + notes,
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
        "extra_data": {"submission": res.submission, "lab": res.lab, "mode": res.mode,
                       "max_score": res.max_score, "printed_tail": res.log_tail[-2000:], "notes": res.notes},
    }


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
    names = [e.name for e in lab.exercises]
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["submission", *names, "total", "max", "flags"])
    for sub, result in read_results(out_dir, lab).items():
        scores = exercise_scores(result)
        flags = sum(len(t.get("extra_data", {}).get("flags", []) or []) for t in result.get("tests", [])
                    if isinstance(t.get("extra_data"), dict))
        w.writerow([sub, *[f"{scores.get(n, 0.0):g}" for n in names], f"{float(result.get('score', 0)):g}",
                    f"{lab.max_points:g}", flags])
    path = Path(out_dir) / "grades.csv"
    atomic_write(path, buf.getvalue())
    return path
