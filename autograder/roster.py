"""``autograder grades``: a graded folder joined to a class roster, as a CSV an LMS imports.

The roster is a CSV as Canvas (Student, ID, SIS User ID, SIS Login ID, Section) or Gradescope
(First Name, Last Name, SID, Email) exports it. A submission belongs to a student when its name
(the folder ``autograder grade`` made from the file's name) is, or contains as a whole
``_``/``-``-separated part, one of the student's keys: an ID, the login, the e-mail address or
its local part. So ``jdoe.ipynb``, ``jdoe_lab2.ipynb`` and Canvas's ``doejane_12345_678_lab.ipynb``
all match. What matched nothing, and who has no submission, is said, never guessed.

Late penalties: a due time, a percentage of the score lost per day or part of a day late, a
grace period and a cutoff; submission times come from the files' modification times or a CSV.
"""
from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from .collect import collect, safe_name, submission_names
from .results import atomic_write, exercise_scores, read_results
from .spec import Lab


def _norm(header: str) -> str:
    return re.sub(r"[^a-z0-9]", "", header.lower())


# Normalized header names, in order of preference.
ID_HEADERS = ("sid", "studentid", "sisuserid", "studentnumber", "id", "userid")
LOGIN_HEADERS = ("email", "emailaddress", "sisloginid", "loginid", "username")
NAME_HEADERS = ("name", "student", "studentname", "fullname")
KEEP_HEADERS = ("section",)  # carried into the output: Canvas's import expects it


@dataclass
class Student:
    row: dict[str, str]  # the roster's columns that identify the student, as exported
    name: str
    keys: list[str] = field(default_factory=list)  # lower-case, safe_name'd: what submission names contain


def read_roster(path: Path) -> tuple[list[str], list[Student]]:
    """The identifying columns (as the roster names them) and the students."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read the roster {path}: {exc}") from None
    reader = csv.DictReader(io.StringIO(text))
    headers = [h for h in reader.fieldnames or [] if h]
    by_norm = {_norm(h): h for h in reversed(headers)}  # the first of equal names wins
    ids = [by_norm[h] for h in ID_HEADERS if h in by_norm]
    logins = [by_norm[h] for h in LOGIN_HEADERS if h in by_norm]
    names = [by_norm[h] for h in NAME_HEADERS if h in by_norm]
    first, last = by_norm.get("firstname"), by_norm.get("lastname")
    if not ids and not logins:
        raise ValueError(f"the roster {path} has no ID or e-mail column (it has: {', '.join(headers)}); "
                         "expected e.g. SID, Student ID, SIS User ID, Email or SIS Login ID")
    keep = [h for h in headers if h in ids + logins + names + [first, last]
            or _norm(h) in KEEP_HEADERS]
    students = []
    for row in reader:
        name = (row.get(names[0]) or "").strip() if names else \
            " ".join(x for x in ((row.get(first) or "").strip(), (row.get(last) or "").strip()) if x)
        if "points possible" in name.lower():  # Canvas's second row: the maximum of each column
            continue
        keys = []
        for h in ids + logins:
            value = (row.get(h) or "").strip().lower()
            if value:
                keys.append(value)
                if "@" in value:
                    keys.append(value.split("@", 1)[0])
        keys = sorted({safe_name(k).lower() for k in keys if len(k) >= 3}, key=len, reverse=True)
        if keys:
            students.append(Student({h: row.get(h) or "" for h in keep}, name or keys[0], keys))
    return keep, students


def owner(name: str, students: list[Student]) -> list[int]:
    """The students a submission's name belongs to (more than one: ambiguous)."""
    low = name.lower()
    found = []
    for i, s in enumerate(students):
        if any(low == k or re.search(rf"(^|[_-]){re.escape(k)}($|[_-])", low) for k in s.keys):
            found.append(i)
    return found


@dataclass(frozen=True)
class LatePolicy:
    due: datetime | None = None
    per_day: float = 0.0  # percent of the score per day or part of a day late
    grace: timedelta = timedelta(0)
    max_days: float | None = None  # later than this: nothing

    @classmethod
    def from_args(cls, due: str | None, per_day: float, grace_minutes: float, max_days: float | None) -> "LatePolicy":
        if due is None:
            if per_day or max_days is not None:
                raise ValueError("a late penalty needs --due")
            return cls()
        if per_day < 0 or per_day > 100 or grace_minutes < 0 or (max_days is not None and max_days < 0):
            raise ValueError("--penalty-per-day is a percentage (0 to 100); grace and cutoff are not negative")
        return cls(parse_time(due), per_day, timedelta(minutes=grace_minutes), max_days)

    def days_late(self, when: datetime | None) -> int:
        if self.due is None or when is None:
            return 0
        late = _aware(when) - _aware(self.due) - self.grace
        return max(0, math.ceil(late / timedelta(days=1)))

    def penalty_percent(self, when: datetime | None) -> float:
        days = self.days_late(when)
        if days and self.max_days is not None and days > self.max_days:
            return 100.0
        return min(100.0, days * self.per_day)


def parse_time(text: str) -> datetime:
    try:
        return datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"not a date and time in ISO 8601 form (2025-03-01T23:59:00): {text!r}") from None


def _aware(t: datetime) -> datetime:
    """A naive time is this machine's local time (as file modification times are)."""
    return t if t.tzinfo else t.astimezone()


def submission_times(submissions: Path | None, times: Path | None, graded=()) -> dict[str, datetime]:
    """Submission name -> when it was submitted: from a CSV (submission, time), else from the
    files' modification times. Names are the ones ``autograder grade`` gives the same files
    (``submission_names``); a CSV may give those names (``graded``) or the files' paths."""
    found: dict[str, datetime] = {}
    if submissions is not None:
        for name, p in submission_names(collect([str(submissions)]).files).items():
            found[name] = datetime.fromtimestamp(p.stat().st_mtime).astimezone()
    if times is not None:
        rows = list(csv.reader(io.StringIO(Path(times).read_text(encoding="utf-8-sig"))))
        if rows and not _looks_like_time(rows[0][-1] if rows[0] else ""):
            rows = rows[1:]  # a header
        for row in rows:
            given = row[0].strip() if row else ""
            if len(row) >= 2 and given:
                name = given if given in graded else next(iter(submission_names([(Path(given), given)])))
                found[name] = parse_time(row[1])
    return found


def _looks_like_time(text: str) -> bool:
    try:
        parse_time(text)
        return True
    except ValueError:
        return False


def write_lms_grades(out_dir: Path, lab: Lab, roster: Path, out: Path | None = None, *,
                     policy: LatePolicy = LatePolicy(), submissions: Path | None = None,
                     times: Path | None = None, column: str | None = None, grade_only: bool = False) -> str:
    """Write the roster with the lab's grade per student; return what the instructor must know.
    The grade column comes right after the roster's own; ``grade_only`` leaves out the details
    (per exercise, lateness, submission), which an LMS such as Canvas would import as assignments."""
    keep, students = read_roster(roster)
    results = read_results(out_dir, lab)
    if not results:
        raise ValueError(f"{out_dir}: no graded submissions (run `autograder grade --out {out_dir}` first)")
    when = submission_times(submissions, times, set(results)) if (submissions or times) else {}
    if policy.due is not None and not when:
        raise ValueError("a late penalty needs submission times: --submissions DIR or --times CSV")
    column = column or lab.name
    unmatched, ambiguous = [], []
    theirs: dict[int, list[str]] = {}
    for name in results:
        who = owner(name, students)
        if not who:
            unmatched.append(name)
        elif len(who) > 1:
            ambiguous.append(f"{name} ({' / '.join(students[i].name for i in who)})")
        else:
            theirs.setdefault(who[0], []).append(name)
    exercises = [e.name for e in lab.exercises]
    buf = io.StringIO()
    w = csv.writer(buf)
    details = [*exercises, f"{column} (before late penalty)", "days late", "late penalty %", "submission", "status"]
    w.writerow([*keep, column, *([] if grade_only else details)])

    def write(s: Student, grade: str, values: list) -> None:
        w.writerow([*(s.row[h] for h in keep), grade, *([] if grade_only else values)])
    several, missing = [], []
    for i, s in enumerate(students):
        subs = theirs.get(i, [])
        if not subs:
            missing.append(s.name)
            write(s, "", [""] * (len(details) - 1) + ["no submission"])
            continue
        # Several: the latest one counts where times are known, else the best.
        pick = max(subs, key=lambda n: (when[n].timestamp() if n in when else float("-inf"),
                                        float(results[n].get("score", 0))))
        if len(subs) > 1:
            several.append(f"{s.name}: {', '.join(subs)} (counted: {pick})")
        raw = float(results[pick].get("score", 0))
        pct = policy.penalty_percent(when.get(pick))
        scores = exercise_scores(results[pick])
        write(s, f"{round(raw * (1 - pct / 100), 2):g}",
              [*(f"{scores.get(e, 0.0):g}" for e in exercises), f"{raw:g}", policy.days_late(when.get(pick)),
               f"{pct:g}", pick, "graded" if pick in when or policy.due is None else "graded (submission time unknown)"])
    out = Path(out) if out else Path(out_dir) / "grades-roster.csv"
    atomic_write(out, buf.getvalue())
    lines = [f"{out}: {len(students)} students, {len(students) - len(missing)} with a graded submission"]
    for title, items in (("Submissions that match no student", unmatched),
                         ("Submissions that match several students (not counted)", ambiguous),
                         ("Students with several submissions", several),
                         ("Students with no submission (grade left blank)", missing)):
        if items:
            lines += [f"{title} ({len(items)}):", *(f"  {x}" for x in items)]
    if policy.due is not None:
        unknown = [n for n in theirs_flat(theirs) if n not in when]
        if unknown:
            lines += [f"Submissions with no known time (no penalty applied) ({len(unknown)}):",
                      *(f"  {x}" for x in unknown)]
    return "\n".join(lines)


def theirs_flat(theirs: dict[int, list[str]]) -> list[str]:
    return sorted(n for subs in theirs.values() for n in subs)
