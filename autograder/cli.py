"""The ``autograder`` command: grade, release, report, merge; and the course's own tools
(doctor, execute, freshness, wheelhouse)."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def _submissions(items: list[str], quiet: bool = False):
    """The submission files among ``items`` (folders searched to any depth), as (path, path as
    given) pairs; what was skipped, and why, is said on stderr."""
    from .collect import collect

    try:
        found = collect(items)
    except FileNotFoundError as exc:
        raise SystemExit(f"autograder: {exc}") from None
    if found.skipped and not quiet:
        print(f"skipped {len(found.skipped)} file(s) that are not submissions:", file=sys.stderr)
        for line in found.skipped[:20]:
            print(f"  {line}", file=sys.stderr)
        if len(found.skipped) > 20:
            print(f"  ... and {len(found.skipped) - 20} more", file=sys.stderr)
    if not found.files:
        raise SystemExit("autograder: no submissions (.ipynb or .py) given")
    return found.files


def _lab(name: str):
    from .labs import get_lab

    try:
        return get_lab(name)
    except KeyError as exc:
        raise SystemExit(f"autograder: {exc.args[0]}") from None


def cmd_grade(args) -> int:
    from course.device import gpu_present

    from .batch import OutputProblem, grade_all

    lab = _lab(args.lab)
    for name in args.exercise or []:
        try:
            lab.exercise(name)
        except KeyError as exc:
            raise SystemExit(f"autograder: {exc.args[0]}") from None
    paths = _submissions(args.submissions, args.quiet)
    simulator = args.simulator or not gpu_present()
    gpus = _worker_gpus(args.gpus, args.workers, simulator)
    if simulator and not args.quiet:
        print("No GPU (or --simulator): grading correctness in the CUDA simulator; kernel speed is not scored.",
              file=sys.stderr)
        _suggest_workers(len(gpus), len(paths))
    if args.sanitize and simulator:
        raise SystemExit("autograder: --sanitize needs a GPU (compute-sanitizer checks real kernels)")
    if args.profile and not simulator:
        from .nsight import ncu_path

        if ncu_path() is None:
            raise SystemExit("autograder: --profile on a GPU needs Nsight Compute (ncu, part of the CUDA toolkit); "
                             "add --simulator for the simulator's traced analysis")
    for flag, value in (("--timeout", args.timeout), ("--memory-limit", args.memory_limit)):
        if value is not None and not value > 0:
            raise SystemExit(f"autograder: {flag} must be a positive number of "
                             f"{'seconds' if flag == '--timeout' else 'GB'}, not {value:g}")
    if args.shard:
        from .batch import parse_shard

        try:
            parse_shard(args.shard)
        except ValueError as exc:
            raise SystemExit(f"autograder: {exc}") from None
    sandboxed = not args.no_sandbox
    if sandboxed:
        refused = sandbox_refusal()
        if refused:
            raise SystemExit(f"autograder: {refused}")
    elif not args.quiet:
        print("warning: grading WITHOUT a sandbox (--no-sandbox): submissions run with your rights, "
              "and every result says so", file=sys.stderr)
    started = time.monotonic()
    try:
        book = grade_all(lab, paths, Path(args.out).absolute(), simulator=simulator, gpus=gpus, force=args.force,
                         seed=args.seed, sanitize=args.sanitize, shard_spec=args.shard, quiet=args.quiet,
                         timeout=args.timeout, exercises=args.exercise, memory_limit_gb=args.memory_limit,
                         sandboxed=sandboxed, profile=args.profile)
    except (ValueError, OutputProblem) as exc:
        raise SystemExit(f"autograder: {exc}") from None
    if not args.quiet:
        print(f"gradebook: {book} ({time.monotonic() - started:.1f} s)")
    return 0


def _worker_gpus(gpus: str | None, workers: int | None, simulator: bool) -> list[str | None]:
    """The GPU of each worker (None: none named), from --gpus and --workers: one judge and one
    sandbox slot per worker."""
    ids: list[str | None] = [g.strip() for g in gpus.split(",")] if gpus else [None]
    if workers is None or workers == 1:
        return ids
    if workers < 1:
        raise SystemExit(f"autograder: --workers must be 1 or more, not {workers}")
    if not simulator:
        raise SystemExit("autograder: --workers N grades N submissions at once in simulator mode only: on a GPU, "
                         "submissions graded side by side would slow each other's timed kernels and lose speed "
                         "points. Give each worker a GPU of its own with --gpus 0,1,... (or add --simulator)")
    if gpus:
        raise SystemExit("autograder: --gpus with --workers: simulator mode uses no GPU; give --workers N alone")
    from .host_parallel import cores

    if workers > cores():
        raise SystemExit(f"autograder: --workers {workers}, but this process may use {cores()} core(s): workers "
                         f"sharing a core slow each other down, and a submission slowed past its time limit "
                         f"(wall-clock seconds) loses points it earned. Use --workers {cores()} or fewer")
    return [None] * workers


def _suggest_workers(workers: int, submissions: int) -> None:
    """Say that a class could use more of this machine's cores (never chosen for the user: the
    machine may be shared, and every worker may use the lab's memory limit)."""
    from .host_parallel import cores

    if workers == 1 and submissions > 1 and cores() >= 4:
        print(f"(one worker: --workers {cores() // 2} would grade {cores() // 2} submissions at a time on this "
              f"machine's {cores()} cores)", file=sys.stderr)


def sandbox_refusal() -> str | None:
    """Why `autograder grade` refuses to start without --no-sandbox, and the fix; None when a
    sandbox works here."""
    from .sandbox import available, bwrap_path

    ok, why = available()
    if ok:
        return None
    no_sandbox = "or grade without one with --no-sandbox (only for code you trust: it then runs with your rights)"
    if bwrap_path() is None:
        return f"no sandbox for the submissions: {why}.\nInstall bubblewrap (apt-get install bubblewrap), {no_sandbox}"
    return (f"no sandbox for the submissions: bubblewrap is installed but could not run a sandbox here: {why}.\n"
            f"Fix that (`autograder doctor` tries grading end to end), {no_sandbox}")


def cmd_release(args) -> int:
    from course.notebooks import ROOT

    from .release import release, solution_notebooks

    sources = [Path(s) for s in args.notebooks] or solution_notebooks(ROOT)
    for src in sources:
        if src.parent.name != "solutions":
            raise SystemExit(f"autograder: {src} is not an instructor notebook (labs/<lab>/solutions/<lab>.ipynb)")
        print(f"{src} -> {release(src)}")
    return 0


def cmd_report(args) -> int:
    from .report import write_report
    from .results import RECORD

    folder = Path(args.dir)
    if not (folder / RECORD).is_file():
        raise SystemExit(f"autograder: {folder} is not a folder `autograder grade` wrote (no {RECORD} in it): "
                         "give the --out folder of a grading run")
    try:
        paths = write_report(folder, _lab(args.lab))
    except OSError as exc:
        raise SystemExit(f"autograder: cannot write the report into {folder}: {exc.strerror or exc}") from None
    for path in paths:
        print(path)
    return 0


def cmd_merge(args) -> int:
    from .batch import MergeError, merge

    try:
        book, gaps = merge([Path(d) for d in args.shards], Path(args.out), _lab(args.lab),
                           allow_partial=args.allow_partial)
    except MergeError as exc:
        partial = "" if args.allow_partial else "\n(--allow-partial merges what is graded, leaving the rest out)"
        raise SystemExit("autograder: merge refused, nothing written:\n" + "\n".join(f"  {p}" for p in exc.problems)
                         + partial) from None
    for gap in gaps:
        print(f"warning: partial merge, left out: {gap}", file=sys.stderr)
    print(book)
    return 0


def _sinfo(partition: str | None, field: str) -> list[str] | None:
    """One field of every node (sinfo -o), or None where sinfo cannot tell."""
    import subprocess

    cmd = ["sinfo", "-h", "-N", "-o", field] + (["-p", partition] if partition else [])
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.split() if r.returncode == 0 and r.stdout.strip() else None


def cmd_slurm(args) -> int:
    import re
    import shlex
    import subprocess

    lab = _lab(args.lab)
    subs, out = Path(args.submissions).resolve(), Path(args.out).resolve()
    if not subs.exists():
        raise SystemExit(f"autograder: no such submissions: {args.submissions}")
    if args.shards < 1:
        raise SystemExit("autograder: --shards must be 1 or more")
    grade = list(args.grade_options)
    if any(re.match(r"--(shard|out|lab)(=|$)", g) for g in grade):
        raise SystemExit("autograder: --lab, --out and --shard are the job's to set, not grade options")
    # Check the grade options here rather than in N job logs; a stray positional would be
    # taken for a submission.
    parsed = parser().parse_args(["grade", "--lab", lab.name, "--out", str(out), *grade, str(subs)])
    if parsed.submissions != [str(subs)]:
        raise SystemExit(f"autograder: give grade options after --, as options: {grade}")
    stale = sorted(p.name for p in out.glob("shard-*") if re.fullmatch(r"shard-(\d+)", p.name)
                   and int(p.name[6:]) >= args.shards)
    if stale:
        raise SystemExit(f"autograder: {out} holds {', '.join(stale)} of an earlier run with more shards: "
                         "merge would refuse the mix; remove them or use another --out")

    gpus = args.gpus_per_task
    if gpus is None:  # what the cluster has: a --gres=gpu request is refused where no node has one
        gres = _sinfo(args.partition, "%G")
        if gres is None:
            raise SystemExit("autograder: sinfo cannot tell whether the cluster has GPUs: "
                             "pass --gpus-per-task 1 (or 0 to grade in the simulator)")
        gpus = 1 if any("gpu" in g for g in gres) else 0
        print(f"GPUs per task: {gpus} (the nodes' gres: {', '.join(sorted(set(gres)))}; "
              f"--gpus-per-task overrides)", file=sys.stderr)
    workers = parsed.workers or 1
    if workers > 1 and gpus and not parsed.simulator:
        raise SystemExit("autograder: --workers is for simulator mode: on a GPU, use --gpus-per-task (one worker "
                         "per GPU), or --gpus-per-task 0")
    cpus = args.cpus_per_task
    if cpus is None:  # the judge and the runner side by side; fewer on nodes that have fewer; a core per worker
        counts = [int(c) for c in _sinfo(args.partition, "%c") or [] if c.isdigit()]
        cpus = max(min(2, max(counts)) if counts else 2, workers)
    elif cpus < workers:
        raise SystemExit(f"autograder: --cpus-per-task {cpus} for --workers {workers}: each worker needs a CPU")
    if gpus == 0 and "--simulator" not in grade:
        grade.append("--simulator")  # no GPU allocated: a node's GPUs are not this job's to use
    elif gpus > 1 and not any(g.startswith("--gpus") for g in grade):
        grade += ["--gpus", ",".join(map(str, range(gpus)))]  # Slurm numbers the allocated GPUs from 0

    venv = args.venv if args.venv is not None else (sys.prefix if sys.prefix != sys.base_prefix else "")
    export = "ALL"
    if venv:
        venv = str(Path(venv).resolve())
        if not (Path(venv) / "bin" / "activate").is_file():
            raise SystemExit(f"autograder: --venv {venv}: no virtual environment there (no bin/activate)")
        if "," in venv:
            raise SystemExit(f"autograder: --venv {venv}: sbatch --export cannot pass a path with a comma")
        export += f",AUTOGRADER_VENV={venv}"
    script = Path(__file__).resolve().parent / "slurm" / "grade_array.sbatch"
    cmd = ["sbatch", "--parsable", f"--array=0-{args.shards - 1}", f"--cpus-per-task={cpus}",
           f"--output={out}/shard-%a/slurm-%A_%a.log", f"--export={export}"]
    cmd += [f"--gres=gpu:{gpus}"] if gpus else []
    cmd += [f"--partition={args.partition}"] if args.partition else []
    cmd += ["--wait"] if args.wait else []
    cmd += (args.sbatch or []) + [str(script), lab.name, str(subs), str(out), *grade]
    merge_cmd = f"autograder merge --lab {lab.name} --out {shlex.quote(str(out))} {shlex.quote(str(out))}/shard-*"
    if args.dry_run:
        print(shlex.join(cmd))
        return 0
    for i in range(args.shards):  # Slurm writes each task's log here, and does not make folders
        (out / f"shard-{i}").mkdir(parents=True, exist_ok=True)
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    except OSError as exc:
        raise SystemExit(f"autograder: cannot run sbatch: {exc}") from None
    job = r.stdout.strip().split(";")[0]
    if not job:
        raise SystemExit(f"autograder: sbatch refused the job (exit {r.returncode}): {shlex.join(cmd)}")
    print(f"job array {job}: {args.shards} shard(s), {gpus} GPU(s) and {cpus} CPU(s) per task; "
          f"logs: {out}/shard-I/slurm-{job}_I.log")
    if args.wait and r.returncode != 0:
        print(f"autograder: a task of job {job} failed (exit {r.returncode}): see its log", file=sys.stderr)
        return r.returncode
    print(("Merge: " if args.wait else f"When it has finished (squeue -j {job} lists nothing), merge: ") + merge_cmd)
    return r.returncode


def cmd_gradescope(args) -> int:
    from .gradescope import build_zip

    try:
        out = build_zip(_lab(args.lab), Path(args.out), cases=args.hide_cases,
                        wheelhouse=Path(args.wheelhouse) if args.wheelhouse else None, timeout=args.timeout,
                        memory_limit_gb=args.memory_limit, speed_from=Path(args.speed_from) if args.speed_from else None,
                        sandbox=not args.no_sandbox)
    except (ValueError, RuntimeError) as exc:
        raise SystemExit(f"autograder: {exc}") from None
    print(f"{out} ({out.stat().st_size / 1e6:.1f} MB): upload it as the assignment's autograder on Gradescope")
    return 0


def cmd_grades(args) -> int:
    from .roster import LatePolicy, write_lms_grades

    try:
        policy = LatePolicy.from_args(args.due, args.penalty_per_day, args.grace_minutes, args.max_days_late)
        report = write_lms_grades(Path(args.dir), _lab(args.lab), Path(args.roster), Path(args.out) if args.out else None,
                                  policy=policy, submissions=Path(args.submissions) if args.submissions else None,
                                  times=Path(args.times) if args.times else None, column=args.column,
                                  grade_only=args.grade_only)
    except ValueError as exc:
        raise SystemExit(f"autograder: {exc}") from None
    print(report)
    return 0


def cmd_doctor(args) -> int:
    from course.doctor import main

    return main()


def cmd_execute(args) -> int:
    from course.device import gpu_present
    from course.notebooks import executed_notebooks, execute

    if not gpu_present() and not args.allow_cpu:
        raise SystemExit("autograder: execute writes the outputs the site shows; run it on a GPU machine")
    paths = [Path(p) for p in args.notebooks] or executed_notebooks()
    for p in paths:
        t = time.monotonic()
        stamp = execute(p, timeout=args.timeout, memory_cap=int(args.memory_cap_gb * 1e9) or None)
        print(f"{p}: executed in {time.monotonic() - t:.1f} s on {stamp.get('gpu')}, "
              f"peak GPU memory {stamp.get('peak_gpu_memory_mib', '?')} MiB")
    return 0


def cmd_freshness(args) -> int:
    from course.notebooks import executed_notebooks, staleness

    problems = [msg for p in executed_notebooks() for msg in staleness(p)]
    for msg in problems:
        print(msg)
    print("all notebooks fresh" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


def cmd_wheelhouse(args) -> int:
    from course.wheelhouse import build

    extras = [e for e in args.extras.split(",") if e]
    got = build(Path(args.out), args.python, args.platform, extras, Path(args.node_freeze) if args.node_freeze else None)
    print(f"{len(got)} distributions in {args.out}: " + ", ".join(got))
    print(f"On the node: python -m pip install --no-index --find-links {args.out} "
          f"'gpu-course{'[' + ','.join(extras) + ']' if extras else ''}'")
    return 0


def parser() -> argparse.ArgumentParser:
    from .runproc import SANITIZER_TOOLS

    ap = argparse.ArgumentParser(prog="autograder", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)

    g = sub.add_parser("grade", help="grade submissions (.ipynb or .py, or folders of them)")
    g.add_argument("--lab", required=True)
    g.add_argument("--out", required=True, help="folder for results.json per submission and grades.csv")
    g.add_argument("--force", action="store_true", help="regrade submissions already graded")
    g.add_argument("--gpus", help="comma-separated GPU ids: one worker per GPU, e.g. 0,1,2,3")
    g.add_argument("--workers", type=int, metavar="N",
                   help="simulator mode: grade N submissions at a time, each in a judge and sandbox of its own "
                        "(at most the cores this process may use; default 1: the machine may be shared, and "
                        "the time limits are wall-clock seconds)")
    g.add_argument("--sanitize", choices=SANITIZER_TOOLS,
                   help="run correctness under this compute-sanitizer tool (GPU only; synccheck: barriers)")
    g.add_argument("--shard", help="I/N: grade only shard I of N (for Slurm job arrays)")
    g.add_argument("--simulator", action="store_true", help="grade in the CUDA simulator even with a GPU")
    g.add_argument("--profile", action="store_true",
                   help="profile each passing exercise and the reference, into the feedback (never scored): on a "
                        "GPU with Nsight Compute at the timing size; with --simulator, the traced memory accesses of "
                        "Numba kernels on the largest case")
    g.add_argument("--seed", type=int, help="fix the input seed (reproduce a run; keep it secret)")
    g.add_argument("--exercise", action="append", help="grade only this exercise (repeatable)")
    g.add_argument("--timeout", type=float, help="seconds per exercise (default: the lab's)")
    g.add_argument("--memory-limit", type=float, help="GB of host memory per submission (default: the lab's)")
    g.add_argument("--no-sandbox", action="store_true",
                   help="run submissions without bubblewrap's sandbox (only for code you trust)")
    g.add_argument("--quiet", action="store_true")
    g.add_argument("submissions", nargs="+")
    g.set_defaults(fn=cmd_grade)

    r = sub.add_parser("release", help="make student notebooks from labs/*/solutions/*.ipynb")
    r.add_argument("notebooks", nargs="*")
    r.set_defaults(fn=cmd_release)

    rep = sub.add_parser("report", help="plots and a summary table of a graded folder")
    rep.add_argument("--lab", required=True)
    rep.add_argument("dir")
    rep.set_defaults(fn=cmd_report)

    m = sub.add_parser("merge", help="merge shard folders into one gradebook")
    m.add_argument("--lab", required=True)
    m.add_argument("--out", required=True)
    m.add_argument("--allow-partial", action="store_true",
                   help="merge what is graded when shards or submissions are missing (and list them)")
    m.add_argument("shards", nargs="+")
    m.set_defaults(fn=cmd_merge)

    sl = sub.add_parser("slurm", help="grade on a Slurm cluster: submit a job array of shards, then merge",
                        usage="autograder slurm --lab LAB --out OUT --shards N [options] SUBMISSIONS [-- GRADE OPTIONS]")
    sl.add_argument("--lab", required=True)
    sl.add_argument("--out", required=True, help="folder for the shards (OUT/shard-I) and the merged gradebook")
    sl.add_argument("--shards", type=int, required=True, help="array tasks, one shard of the submissions each")
    sl.add_argument("--gpus-per-task", type=int, choices=range(0, 17), metavar="G",
                    help="GPUs per task (0: grade in the simulator); default: 1 if sinfo shows GPU gres, else 0")
    sl.add_argument("--cpus-per-task", type=int, help="default 2, or fewer where no node has 2")
    sl.add_argument("--partition", help="the Slurm partition")
    sl.add_argument("--venv", help="the virtual environment the job activates (a path the nodes see; "
                                   "default: this autograder's, '' for none)")
    sl.add_argument("--sbatch", action="append", metavar="OPT",
                    help="one more sbatch option, e.g. --sbatch=--time=1:00:00 (repeatable)")
    sl.add_argument("--wait", action="store_true", help="wait for every task to finish (sbatch --wait)")
    sl.add_argument("--dry-run", action="store_true", help="print the sbatch command, submit nothing")
    sl.add_argument("submissions", help="a folder of submissions (or one file)")
    sl.add_argument("grade_options", nargs="*", help="after --: options of autograder grade, e.g. --seed S")
    sl.set_defaults(fn=cmd_slurm)

    gs = sub.add_parser("gradescope", help="build a Gradescope autograder zip for a lab (grades in the simulator)")
    gs.add_argument("lab")
    gs.add_argument("--out", required=True, help="the zip to write")
    gs.add_argument("--hide-cases", default="visible", choices=["visible", "after_due_date", "after_published", "hidden"],
                    help="when students see the case lists (the score stays visible)")
    gs.add_argument("--wheelhouse", help="bundle these wheels (autograder wheelhouse) so setup.sh needs no index")
    gs.add_argument("--speed-from", help="an `autograder grade` folder from a GPU: bundle its speed results")
    gs.add_argument("--timeout", type=float, help="seconds per exercise (default: the lab's)")
    gs.add_argument("--memory-limit", type=float, help="GB of host memory per submission (default: the lab's)")
    gs.add_argument("--no-sandbox", action="store_true",
                    help="grade without a sandbox where none can be made (only for code you trust); every result "
                         "says so. Without it, a machine with no sandbox grades nothing and says why")
    gs.set_defaults(fn=cmd_gradescope)

    gr = sub.add_parser("grades", help="join a graded folder to a roster (Canvas, Gradescope): a CSV for the LMS")
    gr.add_argument("--lab", required=True)
    gr.add_argument("--roster", required=True, help="the roster CSV as Canvas or Gradescope exports it")
    gr.add_argument("--out", help="the CSV to write (default: DIR/grades-roster.csv)")
    gr.add_argument("--column", help="the grade column's name (default: the lab's name)")
    gr.add_argument("--grade-only", action="store_true",
                    help="only the roster's columns and the grade (an LMS makes every other column an assignment)")
    gr.add_argument("--due", help="due date and time, ISO 8601 (e.g. 2025-03-01T23:59:00+01:00)")
    gr.add_argument("--penalty-per-day", type=float, default=0.0, help="percent of the score lost per day late")
    gr.add_argument("--grace-minutes", type=float, default=0.0, help="minutes after the due time not counted late")
    gr.add_argument("--max-days-late", type=float, help="later than this: no points")
    gr.add_argument("--submissions", help="the submitted files: their modification times are the submission times")
    gr.add_argument("--times", help="a CSV of submission,time (ISO 8601): the submission times")
    gr.add_argument("dir", help="the folder `autograder grade` wrote")
    gr.set_defaults(fn=cmd_grades)

    d = sub.add_parser("doctor", help="what this machine has for the course, and what is broken")
    d.set_defaults(fn=cmd_doctor)

    e = sub.add_parser("execute", help="run notebooks on a GPU and store outputs plus a stamp")
    e.add_argument("notebooks", nargs="*")
    e.add_argument("--timeout", type=int, default=1200, help="seconds per cell")
    e.add_argument("--memory-cap-gb", type=float, default=15.0,
                   help="GB left free on each GPU while a notebook runs, as on a 16 GB card (0: no cap)")
    e.add_argument("--allow-cpu", action="store_true", help=argparse.SUPPRESS)
    e.set_defaults(fn=cmd_execute)

    f = sub.add_parser("freshness", help="fail if a notebook's outputs are stale or not from a GPU")
    f.set_defaults(fn=cmd_freshness)

    w = sub.add_parser("wheelhouse", help="download wheels an offline GPU node lacks")
    w.add_argument("--python", default="3.12")
    w.add_argument("--platform", default="manylinux_2_28_x86_64")
    w.add_argument("--extras", default="test", help="comma-separated extras of gpu-course")
    w.add_argument("--node-freeze", help="the node's `pip freeze`: leave out what it already has")
    w.add_argument("--out", required=True)
    w.set_defaults(fn=cmd_wheelhouse)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
