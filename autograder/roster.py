"""``autograder grades``: a graded folder joined to a class roster, as a CSV an LMS imports.

The roster is a CSV as Canvas (Student, ID, SIS User ID, SIS Login ID, Section) or Gradescope
(First Name, Last Name, SID, Email) exports it. A submission belongs to a student when its name
(the folder ``autograder grade`` made from the file's name) is, or contains as a whole
``_``/``-``-separated part, one of the student's keys: an ID, the login, the e-mail address or
its local part. So ``jdoe.ipynb``, ``jdoe_lab2.ipynb`` and Canvas's ``doejane_12345_678_lab.ipynb``
all match. What matched nothing, and who has no submission, is said, never guessed.

A student may choose a login or e-mail address, never the institution's ID, so a match by an ID
outranks a match by a login: a classmate's chosen address cannot take a submission whose name
carries its writer's ID (Canvas's download names do). An ID that is also a classmate's key (a SID
a student typed in) outranks nothing. A submission that names several students with the same kind
of key counts for none of them: it is printed, marked in each student's row and listed in a review
file beside the CSV, for the instructor to decide.

Late penalties: a due time, a percentage of the score lost per day or part of a day late, a
grace period and a cutoff; submission times come from the files' modification times or a CSV.
"""
from __future__ import annotations

import csv
import io
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from .collect import collect, safe_name, submission_names
from .results import PENDING_COLUMN, atomic_write, csv_text, exercise_scores, pending_points, read_results
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
    # Keys: lower-case, safe_name'd, what submission names contain. IDs are the institution's; a
    # login or e-mail address (and its local part) may be the student's own choice.
    ids: list[str] = field(default_factory=list)
    logins: list[str] = field(default_factory=list)


def _keys(values) -> list[str]:
    """The keys of roster cells: each value, and an address's local part; longest first."""
    keys = set()
    for value in values:
        value = (value or "").strip().lower()
        keys.update([value, value.split("@", 1)[0]] if "@" in value else [value])
    return sorted({safe_name(k).lower() for k in keys if len(k) >= 3}, key=len, reverse=True)


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
        id_keys = _keys(row.get(h) for h in ids)
        login_keys = [k for k in _keys(row.get(h) for h in logins) if k not in id_keys]
        if id_keys or login_keys:
            students.append(Student({h: row.get(h) or "" for h in keep}, name or (id_keys + login_keys)[0],
                                    id_keys, login_keys))
    held = Counter(k for s in students for k in set(s.ids + s.logins))
    for s in students:  # a key two students hold names neither: it never carries an ID's weight
        s.logins = sorted(set(s.logins) | {k for k in s.ids if held[k] > 1}, key=len, reverse=True)
        s.ids = [k for k in s.ids if held[k] == 1]
    return keep, students


def _names(name: str, keys: list[str]) -> bool:
    """Whether a submission's name is one of the keys or holds one as a whole _/- separated part."""
    low = name.lower()
    return any(low == k or re.search(rf"(^|[_-]){re.escape(k)}($|[_-])", low) for k in keys)


def owner(name: str, students: list[Student]) -> list[int]:
    """The students a submission's name belongs to: those it names by the strongest kind of key, an
    ID before a login (which a student may choose). More than one: ambiguous."""
    by_id = [i for i, s in enumerate(students) if _names(name, s.ids)]
    return by_id or [i for i, s in enumerate(students) if _names(name, s.logins)]


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
    unmatched, contested = [], {}  # contested: a submission -> the students it names equally
    theirs: dict[int, list[str]] = {}
    for name in results:
        who = owner(name, students)
        if not who:
            unmatched.append(name)
        elif len(who) > 1:
            contested[name] = who
        else:
            theirs.setdefault(who[0], []).append(name)
    pending = {n: sum(pending_points(r, lab).values()) for n, r in results.items()}
    counted = theirs_flat(theirs)
    with_pending = any(pending[n] for n in counted)
    exercises = [e.name for e in lab.exercises]
    details = [*exercises, f"{column} (before late penalty)",
               *([f"{column} out of", PENDING_COLUMN] if with_pending else []),
               "days late", "late penalty %", "submission", "status"]
    rows = [[*keep, column, *([] if grade_only else details)]]

    def write(s: Student, grade: str, values: list) -> None:
        rows.append([*(s.row[h] for h in keep), grade, *([] if grade_only else values)])
    several, missing = [], []
    for i, s in enumerate(students):
        subs = theirs.get(i, [])
        also = ambiguity(i, contested, students)
        if not subs:
            if not also:
                missing.append(s)
            write(s, "", [""] * (len(details) - 1) + [also or "no submission"])
            continue
        # Several: the latest one counts where times are known, else the best.
        pick = max(subs, key=lambda n: (when[n].timestamp() if n in when else float("-inf"),
                                        float(results[n].get("score", 0))))
        if len(subs) > 1:
            several.append(f"{s.name}: {', '.join(subs)} (counted: {pick})")
        raw = float(results[pick].get("score", 0))
        pct = policy.penalty_percent(when.get(pick))
        scores = exercise_scores(results[pick])
        status = "graded" if pick in when or policy.due is None else "graded (submission time unknown)"
        write(s, f"{round(raw * (1 - pct / 100), 2):g}",
              [*(f"{scores.get(e, 0.0):g}" for e in exercises), f"{raw:g}",
               *([f"{lab.max_points - pending[pick]:g}", f"{pending[pick]:g}"] if with_pending else []),
               policy.days_late(when.get(pick)), f"{pct:g}", pick, "; ".join(filter(None, (status, also)))])
    out = Path(out) if out else Path(out_dir) / "grades-roster.csv"
    atomic_write(out, csv_text(rows))
    review = out.with_name(out.stem + "-review.csv")
    atomic_write(review, csv_text(review_rows(keep, students, contested, unmatched, missing)))
    lines = [f"{out}: {len(students)} students, {len(theirs)} with a graded submission"]
    for title, items in (("Submissions that match no student", unmatched),
                         ("Submissions that name several students alike: counted for none of them; decide who "
                          "wrote each (their rows say so)",
                          [f"{n} ({' / '.join(students[i].name for i in who)})" for n, who in contested.items()]),
                         ("Students with several submissions", several),
                         ("Students with no submission (grade left blank)", [s.name for s in missing])):
        if items:
            lines += [f"{title} ({len(items)}):", *(f"  {one_line(x)}" for x in items)]
    if policy.due is not None:
        unknown = [n for n in counted if n not in when]
        if unknown:
            lines += [f"Submissions with no known time (no penalty applied) ({len(unknown)}):",
                      *(f"  {x}" for x in unknown)]
    if with_pending:
        lines.append(pending_note(sorted({lab.max_points - pending[n] for n in counted}),
                                  sorted({pending[n] for n in counted}), column))
    if contested or unmatched or missing:
        lines.append(f"To review: {review}")
    return "\n".join(lines)


def one_line(text: str) -> str:
    """Roster text as the command prints it: on one line, no control characters (a name could
    otherwise print lines of its own, or terminal escapes)."""
    return "".join(c if c.isprintable() else "?" for c in text)


def ambiguity(i: int, contested: dict[str, list[int]], students: list[Student]) -> str:
    """What a student's row says of the submissions that name them and a classmate alike ("" if none)."""
    notes = [f"ambiguous: {name} names {' and '.join(students[j].name for j in who if j != i)} too, so it "
             f"counts for no one; decide who wrote it" for name, who in contested.items() if i in who]
    return "; ".join(notes)


def review_rows(keep: list[str], students: list[Student], contested: dict[str, list[int]], unmatched: list[str],
                missing: list[Student]) -> list[list[str]]:
    """The review file: every submission or student whose grade waits for the instructor's decision."""
    rows = [["problem", "submission", "student", *keep, "what was done"]]
    for name, who in contested.items():
        rows += [["ambiguous: names several students", name, students[i].name, *(students[i].row[h] for h in keep),
                  "counted for none of them: decide who wrote it"] for i in who]
    rows += [["matches no student", name, "", *([""] * len(keep)), "not counted"] for name in unmatched]
    rows += [["no submission", "", s.name, *(s.row[h] for h in keep), "grade left blank"] for s in missing]
    return rows


def pending_note(gradable: list[float], pending: list[float], column: str) -> str:
    """What an instructor importing a simulator run into an LMS must know: the maximum to give the
    assignment, and that the GPU-only points are pending, not lost."""
    most = f"{gradable[0]:g} points" if len(gradable) == 1 else f"the points in the '{column} out of' column"
    more = f"{pending[0]:g} more points" if len(pending) == 1 else "More points"
    return (f"Graded in simulator mode: the grades are out of {most}, all that could be graded without a GPU. "
            f"{more}, for the parts only a GPU can grade, are pending the course's GPU run ('{PENDING_COLUMN}' "
            f"column), not lost. Give the LMS assignment {most} for now, or import the GPU run's grades.")


def theirs_flat(theirs: dict[int, list[str]]) -> list[str]:
    return sorted(n for subs in theirs.values() for n in subs)
