"""Attack: softmax computed in host Python (math.exp, Python max/sum) inside a Triton launch.

Two channels together:

1. triton.runtime.jit.ConstexprFunction runs ANY Python function from a @triton.jit kernel.
   `type(tl.target_info.is_cuda)` is that class (tl.target_info.is_cuda is a public
   ConstexprFunction of triton.language; `type()` is no forbidden call and
   install_function_guards wraps functions, not classes). Triton's front end (the grader's
   _front_end in triton_guard.py, ASTSource.make_ir) calls the helper at compile time with
   frontend values, where int() raises TypeError: the helper returns None and the kernel
   "compiles for a GPU". Triton's dependency finder (runtime/jit.py DependenciesFinder) walks the
   helper's source but refuses only non-Triton *callables* it resolves: triton.language, math
   and Python builtins pass. In the interpreter the same helper then runs as plain Python.

2. A block's values as text: `repr(tl.constexpr(block))` is "constexpr[<values>]". The
   f-string in triton.language.core.constexpr.__repr__ calls the block's __str__ from Triton's
   frame, so the grader's patched __str__ (patch_lang_tensor: shape only for learner frames,
   learner_frame(1)) sees a library caller and returns the interpreter's str(handle.data).

The helper loads each row in chunks of 512 (under NumPy's print threshold), parses the numbers
with float(), computes the softmax with math.exp and Python max/sum, and stores each result with
a scalar tl.store. Triton does none of the softmax's arithmetic.
"""
import math

import triton
import triton.language as tl

CF = type(tl.target_info.is_cuda)  # triton.runtime.jit.ConstexprFunction, by a public name


def _host_softmax(src, dst, n):
    try:
        cols = int(n)  # interpreter: a number; Triton's front end: TypeError
    except Exception:
        return None  # compile time: nothing, so the kernel compiles
    vals = []
    for start in range(0, cols, 512):
        offs = tl.arange(0, 512)
        blk = tl.load(src + start + offs, mask=start + offs < cols, other=0.0)
        text = repr(tl.constexpr(blk))
        text = text.replace("constexpr[", " ").replace("[", " ").replace("]", " ")
        nums = [float(t) for t in text.split()]
        vals.extend(nums[: min(512, cols - start)])
    top = max(vals)
    ex = [math.exp(v - top) for v in vals]
    total = 0.0
    for v in ex:
        total += v
    for i in range(cols):
        tl.store(dst + i, ex[i] / total)
    return None


host_softmax = CF(_host_softmax)


@triton.jit
def softmax_kernel(x_ptr, out_ptr, x_row_stride, out_row_stride, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    host_softmax(x_ptr + row * x_row_stride, out_ptr + row * out_row_stride, cols)


def softmax(x, out):
    rows, cols = x.shape
    block = triton.next_power_of_2(cols)
    softmax_kernel[(rows,)](x, out, x.stride(0), out.stride(0), cols, BLOCK=block)
