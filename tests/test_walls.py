"""The runner's walls, each on its own, against learner code that the static check would let
through (tests/walls_probe.py runs the snippets in a fresh process as the runner runs a
submission's cells). The attack bank (test_attacks.py) checks the same walls through whole
gradings, where the first wall to hold hides the others."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = Path(__file__).resolve().parent / "walls_probe.py"


def _probe(which: str) -> dict:
    r = subprocess.run([sys.executable, str(PROBE), which], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def numba_walls() -> dict:
    return _probe("numba")


@pytest.fixture(scope="module")
def triton_walls() -> dict:
    return _probe("triton")


@pytest.mark.parametrize("probe, said", [
    ("attributes", "ok: []"),  # no .data, ._ary, __dict__, __array_interface__, .base or gpu_data
    ("match_pattern", "ok: 'nothing'"),
    ("numpy_view", "host access to a device array (__array__)"),
    ("memoryview", "a bytes-like object is required"),
    ("arithmetic", "unsupported operand"),
    ("copy_to_host", "host access to a device array (copy_to_host)"),
    ("repr", "ok: '<device array shape=(8,) dtype=float32>'"),
])
def test_a_device_array_in_the_simulator_exposes_no_data(numba_walls, probe, said):
    assert said in numba_walls[probe] and "fault" not in numba_walls[probe], numba_walls[probe]


@pytest.mark.parametrize("probe, said", [
    ("list_argument", "is a list: a kernel takes device arrays, numbers and tuples"),
    ("host_array_argument", "a NumPy array on the host as argument 2"),
    ("captured_list", "uses stash, a list: a GPU kernel reaches only its arguments"),
    ("array_method_in_kernel", "uses .sum"),
    ("try_in_kernel", "uses try/except"),
    ("default_argument", "uses a default argument, a list"),
    ("rebound_after_a_launch", "uses buf, a NumPy array on the host"),
    ("view_with_a_hooked_dtype", "a device array views its memory as a NumPy dtype"),
    ("local_array_maths", "operand 'LocalArray' does not support ufuncs"),
])
def test_a_launch_numba_could_not_compile_for_a_gpu_is_refused(numba_walls, probe, said):
    assert said in numba_walls[probe], numba_walls[probe]


@pytest.mark.parametrize("probe, said", [
    ("out_of_bounds_caught_on_host", "accessed 'x' out of bounds at line 6: index 8"),
    ("shared_race", "a data race on the shared array of line 4"),
    ("global_race_across_blocks", "threads of different blocks are never ordered"),
    ("uninitialised_shared", "read element 5 of the shared array of line 4 at line 10 before any thread wrote it"),
    ("fenced_racy_counts", "a data race on 'out'"),
])
def test_what_a_gpu_would_get_wrong_is_kept_as_a_fault(numba_walls, probe, said):
    assert f"fault: {said}" in numba_walls[probe] or ("fault:" in numba_walls[probe] and said in numba_walls[probe]), \
        numba_walls[probe]


@pytest.mark.parametrize("probe", ["honest_vector_add", "shared_atomic"])
def test_honest_kernels_pass_every_wall(numba_walls, probe):
    assert numba_walls[probe] == "ok: 'done'", numba_walls[probe]


# Two walls stand in the first two probes' way: Triton's front end refuses the kernel before it
# runs (a match statement, a list), and behind it a block hides its values from learner code.
@pytest.mark.parametrize("probe, said", [
    ("handle_by_match", ("a Triton block's handle", "does not compile for a GPU")),
    ("repr_of_a_block", ("ok: '<Triton block of fp32, shape [8]>'", "does not compile for a GPU")),
    ("one_past_the_end", "fault: kernel 'k' reads memory outside its arrays at line 6: 1 element(s) past the end"),
    # a 2-D block over a 2-D tensor, unmasked along the columns: named as the dimension it overruns, though
    # most of its lanes fall in the next row's memory
    ("past_the_end_along_a_dimension", "fault: kernel 'k' reads memory outside its arrays at line 6: 'x_ptr' (shape "
                                       "(2, 4)) is read past the end along its dimension 1 (size 4, the kernel's "
                                       "argument cols), at indices 4 to 7"),
    # a view read as a flat array: the view is named, with its strides
    ("flat_read_of_an_expanded_view", "'x_ptr' is a view that is not contiguous, shape (8,) with strides (0,)"),
    ("interpreter_memory_directly", "Triton's interpreter's memory functions"),
    ("interpreter_internals_by_match", "Triton's interpreter's own ReduceOps"),
])
def test_tritons_interpreter_shows_no_data_and_keeps_memory_inside_the_arrays(triton_walls, probe, said):
    assert any(s in triton_walls[probe] for s in ((said,) if isinstance(said, str) else said)), triton_walls[probe]


def test_an_honest_triton_kernel_passes(triton_walls):
    assert triton_walls["honest_copy"] == "ok: 28.0", triton_walls["honest_copy"]


def test_programs_that_share_an_element_race_unless_atomic(triton_walls):
    """The interpreter runs programs one after another; a GPU runs them side by side: a plain load and
    store of one element by two programs is a race, two atomic adds are not."""
    assert "fault: a data race in kernel 'k' at line 6: program (1, 0, 0) reads byte 0 of 'o_ptr', which program " \
           "(0, 0, 0) wrote" in triton_walls["programs_race"], triton_walls["programs_race"]
    assert triton_walls["programs_add_atomically"] == "ok: 28.0", triton_walls["programs_add_atomically"]


def test_the_libraries_the_grader_checks_with_are_sealed():
    """The modules torch.library.opcheck and its kin run are recorded when learner code starts: any
    change the learner makes (an attribute set, setattr by another name, a deletion, a module swapped
    in sys.modules) is named, and an entry exercise refuses to run on it; a library importing a
    submodule changes nothing that was recorded."""
    found = _probe("seal")
    for probe in ("set_a_library_attribute", "set_it_by_another_name", "delete_a_library_attribute"):
        assert "torch.testing._internal.optests.opcheck" in found[probe], (probe, found[probe])
    assert "torch.testing._internal.optests" in found["swap_the_module"], found["swap_the_module"]
    assert found["library_imports_a_submodule"] == "nothing", found
