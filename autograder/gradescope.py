"""Gradescope: ``autograder gradescope LAB --out ZIP`` builds an autograder zip, and
``python -m autograder.gradescope`` is what that zip's ``run_autograder`` runs per submission.

Gradescope's machines have no GPU, so the zip grades correctness in the CUDA simulator; kernel
speed is left out of the tests there (not failed). The instructor's GPU run grades speed later;
``--speed-from GPU_OUT`` bundles that run's speed results into a new zip, matched to each
submission by its content (SHA-256), and a regrade on Gradescope then shows them.

The zip holds the course as a wheel built from this checkout (so the grader that runs is the
instructor's, not whatever PyPI has), and, with ``--wheelhouse``, every dependency too, so
that setup.sh installs with no index at all. Every path under ``/autograder`` moves with the
environment variable AUTOGRADER_ROOT (tests unpack the zip into a temporary folder).
"""
from __future__ import annotations

import ctypes
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import zipfile
from pathlib import Path

from .results import (CASE_VISIBILITIES, NOT_GRADED, atomic_write, gradescope_json, not_graded_note,
                      read_record, read_results, result_headline)
from .spec import Lab

ROOT_ENV = "AUTOGRADER_ROOT"
CONFIG = "gradescope.json"
WHEELS = "wheels"
COMPLETE = "COMPLETE"  # in wheels/: every dependency is there, so pip needs no index
CHECKOUT = Path(__file__).resolve().parent.parent

SETUP_SH = r"""#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder image: it installs the
# course (the wheel in wheels/, built from the instructor's checkout) into /autograder/venv,
# with the libraries the lab needs (CPU builds: Gradescope has no GPU), makes the grader's own
# files readable by root alone, and grades the lab's own solution: the build fails unless it
# scores full marks on everything a machine without a GPU can grade.
set -euo pipefail
ROOT="${AUTOGRADER_ROOT:-/autograder}"
SRC="$ROOT/source"
PY="${AUTOGRADER_PYTHON:-__PYTHON__}"
EXTRAS="__EXTRAS__"
if [ -z "${AUTOGRADER_NO_APT:-}" ] && command -v apt-get >/dev/null; then
    # bubblewrap: the grader's sandbox where the container allows namespaces (Gradescope's does
    # not; the grader then uses a user of its own, Landlock and seccomp instead)
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$(basename "$PY")" "$(basename "$PY")-venv" bubblewrap
fi
"$PY" -m venv "$ROOT/venv"
INDEX=""
if [ -f "$SRC/wheels/COMPLETE" ]; then INDEX="--no-index"; fi
if [ -n "$EXTRAS" ] && [ -z "$INDEX" ] && [ -z "${AUTOGRADER_NO_TORCH_INDEX:-}" ]; then
    # torch's CPU build (PyPI's Linux wheel is the CUDA one, gigabytes of libraries no one uses here)
    "$ROOT/venv/bin/python" -m pip install -q --find-links "$SRC/wheels" \
        --extra-index-url https://download.pytorch.org/whl/cpu torch
fi
WHEEL="$(ls "$SRC"/wheels/gpu_course-*.whl)"
"$ROOT/venv/bin/python" -m pip install -q $INDEX --find-links "$SRC/wheels" "$WHEEL${EXTRAS:+[$EXTRAS]}"
# The grader, its lab references and this folder: root's alone. Submissions run as another user.
SITE="$("$ROOT/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
chmod -R go-rwx "$SITE/autograder" "$SITE/course" "$SRC"
"$ROOT/venv/bin/python" -m autograder.gradescope --check
"""

RUN_AUTOGRADER = r"""#!/usr/bin/env bash
# Gradescope runs this once per submission: it grades /autograder/submission in the CUDA
# simulator and writes /autograder/results/results.json. It never fails without a result.
ROOT="${AUTOGRADER_ROOT:-/autograder}"
mkdir -p "$ROOT/results"
rm -f "$ROOT/results/results.json"
"$ROOT/venv/bin/python" -m autograder.gradescope
if [ ! -s "$ROOT/results/results.json" ]; then
    echo '{"score": 0, "tests": [], "output": "The autograder could not start (its Python environment is broken): your submission was not graded. Please tell your instructor."}' > "$ROOT/results/results.json"
fi
exit 0
"""


# --------------------------------------------------------------------------- building the zip
def _package_files() -> list[Path]:
    """The files the course's wheel is built from, relative to the checkout: tracked and
    untracked-but-not-ignored ones where git knows the checkout, so no stray build output
    (setuptools' build/ keeps deleted modules) reaches the wheel."""
    tops = ("pyproject.toml", "README.md", "autograder/", "course/")
    try:
        out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z", *tops], cwd=CHECKOUT,
                             capture_output=True, text=True, check=True).stdout
        files = [Path(f) for f in out.split("\0") if f and (CHECKOUT / f).is_file()]
    except (OSError, subprocess.CalledProcessError):
        files = []
    if not files:  # not a git checkout (an installed sdist): take the folders as they are
        files = [p.relative_to(CHECKOUT) for top in tops for p in
                 ([CHECKOUT / top] if not top.endswith("/") else (CHECKOUT / top).rglob("*"))
                 if p.is_file() and "__pycache__" not in p.parts]
    return files


def course_wheel(dest: Path) -> Path:
    """A wheel of the course built from this checkout, as it is now (uncommitted edits included)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp, "src")
        for f in _package_files():
            (src / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(CHECKOUT / f, src / f)
        cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(Path(tmp, "out")), str(src)]
        try:
            import setuptools  # noqa: F401 - present: build without fetching it (offline machines)
            cmd.insert(4, "--no-build-isolation")
        except ImportError:
            pass
        r = subprocess.run(cmd, capture_output=True, text=True)
        wheels = list(Path(tmp, "out").glob("gpu_course-*.whl"))
        if r.returncode != 0 or len(wheels) != 1:
            raise RuntimeError("could not build the course's wheel:\n" + (r.stderr or r.stdout)[-2000:])
        dest.mkdir(parents=True, exist_ok=True)
        return Path(shutil.copy2(wheels[0], dest / wheels[0].name))


def checkout_version() -> str:
    """The commit the zip was built from, "+dirty" when the checkout had changes."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=CHECKOUT, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=CHECKOUT,
                               capture_output=True, text=True).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def wheel_python(wheels: list[Path]) -> str | None:
    """The Python a wheelhouse was downloaded for ("3.11" from cp311 wheels), if it says."""
    tags = {m.group(1) for w in wheels for m in [re.search(r"-cp3(\d+)-", w.name)] if m}
    return f"3.{tags.pop()}" if len(tags) == 1 else None


def speed_results(gpu_out: Path, lab: Lab) -> dict[str, list[dict]]:
    """From the instructor's GPU run: the speed tests of each graded submission, keyed by the
    SHA-256 of the file graded (the record's), so Gradescope matches them to the same bytes."""
    record = read_record(gpu_out)
    found = {}
    for name, result in read_results(gpu_out, lab, record).items():
        sha = record.get(name, {}).get("sha256")
        speed = [t for t in result["tests"] if (t.get("extra_data") or {}).get("part") == "speed"]
        if isinstance(sha, str) and result.get("extra_data", {}).get("mode") == "gpu" and speed:
            found[sha] = speed
    return found


def lab_extras(lab: Lab) -> list[str]:
    """The course's extras a lab's exercises need on a machine without a GPU: torch and Triton
    (Triton's interpreter) for torch and Triton exercises; CuPy exercises need a GPU anyway."""
    backends = {e.backend for e in lab.exercises if not e.gpu_only}
    return ["triton"] if backends & {"torch", "triton"} else []


SOLUTION = "solution.ipynb"  # the lab's own solution, graded by setup.sh's self-check


def build_zip(lab: Lab, out: Path, *, cases: str = "visible", wheelhouse: Path | None = None,
              timeout: float | None = None, memory_limit_gb: float | None = None,
              speed_from: Path | None = None, sandbox: bool = True) -> Path:
    if cases not in CASE_VISIBILITIES:
        raise ValueError(f"--hide-cases: one of {', '.join(CASE_VISIBILITIES)}, not {cases!r}")
    deps = sorted(p for p in Path(wheelhouse).glob("*.whl") if not p.name.startswith("gpu_course-")) \
        if wheelhouse else []
    if wheelhouse and not deps:
        raise ValueError(f"--wheelhouse {wheelhouse}: no wheels there (make one with `autograder wheelhouse`)")
    speed = speed_results(Path(speed_from), lab) if speed_from else {}
    if speed_from and not speed:
        raise ValueError(f"--speed-from {speed_from}: no submission graded on a GPU there")
    solution = CHECKOUT / "labs" / lab.name / "solutions" / f"{lab.name}.ipynb"
    if not solution.is_file():
        raise ValueError(f"no solution notebook for {lab.name} ({solution}): the zip's self-check grades it")
    extras = lab_extras(lab)
    config = {"lab": lab.name, "cases": cases, "timeout": timeout, "memory_limit_gb": memory_limit_gb,
              "built_from": checkout_version(), "speed": speed, "sandbox": sandbox, "extras": extras}
    python = wheel_python(deps) or "3"
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        wheel = course_wheel(Path(tmp))
        fd, partial = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
        os.close(fd)
        try:
            with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as z:
                setup = SETUP_SH.replace("__PYTHON__", f"python{python}").replace("__EXTRAS__", ",".join(extras))
                for name, text in (("setup.sh", setup), ("run_autograder", RUN_AUTOGRADER)):
                    info = zipfile.ZipInfo(name, date_time=time.localtime()[:6])
                    info.external_attr = 0o100755 << 16  # executable, as Gradescope runs them
                    info.compress_type = zipfile.ZIP_DEFLATED
                    z.writestr(info, text)
                info = zipfile.ZipInfo(CONFIG, date_time=time.localtime()[:6])
                info.external_attr = 0o100644 << 16
                z.writestr(info, json.dumps(config, indent=1), compress_type=zipfile.ZIP_DEFLATED)
                z.write(solution, SOLUTION, compress_type=zipfile.ZIP_DEFLATED)
                for w in [wheel, *deps]:  # wheels are compressed already
                    z.write(w, f"{WHEELS}/{w.name}", compress_type=zipfile.ZIP_STORED)
                if deps:
                    z.writestr(f"{WHEELS}/{COMPLETE}", "every dependency is here: pip installs with --no-index\n")
            os.replace(partial, out)
        finally:
            if os.path.exists(partial):
                os.unlink(partial)
    return out


# --------------------------------------------------------------------------- inside Gradescope
def find_submission(folder: Path, lab: Lab) -> tuple[Path | None, str]:
    """The file to grade, and a note for the student (which file, or why none)."""
    files = sorted(p for p in folder.rglob("*")
                   if p.is_file() and not p.is_symlink() and p.suffix in (".ipynb", ".py")
                   and not any(part.startswith(".") or part == "__MACOSX" for part in p.relative_to(folder).parts))
    if not files:
        seen = sorted(p.name for p in folder.rglob("*") if p.is_file())[:10] if folder.is_dir() else []
        return None, (f"No .ipynb or .py file was submitted (found: {', '.join(seen) or 'nothing'}). "
                      f"Upload your notebook {lab.name}.ipynb.")
    if len(files) == 1:
        return files[0], ""
    # Several: the lab's own notebook by name, else the only notebook, else the only script.
    for pick in ([p for p in files if p.stem == lab.name], [p for p in files if p.suffix == ".ipynb"],
                 [p for p in files if p.suffix == ".py"]):
        if len(pick) == 1:
            others = ", ".join(p.name for p in files if p != pick[0])
            return pick[0], f"Graded {pick[0].name}; the other files were not graded: {others}."
    return None, (f"Several files could be the answer ({', '.join(p.name for p in files)}): "
                  f"submit one, {lab.name}.ipynb.")


def _become_subreaper() -> None:
    """Orphans of the processes graded here become this process's children (Linux), so that
    ``_kill_descendants`` finds daemons a submission left behind when it ran unsandboxed."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def _kill_descendants() -> None:
    me = os.getpid()
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parents[int(stat.parent.name)] = int(fields[1])
        except (OSError, IndexError, ValueError):
            continue
    for pid in parents:
        p, seen = pid, 0
        while p in parents and p != me and seen < 10_000:
            p, seen = parents[p], seen + 1
        if p == me and pid != me:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def _merge_speed(result: dict, speed: list[dict]) -> dict:
    """The GPU run's speed tests in place of this run's (which are left out: no GPU here): those parts
    are then graded, no longer pending, and the result's first line says so."""
    headline = result_headline(result)
    have = {t.get("extra_data", {}).get("exercise") for t in result["tests"]}
    tests = [t for t in result["tests"] if (t.get("extra_data") or {}).get("part") != "speed"]
    added = [t for t in speed if t.get("extra_data", {}).get("exercise") in have]
    result["tests"] = sorted(tests + added, key=lambda t: [int(x) for x in str(t.get("number", "0")).split(".")
                                                           if x.isdigit()])
    result["score"] = round(sum(float(t.get("score", 0)) for t in result["tests"]), 2)
    speed_names = {t["extra_data"]["exercise"] for t in added}
    result["extra_data"]["not_graded"] = {k: v for k, v in result["extra_data"].get("not_graded", {}).items()
                                          if not (k.endswith("/speed") and k.split("/")[0] in speed_names)}
    result["extra_data"]["pending"] = {k: v for k, v in (result["extra_data"].get("pending") or {}).items()
                                       if k in result["extra_data"]["not_graded"]}
    board = []
    for t in added:
        timing = t.get("extra_data", {}).get("timing") or {}
        if timing.get("ratio") is not None:
            ex = t["extra_data"]["exercise"]
            board += [{"name": f"{ex} speed ratio", "value": round(float(timing["ratio"]), 3), "order": "desc"},
                      {"name": f"{ex} time (us)", "value": round(timing["median_s"] * 1e6, 2), "order": "asc"}]
    if board:
        result["leaderboard"] = board
    lines = [line for line in result["output"].split("\n") if not line.startswith(NOT_GRADED)]
    result["output"] = "\n".join(lines).replace(headline, result_headline(result), 1) + \
        not_graded_note(result["extra_data"]["not_graded"]) + \
        f"\nSpeed: from the course's GPU run of this same file ({len(added)} exercise(s))."
    return result


def _failure(lab: Lab | None, message: str, name: str = "(no submission)", reason: str = "grader_failure") -> dict:
    """A results.json of zero points that says why, in the lab's shape where the lab is known; ``reason``:
    the REASONS code the report shows (no usable file, or the grader's own failure)."""
    if lab is None:
        return {"score": 0.0, "output": message, "tests": [], "visibility": "visible"}
    from .batch import _failed

    return gradescope_json(_failed(lab, Path(name), None, True, message, reason), lab=lab)


def run(root: Path) -> dict:
    """Grade the submission under ``root`` (Gradescope's layout) and write its results.json.
    Never raises: whatever goes wrong is a result of zero points that says what."""
    results = root / "results" / "results.json"
    lab = None
    try:
        config = json.loads((root / "source" / CONFIG).read_text())
        from .labs import get_lab

        lab = get_lab(config["lab"])
        path, note = find_submission(root / "submission", lab)
        if path is None:
            result = _failure(lab, note, reason="no_usable_file")
        elif path.stat().st_size == 0:
            result = _failure(lab, f"{path.name} is empty: upload the notebook with your answers saved.", path.name,
                              reason="no_usable_file")
        else:
            result = _grade(lab, path, config, note)
    except Exception as exc:  # noqa: BLE001 - a grader bug is reported as a result, never a crash
        traceback.print_exc()  # to Gradescope's stdout, which only instructors see
        result = _failure(lab, f"The autograder failed ({type(exc).__name__}); your submission was not graded. "
                               "Please tell your instructor.")
    atomic_write(results, json.dumps(result, indent=2))
    return result


def _grade(lab: Lab, path: Path, config: dict, note: str) -> dict:
    from .grade import grade_submission
    from .results import digest
    from .sandbox import available

    sandboxed, why = available()
    if not sandboxed and config.get("sandbox", True):
        print(f"no sandbox: {why}", file=sys.stderr)  # Gradescope shows instructors the run's output
        return _failure(lab, "Not graded: the autograder could not make a sandbox for your code on this machine "
                             "(your instructor can see why in the autograder's output). Please tell your instructor.",
                        path.name)
    if not sandboxed:
        print(f"grading without a sandbox (built with --no-sandbox): {why}", file=sys.stderr)
        _become_subreaper()
    with tempfile.TemporaryDirectory() as work:
        try:
            res = grade_submission(lab, path, seed=secrets.randbits(63), simulator=True, work_dir=Path(work),
                                   timeout=config.get("timeout"), memory_limit_gb=config.get("memory_limit_gb"),
                                   sandboxed=sandboxed)
        finally:
            if not sandboxed:
                _kill_descendants()  # nothing the submission started outlives its grade
    result = gradescope_json(res, cases=config.get("cases", "visible"), lab=lab)
    if note:
        result["output"] = note + "\n" + result["output"]
    speed = (config.get("speed") or {}).get(digest(path))
    return _merge_speed(result, speed) if speed else result


def self_check(root: Path) -> int:
    """Grade the lab's own solution as a submission is graded here: 0 if it scores every point a
    machine without a GPU can grade, 1 (the build fails) otherwise, with what went wrong."""
    from .labs import get_lab
    from .sandbox import available

    config = json.loads((root / "source" / CONFIG).read_text())
    lab = get_lab(config["lab"])
    ok, why = available()
    print(f"sandbox: {why}" if ok else f"sandbox: none ({why})")
    if not ok and config.get("sandbox", True):
        print("self-check failed: no sandbox can be made here, and the zip was not built with --no-sandbox")
        return 1
    result = _grade(lab, root / "source" / SOLUTION, config, "")
    pending = set(result.get("extra_data", {}).get("not_graded", {}))
    short = [t for t in result["tests"] if float(t.get("score", 0)) < float(t.get("max_score", 0))]
    for t in result["tests"]:
        print(f"  {t.get('name')}: {t.get('score')}/{t.get('max_score')}")
    if pending:
        print(f"  not graded here (need a GPU): {', '.join(sorted(pending))}")
    if short or not result["tests"]:
        print(f"self-check failed: the lab's own solution lost points here: "
              f"{'; '.join(str(t.get('name')) + ': ' + str(t.get('output', ''))[:300] for t in short) or 'no tests'}")
        return 1
    print(f"autograder for {lab.name} ({lab.title}) installed: its solution scores {result['score']:g} of the "
          f"points gradable without a GPU")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    root = Path(os.environ.get(ROOT_ENV, "/autograder"))
    if argv == ["--check"]:  # setup.sh: a broken install fails the build, not a student
        return self_check(root)
    result = run(root)
    print(f"score {result.get('score')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
