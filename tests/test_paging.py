"""course.paging: the block allocator behind Part IV's paged KV cache."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from course.paging import BlockAllocator, OutOfBlocks, blocks_for


def test_blocks_for_is_the_ceiling():
    assert [blocks_for(t, 4) for t in (0, 1, 4, 5, 8, 9)] == [0, 1, 1, 2, 2, 3]
    with pytest.raises(ValueError):
        blocks_for(-1, 4)


def test_an_empty_sequence_takes_its_first_block_on_append():
    pool = BlockAllocator(4, 16)
    assert pool.allocate("a", 0) == [] and pool.free_blocks == 4
    assert pool.append("a") is None
    assert pool.free_blocks == 3 and pool.length("a") == 1


def test_out_of_blocks_changes_nothing():
    pool = BlockAllocator(3, 4)
    pool.allocate("a", 8)                       # two blocks
    with pytest.raises(OutOfBlocks):
        pool.allocate("b", 5)                   # needs two, one is free
    assert pool.free_blocks == 1 and "b" not in pool
    pool.allocate("c", 4)
    before = pool.blocks("a")
    with pytest.raises(OutOfBlocks):
        pool.append("a")                        # "a" is full at 8 tokens
    assert pool.blocks("a") == before and pool.length("a") == 8


def test_fork_shares_blocks_and_copies_on_write():
    pool = BlockAllocator(8, 4)
    pool.allocate("p", 6)                       # blocks 0 (full) and 1 (half)
    pool.fork("p", "q")
    assert pool.refcount(0) == 2 and pool.refcount(1) == 2
    copy = pool.append("q")                     # writes into the shared half block
    assert copy is not None and copy[0] == 1 and pool.pending_copies == [copy]
    assert pool.refcount(1) == 1 and pool.blocks("q")[-1] == copy[1]
    assert pool.append("p") is None             # block 1 is p's alone now
    assert pool.take_copies() == [copy] and pool.pending_copies == []


def test_append_at_a_block_boundary_after_fork_copies_nothing():
    pool = BlockAllocator(8, 4)
    pool.allocate("p", 4)
    pool.fork("p", "q")
    assert pool.append("q") is None and pool.refcount(0) == 2


def test_freeing_both_forks_returns_every_block():
    pool = BlockAllocator(6, 4)
    pool.allocate("p", 6)
    pool.fork("p", "q")
    pool.append("q")
    pool.free("p")
    pool.free("q")
    assert pool.free_blocks == 6


def test_table_pads_with_minus_one_and_refuses_narrow_widths():
    pool = BlockAllocator(6, 4)
    pool.allocate("a", 9)
    pool.allocate("b", 1)
    table = pool.table(["a", "b"], 4)
    assert table.dtype == np.int32
    assert table[0, :3].tolist() == pool.blocks("a") and table[0, 3] == -1
    assert table[1].tolist() == pool.blocks("b") + [-1, -1, -1]
    with pytest.raises(ValueError):
        pool.table(["a"], 2)


def test_importing_it_loads_no_torch():
    code = "import sys, course.paging; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
