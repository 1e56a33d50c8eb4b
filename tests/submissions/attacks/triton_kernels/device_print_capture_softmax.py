# ATTACK (library, simulator): the data leaves the Triton "kernel" as text. In Triton's interpreter
# tl.device_print(..., hex=True) prints each block's values (exactly, as float.hex) with Python's
# print; contextlib.redirect_stdout (no module the static check names) catches them in a StringIO on
# the host. The host parses the numbers, does the softmax in Python floats, and a kernel that only
# stores the one number it is given writes each result. triton_guard hides .handle and a block's
# repr, but not the interpreter's print. No GPU kernel computes anything.
# A secure grader gives 0 points for softmax.
import contextlib
import io
import math

import triton
import triton.language as tl

_told = []


@triton.jit
def _show(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.device_print("v", v, hex=True)


@triton.jit
def _put(out, i, value):
    tl.store(out + i, value)


def softmax(x, out):
    rows, cols = x.shape[0], x.shape[1]
    n = rows * cols
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        _show[(triton.cdiv(n, 512),)](x, n, BLOCK=512)
    vals = [float.fromhex(t.strip("[],")) for t in buf.getvalue().split() if "0x" in t][:n]
    for r in range(rows):
        row = vals[r * cols:(r + 1) * cols]
        top = max(row)
        es = [math.exp(v - top) for v in row]
        s = math.fsum(es)
        for c in range(cols):
            _put[(1,)](out, r * cols + c, es[c] / s)
    if not _told:
        _told.append(1)
        print("ATTACK device_print_capture_softmax: values read from tl.device_print's output", flush=True)
