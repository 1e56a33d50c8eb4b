"""Grade a folder of submissions: resumable, one worker per GPU, shardable for Slurm."""
from __future__ import annotations

import queue
import re
import secrets
import shutil
import sys
import threading
import time
from pathlib import Path

from .grade import grade_submission
from .outcome import ExerciseResult, SubmissionResult
from .results import digest, read_record, read_results, write_gradebook, write_record, write_result
from .spec import Lab


def safe_name(stem: str) -> str:
    """A folder name from a file's stem: letters, digits, '-' and '_' only (no dots, so no
    '..' and no name of the grader's own files, such as grades.csv)."""
    return re.sub(r"[^A-Za-z0-9_-]+", "_", stem).strip("_-")[:80] or "submission"


def submission_names(paths: list[Path]) -> dict[str, Path]:
    """A folder name per submission: the file's stem, made unique and filesystem-safe."""
    names: dict[str, Path] = {}
    for p in sorted(paths):
        base = safe_name(p.stem)
        name, k = base, 2
        while name in names:
            name, k = f"{base}-{k}", k + 1
        names[name] = p
    return names


def parse_shard(spec: str) -> tuple[int, int]:
    try:
        index, count = (int(x) for x in spec.split("/"))
    except ValueError:
        raise ValueError(f"--shard {spec!r}: give it as I/N, e.g. 0/4 (shard I of N, counting from 0)") from None
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"--shard {spec}: the index must be in 0..{count - 1}")
    return index, count


def shard(names: dict[str, Path], spec: str | None) -> dict[str, Path]:
    if not spec:
        return names
    index, count = parse_shard(spec)
    return {n: p for i, (n, p) in enumerate(sorted(names.items())) if i % count == index}


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


def grade_all(lab: Lab, paths: list[Path], out_dir: Path, *, simulator: bool, gpus: list[str | None],
              force: bool = False, seed: int | None = None, sanitize: str | None = None,
              shard_spec: str | None = None, quiet: bool = False,
              timeout: float | None = None, exercises: list[str] | None = None,
              memory_limit_gb: float | None = None, sandboxed: bool = True) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    names = shard(submission_names(paths), shard_spec)
    record = read_record(out_dir)
    if shard_spec:
        index, count = parse_shard(shard_spec)
        write_record(out_dir, lab, record, shard={"index": index, "count": count, "names": sorted(names)})
    valid = read_results(out_dir, lab, record)
    wanted = sorted(exercises) if exercises else [e.name for e in lab.exercises]
    todo = []
    digests = {n: digest(p) for n, p in names.items()}
    for n, p in names.items():
        r = record.get(n, {})
        same = r.get("sha256") == digests[n] and r.get("source") == p.name and n in valid
        covered = set(wanted) <= set(r.get("exercises") or [])
        if force or not (same and covered):
            todo.append((n, p))
    skipped = len(names) - len(todo)
    if skipped and not quiet:
        print(f"skipping {skipped} already graded (use --force to regrade)", file=sys.stderr)
    seed = secrets.randbits(63) if seed is None else seed  # secret: never written anywhere
    progress = Progress(len(todo), stream=sys.stderr if not quiet else open("/dev/null", "w"))
    jobs: queue.Queue = queue.Queue()
    for item in todo:
        jobs.put(item)
    book_lock = threading.Lock()

    def run(slot: int, gpu: str | None) -> None:
        while True:
            try:
                name, path = jobs.get_nowait()
            except queue.Empty:
                return
            work = out_dir / name
            try:
                res = grade_submission(lab, path, seed=seed, simulator=simulator, gpu=gpu, work_dir=work,
                                       sanitize=sanitize, timeout=timeout, exercises=exercises,
                                       memory_limit_gb=memory_limit_gb, sandboxed=sandboxed, slot=slot)
            except Exception as exc:  # noqa: BLE001 - a grader bug costs this submission, not the batch
                res = _failed(lab, path, exercises, simulator, f"the grader failed on this submission: "
                                                               f"{type(exc).__name__}: {exc}")
            write_result(out_dir, name, res)
            with book_lock:
                record[name] = {"source": path.name, "sha256": digests[name], "exercises": wanted}
                write_record(out_dir, lab, record)
                write_gradebook(out_dir, lab)
            progress.step(f"{name}: {res.score:g}/{res.max_score:g}")

    threads = [threading.Thread(target=run, args=(i, g), daemon=True) for i, g in enumerate(gpus)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return write_gradebook(out_dir, lab)


def _failed(lab: Lab, path: Path, exercises, simulator: bool, message: str) -> SubmissionResult:
    res = [ExerciseResult(e.name, e.title, e.points, e.speed.points if e.speed else 0.0, message=message)
           for e in lab.exercises if exercises is None or e.name in exercises]
    return SubmissionResult(path.name, lab.name, "simulator" if simulator else "gpu", res, 0.0, message)


def merge(shard_dirs: list[Path], out_dir: Path, lab: Lab) -> Path:
    """Combine shards' results into one folder and one gradebook."""
    out_dir.mkdir(parents=True, exist_ok=True)
    record = read_record(out_dir)
    for d in shard_dirs:
        shard_record = read_record(d)
        for name in read_results(d, lab, shard_record):
            target = out_dir / name
            if target.resolve() != (d / name).resolve():
                tmp = out_dir / f".{name}.merging"
                shutil.rmtree(tmp, ignore_errors=True)
                shutil.copytree(d / name, tmp)
                shutil.rmtree(target, ignore_errors=True)
                tmp.rename(target)
            record[name] = shard_record[name]
    write_record(out_dir, lab, record)
    return write_gradebook(out_dir, lab)
