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
from .results import read_results, write_gradebook, write_result
from .spec import Lab


def submission_names(paths: list[Path]) -> dict[str, Path]:
    """A folder name per submission: the file's stem, made unique and filesystem-safe."""
    names: dict[str, Path] = {}
    for p in sorted(paths):
        base = re.sub(r"[^A-Za-z0-9_.-]+", "_", p.stem) or "submission"
        name, k = base, 2
        while name in names:
            name, k = f"{base}-{k}", k + 1
        names[name] = p
    return names


def shard(names: dict[str, Path], spec: str | None) -> dict[str, Path]:
    if not spec:
        return names
    index, count = (int(x) for x in spec.split("/"))
    if not 0 <= index < count:
        raise ValueError(f"--shard {spec}: the index must be in 0..{count - 1}")
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
              memory_limit_gb: float | None = None) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    names = shard(submission_names(paths), shard_spec)
    done = set() if force else set(read_results(out_dir))
    todo = [(n, p) for n, p in names.items() if n not in done]
    if done & set(names) and not quiet:
        print(f"skipping {len(done & set(names))} already graded (use --force to regrade)", file=sys.stderr)
    seed = secrets.randbits(63) if seed is None else seed  # secret: never written anywhere
    progress = Progress(len(todo), stream=sys.stderr if not quiet else open("/dev/null", "w"))
    jobs: queue.Queue = queue.Queue()
    for item in todo:
        jobs.put(item)
    book_lock = threading.Lock()
    errors: list[BaseException] = []

    def run(gpu: str | None) -> None:
        while True:
            try:
                name, path = jobs.get_nowait()
            except queue.Empty:
                return
            try:
                work = out_dir / name
                res = grade_submission(lab, path, seed=seed, simulator=simulator, gpu=gpu,
                                       work_dir=work, sanitize=sanitize, timeout=timeout,
                                       exercises=exercises, memory_limit_gb=memory_limit_gb)
                write_result(out_dir, name, res)
                with book_lock:
                    write_gradebook(out_dir, lab)
                progress.step(f"{name}: {res.score:g}/{res.max_score:g}")
            except BaseException as exc:  # a grader bug: keep going, report at the end
                errors.append(exc)
                progress.step(f"{name}: grader error {exc}")

    threads = [threading.Thread(target=run, args=(g,), daemon=True) for g in gpus]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    path = write_gradebook(out_dir, lab)
    if errors:
        raise errors[0]
    return path


def merge(shard_dirs: list[Path], out_dir: Path, lab: Lab) -> Path:
    """Combine shards' results into one folder and one gradebook."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for d in shard_dirs:
        for name in read_results(d):
            target = out_dir / name
            if target.resolve() == (d / name).resolve():
                continue
            tmp = out_dir / f".{name}.merging"
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(d / name, tmp)
            shutil.rmtree(target, ignore_errors=True)
            tmp.rename(target)
    return write_gradebook(out_dir, lab)
