"""The split-K decode attention of course/decode_attention.py against float64 attention, paged
and contiguous, in Triton's interpreter (small shapes). The GPU's path is test_performance_bar."""
from __future__ import annotations

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

GPU = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") in ("", "0")
pytestmark = pytest.mark.skipif(GPU, reason="the interpreter's path")


def _case(b, t, h, kv, d, seed):
    from autograder.labs.paged_attention import _attention_inputs, _attention_ref

    inputs = _attention_inputs({"B": b, "T": t, "H": h, "KV": kv, "D": d}, np.random.default_rng(seed))
    return inputs, _attention_ref(**inputs)["out"]


# (B, T, H, KV, D): groups of 1, 2 and 4 heads; D not a power of two; lengths at a page's edges
@pytest.mark.parametrize("shape", [(3, 40, 4, 2, 8), (6, 33, 2, 1, 5), (2, 70, 4, 1, 16)])
@pytest.mark.parametrize("chunk", [16, 32, None])
def test_paged_decode_matches_float64(shape, chunk):
    from course.decode_attention import decode_attention

    inputs, ref = _case(*shape, seed=sum(shape))
    t = {k: torch.from_numpy(v) for k, v in inputs.items()}
    out = torch.zeros(ref.shape, dtype=torch.float32)
    decode_attention(t["q"], t["k_pages"], t["v_pages"], t["lengths"], out, block_table=t["block_table"],
                     chunk=chunk, block_t=16)
    # the weights enter tl.dot in float16 (a relative rounding of 2^-11 each): 1e-3 of the largest output
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-3, atol=1e-3 * np.abs(ref).max())


def test_contiguous_decode_matches_the_paged_one():
    from course.decode_attention import decode_attention

    inputs, ref = _case(3, 40, 4, 2, 8, seed=7)
    b, pages = inputs["block_table"].shape
    # the same tokens laid out sequence by sequence: (B, T, KV, D)
    k = np.zeros((b, (pages - 1) * 16, 2, 8), np.float16)
    v = np.zeros_like(k)
    for i, n in enumerate(inputs["lengths"]):
        rows = inputs["block_table"][i, :-(-int(n) // 16)]
        k[i, :n] = inputs["k_pages"][rows].reshape(-1, 2, 8)[:n]
        v[i, :n] = inputs["v_pages"][rows].reshape(-1, 2, 8)[:n]
    out = torch.zeros(ref.shape, dtype=torch.float32)
    decode_attention(torch.from_numpy(inputs["q"]), torch.from_numpy(k), torch.from_numpy(v),
                     torch.from_numpy(inputs["lengths"]), out, chunk=16, block_t=16)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-3, atol=1e-3 * np.abs(ref).max())


@pytest.mark.parametrize("name", ["q", "k", "v", "out"])
def test_a_non_unit_last_stride_is_refused(name):
    from course.decode_attention import decode_attention

    inputs, ref = _case(3, 40, 4, 2, 8, seed=7)
    t = {"q": torch.from_numpy(inputs["q"]), "k": torch.from_numpy(inputs["k_pages"]),
         "v": torch.from_numpy(inputs["v_pages"]), "out": torch.zeros(ref.shape, dtype=torch.float32)}
    t[name] = t[name].transpose(-1, -2).contiguous().transpose(-1, -2)  # same shape, last stride > 1
    with pytest.raises(ValueError, match=f"{name} must have stride 1"):
        decode_attention(t["q"], t["k"], t["v"], torch.from_numpy(inputs["lengths"]), t["out"],
                         block_table=torch.from_numpy(inputs["block_table"]), chunk=16, block_t=16)
