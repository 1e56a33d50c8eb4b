"""The chapter *Custom operators for PyTorch* (course/custom_ops.py): the C++ extensions build and pass
opcheck on CPU tensors, the CUDA sources compile with nvcc, the Triton custom_op traces under
torch.compile and differentiates correctly; on a GPU, the same on CUDA tensors."""
from __future__ import annotations


import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from course import custom_ops as ops  # noqa: E402

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}


def _fake_like(x, *_):
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


@pytest.fixture(scope="module")
def jit_op(tmp_path_factory):
    ops.build_jit(tmp_path_factory.mktemp("jit"))
    if not torch._C._dispatch_has_kernel_for_dispatch_key("course_jit::swiglu", "Meta"):
        torch.library.register_fake("course_jit::swiglu")(_fake_like)
    return torch.ops.course_jit.swiglu


@pytest.fixture(scope="module")
def aot_op(tmp_path_factory):
    folder = tmp_path_factory.mktemp("aot")
    ops.write_aot_project(folder)
    status, log = ops.build_aot(folder)
    assert status == 0, log
    ops.load_aot(folder)
    if not torch._C._dispatch_has_kernel_for_dispatch_key("course_aot::softmax", "Meta"):
        torch.library.register_fake("course_aot::softmax")(_fake_like)
    return torch.ops.course_aot.softmax


def _rel_err(got, want):
    """Largest difference relative to the largest value: one rounding of the type, at most."""
    return ((got.double() - want.double()).abs().max() / want.double().abs().max()).item()


def _passed(result):
    return {k: v for k, v in result.items() if v != "SUCCESS"} == {}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ops.DTYPES)
def test_jit_swiglu_matches_pytorch_and_passes_opcheck(jit_op, device, dtype):
    gen = torch.Generator().manual_seed(1)
    a, g = (torch.randn(37, 129, generator=gen).to(device, dtype) for _ in range(2))
    got = jit_op(a, g)
    assert got.device.type == device and got.dtype == dtype and got.shape == a.shape
    assert _rel_err(got, ops.swiglu_reference(a, g)) <= TOL[dtype]
    assert _passed(torch.library.opcheck(jit_op.default, (a, g)))
    with pytest.raises(RuntimeError, match="same shape"):
        jit_op(a, g[:-1])


@pytest.mark.parametrize("device", DEVICES)
def test_aot_softmax_matches_pytorch_and_passes_opcheck(aot_op, device):
    gen = torch.Generator().manual_seed(2)
    for shape in [(4, 1), (33, 1000), (2, 3, 4097)]:
        x = 5 * torch.randn(shape, generator=gen).to(device)
        assert (aot_op(x) - torch.softmax(x, dim=-1)).abs().max() < 2e-5
    assert _passed(torch.library.opcheck(aot_op.default, (torch.randn(6, 50, device=device),)))


@pytest.mark.skipif(ops.cuda_build_possible(), reason="checks the CPU-only build")
def test_cpu_build_registers_no_cuda_kernel(jit_op, aot_op):
    assert torch._C._dispatch_has_kernel_for_dispatch_key("course_jit::swiglu", "CPU")
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("course_jit::swiglu", "CUDA")
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("course_aot::softmax", "CUDA")


@pytest.mark.skipif(ops.find_nvcc() is None, reason="no CUDA toolkit")
@pytest.mark.parametrize("source,name,kernels", [(ops.SWIGLU_CU, "swiglu", 3), (ops.SOFTMAX_CU, "softmax", 1)])
def test_cuda_sources_compile_for_sm80(tmp_path, source, name, kernels):
    status, lines = ops.nvcc_compile(source, name, tmp_path, "sm_80")
    assert status == 0, "\n".join(lines)
    assert len(lines) == kernels and all("registers" in line for line in lines)
    assert (tmp_path / f"{name}_sm_80.o").stat().st_size > 0


def test_nvcc_reports_a_broken_source(tmp_path):
    if ops.find_nvcc() is None:
        pytest.skip("no CUDA toolkit")
    status, lines = ops.nvcc_compile(ops.SOFTMAX_CU.replace("fmaxf(m, row[c])", "fmaxf(m, row[c]"),
                                      "broken", tmp_path)
    assert status != 0 and any("error" in line for line in lines)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ops.DTYPES)
def test_triton_custom_op_opcheck_and_gradients(device, dtype):
    gen = torch.Generator().manual_seed(3)
    a, g, dout = (torch.randn(19, 257, generator=gen).to(device, dtype) for _ in range(3))
    assert _passed(torch.library.opcheck(ops.swiglu, (a, g)))
    assert _passed(torch.library.opcheck(ops.swiglu, (a.clone().requires_grad_(), g.clone().requires_grad_())))
    a.requires_grad_(), g.requires_grad_()
    out = ops.swiglu(a, g)
    assert _rel_err(out, ops.swiglu_reference(a, g)) <= TOL[dtype]
    out.backward(dout)
    a64, g64 = a.detach().double().requires_grad_(), g.detach().double().requires_grad_()
    (torch.nn.functional.silu(a64) * g64).backward(dout.double())
    for got, want in ((a.grad, a64.grad), (g.grad, g64.grad)):
        assert ((got.double() - want).abs().max() / want.abs().max()).item() < TOL[dtype]


@pytest.mark.parametrize("shape", [(0,), (1,), (3, 1025), (2, 3, 4, 5)])
def test_triton_kernel_pair_any_shape(shape):
    """The kernels themselves (Triton's interpreter on a CPU): any shape, non-contiguous inputs."""
    import os

    if not (torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1"):
        pytest.skip("the Triton kernels need a GPU or TRITON_INTERPRET=1")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    a, g, dout = (torch.randn(shape[::-1], device=device).permute(*range(len(shape) - 1, -1, -1)) for _ in range(3))  # transposed views
    out = ops.swiglu_forward(a, g)
    assert out.shape == a.shape and torch.allclose(out, ops.swiglu_reference(a, g), atol=1e-6)
    da, dg = ops.swiglu_backward(a, g, dout)
    want_da, want_dg = ops._swiglu_backward_reference(a, g, dout)
    assert torch.allclose(da, want_da, atol=1e-5) and torch.allclose(dg, want_dg, atol=1e-6)


def test_wrong_inputs_are_refused():
    with pytest.raises(ValueError):
        ops.swiglu(torch.ones(3), torch.ones(4))
    with pytest.raises(TypeError):
        ops.swiglu(torch.ones(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64))


@pytest.mark.parametrize("device", DEVICES)
def test_compiled_model_matches_eager(device):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = ops.SwiGLUMLP(64, 160, 10).to(device)
    x = torch.randn(16, 64, device=device)
    labels = torch.arange(16, device=device) % 10
    backend = "inductor" if device == "cuda" else "aot_eager"
    compiled = torch.compile(model.using(gate=ops.swiglu), fullgraph=True, backend=backend)
    grads = []
    for run in (model, compiled):
        model.zero_grad()
        out = run(x)
        torch.nn.functional.nll_loss(out.log(), labels).backward()
        grads.append(([p.grad.clone() for p in model.parameters()], out.detach()))
    (g_eager, y_eager), (g_comp, y_comp) = grads
    assert torch.allclose(y_comp, y_eager, atol=1e-5)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(g_comp, g_eager))


def test_without_fake_impl_fullgraph_fails():
    @torch.library.custom_op("course_test::swiglu_no_fake", mutates_args=())
    def no_fake(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        return ops.swiglu_reference(a, g)

    torch._dynamo.reset()
    model = ops.SwiGLUMLP(8, 16, 4).using(gate=no_fake)
    with pytest.raises(Exception, match="no fake impl"):
        torch.compile(model, fullgraph=True, backend="aot_eager")(torch.randn(2, 8))
