"""The pip and conda dependency lists agree; the numpy pin holds; doctor diagnoses."""
from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from course.doctor import version_problems

ROOT = Path(__file__).resolve().parent.parent
try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
# pip name -> conda-forge name, where they differ
CONDA_NAME = {"torch": "pytorch", "cupy-cuda13x": "cupy"}


def pip_requirements() -> dict[str, SpecifierSet]:
    reqs = PYPROJECT["dependencies"] + PYPROJECT["optional-dependencies"]["dev"] \
        + PYPROJECT["optional-dependencies"]["cuda13"]
    out: dict[str, SpecifierSet] = {}
    for line in reqs:
        r = Requirement(line)
        if r.marker is None or r.marker.evaluate():
            out[CONDA_NAME.get(r.name, r.name)] = r.specifier
    return out


def conda_requirements() -> dict[str, SpecifierSet]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert env["channels"] == ["conda-forge"]
    out = {}
    for dep in env["dependencies"]:
        if isinstance(dep, str) and dep not in ("pip",) and not dep.startswith(("python", "cuda-version")):
            r = Requirement(dep.replace(" ", ""))
            out[r.name] = r.specifier
    return out


def test_conda_and_pip_lists_agree():
    pip, conda = pip_requirements(), conda_requirements()
    assert set(pip) == set(conda), f"only pip: {set(pip) - set(conda)}; only conda: {set(conda) - set(pip)}"
    for name, spec in pip.items():
        if name != "cupy":  # cupy-cuda13x (pip) and cupy with cuda-version (conda) version alike
            assert spec == conda[name], (name, spec, conda[name])


def test_numpy_is_pinned_below_2_5():
    spec = next(Requirement(r).specifier for r in PYPROJECT["dependencies"] if r.startswith("numpy"))
    assert not spec.contains("2.5.0") and not spec.contains("2.5.2") and spec.contains("2.4.6")
    assert spec.contains(metadata.version("numpy")), "the installed numpy breaks the pin"


def test_doctor_flags_numpy_2_5_with_numba_cuda_0_30():
    bad = version_problems({"numpy": "2.5.2", "numba": "0.68.0", "numba-cuda": "0.30.4"}, gpu=False)
    assert any("numpy<2.5" in b and "row_stack" in b for b in bad)
    assert version_problems({"numpy": "2.4.6", "numba": "0.68.0", "numba-cuda": "0.30.4"}, gpu=False) == []
    assert any("cupy" in b.lower() for b in version_problems(
        {"numpy": "2.4.6", "numba": "0.68.0", "numba-cuda": "0.30.4"}, gpu=True))


def test_doctor_on_this_machine():
    r = subprocess.run([sys.executable, "-m", "autograder", "doctor"], capture_output=True, text=True, timeout=300)
    print(r.stdout)
    assert "numba-cuda" in r.stdout
    from conftest import GPU

    if GPU:
        assert "Mode: GPU" in r.stdout and "compute capability" in r.stdout
    else:
        assert "Mode: simulator" in r.stdout and "NUMBA_ENABLE_CUDASIM=1" in r.stdout
    assert "Grading a class: works" in r.stdout  # a built-in answer, graded through `autograder grade`
    assert r.returncode == 0, r.stdout


def fake_bwrap(folder: Path, real: str | None) -> Path:
    """A bwrap that refuses every sandbox (real None), or only the runner's, passing its probe
    to the real one: grading fails while a check of bubblewrap alone would pass."""
    script = folder / "bwrap"
    passes = f'case "$*" in *"/grader/runner.py "[0-9]*) ;; *) exec {real} "$@";; esac\n' if real else ""
    script.write_text(f"#!/bin/sh\n{passes}echo 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    script.chmod(0o755)
    return script


def _bwrap_works() -> bool:
    real = shutil.which("bwrap")
    return real is not None and subprocess.run([real, "--ro-bind", "/", "/", "true"], capture_output=True).returncode == 0


@pytest.mark.parametrize("refuses", ["every sandbox", "the runner's sandbox"])
def test_doctor_fails_when_grading_would_fail(tmp_path, refuses):
    real = None
    if refuses == "the runner's sandbox":
        if not _bwrap_works():
            pytest.skip("needs a working bubblewrap to pass its probe")
        real = shutil.which("bwrap")
    # bubblewrap only: as root, the uid walls would otherwise take over, and grading work
    env = dict(os.environ, AUTOGRADER_BWRAP=str(fake_bwrap(tmp_path, real)), AUTOGRADER_SANDBOX="bwrap")
    r = subprocess.run([sys.executable, "-m", "autograder", "doctor"], capture_output=True, text=True, env=env,
                       timeout=300)
    print(r.stdout)
    assert r.returncode == 1 and "Grading a class: FAILS" in r.stdout and "Setup is broken" in r.stdout
    if real is None:  # the grader's own refusal, with its fix
        assert "setting up uid map: Permission denied" in r.stdout and "--no-sandbox" in r.stdout
    else:  # the sandbox starts, the runner does not: the grade says so
        assert "a correct built-in answer scored 0 of 2" in r.stdout


def venv_with_these_packages(venv: Path, clone: Path) -> Path:
    """A virtual environment at ``venv`` that imports the course from ``clone`` and every other
    package from this one's site-packages (no download); its python."""
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))
    (site / "00_course.pth").write_text(f"{clone}\n")  # before the editable install's finder
    (site / "zz_packages.pth").write_text(f"import site; site.addsitedir({sysconfig.get_path('purelib')!r})\n")
    return venv / "bin" / "python"


@pytest.mark.parametrize("under", ["/tmp", "home"])
def test_a_clone_and_venv_grade_wherever_they_are(under):
    """The interpreter and the checkout are visible to the sandbox wherever they live."""
    base = Path(tempfile.mkdtemp(prefix="gpu-course-test-", dir=Path.home() if under == "home" else under))
    try:
        clone = base / "gpu-course"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        py = venv_with_these_packages(base / "venv", clone)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the course from the clone only
        bank = clone / "tests" / "submissions" / "first_kernel"
        r = subprocess.run([py, "-m", "autograder", "grade", "--lab", "first_kernel", "--simulator", "--exercise",
                            "vector_add", "--seed", "7", "--out", "graded", bank / "correct.py",
                            bank / "wrong_index.py"], capture_output=True, text=True, cwd=base, env=env, timeout=300)
        assert r.returncode == 0, r.stderr
        with open(base / "graded" / "grades.csv", newline="") as f:
            rows = {row["submission"]: row["vector_add"] for row in csv.DictReader(f)}
        assert rows == {"correct": "2", "wrong_index": "0"}, (rows, r.stderr)
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.gpu
def test_doctor_exit_code_on_broken_numpy(tmp_path):
    """Run doctor against numpy 2.5 when the machine has it (the GPU image ships 2.5.2)."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, "-c", "import numpy; print(numpy.__version__)"],
                       capture_output=True, text=True, env=env)
    if Version(r.stdout.strip()) < Version("2.5"):
        pytest.skip("this machine's own numpy is not 2.5")
    env["PYTHONPATH"] = str(ROOT)
    r = subprocess.run([sys.executable, "-m", "autograder", "doctor"], capture_output=True, text=True, env=env)
    print(r.stdout)
    assert r.returncode == 1 and "numpy<2.5" in r.stdout
