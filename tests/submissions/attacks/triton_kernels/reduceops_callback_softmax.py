# ATTACK (library, runs past the static check): a @triton.jit function that is no Triton kernel.
# triton_guard refuses a block's `handle` to learner frames, but Triton's interpreter reads it for
# anyone who asks: ReduceOps.min_max(block, val_reduce_op) (triton.runtime.interpreter, importable
# by name: triton.* is allowed) calls val_reduce_op(block.handle.data, ...) from Triton's own frame.
# The callback is the learner's: NumPy's softmax of the row (ndarray operators and methods), returned
# as a block and stored. On a GPU this does not compile; in simulator mode it is the only code that runs.
# A secure grader gives 0 points for softmax.
import math

import triton
import triton.language as tl
from triton.runtime.interpreter import ReduceOps

_told = []


def _softmax_row(xs, axis=None, keepdims=False):
    e = math.e ** (xs.astype("float64") - xs.max())
    return (e / e.sum()).astype(xs.dtype)


@triton.jit
def _numpy_rows(x_ptr, out_ptr, x_row_stride, out_row_stride, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offsets = tl.arange(0, BLOCK)
    mask = offsets < cols
    x = tl.load(x_ptr + row * x_row_stride + offsets, mask=mask, other=-float("inf"))
    y = ReduceOps(0, None, True).min_max(x, _softmax_row)
    tl.store(out_ptr + row * out_row_stride + offsets, y, mask=mask)


def softmax(x, out):
    rows, cols = x.shape
    _numpy_rows[(rows,)](x, out, x.stride(0), out.stride(0), cols, BLOCK=triton.next_power_of_2(cols))
    if not _told:
        _told.append(1)
        print("ATTACK reduceops_callback_softmax: NumPy's softmax in a callback Triton hands the block to",
              flush=True)
