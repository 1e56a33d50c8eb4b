"""Test-run setup: simulator mode without a GPU; tests marked ``gpu`` skipped there, and tests
marked ``multigpu`` skipped with fewer than two GPUs. Notebook cells need no help: a cell that
needs a GPU starts with ``%%gpu`` and skips itself (course/gpu_cells.py)."""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))  # the course packages, also without pip install -e
# One thread for NumPy's OpenBLAS and torch's OpenMP in every process the tests start (notebook kernels,
# graders, judges), set before either is imported: the parallel workers already fill the cores, and idle
# helper threads spin (three torch-heavy chapters side by side: 59 s of CPU instead of 78).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

from course.device import gpu_count, gpu_present  # noqa: E402

GPU = gpu_present() and os.environ.get("NUMBA_ENABLE_CUDASIM", "0") in ("", "0")
MULTI_GPU = GPU and gpu_count() >= 2
if not GPU:
    # Set before anything imports numba or triton, here and in every notebook kernel nbval starts:
    # Numba's CUDA simulator, and Triton's interpreter.
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    os.environ["TRITON_INTERPRET"] = "1"
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))


# Test files whose tests share a module- or session-wide fixture (a graded bank, a built site, a
# virtual environment): under pytest-xdist (`make test` runs two workers) each such file runs on
# one worker, so the fixture is built once. Other tests are spread one by one.
# Largest first: they are handed out first, and the single tests fill in behind them.
SHARED_FIXTURES = ("test_attacks", "test_autograder", "test_inflight_batching", "test_class", "test_policy_grading",
                   "test_site", "test_handoff", "test_install", "test_custom_ops", "test_slurm", "test_serving")


# test_attacks grades its kernel attacks in groups (a lab's attacks graded on the same exercises), each
# once per worker (a session fixture): the tests of one group share a scope, and the groups run side by side.
ATTACK_GROUP = re.compile(r"::test_(?:cpu|gpu)_(?:attack_scores_nothing|groups_grade_every_submission)\[([\w.+]+)[/\]]")


def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist's scheduling by scope, with a scope per test except in SHARED_FIXTURES files."""
    from xdist.scheduler import LoadScopeScheduling

    class ByFixture(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            if Path(path).stem not in SHARED_FIXTURES:
                return nodeid
            lab = ATTACK_GROUP.search(nodeid) if Path(path).stem == "test_attacks" else None
            return f"{path}::{lab.group(1)}" if lab else path

    return ByFixture(config, log)
# Fixtures that look at the whole machine (every process, /tmp) before and after grading: tests using
# them run on their own, after the parallel run, where no other test's processes or files can show.
WHOLE_MACHINE_FIXTURES = {"machine", "planted"}
# The files that hold them: `make test` collects only these for its second run (collecting every
# file again would cost it seconds alone on the machine). A whole-machine test elsewhere is an error.
WHOLE_MACHINE_FILES = ("tests/test_attacks.py", "tests/test_workers.py")


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a GPU (simulator mode)")
    skip_multi = pytest.mark.skip(reason="needs two or more GPUs")
    # The shared-fixture files first, largest first (a stable sort: each file keeps its order).
    rank = {name: i for i, name in enumerate(SHARED_FIXTURES)}
    items.sort(key=lambda item: rank.get(Path(str(item.fspath)).stem, len(rank)))
    for item in items:
        if WHOLE_MACHINE_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.whole_machine)
        if "whole_machine" in item.keywords and Path(str(item.fspath)).relative_to(ROOT).as_posix() \
                not in WHOLE_MACHINE_FILES:
            raise pytest.UsageError(f"{item.nodeid} looks at the whole machine: add its file to "
                                    "conftest.WHOLE_MACHINE_FILES, which `make test` runs alone")
        if getattr(item, "cell", None) is not None:  # an nbval notebook cell: %%gpu cells skip themselves
            continue
        if "gpu" in item.keywords and not GPU:
            item.add_marker(skip_gpu)
        elif "multigpu" in item.keywords and not MULTI_GPU:
            item.add_marker(skip_multi)


def pytest_ignore_collect(collection_path, config):
    """Student releases are checked by regeneration and compilation, not executed to their stubs."""
    rel = Path(collection_path).resolve().relative_to(ROOT) if Path(collection_path).resolve().is_relative_to(ROOT) else None
    if rel is None:
        return None
    parts = rel.parts
    if parts[:1] in (("_build",), (".venv",), ("wheelhouse",)) or parts[:2] == ("tests", "submissions"):
        return True
    if len(parts) == 3 and parts[0] == "labs" and rel.suffix == ".ipynb":
        return True
    return None


# One folder per test run where nvcc's results are remembered (course.cuda_tools.nvcc): the chapters,
# the labs and the compile tests build many of the same sources with the same flags. Made by the
# first process (pytest-xdist's workers and the notebooks' kernels inherit it), removed at its end.
_NVCC_MEMO: list[str] = []


def pytest_configure(config):
    if not os.environ.get("COURSE_NVCC_MEMO"):
        import tempfile

        _NVCC_MEMO.append(tempfile.mkdtemp(prefix="gpu-course-nvcc-"))
        os.environ["COURSE_NVCC_MEMO"] = _NVCC_MEMO[0]


def pytest_unconfigure(config):
    if _NVCC_MEMO:
        import shutil

        shutil.rmtree(_NVCC_MEMO.pop(), ignore_errors=True)
        os.environ.pop("COURSE_NVCC_MEMO", None)
