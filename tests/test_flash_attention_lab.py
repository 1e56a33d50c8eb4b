"""Lab 19's inputs catch the shortcuts its prose says they catch: the tile loop of FlashAttention,
written in NumPy with float16 probabilities as a kernel has them, passes the lab's check, and the
same loop without the maximum, without the rescaling, or with the causal mask off by one fails."""
from __future__ import annotations

import math

import numpy as np
import pytest

from autograder.labs.flash_attention import TOLERANCE, attention64, attention_inputs, cases

BLOCK = 16  # keys per tile: every simulator case but the first has several, one of them partial


def tiled(q, k, v, causal, *, use_max=True, rescale=True, diagonal=True):
    """Attention over tiles of keys for every query at once, float32 inside, float16 out."""
    q, k, v = (x.astype(np.float32) for x in (q, k, v))
    n, d = q.shape[-2:]
    rows = np.arange(n)[:, None]
    m = np.full(q.shape[:-1], -np.inf, np.float32)
    l = np.zeros(q.shape[:-1], np.float32)
    acc = np.zeros(q.shape, np.float32)
    with np.errstate(all="ignore"):
        for j0 in range(0, n, BLOCK):
            cols = np.arange(j0, min(j0 + BLOCK, n))[None, :]
            s = q @ np.swapaxes(k[..., cols[0], :], -1, -2) / np.float32(math.sqrt(d))
            if causal:
                s = np.where(rows >= cols if diagonal else rows > cols, s, -np.inf)
            m_new = np.maximum(m, s.max(-1)) if use_max else np.zeros_like(m)
            p = np.exp(s - m_new[..., None]).astype(np.float16).astype(np.float32)
            alpha = np.exp(m - m_new) if rescale else np.ones_like(m)
            l = l * alpha + p.sum(-1)
            acc = acc * alpha[..., None] + p @ v[..., cols[0], :]
            m = m_new
        return (acc / l[..., None]).astype(np.float16)


def passes(got, want) -> bool:
    rtol, atol = TOLERANCE["float16"]
    got = got.astype(np.float64)
    return bool(np.all(np.abs(got - want) <= atol * np.abs(want).max() + rtol * np.abs(want)))


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(19)
    out = []
    for p in cases(True):
        inputs = attention_inputs(p, rng)
        for causal in (False, True):
            want = attention64(*(inputs[x].astype(np.float64) for x in "qkv"), causal)
            out.append((p, causal, inputs, want))
    return out


def test_the_tile_loop_passes_every_case(data):
    for p, causal, x, want in data:
        assert passes(tiled(x["q"], x["k"], x["v"], causal), want), (p, causal)


@pytest.mark.parametrize("shortcut", [{"use_max": False}, {"rescale": False}, {"diagonal": False}])
def test_each_shortcut_fails_a_case(data, shortcut):
    failed = [(p, causal) for p, causal, x, want in data
              if (causal or "diagonal" not in shortcut) and not passes(tiled(x["q"], x["k"], x["v"], causal, **shortcut), want)]
    assert failed, f"no case catches {shortcut}"
