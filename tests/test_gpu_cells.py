"""The %%gpu cell magic skips a cell without a GPU and is invisible with one; the memory cap holds."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from course import device, gpu_cells
from course.gpu_cells import (INDEX, SITE_URL, anchor, build_index, output_url, page_url, parse_line,
                              skip_message, split_source)

ROOT = Path(__file__).resolve().parents[1]


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
    msg = skip_message(2, "all-reduce bus bandwidth", 1, SITE_URL + "chapters/16_collectives.html#gpu-0123456789")
    assert "\n" not in msg and "needs 2 GPUs (1 here)" in msg and "all-reduce bus bandwidth" in msg
    assert msg.endswith("chapters/16_collectives.html#gpu-0123456789")


def gpu_cell(notebook: str, starts: str) -> str:
    """The source of the %%gpu cell of a notebook whose line starts so."""
    cells = json.loads((ROOT / notebook).read_text(encoding="utf-8"))["cells"]
    found = ["".join(c["source"]) for c in cells if "".join(c["source"]).startswith(f"%%gpu {starts}")]
    assert len(found) == 1, f"{notebook}: {len(found)} %%gpu cells start with {starts!r}"
    return found[0]


def test_the_anchor_is_the_cells_text_and_only_that():
    assert split_source("x = 1") is None and split_source("%%gpux\nx") is None
    assert split_source("%%gpu\nx = 1") == ("", "x = 1")
    line, body = split_source("%%gpu --gpus 2 the ring\nx = 1")
    assert (line, body) == ("--gpus 2 the ring", "x = 1")
    # IPython hands the magic the body with a final newline; spacing in the line does not count
    assert anchor(line, body) == anchor("--gpus 2  the ring ", body + "\n") == anchor(line, "x = 1\r\n")
    assert anchor(line, "x = 2") != anchor(line, body) != anchor("--gpus 2 the rings", body)


def test_the_index_of_stored_outputs_is_current():
    """Rewrite it with `python -m course.gpu_cells` after a %%gpu cell changes."""
    stored = json.loads(INDEX.read_text(encoding="utf-8"))
    assert stored == build_index(ROOT), f"{INDEX.name} is stale: run `python -m course.gpu_cells`"
    assert sum(page.startswith("chapters/") for page in stored.values()) > 100, stored
    assert all(page.startswith("labs/") and "/solutions/" in page for page in stored.values()
               if not page.startswith("chapters/")), "a student lab's page holds no stored output"


def test_the_index_refuses_two_cells_with_the_same_text(tmp_path):
    cell = {"cell_type": "code", "source": "%%gpu the copy\nx = 1", "metadata": {}, "outputs": []}
    (tmp_path / "chapters").mkdir()
    for name in ("01_a", "02_b"):
        (tmp_path / "chapters" / f"{name}.ipynb").write_text(json.dumps({"cells": [cell]}))
    with pytest.raises(ValueError, match="chapters/01_a and|chapters/02_b and"):
        build_index(tmp_path)


@pytest.mark.parametrize("notebook, page", [
    ("chapters/04_memory.ipynb", "chapters/04_memory.html"),
    # a student lab's page stops its outputs at the first answer: its solution page has them all
    ("labs/reduction/reduction.ipynb", "labs/reduction/solutions/reduction.html"),
    ("labs/reduction/solutions/reduction.ipynb", "labs/reduction/solutions/reduction.html"),
])
@pytest.mark.parametrize("known", [True, False], ids=["path known", "no path (Colab, nbclient)"])
def test_the_skip_line_links_to_the_page_and_the_cell(shell, monkeypatch, capsys, notebook, page, known):
    source = gpu_cell(notebook, "cudaMalloc" if "04" in notebook else "the check of exercise 3")
    _gpus(monkeypatch, 0)
    monkeypatch.setattr(gpu_cells, "_notebook_path", lambda shell: str(ROOT / notebook) if known else None)
    assert shell.run_cell(source).success
    out = capsys.readouterr().out.strip().splitlines()
    url = f"{SITE_URL}{page}#{anchor(*split_source(source))}"
    assert len(out) == 1 and out[0].endswith(f" on {url}"), out
    assert output_url(*split_source(source)) == url


def test_an_edited_cell_links_to_its_notebooks_page_or_the_site():
    source = gpu_cell("chapters/04_memory.ipynb", "cudaMalloc") + "\nprint('mine')"
    assert output_url(*split_source(source), "chapters/04_memory.ipynb") == SITE_URL + "chapters/04_memory.html"
    assert output_url(*split_source(source)) == SITE_URL


def test_without_a_gpu_the_cell_prints_one_line_and_does_not_run(shell, monkeypatch, capsys):
    _gpus(monkeypatch, 0)
    result = shell.run_cell("%%gpu the copy kernel's bandwidth\nran = True\nraise RuntimeError('must not run')")
    assert result.success and "ran" not in shell.user_ns
    out = capsys.readouterr().out.strip().splitlines()
    # a cell not on the site: the page of the notebook the front end names, without an anchor
    assert len(out) == 1 and "the copy kernel's bandwidth" in out[0] and out[0].endswith("chapters/04_memory.html")


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
