"""course.llm's model builder: weights drawn straight in a small dtype on a GPU are exactly
float32's weights rounded, so every notebook's model is the same whichever way it was built."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from course import llm  # noqa: E402


def test_build_gives_the_dtype_asked_for_and_eval_mode():
    model = llm.build(llm.TINY, device="cpu", dtype=torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert not model.training
    assert torch.get_default_dtype() == torch.float32  # restored


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_gpu_weights_drawn_in_a_small_dtype_equal_float32_rounded(dtype):
    dtype = getattr(torch, dtype)
    cfg = llm.TINY.scaled(n_layers=2)
    direct = llm.build(cfg, device="cuda", dtype=dtype)
    via_fp32 = llm.build(cfg, device="cuda").to(dtype)
    for (name, a), b in zip(direct.state_dict().items(), via_fp32.state_dict().values()):
        assert a.dtype == b.dtype and torch.equal(a, b), name
    assert torch.get_default_dtype() == torch.float32
