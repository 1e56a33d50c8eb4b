"""What grading writes: results.json per submission (Gradescope's format) and grades.csv.

Every write goes to a temporary file that is renamed into place, so a crash or a
kill never leaves a half-written file. grades.csv is rebuilt from the results.json
files, which are the record: resuming and merging shards need nothing else.
"""
from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from pathlib import Path

from .grade import SubmissionResult
from .spec import Lab


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
    return {
        "score": res.score,
        "execution_time": round(res.seconds, 2),
        "output": res.problem or f"{res.score:g} of {res.max_score:g} points ({res.mode} mode)",
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
        "extra_data": {"submission": res.submission, "lab": res.lab, "mode": res.mode,
                       "max_score": res.max_score, "printed_tail": res.log_tail[-2000:]},
    }


def write_result(out_dir: Path, name: str, res: SubmissionResult) -> None:
    atomic_write(out_dir / name / "results.json", json.dumps(gradescope_json(res), indent=2))


def read_results(out_dir: Path) -> dict[str, dict]:
    found = {}
    for path in sorted(Path(out_dir).glob("*/results.json")):
        try:
            found[path.parent.name] = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # cannot happen with atomic writes, but never stop the gradebook for it
    return found


def exercise_scores(result: dict) -> dict[str, float]:
    scores: dict[str, float] = {}
    for t in result.get("tests", []):
        ex = t.get("extra_data", {}).get("exercise")
        if ex:
            scores[ex] = round(scores.get(ex, 0.0) + float(t.get("score", 0)), 2)
    return scores


def write_gradebook(out_dir: Path, lab: Lab) -> Path:
    names = [e.name for e in lab.exercises]
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["submission", *names, "total", "max", "flags"])
    for sub, result in read_results(out_dir).items():
        scores = exercise_scores(result)
        flags = sum(len(t.get("extra_data", {}).get("flags", [])) for t in result.get("tests", []))
        w.writerow([sub, *[f"{scores.get(n, 0.0):g}" for n in names], f"{result.get('score', 0):g}",
                    f"{lab.max_points:g}", flags])
    path = Path(out_dir) / "grades.csv"
    atomic_write(path, buf.getvalue())
    return path
