"""The instructor's hand-off: the Gradescope zip (installed offline into a fresh virtual
environment and run in Gradescope's layout), results.json as Gradescope reads it, the roster
join for the LMS with late penalties, and the report an instructor acts on."""
from __future__ import annotations

import csv
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from autograder.labs import get_lab
from autograder.outcome import ExerciseResult, SubmissionResult
from autograder.results import gradescope_json, read_record
from test_autograder import BANK, EXPECTED, SEED, autograder
from test_install import run

import container  # noqa: E402 - tests/ is on the path (the root conftest)

ROOT = Path(__file__).resolve().parent.parent
LAB = get_lab("first_kernel")


# --------------------------------------------------------------------------- results.json
def _result(mode: str, timing: dict | None = None) -> SubmissionResult:
    """vector_add right (with a timing, if given), saxpy wrong, vector_add_cupy not graded."""
    ok = ExerciseResult("vector_add", "Vector add", 2, 1, correctness=2, passed=True,
                        message="all 2 cases correct", cases=["pass n=1 (max abs err 0)", "pass n=31 (max abs err 0)"],
                        timing=timing or {}, speed=0.8 if timing else 0.0)
    bad = ExerciseResult("saxpy", "SAXPY", 2, 1, message="1 of 2 cases correct",
                         cases=["pass n=1 (max abs err 0)", "FAIL n=1023 (max abs err nan): out[768] = nan | x"])
    gpu = ExerciseResult("vector_add_cupy", "CuPy", 1, 1, message="needs a GPU: not graded in simulator mode")
    return SubmissionResult("s.py", "first_kernel", mode, [ok, bad, gpu], 1.0)


def test_simulator_results_leave_out_what_needs_a_gpu_and_keep_real_failures():
    res = gradescope_json(_result("simulator"))
    by_number = {t["number"]: t for t in res["tests"]}
    # vector_add's and saxpy's speed and all of vector_add_cupy need a GPU: not tests here
    assert sorted(by_number) == ["1.1", "2.1"], sorted(by_number)
    assert by_number["1.1"]["status"] == "passed" and by_number["1.1"]["tags"] == ["vector_add", "correctness"]
    saxpy = by_number["2.1"]
    assert saxpy["status"] == "failed" and saxpy["score"] == 0 and saxpy["output_format"] == "md"
    assert "| n=1023 | **FAIL** | (max abs err nan): out\\[768\\] = nan \\| x |" in saxpy["output"]
    assert set(res["extra_data"]["not_graded"]) == {"vector_add/speed", "saxpy/speed", "vector_add_cupy/correctness",
                                                    "vector_add_cupy/speed"}
    assert "Not graded here, for want of a GPU" in res["output"] and "not failures" in res["output"]
    assert res["score"] == sum(t["score"] for t in res["tests"]) == 2
    assert "leaderboard" not in res


def test_gpu_results_keep_every_part_and_fill_the_leaderboard():
    timing = {"measured": True, "median_s": 12.5e-6, "reps": 50, "ratio": 0.9, "baseline_median_s": 11.2e-6}
    res = gradescope_json(_result("gpu", timing))
    numbers = [t["number"] for t in res["tests"]]
    assert numbers == ["1.1", "1.2", "2.1", "2.2", "3.1", "3.2"]
    speed = res["tests"][1]
    assert speed["tags"] == ["vector_add", "speed"] and speed["score"] == 0.8 and "0.90x" in speed["output"]
    assert res["tests"][4]["status"] == "failed" and "needs a GPU" in res["tests"][4]["output"]
    assert res["leaderboard"] == [{"name": "vector_add speed ratio", "value": 0.9, "order": "desc"},
                                  {"name": "vector_add time (us)", "value": 12.5, "order": "asc"}]
    assert res["extra_data"]["not_graded"] == {}


def test_hidden_cases_move_to_a_test_of_no_points_and_the_score_stays_visible():
    res = gradescope_json(_result("simulator"), cases="after_due_date")
    saxpy = [t for t in res["tests"] if t["tags"][0] == "saxpy"]
    assert [t["number"] for t in saxpy] == ["2.1", "2.3"]
    scored, cases = saxpy
    assert scored["visibility"] == "visible" and "FAIL" not in scored["output"] and "1 of 2 cases" in scored["output"]
    assert cases["visibility"] == "after_due_date" and cases["max_score"] == 0 and "**FAIL**" in cases["output"]
    assert all(t["visibility"] == "visible" for t in res["tests"] if t["max_score"])
    with pytest.raises(ValueError):
        gradescope_json(_result("simulator"), cases="sometimes")


# --------------------------------------------------------------------------- the Gradescope zip
@pytest.fixture(scope="module")
def wheelhouse() -> Path:
    """The course's dependencies as wheels for this Python, downloaded once and cached (keyed by
    the requirements), so that the zip installs with no index, as on an offline machine."""
    from course.wheelhouse import build, requirements

    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    key = hashlib.sha256(json.dumps([python, requirements([])]).encode()).hexdigest()[:12]
    cached = Path(tempfile.gettempdir()) / f"gpu-course-wheelhouse-{key}"
    if not (cached / "ready").exists():
        building = cached.with_name(cached.name + f".{os.getpid()}")
        shutil.rmtree(building, ignore_errors=True)
        build(building, python, "manylinux_2_28_x86_64", [], None)
        (building / "ready").touch()
        shutil.rmtree(cached, ignore_errors=True)
        building.rename(cached)
    return cached


def _gradescope_env(root: Path) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "NUMBA_ENABLE_CUDASIM") and not k.startswith(("PIP_", "AUTOGRADER_"))}
    env.update(AUTOGRADER_ROOT=str(root), AUTOGRADER_NO_APT="1", PIP_NO_INDEX="1",
               PATH=os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if ".venv" not in p))
    return env


def _submit(root: Path, env: dict, files: dict[str, bytes], inside: bool = False) -> dict:
    """One Gradescope run: a fresh submission folder, run_autograder, its results.json. ``inside``:
    in the Docker-like container, with ``root`` at /autograder."""
    shutil.rmtree(root / "submission", ignore_errors=True)
    (root / "submission").mkdir()
    for name, data in files.items():
        (root / "submission" / name).write_bytes(data)
    if inside:
        r = container.run(["/autograder/run_autograder"], binds={"/autograder": root}, env=env, cwd=root, timeout=600)
    else:
        r = subprocess.run([str(root / "run_autograder")], cwd=root, env=env, capture_output=True, text=True,
                           timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads((root / "results" / "results.json").read_text())


def _unpack(zip_path: Path, root: Path) -> None:
    """Gradescope's layout: the zip in source/, run_autograder copied to the top."""
    for d in ("source", "submission", "results"):
        (root / d).mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(zip_path) as z:
        for info in z.infolist():
            z.extract(info, root / "source")
            os.chmod(root / "source" / info.filename, (info.external_attr >> 16) & 0o777 or 0o644)
    shutil.copy2(root / "source" / "run_autograder", root / "run_autograder")


def _image_python() -> str | None:
    """A Python of this version that other users may run (the image's python3: Gradescope's
    submissions run as a user of their own), for setup.sh's venv."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (sys.executable, f"/usr/bin/{version}", f"/usr/local/bin/{version}"):
        real = Path(candidate).resolve()
        if real.is_file() and all(os.stat(p).st_mode & 0o001 for p in [*real.parents][:-1]):
            return candidate
    return None


@pytest.fixture(scope="module")
def gradescope_image(wheelhouse, tmp_path_factory):
    """The first_kernel zip as Gradescope builds its image: unpacked at /autograder in a Docker-like
    container (root without CAP_SYS_ADMIN: bubblewrap cannot make namespaces there), setup.sh run
    as root, offline from the bundled wheels. (zip, the folder mounted at /autograder, env, setup)."""
    why = container.unusable()
    python = _image_python()
    if why or python is None:
        pytest.skip(why or "no Python of this version that another user may run")
    base = tmp_path_factory.mktemp("gradescope")
    zip_path = base / "first_kernel.zip"
    autograder("gradescope", "first_kernel", "--out", str(zip_path), "--wheelhouse", str(wheelhouse),
               "--hide-cases", "after_due_date", "--timeout", "60")
    root = base / "autograder"
    _unpack(zip_path, root)
    env = _gradescope_env(Path("/autograder"))
    env["AUTOGRADER_PYTHON"] = python
    setup = container.run(["bash", "/autograder/source/setup.sh"], binds={"/autograder": root}, env=env, cwd=root,
                          timeout=900)
    assert setup.returncode == 0, setup.stdout + setup.stderr
    return zip_path, root, env, setup


def test_gradescope_zip_holds_the_wheels_the_scripts_and_the_solution_for_its_self_check(gradescope_image):
    zip_path = gradescope_image[0]
    with zipfile.ZipFile(zip_path) as z:
        names = set(z.namelist())
        assert {"setup.sh", "run_autograder", "gradescope.json", "solution.ipynb", "wheels/COMPLETE"} <= names
        assert any(re.fullmatch(r"wheels/gpu_course-.*\.whl", n) for n in names)
        assert (z.getinfo("run_autograder").external_attr >> 16) & 0o111, "run_autograder must be executable"
        assert json.loads(z.read("gradescope.json"))["sandbox"] is True


def test_gradescope_image_builds_offline_and_grades_in_a_container_without_namespaces(gradescope_image):
    _, root, env, setup = gradescope_image
    # bubblewrap cannot work there: the uid walls grade, and the self-check graded the lab's own solution
    assert "sandbox: a user of its own" in setup.stdout and "bwrap failed" in setup.stdout, setup.stdout
    assert "its solution scores" in setup.stdout and "autograder for first_kernel" in setup.stdout, setup.stdout
    site = next((root / "venv" / "lib").glob("python3*/site-packages"))
    for private in (site / "autograder", site / "course", root / "source"):
        assert not os.stat(private).st_mode & 0o077, f"{private} is readable by other users"

    right = _submit(root, env, {"first_kernel.py": (BANK / "correct.py").read_bytes()}, inside=True)
    want = EXPECTED["correct"]
    graded = {t["tags"][0]: t["score"] for t in right["tests"] if t["tags"][1] == "correctness"}
    assert graded == {k: v for k, v in want.items() if k != "vector_add_cupy"}, right
    assert right["score"] == sum(graded.values())
    assert not any(t["tags"][1] == "speed" for t in right["tests"]), "no GPU there: speed is not a test"
    assert "Not graded here" in right["output"]

    wrong = _submit(root, env, {"first_kernel.py": (BANK / "off_by_one.py").read_bytes()}, inside=True)
    scores = {t["tags"][0]: t["score"] for t in wrong["tests"] if t["tags"][1] == "correctness"}
    assert scores["vector_add"] == EXPECTED["off_by_one"]["vector_add"] == 0
    failed = next(t for t in wrong["tests"] if t["tags"] == ["vector_add", "correctness"])
    cases = next(t for t in wrong["tests"] if t["tags"] == ["vector_add", "cases"])
    assert failed["status"] == "failed" and failed["visibility"] == "visible" and "**FAIL**" not in failed["output"]
    assert cases["visibility"] == "after_due_date" and "| n=1023 | **FAIL** |" in cases["output"]

    for files, words in (({}, "No .ipynb or .py file"),
                         ({"first_kernel.ipynb": b""}, "is empty"),
                         ({"first_kernel.ipynb": b"{not json"}, "not a valid notebook"),
                         ({"a.py": b"x = 1\n", "b.py": b"y = 2\n"}, "Several files")):
        res = _submit(root, env, files, inside=True)
        assert res["score"] == 0 and words in json.dumps(res), (files, res)


@pytest.mark.heavy
def test_a_torch_labs_zip_installs_torch_and_triton_and_its_self_check_grades_the_solution(wheelhouse, tmp_path):
    """The triton_kernels zip, offline: its setup.sh installs torch (CPU) and Triton from the bundled
    wheels and grades the lab's own solution in Triton's interpreter, in a container without
    namespaces; the solution's results there are full marks on everything gradable without a GPU."""
    import torch
    import triton

    why = container.unusable()
    python = _image_python()
    if why or python is None:
        pytest.skip(why or "no Python of this version that another user may run")
    wheels = tmp_path / "wheels"
    shutil.copytree(wheelhouse, wheels)
    torch_version = torch.__version__.split("+")[0]
    got = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "--dest", str(wheels),
                          f"torch=={torch_version}", f"triton=={triton.__version__}", "ninja>=1.11"],
                         capture_output=True, text=True, timeout=1200)
    assert got.returncode == 0, got.stderr[-3000:]
    zip_path = tmp_path / "triton_kernels.zip"
    autograder("gradescope", "triton_kernels", "--out", str(zip_path), "--wheelhouse", str(wheels))
    root = tmp_path / "autograder"
    _unpack(zip_path, root)
    env = _gradescope_env(Path("/autograder"))
    env["AUTOGRADER_PYTHON"] = python
    setup = container.run(["bash", "/autograder/source/setup.sh"], binds={"/autograder": root}, env=env, cwd=root,
                          timeout=2400)
    assert setup.returncode == 0, setup.stdout[-4000:] + setup.stderr[-4000:]
    assert "its solution scores" in setup.stdout, setup.stdout
    solution = (ROOT / "labs" / "triton_kernels" / "solutions" / "triton_kernels.ipynb").read_bytes()
    res = _submit(root, env, {"triton_kernels.ipynb": solution}, inside=True)
    scored = {t["tags"][0]: t["score"] for t in res["tests"] if t["tags"][1] == "correctness"}
    want = {e.name: e.points for e in get_lab("triton_kernels").exercises if not e.gpu_only}
    assert scored == want, res


GRADESCOPE_ATTACKS = ROOT / "tests" / "submissions" / "attacks" / "gradescope"


def test_gradescope_submissions_cannot_forge_their_result_read_the_solution_or_reach_the_reference(gradescope_image):
    _, root, env, _ = gradescope_image
    before = {p: p.read_bytes() for p in [root / "run_autograder", *sorted((root / "source").rglob("*.sh"))]}
    forged = _submit(root, env, {"first_kernel.py": (GRADESCOPE_ATTACKS / "forge_run_autograder.py").read_bytes()},
                     inside=True)
    printed = forged["extra_data"].get("printed_tail", "")
    assert "ATTACK forge_run_autograder" in printed and "wrote" not in printed, printed
    assert forged["score"] == 0 and "FORGED" not in json.dumps(forged), forged
    assert all(p.read_bytes() == data for p, data in before.items()), "Gradescope's own files changed"
    assert not list((root / "venv" / "lib").glob("python3*/site-packages/sitecustomize.py"))
    after = _submit(root, env, {"first_kernel.py": (BANK / "correct.py").read_bytes()}, inside=True)
    assert after["score"] == sum(v for k, v in EXPECTED["correct"].items() if k != "vector_add_cupy"), after

    reference = _submit(root, env, {"first_kernel.py": (GRADESCOPE_ATTACKS / "reference_pydoc.py").read_bytes()},
                        inside=True)
    assert "no reference reachable" in reference["extra_data"].get("printed_tail", ""), reference
    assert reference["score"] == 0, reference

    reader = _submit(root, env, {"first_kernel.py": (GRADESCOPE_ATTACKS / "read_solution.py").read_bytes()},
                     inside=True)
    printed = reader["extra_data"].get("printed_tail", "")
    assert "denied /autograder/source/solution.ipynb" in printed and "characters" not in printed, printed
    assert reader["score"] == 0


def test_run_autograder_reports_a_broken_install_as_a_result(tmp_path):
    root = tmp_path / "autograder"
    (root / "source").mkdir(parents=True)
    from autograder.gradescope import RUN_AUTOGRADER

    (root / "run_autograder").write_text(RUN_AUTOGRADER)
    (root / "run_autograder").chmod(0o755)
    res = _submit(root, _gradescope_env(root), {"first_kernel.py": b"x = 1\n"})  # no venv: setup never ran
    assert res["score"] == 0 and "could not start" in res["output"]


# --------------------------------------------------------------------------- a graded class
@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Four submissions named as students name them, graded in the simulator, and the same
    folder as if graded on a GPU: jane's vector_add and saxpy given a time (speed is measured
    only on a GPU, so the timings are made up; what is checked is where they go)."""
    base = tmp_path_factory.mktemp("class")
    subs = base / "submissions"
    subs.mkdir()
    named = {"jane.doe.py": "correct.py", "doejohn_12345_998_first_kernel.py": "off_by_one.py",
             "kim_lab.py": "wrong_signature.py", "stranger.py": "partial_write.py"}
    for new, old in named.items():
        shutil.copy(BANK / old, subs / new)
    out = base / "graded"
    autograder("grade", "--lab", "first_kernel", "--out", str(out), "--simulator", "--seed", SEED,
               "--timeout", "60", str(subs))
    gpu = base / "gpu"
    shutil.copytree(out, gpu)
    path = gpu / _name(out, "jane_doe") / "results.json"
    res = json.loads(path.read_text())
    res["extra_data"]["mode"] = "gpu"
    for i, ex in enumerate(("vector_add", "saxpy")):
        ratio = 1.5 - i
        res["tests"].append({"name": f"{ex}: speed", "number": f"{i + 1}.2", "score": 1.0 if ratio >= 0.8 else 0.5,
                             "max_score": 1, "status": "passed", "output": f"{ratio:.2f}x",
                             "tags": [ex, "speed"], "extra_data": {"exercise": ex, "part": "speed", "flags": [],
                             "timing": {"measured": True, "ratio": ratio, "median_s": 1e-5 / ratio, "reps": 9}}})
    res["score"] = sum(t["score"] for t in res["tests"])
    path.write_text(json.dumps(res))
    return subs, out, gpu


def _name(out: Path, start: str) -> str:
    """The folder the grader made for a submission whose name starts so (a name with a dot
    gets a suffix that keeps it unique)."""
    (found,) = [p.name for p in out.iterdir() if p.is_dir() and p.name.startswith(start)]
    return found


ROSTER = """Student,ID,SIS User ID,SIS Login ID,Section,Lab 0 (123)
    Points Possible,,,,,8
"Doe, Jane",11111,S001,jane.doe@uni.edu,A,
"Doe, John",12345,S002,jdoe@uni.edu,A,
"Lee, Kim",22222,S003,klee@uni.edu,B,
"""


def test_grades_join_a_canvas_roster_with_late_penalties(graded, tmp_path):
    subs, out, _ = graded
    roster = tmp_path / "roster.csv"
    roster.write_text(ROSTER)
    due = datetime(2025, 3, 1, 23, 59, tzinfo=timezone.utc)
    os.utime(subs / "jane.doe.py", (due.timestamp() - 60,) * 2)  # on time
    os.utime(subs / "doejohn_12345_998_first_kernel.py", ((due + timedelta(hours=30)).timestamp(),) * 2)  # 2 days
    lms = tmp_path / "lms.csv"
    r = autograder("grades", "--lab", "first_kernel", "--roster", str(roster), "--out", str(lms),
                   "--due", due.isoformat(), "--penalty-per-day", "10", "--submissions", str(subs), str(out))
    rows = {row["SIS User ID"]: row for row in csv.DictReader(lms.open())}
    assert set(rows) == {"S001", "S002", "S003"}, "Canvas's Points Possible row is not a student"
    assert list(rows["S001"])[:5] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
    assert "Lab 0 (123)" not in rows["S001"], "other assignments' columns stay out of the import"
    jane, john, kim = rows["S001"], rows["S002"], rows["S003"]
    assert jane["submission"] == _name(out, "jane_doe") and float(jane["first_kernel"]) == sum(EXPECTED["correct"].values())
    assert jane["days late"] == "0" and jane["late penalty %"] == "0"
    assert john["submission"] == "doejohn_12345_998_first_kernel" and john["days late"] == "2"
    assert john["late penalty %"] == "20"
    assert float(john["first_kernel"]) == pytest.approx(0.8 * float(john["first_kernel (before late penalty)"]))
    assert kim["status"] == "no submission" and kim["first_kernel"] == "", "kim_lab is not klee: no guessing"
    assert "match no student (2):\n  kim_lab\n  stranger" in r.stdout
    assert "no submission (grade left blank) (1):\n  Lee, Kim" in r.stdout


def test_grades_read_a_gradescope_roster_and_a_times_file(graded, tmp_path):
    subs, out, _ = graded
    roster = tmp_path / "roster.csv"
    roster.write_text("First Name,Last Name,SID,Email\nJane,Doe,S001,jane.doe@uni.edu\nJohn,Doe,12345,jd@x.org\n")
    times = tmp_path / "times.csv"
    times.write_text("submission,time\njane.doe.py,2025-03-05T10:00:00+00:00\n")
    r = autograder("grades", "--lab", "first_kernel", "--roster", str(roster), "--due", "2025-03-01T23:59:00+00:00",
                   "--penalty-per-day", "25", "--max-days-late", "3", "--times", str(times), str(out))
    rows = {row["SID"]: row for row in csv.DictReader((out / "grades-roster.csv").open())}
    assert rows["S001"]["days late"] == "4" and rows["S001"]["late penalty %"] == "100"  # past the cutoff
    assert rows["S001"]["first_kernel"] == "0"
    assert rows["12345"]["late penalty %"] == "0" and "no known time" in r.stdout
    lms = tmp_path / "lms.csv"
    autograder("grades", "--lab", "first_kernel", "--roster", str(roster), "--grade-only", "--column", "Lab 0 (77)",
               "--out", str(lms), str(out))
    table = list(csv.reader(lms.open()))
    assert table[0] == ["First Name", "Last Name", "SID", "Email", "Lab 0 (77)"], "only what an LMS imports"
    assert table[1] == ["Jane", "Doe", "S001", "jane.doe@uni.edu", f"{sum(EXPECTED['correct'].values()):g}"]
    bad = autograder("grades", "--lab", "first_kernel", "--roster", str(times), str(out), check=False)
    assert bad.returncode != 0 and "no ID or e-mail column" in bad.stderr


# --------------------------------------------------------------------------- the report
def test_report_shows_reasons_first_failing_cases_and_the_leaderboard(graded):
    _, _, gpu = graded
    autograder("report", "--lab", "first_kernel", str(gpu))
    page = (gpu / "report.html").read_text()
    text = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", page)
    assert page.count("data:image/png;base64,") == 2, "plots are embedded: the page stands alone"
    for path in (str(gpu), str(ROOT), "/tmp/", "/work/", "/home/", "/root/"):
        assert path not in text, f"the report shows a path of this machine: {path}"
    row = re.search(r"<tr><td>doejohn_12345_998_first_kernel</td>.*?</tr>", text).group(0)
    assert "elements never written" in row and "n=1023" in row  # off by one: the last elements
    row = re.search(r"<tr><td>kim_lab</td>.*?</tr>", text).group(0)
    assert "wrong signature" in row
    md = (gpu / "report.md").read_text()
    assert "| vector_add | elements never written | 2 |" in md  # doejohn and stranger
    board = md.split("## Speed leaderboard")[1]
    jane = _name(gpu, "jane_doe")
    assert f"| vector_add | 1 | {jane} | 1.50 | 6.7 |" in board and f"| saxpy | 1 | {jane} | 0.50 | 20.0 |" in board


def test_speed_from_the_gpu_run_reaches_gradescope_for_the_same_file_only(graded, tmp_path, monkeypatch):
    from autograder import gradescope

    subs, _, gpu = graded
    zip_path = tmp_path / "speed.zip"
    autograder("gradescope", "first_kernel", "--out", str(zip_path), "--speed-from", str(gpu))
    root = tmp_path / "autograder"
    _unpack(zip_path, root)
    config = json.loads((root / "source" / "gradescope.json").read_text())
    assert list(config["speed"]) == [read_record(gpu)[_name(gpu, "jane_doe")]["sha256"]]
    shutil.copy(subs / "jane.doe.py", root / "submission" / "first_kernel.py")
    same = gradescope.run(root)
    speed = {t["tags"][0]: t for t in same["tests"] if t["tags"][1] == "speed"}
    assert speed["vector_add"]["score"] == 1.0 and speed["saxpy"]["score"] == 0.5
    assert same["score"] == sum(EXPECTED["correct"].values()) + 1.5
    assert {"name": "vector_add speed ratio", "value": 1.5, "order": "desc"} in same["leaderboard"]
    assert "from the course's GPU run" in same["output"]
    note = next(line for line in same["output"].splitlines() if line.startswith("Not graded here"))
    assert "vector_add_cupy correctness" in note and "vector_add speed" not in note, note
    (root / "submission" / "first_kernel.py").write_bytes((subs / "jane.doe.py").read_bytes() + b"\n# edited\n")
    other = gradescope.run(root)
    assert not any(t["tags"][1] == "speed" for t in other["tests"]) and "leaderboard" not in other
    assert json.loads((root / "results" / "results.json").read_text()) == other
