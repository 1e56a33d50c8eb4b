"""Custom PyTorch operators, built three ways (chapter *Custom operators for PyTorch*).

1. ``course_jit::swiglu``: the fused SwiGLU gate ``silu(a) * g`` in CUDA C, compiled just in time
   with ``torch.utils.cpp_extension.load_inline`` and registered with ``TORCH_LIBRARY``.
2. ``course_aot::softmax``: a row softmax in CUDA C (one block per row, reductions in shared
   memory, as in chapter 9), built ahead of time as a setuptools ``CUDAExtension``.
3. ``course::swiglu``: the same gate as a pair of Triton kernels (forward; backward giving da and
   dg) wrapped by ``torch.library.custom_op``, with ``register_fake`` and ``register_autograd``.

Each C++ operator has a CPU kernel under the same schema, so it builds and runs on a machine
without a GPU; its CUDA kernel is registered only when the extension is built with CUDA. The CUDA
sources include no PyTorch header, so ``nvcc -c`` compiles them on any machine with the toolkit.
"""
from __future__ import annotations

import inspect
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

import torch

# ---------------------------------------------------------------------------------------------
# Way 1: the SwiGLU gate in CUDA C, for load_inline

SWIGLU_CU = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
    return __float2bfloat16(v);
}

// One thread per element, as chapter 1's vector add; the arithmetic is done in float32.
template <typename T>
__global__ void swiglu_kernel(const T* a, const T* g, T* out, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float x = to_float(a[i]);
        out[i] = from_float<T>(x / (1.0f + __expf(-x)) * to_float(g[i]));
    }
}

// Called from C++: dtype 0 = float32, 1 = float16, 2 = bfloat16. Returns a cudaError_t.
extern "C" int course_swiglu_launch(const void* a, const void* g, void* out, long long n,
                                    int dtype, void* stream) {
    if (n == 0) return 0;
    const int threads = 256;
    const unsigned blocks = (unsigned)((n + threads - 1) / threads);
    cudaStream_t s = (cudaStream_t)stream;
    if (dtype == 0)
        swiglu_kernel<<<blocks, threads, 0, s>>>((const float*)a, (const float*)g, (float*)out, n);
    else if (dtype == 1)
        swiglu_kernel<<<blocks, threads, 0, s>>>((const __half*)a, (const __half*)g, (__half*)out, n);
    else
        swiglu_kernel<<<blocks, threads, 0, s>>>((const __nv_bfloat16*)a, (const __nv_bfloat16*)g,
                                                 (__nv_bfloat16*)out, n);
    return (int)cudaGetLastError();
}
"""

# The C++ side: the schema, a CPU kernel, and (built with CUDA) the CUDA kernel's registration.
SWIGLU_CPP = r"""
#include <cmath>
#include <torch/library.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#ifdef COURSE_WITH_CUDA
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
extern "C" int course_swiglu_launch(const void*, const void*, void*, long long, int, void*);
#endif

static void check_inputs(const at::Tensor& a, const at::Tensor& g) {
    TORCH_CHECK(a.sizes() == g.sizes(), "swiglu: a and g must have the same shape");
    TORCH_CHECK(a.scalar_type() == g.scalar_type(), "swiglu: a and g must have the same dtype");
    TORCH_CHECK(a.device() == g.device(), "swiglu: a and g must be on the same device");
}

at::Tensor swiglu_cpu(const at::Tensor& a, const at::Tensor& g) {
    check_inputs(a, g);
    // float32 copies make one loop serve every dtype; the result is rounded back at the end.
    at::Tensor af = a.to(at::kFloat).contiguous(), gf = g.to(at::kFloat).contiguous();
    at::Tensor out = at::empty(af.sizes(), af.options());
    const float *pa = af.data_ptr<float>(), *pg = gf.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < af.numel(); ++i) po[i] = pa[i] / (1.0f + std::exp(-pa[i])) * pg[i];
    return out.to(a.scalar_type());
}

#ifdef COURSE_WITH_CUDA
at::Tensor swiglu_cuda(const at::Tensor& a, const at::Tensor& g) {
    check_inputs(a, g);
    const auto type = a.scalar_type();
    TORCH_CHECK(type == at::kFloat || type == at::kHalf || type == at::kBFloat16,
                "swiglu: float32, float16 or bfloat16 only");
    c10::cuda::CUDAGuard guard(a.device());  // launch on the tensors' GPU
    at::Tensor ac = a.contiguous(), gc = g.contiguous();
    at::Tensor out = at::empty(ac.sizes(), ac.options());
    int code = course_swiglu_launch(ac.data_ptr(), gc.data_ptr(), out.data_ptr(), ac.numel(),
                                    type == at::kFloat ? 0 : type == at::kHalf ? 1 : 2,
                                    c10::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(code == 0, "swiglu: the CUDA launch failed with error ", code);
    return out;
}
#endif

TORCH_LIBRARY(course_jit, m) {
    m.def("swiglu(Tensor a, Tensor g) -> Tensor");
}
TORCH_LIBRARY_IMPL(course_jit, CPU, m) {
    m.impl("swiglu", &swiglu_cpu);
}
#ifdef COURSE_WITH_CUDA
TORCH_LIBRARY_IMPL(course_jit, CUDA, m) {
    m.impl("swiglu", &swiglu_cuda);
}
#endif
"""

# ---------------------------------------------------------------------------------------------
# Way 2: a row softmax in CUDA C, for a setuptools CUDAExtension

SOFTMAX_CU = r"""
#include <cuda_runtime.h>

// One block of 256 threads per row: a strided pass for the maximum, a tree reduction in shared
// memory, the same for the sum of exponentials, then a pass that writes exp(x - max) / sum.
__global__ void __launch_bounds__(256) softmax_rows(const float* x, float* out, int cols) {
    __shared__ float red[256];
    const float* row = x + (long long)blockIdx.x * cols;
    float* out_row = out + (long long)blockIdx.x * cols;
    const int t = threadIdx.x;

    float m = -INFINITY;
    for (int c = t; c < cols; c += 256) m = fmaxf(m, row[c]);
    red[t] = m;
    __syncthreads();
    for (int half = 128; half > 0; half >>= 1) {
        if (t < half) red[t] = fmaxf(red[t], red[t + half]);
        __syncthreads();
    }
    m = red[0];
    __syncthreads();  // everyone has read the maximum before red is reused

    float s = 0.0f;
    for (int c = t; c < cols; c += 256) s += __expf(row[c] - m);
    red[t] = s;
    __syncthreads();
    for (int half = 128; half > 0; half >>= 1) {
        if (t < half) red[t] += red[t + half];
        __syncthreads();
    }
    const float inv = 1.0f / red[0];
    for (int c = t; c < cols; c += 256) out_row[c] = __expf(row[c] - m) * inv;
}

extern "C" int course_softmax_launch(const float* x, float* out, long long rows, int cols,
                                     void* stream) {
    if (rows == 0 || cols == 0) return 0;
    softmax_rows<<<(unsigned)rows, 256, 0, (cudaStream_t)stream>>>(x, out, cols);
    return (int)cudaGetLastError();
}
"""

SOFTMAX_CPP = r"""
#include <cmath>
#include <algorithm>
#include <torch/library.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#ifdef COURSE_WITH_CUDA
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
extern "C" int course_softmax_launch(const float*, float*, long long, int, void*);
#endif

static void check_input(const at::Tensor& x) {
    TORCH_CHECK(x.dim() >= 1, "softmax: x needs at least one dimension");
    TORCH_CHECK(x.scalar_type() == at::kFloat, "softmax: float32 only");
}

// A softmax along the last dimension, one row at a time.
at::Tensor softmax_cpu(const at::Tensor& x) {
    check_input(x);
    at::Tensor xc = x.contiguous();
    at::Tensor out = at::empty(xc.sizes(), xc.options());
    const int64_t cols = xc.size(-1), rows = cols ? xc.numel() / cols : 0;
    const float* px = xc.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = px + r * cols;
        float m = -INFINITY, s = 0.0f;
        for (int64_t c = 0; c < cols; ++c) m = std::max(m, row[c]);
        for (int64_t c = 0; c < cols; ++c) s += std::exp(row[c] - m);
        for (int64_t c = 0; c < cols; ++c) po[r * cols + c] = std::exp(row[c] - m) / s;
    }
    return out;
}

#ifdef COURSE_WITH_CUDA
at::Tensor softmax_cuda(const at::Tensor& x) {
    check_input(x);
    c10::cuda::CUDAGuard guard(x.device());
    at::Tensor xc = x.contiguous();
    at::Tensor out = at::empty(xc.sizes(), xc.options());
    const int64_t cols = xc.size(-1), rows = cols ? xc.numel() / cols : 0;
    int code = course_softmax_launch(xc.data_ptr<float>(), out.data_ptr<float>(), rows, (int)cols,
                                     c10::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(code == 0, "softmax: the CUDA launch failed with error ", code);
    return out;
}
#endif

TORCH_LIBRARY(course_aot, m) {
    m.def("softmax(Tensor x) -> Tensor");
}
TORCH_LIBRARY_IMPL(course_aot, CPU, m) {
    m.impl("softmax", &softmax_cpu);
}
#ifdef COURSE_WITH_CUDA
TORCH_LIBRARY_IMPL(course_aot, CUDA, m) {
    m.impl("softmax", &softmax_cuda);
}
#endif
"""

# setup.py of the ahead-of-time extension. On a machine whose PyTorch has CUDA it builds a
# CUDAExtension from both files; elsewhere a CppExtension from the C++ file alone.
SETUP_PY = '''\
from setuptools import setup
import torch
from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension

if torch.version.cuda is not None and torch.cuda.is_available():
    ext = CUDAExtension("course_softmax", ["softmax.cpp", "softmax_kernel.cu"],
                        extra_compile_args={"cxx": ["-O2", "-DCOURSE_WITH_CUDA"], "nvcc": ["-O3"]})
else:
    ext = CppExtension("course_softmax", ["softmax.cpp"], extra_compile_args=["-O2"])

setup(name="course_softmax", ext_modules=[ext],
      cmdclass={"build_ext": BuildExtension.with_options(no_python_abi_suffix=True)})
'''

# A Python extension module needs an init function even when it defines no Python functions:
# importing it runs the TORCH_LIBRARY blocks, which register the operator.
PYINIT_CPP = r"""
#include <Python.h>
static struct PyModuleDef course_softmax_module = {PyModuleDef_HEAD_INIT, "course_softmax", nullptr, -1, nullptr};
PyMODINIT_FUNC PyInit_course_softmax(void) { return PyModule_Create(&course_softmax_module); }
"""


def cuda_build_possible() -> bool:
    """True when this PyTorch was built with CUDA and sees a GPU: then the extensions get CUDA kernels."""
    return torch.version.cuda is not None and torch.cuda.is_available()


def build_folder(name: str) -> Path:
    """A fresh folder for a build, under the system's temporary folder (never printed)."""
    return Path(tempfile.mkdtemp(prefix=f"course_{name}_"))


def ninja_available() -> bool:
    from torch.utils.cpp_extension import is_ninja_available

    return is_ninja_available()


def build_jit(folder: Path | None = None, with_cuda: bool | None = None) -> None:
    """Way 1: compile SWIGLU_CPP (and SWIGLU_CU where CUDA is possible) with load_inline and load it,
    which registers ``torch.ops.course_jit.swiglu``. Quiet: a failure raises with the compiler's log."""
    from torch.utils.cpp_extension import load_inline

    with_cuda = cuda_build_possible() if with_cuda is None else with_cuda
    folder = build_folder("jit") if folder is None else Path(folder)
    kwargs = {}
    if "no_implicit_headers" in inspect.signature(load_inline).parameters:
        kwargs["no_implicit_headers"] = True  # our sources include what they use: a faster build
    if not ninja_available():  # load_inline needs ninja: build the same sources with setuptools instead
        _build_with_setuptools(folder, with_cuda)
        return
    load_inline(name="course_swiglu_jit", cpp_sources=[SWIGLU_CPP],
                cuda_sources=[SWIGLU_CU] if with_cuda else None,
                extra_cflags=["-O2"] + (["-DCOURSE_WITH_CUDA"] if with_cuda else []),
                extra_cuda_cflags=["-O3"], with_cuda=with_cuda, is_python_module=False,
                build_directory=str(folder), verbose=False, **kwargs)


def _build_with_setuptools(folder: Path, with_cuda: bool) -> None:
    """build_jit's fallback where ninja is missing: the same sources, compiled by setuptools."""
    from .cuda_tools import run

    files = {"swiglu.cpp": SWIGLU_CPP} | ({"swiglu_kernel.cu": SWIGLU_CU} if with_cuda else {})
    for name, text in files.items():
        (folder / name).write_text(text)
    kind = "CUDAExtension" if with_cuda else "CppExtension"
    flags = '{"cxx": ["-O2", "-DCOURSE_WITH_CUDA"], "nvcc": ["-O3"]}' if with_cuda else '["-O2"]'
    (folder / "setup.py").write_text(
        "from setuptools import setup\n"
        f"from torch.utils.cpp_extension import BuildExtension, {kind}\n"
        f"setup(name='course_swiglu_jit', ext_modules=[{kind}('course_swiglu_jit', {sorted(files)!r}, "
        f"extra_compile_args={flags})],\n"
        "      cmdclass={'build_ext': BuildExtension.with_options(use_ninja=False, no_python_abi_suffix=True)})\n")
    status, log = run(BUILD_COMMAND, timeout=600, cwd=str(folder))
    if status != 0:
        raise RuntimeError("building course_swiglu_jit failed:\n" + log[-4000:])
    torch.ops.load_library(str(next(folder.glob("course_swiglu_jit*.so"))))


def write_aot_project(folder: Path) -> list[str]:
    """Way 2: write setup.py and the sources into ``folder``; return the file names written."""
    folder = Path(folder)
    files = {"setup.py": SETUP_PY, "softmax.cpp": SOFTMAX_CPP + PYINIT_CPP, "softmax_kernel.cu": SOFTMAX_CU}
    for name, text in files.items():
        (folder / name).write_text(text)
    return sorted(files)


BUILD_COMMAND = [sys.executable, "setup.py", "build_ext", "--inplace"]


def build_aot(folder: Path, timeout: float = 600) -> tuple[int | None, str]:
    """Run ``python setup.py build_ext --inplace`` in ``folder``; return (status, cleaned log)."""
    from .cuda_tools import clean, run

    status, log = run(BUILD_COMMAND, timeout=timeout, cwd=str(folder))
    return status, clean(log)


def load_aot(folder: Path) -> None:
    """Import the built module from ``folder``: its TORCH_LIBRARY block registers course_aot::softmax."""
    import importlib

    folder = str(folder)
    sys.path.insert(0, folder)
    try:
        importlib.import_module("course_softmax")
    finally:
        sys.path.remove(folder)


def nvcc_compile(source: str, name: str, folder: Path, arch: str = "sm_80") -> tuple[int | None, list[str]]:
    """Compile CUDA C ``source`` to an object file with ``nvcc -c`` (no GPU needed, only the CUDA
    toolkit). Return (status, lines): one line per kernel with ptxas's registers and shared memory,
    or the compiler's errors; status None when nvcc is missing or timed out."""
    from .cuda_tools import clean, find, run

    nvcc = find("nvcc")
    if nvcc is None:
        return None, ["nvcc is not installed here (it comes with the CUDA toolkit): nothing compiled"]
    src, obj = Path(folder) / f"{name}.cu", Path(folder) / f"{name}_{arch}.o"
    src.write_text(source)
    status, log = run([nvcc, "-c", f"-arch={arch}", "-O3", "--resource-usage", "-Xcompiler", "-fPIC",
                       str(src), "-o", str(obj)], timeout=300)
    if status != 0:
        return status, clean(log).splitlines()
    lines, kernel = [], None
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m:
            kernel = demangle(m[1])
        m = re.search(r"Used (\d+) registers.*?(?:(\d+) bytes smem|$)", line)
        if m and kernel:
            lines.append(f"{kernel}: {m[1]} registers, {m[2] or 0} bytes of shared memory")
            kernel = None
    return status, lines


def find_nvcc() -> str | None:
    from .cuda_tools import find

    return find("nvcc")


def demangle(name: str) -> str:
    """A C++ symbol as written in the source (c++filt), without its argument list."""
    from .cuda_tools import run

    status, out = run(["c++filt", name], timeout=30) if shutil.which("c++filt") else (1, name)
    out = out.strip() if status == 0 else name
    return out.split("(")[0].removeprefix("void ")


# ---------------------------------------------------------------------------------------------
# Way 3: the SwiGLU gate in Triton, as a torch.library.custom_op

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

BLOCK = 1024


@triton.jit
def swiglu_fwd_kernel(a_ptr, g_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask).to(tl.float32)
    g = tl.load(g_ptr + offs, mask=mask).to(tl.float32)
    out = a * tl.sigmoid(a) * g
    tl.store(out_ptr + offs, out.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def swiglu_bwd_kernel(a_ptr, g_ptr, dout_ptr, da_ptr, dg_ptr, n, BLOCK: tl.constexpr):
    # out = silu(a) g, silu(a) = a s, s = sigmoid(a):  dg = dout silu(a),
    # da = dout g silu'(a) with silu'(a) = s (1 + a (1 - s)).
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask).to(tl.float32)
    g = tl.load(g_ptr + offs, mask=mask).to(tl.float32)
    dout = tl.load(dout_ptr + offs, mask=mask).to(tl.float32)
    s = tl.sigmoid(a)
    tl.store(dg_ptr + offs, (dout * a * s).to(dg_ptr.dtype.element_ty), mask=mask)
    tl.store(da_ptr + offs, (dout * g * s * (1 + a * (1 - s))).to(da_ptr.dtype.element_ty), mask=mask)


DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def triton_runs_here(t: torch.Tensor) -> bool:
    """Triton kernels run on CUDA tensors, and on CPU tensors in Triton's interpreter (TRITON_INTERPRET=1)."""
    return t.is_cuda or os.environ.get("TRITON_INTERPRET") == "1"


def _check(*tensors: torch.Tensor) -> None:
    first = tensors[0]
    for t in tensors:
        if t.shape != first.shape or t.dtype != first.dtype or t.device != first.device:
            raise ValueError("swiglu: every tensor must have the same shape, dtype and device")
    if first.dtype not in DTYPES:
        raise TypeError(f"swiglu: {first.dtype} is not supported (float32, float16 or bfloat16)")


def swiglu_forward(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """``silu(a) * g`` by the Triton forward kernel: a new contiguous tensor of a's shape and dtype."""
    _check(a, g)
    a, g = a.contiguous(), g.contiguous()
    out = torch.empty_like(a)
    n = a.numel()
    if n:
        swiglu_fwd_kernel[(triton.cdiv(n, BLOCK),)](a, g, out, n, BLOCK=BLOCK)
    return out


def swiglu_backward(a: torch.Tensor, g: torch.Tensor, dout: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(da, dg) of ``silu(a) * g`` for the upstream gradient ``dout``, by the Triton backward kernel."""
    _check(a, g, dout)
    a, g, dout = a.contiguous(), g.contiguous(), dout.contiguous()
    da, dg = torch.empty_like(a), torch.empty_like(a)
    n = a.numel()
    if n:
        swiglu_bwd_kernel[(triton.cdiv(n, BLOCK),)](a, g, dout, da, dg, n, BLOCK=BLOCK)
    return da, dg


def swiglu_reference(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Eager PyTorch: two kernels (silu, then the product), computed in float32 and rounded once."""
    return (torch.nn.functional.silu(a.float()) * g.float()).to(a.dtype)


def swiglu_eager(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """The gate as a model writes it in PyTorch: two kernels in the tensors' own dtype."""
    return torch.nn.functional.silu(a) * g


def _swiglu_backward_reference(a, g, dout):
    a32, g32, d32 = a.float(), g.float(), dout.float()
    s = torch.sigmoid(a32)
    return (d32 * g32 * s * (1 + a32 * (1 - s))).to(a.dtype), (d32 * a32 * s).to(a.dtype)


@torch.library.custom_op("course::swiglu", mutates_args=())
def swiglu(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """The fused gate ``silu(a) * g`` as an operator PyTorch knows: torch.ops.course.swiglu."""
    if triton_runs_here(a):
        return swiglu_forward(a, g)
    _check(a, g)
    return swiglu_reference(a, g).contiguous()  # a CPU without Triton's interpreter


@swiglu.register_fake
def _(a, g):
    # What the output looks like, computed from the inputs' metadata alone: no data is read.
    _check(a, g)
    return torch.empty(a.shape, dtype=a.dtype, device=a.device)


@torch.library.custom_op("course::swiglu_backward", mutates_args=())
def swiglu_grad(a: torch.Tensor, g: torch.Tensor, dout: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(da, dg): the backward pass as an operator of its own, so torch.compile can trace it too."""
    if triton_runs_here(a):
        return swiglu_backward(a, g, dout)
    _check(a, g, dout)
    da, dg = _swiglu_backward_reference(a, g, dout)
    return da.contiguous(), dg.contiguous()


@swiglu_grad.register_fake
def _(a, g, dout):
    _check(a, g, dout)
    return (torch.empty(a.shape, dtype=a.dtype, device=a.device),
            torch.empty(a.shape, dtype=a.dtype, device=a.device))


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)  # a and g: the backward recomputes silu from them


def _backward(ctx, dout):
    a, g = ctx.saved_tensors
    return tuple(swiglu_grad(a, g, dout))


swiglu.register_autograd(_backward, setup_context=_setup_context)


# ---------------------------------------------------------------------------------------------
# The model the chapter times: an MLP block with a SwiGLU gate, and a classifier head

class SwiGLUMLP(torch.nn.Module):
    """x -> W2 gate(W1 x, W3 x) -> logits = W_out (.) -> softmax. ``gate`` and ``softmax`` are
    swappable, so the same weights run with PyTorch's operators or with the custom ones."""

    def __init__(self, dim: int, hidden: int, classes: int, gate=swiglu_eager, softmax=None):
        super().__init__()
        self.w1 = torch.nn.Linear(dim, hidden, bias=False)
        self.w3 = torch.nn.Linear(dim, hidden, bias=False)
        self.w2 = torch.nn.Linear(hidden, dim, bias=False)
        self.head = torch.nn.Linear(dim, classes, bias=False)
        self.gate = gate
        self.softmax = softmax or (lambda z: torch.softmax(z, dim=-1))

    def forward(self, x):
        h = self.w2(self.gate(self.w1(x), self.w3(x)))
        return self.softmax(self.head(x + h).float())

    def using(self, gate=None, softmax=None) -> "SwiGLUMLP":
        """A model sharing these weights whose gate and/or softmax are replaced."""
        import copy

        other = copy.copy(self)
        other._modules = dict(self._modules)  # the same Linear layers, not copies
        other.gate = gate or self.gate
        other.softmax = softmax or self.softmax
        return other
