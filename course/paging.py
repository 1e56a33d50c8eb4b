"""A paged KV cache's bookkeeping: blocks of tokens handed out from one pool.

The chapter *TensorRT-LLM's ideas* and Lab 16 (paged_attention) use it. A model's keys and
values live in a pool of fixed-size blocks (pages) of ``block_size`` tokens each; a sequence
owns a list of blocks, and its block table row names them in order. Token ``t`` of a sequence
sits in block ``table[t // block_size]`` at offset ``t % block_size``.

Why blocks: a sequence reserves memory one block at a time as it grows, so no request holds
room for the longest answer it might give (the padding a dense ``(batch, max_seq)`` cache
wastes), and the only waste is the unused tail of each sequence's last block. Sequences that
share a prefix (beam search, parallel samples of one prompt) share its blocks: ``fork`` counts
references instead of copying, and a block is copied only when one of its sharers writes to it
(copy-on-write).

This module keeps the table on the host, in NumPy only; the kernels that read and write the
pages through the table are the lab's. Nothing here imports torch or touches a GPU.
"""
from __future__ import annotations

from typing import Hashable, Iterable

import numpy as np


def blocks_for(tokens: int, block_size: int) -> int:
    """Blocks needed to hold ``tokens`` tokens: the ceiling of tokens / block_size."""
    if tokens < 0 or block_size < 1:
        raise ValueError(f"need tokens >= 0 and block_size >= 1, got {tokens}, {block_size}")
    return -(-tokens // block_size)


class OutOfBlocks(Exception):
    """The pool has no free block left. A server answers by preempting a sequence (freeing
    its blocks, to recompute or swap them in later) or by admitting no new request."""


class BlockAllocator:
    """Hands out blocks of ``block_size`` tokens from a pool of ``num_blocks``.

    Each block has a reference count: the number of sequences whose table names it. A block
    returns to the free list when its count drops to zero. Free blocks are taken from a stack,
    so a block just freed is the next one handed out (it is likely still in the L2 cache), and
    after a few allocations and frees a sequence's blocks lie scattered over the pool: only the
    table knows where.
    """

    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"need num_blocks >= 1 and block_size >= 1, got {num_blocks}, {block_size}")
        self.num_blocks = int(num_blocks)
        self.block_size = int(block_size)
        self._free = list(range(self.num_blocks - 1, -1, -1))  # pop() hands out 0, 1, 2, ... first
        self._refs = np.zeros(self.num_blocks, dtype=np.int64)
        self._blocks: dict[Hashable, list[int]] = {}
        self._lengths: dict[Hashable, int] = {}
        # (src_block, dst_block) copies that copy-on-write asked for and nobody has made yet.
        self.pending_copies: list[tuple[int, int]] = []

    # ------------------------------------------------------------------ queries
    @property
    def free_blocks(self) -> int:
        """Blocks on the free list (reference count zero)."""
        return len(self._free)

    def length(self, seq_id: Hashable) -> int:
        """Tokens the sequence holds."""
        return self._lengths[seq_id]

    def blocks(self, seq_id: Hashable) -> list[int]:
        """The sequence's blocks, in token order (a copy)."""
        return list(self._blocks[seq_id])

    def refcount(self, block: int) -> int:
        """How many sequences name this block."""
        return int(self._refs[block])

    def slot(self, seq_id: Hashable, position: int) -> tuple[int, int]:
        """(block, offset) of token ``position`` of the sequence."""
        if not 0 <= position < self._lengths[seq_id]:
            raise IndexError(f"position {position} outside sequence {seq_id!r} of length {self._lengths[seq_id]}")
        return self._blocks[seq_id][position // self.block_size], position % self.block_size

    def __contains__(self, seq_id: Hashable) -> bool:
        return seq_id in self._blocks

    def table(self, seq_ids: Iterable[Hashable], width: int) -> np.ndarray:
        """Block table of the given sequences: int32 (len(seq_ids), width), row i naming
        sequence i's blocks in order and -1 after them. A kernel gets this array (and the
        lengths): -1 marks entries it must never follow."""
        seq_ids = list(seq_ids)
        out = np.full((len(seq_ids), width), -1, dtype=np.int32)
        for i, s in enumerate(seq_ids):
            row = self._blocks[s]
            if len(row) > width:
                raise ValueError(f"sequence {s!r} has {len(row)} blocks, more than the table's width {width}")
            out[i, :len(row)] = row
        return out

    # ------------------------------------------------------------------ changes
    def _take(self, n: int) -> list[int]:
        if n > len(self._free):
            raise OutOfBlocks(f"need {n} blocks, {len(self._free)} free of {self.num_blocks}")
        taken = [self._free.pop() for _ in range(n)]
        self._refs[taken] = 1
        return taken

    def _release(self, block: int) -> None:
        self._refs[block] -= 1
        if self._refs[block] == 0:
            self._free.append(block)

    def allocate(self, seq_id: Hashable, tokens: int) -> list[int]:
        """A new sequence of ``tokens`` tokens (its prompt): takes blocks_for(tokens) blocks,
        all or none (raises OutOfBlocks and changes nothing when too few are free)."""
        if seq_id in self._blocks:
            raise ValueError(f"sequence {seq_id!r} already exists")
        taken = self._take(blocks_for(tokens, self.block_size))
        self._blocks[seq_id] = taken
        self._lengths[seq_id] = int(tokens)
        return list(taken)

    def append(self, seq_id: Hashable) -> tuple[int, int] | None:
        """Room for one more token (the one a decode step is about to write).

        Takes a new block when the last one is full (or the sequence has none). When the last
        block is shared with another sequence (after ``fork``) and not full, the new token would
        overwrite a slot the other sequence may use later: the sequence gets a private copy
        first. Then the copy (src_block, dst_block) is returned and also added to
        ``pending_copies``; the caller must copy the pages on the GPU before writing the token.
        Returns None when no copy is needed. Raises OutOfBlocks (changing nothing) when a
        block is needed and none is free.
        """
        blocks = self._blocks[seq_id]
        n = self._lengths[seq_id]
        copy = None
        if n % self.block_size == 0:            # no room in the last block (or no block yet)
            blocks.extend(self._take(1))
        elif self._refs[blocks[-1]] > 1:        # room, but the block is shared: copy on write
            (fresh,) = self._take(1)
            src = blocks[-1]
            self._release(src)
            blocks[-1] = fresh
            copy = (src, fresh)
            self.pending_copies.append(copy)
        self._lengths[seq_id] = n + 1
        return copy

    def take_copies(self) -> list[tuple[int, int]]:
        """The pending copy-on-write copies, emptied: what one ``copy_blocks`` launch does."""
        copies, self.pending_copies = self.pending_copies, []
        return copies

    def fork(self, src: Hashable, dst: Hashable) -> None:
        """A new sequence ``dst`` that starts as a copy of ``src`` (a second sample of the
        same prompt): it names the same blocks, whose reference counts go up by one; no page
        is copied until one of them appends into a shared block."""
        if dst in self._blocks:
            raise ValueError(f"sequence {dst!r} already exists")
        blocks = self._blocks[src]
        self._refs[blocks] += 1
        self._blocks[dst] = list(blocks)
        self._lengths[dst] = self._lengths[src]

    def free(self, seq_id: Hashable) -> None:
        """The sequence is done: each of its blocks loses a reference, and blocks no other
        sequence names go back to the free list."""
        for block in reversed(self._blocks.pop(seq_id)):
            self._release(block)
        del self._lengths[seq_id]
