"""The %%gpu cell magic skips a cell without a GPU and is invisible with one; the memory cap holds."""
from __future__ import annotations

import pytest

from course import device, gpu_cells
from course.gpu_cells import SITE_URL, page_url, parse_line, skip_message


@pytest.fixture
def shell(monkeypatch):
    from IPython.core.interactiveshell import InteractiveShell

    sh = InteractiveShell.instance()
    monkeypatch.setattr(gpu_cells, "_notebook_path", lambda shell: "/home/me/course/chapters/04_memory.ipynb")
    assert gpu_cells.register()
    yield sh
    InteractiveShell.clear_instance()


def _gpus(monkeypatch, n: int):
    monkeypatch.setattr(device, "MODE", "gpu" if n else "simulator")
    monkeypatch.setattr(device, "gpu_count", lambda: n)


def test_parse_line():
    assert parse_line("") == (1, "")
    assert parse_line(" the copy kernel's bandwidth ") == (1, "the copy kernel's bandwidth")
    assert parse_line("--gpus 2 all-reduce bus bandwidth") == (2, "all-reduce bus bandwidth")
    assert parse_line("--gpus=4 x") == (4, "x")


def test_page_url_points_at_the_page_with_stored_outputs():
    assert page_url("/a/b/chapters/04_memory.ipynb") == SITE_URL + "chapters/04_memory.html"
    # a student lab's page stops its outputs at the first answer: its solution page has them all
    assert page_url("labs/reduction/reduction.ipynb") == SITE_URL + "labs/reduction/solutions/reduction.html"
    assert page_url("labs/reduction/solutions/reduction.ipynb") == SITE_URL + "labs/reduction/solutions/reduction.html"
    assert page_url(None) == SITE_URL and page_url("Untitled.ipynb") == SITE_URL


def test_skip_message_is_one_line_that_says_what_and_where():
    msg = skip_message(2, "all-reduce bus bandwidth", 1, "chapters/16_collectives.ipynb")
    assert "\n" not in msg and "needs 2 GPUs (1 here)" in msg and "all-reduce bus bandwidth" in msg
    assert msg.endswith("chapters/16_collectives.html")


def test_without_a_gpu_the_cell_prints_one_line_and_does_not_run(shell, monkeypatch, capsys):
    _gpus(monkeypatch, 0)
    result = shell.run_cell("%%gpu the copy kernel's bandwidth\nran = True\nraise RuntimeError('must not run')")
    assert result.success and "ran" not in shell.user_ns
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "the copy kernel's bandwidth" in out[0] and "chapters/04_memory.html" in out[0]


def test_with_too_few_gpus_a_multi_gpu_cell_skips(shell, monkeypatch, capsys):
    _gpus(monkeypatch, 1)
    assert shell.run_cell("%%gpu --gpus 2 scaling\nran = True").success and "ran" not in shell.user_ns
    assert "needs 2 GPUs (1 here)" in capsys.readouterr().out


def test_with_a_gpu_the_cell_runs_as_if_the_line_were_not_there(shell, monkeypatch):
    _gpus(monkeypatch, 2)
    shell.run_cell("x = 20")
    result = shell.run_cell("%%gpu --gpus 2 anything\ny = x + 1\n%time z = 3\ny * 2")
    assert result.success and shell.user_ns["y"] == 21 and shell.user_ns["z"] == 3
    assert result.result == 42  # the last expression is the cell's value, shown as Out[n]
    assert shell.run_cell("%%gpu\ny * 2;").result is None  # a trailing ";" hides it, as in any cell


def test_with_a_gpu_an_error_in_the_body_is_the_cells_error(shell, monkeypatch):
    _gpus(monkeypatch, 1)
    result = shell.run_cell("%%gpu\nraise ValueError('kernel failed')")
    assert not result.success and isinstance(result.error_in_exec, ValueError)


def test_with_a_gpu_the_source_of_what_the_cell_defines_is_known(shell, monkeypatch):
    # course.dist ships functions to its worker processes by their source
    import inspect

    _gpus(monkeypatch, 2)
    assert shell.run_cell("%%gpu --gpus 2 shipping\ndef ring(rank):\n    return rank + 1").success
    assert inspect.getsource(shell.user_ns["ring"]) == "def ring(rank):\n    return rank + 1\n"


@pytest.mark.gpu
def test_memory_cap_leaves_only_what_it_says_and_peak_memory_sees_use():
    import cupy as cp

    from course.memory_cap import PeakMemory, capped

    with capped(15 * 10**9) as free:
        assert all(14.5e9 < f <= 15.01e9 for f in free.values()), free
        assert cp.cuda.runtime.memGetInfo()[0] < 15.01e9
        with PeakMemory() as peak:
            block = cp.ones(2 * 2**30 // 4, dtype=cp.float32)  # 2 GiB
            cp.cuda.Device().synchronize()
            import time

            time.sleep(0.6)
            del block
        assert peak.used_mib >= 2048, peak.used_mib
        with pytest.raises(cp.cuda.memory.OutOfMemoryError):
            cp.empty(16 * 10**9, dtype=cp.uint8)
    assert cp.cuda.runtime.memGetInfo()[0] > 20e9  # released at exit (our GPUs have 80 GB or more)
