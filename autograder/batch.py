"""Grade a folder of submissions: resumable, one worker per GPU (or several on the CPU in
simulator mode), shardable for Slurm."""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import queue
import secrets
import socket
import shutil
import sys
import threading
import time
from pathlib import Path

from .collect import shown_name, submission_names
from .grade import JudgeSession, grade_submission
from .outcome import ExerciseResult, SubmissionResult
from .results import (RECORD, atomic_write, digest, pending_here, read_record, read_results, read_shard,
                      write_gradebook, write_record, write_result)
from .spec import Lab


def parse_shard(spec: str) -> tuple[int, int]:
    try:
        index, count = (int(x) for x in spec.split("/"))
    except ValueError:
        raise ValueError(f"--shard {spec!r}: give it as I/N, e.g. 0/4 (shard I of N, counting from 0)") from None
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"--shard {spec}: the index must be in 0..{count - 1}")
    return index, count


def shard(names: dict[str, Path], spec: str | None) -> dict[str, Path]:
    """The submissions of shard I of N, by a hash of each name: a submission stays in its shard
    when others are added or removed."""
    if not spec:
        return names
    index, count = parse_shard(spec)
    return {n: p for n, p in names.items() if int(hashlib.sha256(n.encode()).hexdigest()[:12], 16) % count == index}


class OutputProblem(Exception):
    """The output folder cannot take the results: said before any grading starts."""


# Room needed before grading starts: each submission's results and logs take a few hundred kB.
MIN_FREE_BYTES = 50 << 20
FREE_BYTES_PER_SUBMISSION = 2 << 20


@contextlib.contextmanager
def output_folder(out_dir: Path, submissions: int):
    """Check that ``out_dir`` can be written and has room, and hold it for this run only: a
    second grader on the same folder is refused (the lock goes with the process, even killed)."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = out_dir / ".autograder-write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise OutputProblem(f"cannot write to the output folder {out_dir}: {exc.strerror or exc}") from None
    need = MIN_FREE_BYTES + FREE_BYTES_PER_SUBMISSION * submissions
    free = shutil.disk_usage(out_dir).free
    if free < need:
        raise OutputProblem(f"the disk of {out_dir} has {free / 2**20:.0f} MiB free; grading {submissions} "
                            f"submission(s) needs about {need / 2**20:.0f} MiB")
    lock = open(out_dir / LOCK, "a+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.seek(0)
        holder = lock.read().strip() or "another process"
        lock.close()
        raise OutputProblem(f"another autograder ({holder}) is grading into {out_dir}; wait for it, or use "
                            "another --out") from None
    lock.seek(0)
    lock.truncate()
    lock.write(f"pid {os.getpid()} on {socket.gethostname()}")
    lock.flush()
    try:
        yield
    finally:
        lock.close()  # releases the lock


LOCK = ".autograder.lock"


class Progress:
    def __init__(self, total: int, stream=sys.stderr) -> None:
        self.total, self.done, self.stream, self.lock = total, 0, stream, threading.Lock()
        self.started = time.monotonic()

    def step(self, label: str) -> None:
        with self.lock:
            self.done += 1
            width = 30
            filled = int(width * self.done / max(self.total, 1))
            rate = (time.monotonic() - self.started) / self.done
            self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} "
                              f"{rate:.1f} s each  {label[:40]:<40}")
            if self.done == self.total:
                self.stream.write("\n")
            self.stream.flush()


def grade_all(lab: Lab, files, out_dir: Path, *, simulator: bool, gpus: list[str | None],
              force: bool = False, seed: int | None = None, sanitize: str | None = None,
              shard_spec: str | None = None, quiet: bool = False,
              timeout: float | None = None, exercises: list[str] | None = None,
              memory_limit_gb: float | None = None, sandboxed: bool = True, profile: bool = False) -> Path:
    """Grade ``files`` (paths, or (path, path as given) pairs) into ``out_dir``; return grades.csv.

    ``gpus``: one worker per entry, each with a judge and a sandbox slot (its own unprivileged
    uid) of its own; an entry is the GPU id that worker grades on, or None for none (the
    simulator, or the GPUs the process sees). Workers take submissions from one queue, so the
    results do not depend on how many there are.

    Resumable: a submission is graded again only if its content, where it came from, the
    grader (its code and the lab's) or the mode changed, or an exercise asked for is missing.
    Grading some exercises keeps the results of the others, where those are still valid."""
    out_dir = Path(out_dir).absolute()  # the judges run in the course's folder, not in ours
    sources = {Path(f[0]) if isinstance(f, tuple) else Path(f): (f[1] if isinstance(f, tuple) else Path(f).name)
               for f in files}
    names = shard(submission_names([(p, rel) for p, rel in sources.items()]), shard_spec)
    with output_folder(out_dir, len(names)):
        return _grade_all(lab, names, sources, out_dir, simulator=simulator, gpus=gpus, force=force, seed=seed,
                          sanitize=sanitize, shard_spec=shard_spec, quiet=quiet, timeout=timeout,
                          exercises=exercises, memory_limit_gb=memory_limit_gb, sandboxed=sandboxed,
                          profile=profile)


def _grade_all(lab, names, sources, out_dir, *, simulator, gpus, force, seed, sanitize, shard_spec, quiet, timeout,
               exercises, memory_limit_gb, sandboxed, profile=False) -> Path:
    record = read_record(out_dir)
    if shard_spec:
        index, count = parse_shard(shard_spec)
        write_record(out_dir, lab, record, shard={"index": index, "count": count, "names": sorted(names)})
    valid = read_results(out_dir, lab, record)
    wanted = sorted(exercises) if exercises else [e.name for e in lab.exercises]
    mode = "simulator" if simulator else "gpu"
    order = {e.name: i for i, e in enumerate(lab.exercises)}
    graded_by = grader_fingerprint(lab)
    todo, kept = [], {}
    digests = {n: digest(p) for n, p in names.items()}
    for n, p in names.items():
        r = record.get(n, {})
        same = (r.get("sha256") == digests[n] and r.get("source") == shown_name(sources[p]) and r.get("grader") == graded_by
                and r.get("mode", mode) == mode and n in valid and (r.get("profile") or not profile))
        kept[n] = read_exercises(out_dir / n) if same else {}
        covered = set(wanted) <= set(r.get("exercises") or [])
        if force or not (same and covered):
            todo.append((n, p))
    skipped = len(names) - len(todo)
    if skipped and not quiet:
        print(f"skipping {skipped} already graded (use --force to regrade)", file=sys.stderr)
    if len(gpus) > 1 and todo and not quiet:
        print(f"grading {len(todo)} submission(s) on {len(gpus)} workers", file=sys.stderr)
    seed = secrets.randbits(63) if seed is None else seed  # secret: never written anywhere
    progress = Progress(len(todo), stream=sys.stderr if not quiet else open("/dev/null", "w"))
    jobs: queue.Queue = queue.Queue()
    for item in todo:
        jobs.put(item)
    book_lock = threading.Lock()
    stopped: list[str] = []

    for stale in out_dir.glob(".tmp-judge-*"):  # a killed run's judges' files
        shutil.rmtree(stale, ignore_errors=True)

    def run(slot: int, gpu: str | None) -> None:
        # One judge per worker grades its submissions one after another (see JudgeSession).
        session = JudgeSession(gpu=gpu, simulator=simulator, tmp=out_dir / f".tmp-judge-{slot}")
        try:
            work_on(slot, gpu, session)
        finally:
            session.close()
            shutil.rmtree(out_dir / f".tmp-judge-{slot}", ignore_errors=True)

    def work_on(slot: int, gpu: str | None, session: JudgeSession) -> None:
        while not stopped:
            try:
                name, path = jobs.get_nowait()
            except queue.Empty:
                return
            work = out_dir / name
            try:
                res = grade_submission(lab, path, seed=seed, simulator=simulator, gpu=gpu, work_dir=work,
                                       sanitize=sanitize, timeout=timeout, exercises=exercises,
                                       memory_limit_gb=memory_limit_gb, sandboxed=sandboxed, slot=slot,
                                       profile=profile, session=session)
            except OSError as exc:  # the output folder failed under us (a full disk): stop, keep what is done
                stopped.append(f"could not write the results of {name}: {exc.strerror or exc}")
                return
            except Exception as exc:  # noqa: BLE001 - a grader bug costs this submission, not the batch
                res = _failed(lab, path, exercises, simulator, f"the grader failed on this submission: "
                                                               f"{type(exc).__name__}: {exc}")
            res.submission = shown_name(sources[path])  # as text any report can hold
            earlier = {k: v for k, v in kept[name].items() if k not in {e.name for e in res.exercises}}
            res.exercises = sorted(res.exercises + list(earlier.values()), key=lambda e: order[e.name])
            try:
                write_exercises(work, res.exercises)
                write_result(out_dir, name, res)
                with book_lock:
                    record[name] = {"source": res.submission, "sha256": digests[name], "grader": graded_by,
                                    "mode": mode, "exercises": sorted(e.name for e in res.exercises),
                                    "profile": profile}
                    write_record(out_dir, lab, record)
                    write_gradebook(out_dir, lab)
            except OSError as exc:
                stopped.append(f"could not write the results of {name}: {exc.strerror or exc}")
                return
            pending = sum(pending_here(res, lab).values())  # simulator mode: out of what it can grade
            progress.step(f"{name}: {res.score:g}/{res.max_score - pending:g}"
                          + (f", {pending:g} pending a GPU" if pending else ""))

    threads = [threading.Thread(target=run, args=(i, g), daemon=True) for i, g in enumerate(gpus)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if stopped:
        raise OutputProblem(f"grading stopped: {stopped[0]}. What was graded before is kept: make room and run "
                            "the same command again to go on")
    return write_gradebook(out_dir, lab)


EXERCISES_FILE = "exercises.json"


def write_exercises(work: Path, results: list[ExerciseResult]) -> None:
    """Each exercise's result, so that grading other exercises later keeps it."""
    atomic_write(work / EXERCISES_FILE, json.dumps([e.as_dict() for e in results]))


def read_exercises(work: Path) -> dict[str, ExerciseResult]:
    try:
        data = json.loads((work / EXERCISES_FILE).read_text())
        out = {}
        for d in data:
            template = ExerciseResult(d["name"], str(d.get("title", "")), float(d["max_correctness"]),
                                      float(d["max_speed"]))
            out[d["name"]] = ExerciseResult.checked(d, template)
        return out
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def grader_fingerprint(lab: Lab) -> str:
    """The grader's code and the course code its labs use: a change to either regrades."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256(lab.name.encode())
    for path in sorted(list((root / "autograder").rglob("*.py")) + list((root / "course").rglob("*.py"))):
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def _failed(lab: Lab, path: Path, exercises, simulator: bool, message: str,
            reason: str = "grader_failure") -> SubmissionResult:
    res = [ExerciseResult(e.name, e.title, e.points, e.speed.points if e.speed else 0.0, message=message,
                          reason=reason) for e in lab.exercises if exercises is None or e.name in exercises]
    return SubmissionResult(path.name, lab.name, "simulator" if simulator else "gpu", res, 0.0, message)


class MergeError(ValueError):
    """A merge refused: one line per problem."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


def merge(shard_dirs: list[Path], out_dir: Path, lab: Lab, *,
          allow_partial: bool = False) -> tuple[Path, list[str]]:
    """Combine shards' results into one folder and one gradebook: (grades.csv, what is missing).

    Only a complete set is merged: shards 0..N-1 of one N, of this lab, each with a valid
    results.json for every submission its record names. Otherwise MergeError, and nothing is
    written. ``allow_partial`` merges what is graded and returns what is missing instead (a
    shard from another lab or another run, or one given twice, is refused even then)."""
    take, gaps, errors = check_shards(shard_dirs, out_dir, lab)
    if errors or (gaps and not allow_partial):
        raise MergeError(errors + gaps)
    if not any(take.values()):
        raise MergeError(gaps + ["no shard has a graded submission: nothing to merge"])
    out_dir.mkdir(parents=True, exist_ok=True)
    record = read_record(out_dir)
    for d, names in take.items():
        shard_record = read_record(d)
        for name in names:
            target = out_dir / name
            if target.resolve() != (d / name).resolve():
                tmp = out_dir / f".{name}.merging"
                shutil.rmtree(tmp, ignore_errors=True)
                shutil.copytree(d / name, tmp)
                shutil.rmtree(target, ignore_errors=True)
                tmp.rename(target)
            record[name] = shard_record[name]
    write_record(out_dir, lab, record)
    return write_gradebook(out_dir, lab), gaps


def _names(names: list[str], most: int = 10) -> str:
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def _record_lab(folder: Path) -> str | None:
    """The lab a grading folder's record names (read_record gives only its submissions)."""
    try:
        data = json.loads((folder / RECORD).read_text())
    except (OSError, ValueError):
        return None
    return data.get("lab") if isinstance(data, dict) else None


def check_shards(shard_dirs: list[Path], out_dir: Path, lab: Lab) -> tuple[dict[Path, list[str]], list[str], list[str]]:
    """What merge takes from each shard folder, and what stands in its way: (take, gaps, errors).
    gaps: missing shards and ungraded submissions (a partial merge can leave them out);
    errors: what no merge can go on with."""
    gaps: list[str] = []
    errors: list[str] = []
    shards: list[tuple[Path, int, int, list[str]]] = []
    for d in shard_dirs:
        if not d.is_dir():
            gaps.append(f"{d}: no such folder (its task never ran, or the path is wrong)")
            continue
        recorded = _record_lab(d)
        if recorded is None:
            gaps.append(f"{d}: no grader record ({RECORD}) in it: its task never started grading")
            continue
        if recorded != lab.name:
            errors.append(f"{d}: graded for lab {recorded!r}, not {lab.name!r}")
            continue
        s = read_shard(d)
        if s is None:
            errors.append(f"{d}: not a shard (graded without --shard I/N), so merge cannot tell whether it is "
                          f"complete")
            continue
        index, count, names = s.get("index"), s.get("count"), s.get("names")
        if not (isinstance(index, int) and isinstance(count, int) and 0 <= index < count
                and isinstance(names, list) and all(isinstance(n, str) for n in names)):
            errors.append(f"{d}: its record's shard entry is malformed: {s!r}")
            continue
        shards.append((d, index, count, names))

    counts = sorted({c for _, _, c, _ in shards})
    if len(counts) > 1:
        errors.append("the shards come from runs of different shard counts: "
                      + ", ".join(f"{d} is {i}/{c}" for d, i, c, _ in shards))
    elif counts:
        n = counts[0]
        by_index: dict[int, list[Path]] = {}
        for d, i, _, _ in shards:
            by_index.setdefault(i, []).append(d)
        for i, ds in sorted(by_index.items()):
            if len(ds) > 1:
                errors.append(f"shard {i}/{n} given {len(ds)} times: {', '.join(map(str, ds))}")
        absent = [str(i) for i in range(n) if i not in by_index]
        if absent:
            gaps.append(f"shard{'s' if len(absent) > 1 else ''} {', '.join(absent)} of 0..{n - 1} missing: "
                        f"no folder of {'them' if len(absent) > 1 else 'it'} given")
        owner: dict[str, Path] = {}
        for d, i, _, names in shards:
            for name in names:
                if name in owner and owner[name] != d:
                    errors.append(f"submission {name} is in two shards, {owner[name]} and {d}: "
                                  f"the shards come from different runs")
                owner.setdefault(name, d)
        if not absent and not errors:
            # Each shard must hold what sharding the union would give it: else they were graded
            # from different submissions (folders of two runs mixed).
            everyone = dict.fromkeys(owner)
            for d, i, _, names in shards:
                if sorted(names) != sorted(shard(everyone, f"{i}/{n}")):
                    errors.append(f"{d}: shard {i}/{n} of other submissions than the other shards "
                                  f"(graded from another submissions folder?)")

    take: dict[Path, list[str]] = {}
    out = out_dir.resolve()
    shard_paths = {d.resolve() for d, *_ in shards}
    if out in shard_paths:
        errors.append(f"--out {out_dir} is one of the shards: merge into another folder")
    elif (out / RECORD).exists() and _record_lab(out) not in (None, lab.name):
        errors.append(f"--out {out_dir} holds grades of lab {_record_lab(out)!r}, not {lab.name!r}")
    for d, i, n, names in shards:
        record = read_record(d)
        graded = read_results(d, lab, [name for name in names if name in record])
        missing = [name for name in names if name not in graded]
        if missing:
            gaps.append(f"{d} (shard {i}/{n}): {len(missing)} of {len(names)} submissions not graded: "
                        f"{_names(missing)} (its task was interrupted or is still running: run it again, "
                        f"grading resumes, then merge)")
        for name in graded:
            target = (out / name).resolve()
            if any(target == p or target in p.parents for p in shard_paths):
                errors.append(f"submission {name} would overwrite the shard folder {target}: "
                              f"merge into another folder")
        take[d] = sorted(graded)
    return take, gaps, errors
