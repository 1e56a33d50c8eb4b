"""The FlashAttention forward of course/flash_attention.py against float64 attention. Without a
GPU, Triton's interpreter runs it on small shapes; on a GPU, at a prefill shape in bf16."""
from __future__ import annotations

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

GPU = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") in ("", "0")


def _reference(q, k, v, causal: bool) -> np.ndarray:
    q, k, v = (t.double().cpu().numpy() for t in (q, k, v))
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if causal:
        n = s.shape[-1]
        s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


@pytest.mark.skipif(GPU, reason="the interpreter's path; the GPU's is test_performance_bar")
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n", [1, 37, 70])
def test_forward_matches_float64_attention_in_the_interpreter(causal, n):
    from course.flash_attention import attention  # the root conftest set TRITON_INTERPRET

    g = torch.Generator().manual_seed(n)
    q, k, v = (torch.randn(1, 2, n, 16, generator=g) for _ in range(3))
    # blocks smaller than the sequence, one of them partial: the online softmax and the masks both work
    out = attention(q, k, v, causal=causal, block_m=16, block_n=16, num_warps=1, num_stages=1)
    np.testing.assert_allclose(out.numpy(), _reference(q, k, v, causal), rtol=1e-4, atol=1e-5)


def test_a_head_dim_tl_dot_cannot_tile_is_refused_with_a_message():
    from course.flash_attention import attention

    q = torch.zeros(1, 1, 4, 24)
    with pytest.raises(ValueError, match="power of two"):
        attention(q, q, q)
