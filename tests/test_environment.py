"""The pip and conda dependency lists agree; the numpy pin holds; doctor diagnoses."""
from __future__ import annotations

import subprocess
import sys
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
    assert r.returncode == 0, r.stdout


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
