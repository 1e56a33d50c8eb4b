# ATTACK (library, simulator): a @triton.jit "kernel" that learns each value one bit at a time with
# bool(). In Triton's interpreter a block's __bool__ is a lambda in the interpreter's own file that
# reads self.handle.data, so triton_guard (which hides .handle from learner frames only) lets it
# through: `if (v >> k) & 1:` tells learner Python code each of the 16 bits of the float16's int16
# bitcast. A plain Python helper rebuilds x and g with struct, computes silu(x) * g with math.exp,
# and the kernel stores that Python float. The block's data reaches learner code; no GPU compiles
# this. A secure grader gives 0 points for silu_mul.
import math
import struct

import triton
import triton.language as tl

_told = []


def _half(bits):
    w = 0
    for b in bits:
        w = (w << 1) | b
    return struct.unpack("<e", struct.pack("<H", w))[0]


def _silu_mul(xbits, gbits):
    xv, gv = _half(xbits), _half(gbits)
    return xv / (1.0 + math.exp(-xv)) * gv


@triton.jit
def _gate(x_ptr, g_ptr, out_ptr):
    i = tl.program_id(0)
    vx = tl.load(x_ptr + i).to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF
    vg = tl.load(g_ptr + i).to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF
    xb = []
    gb = []
    for k in range(15, -1, -1):
        if (vx >> k) & 1:
            xb.append(1)
        else:
            xb.append(0)
        if (vg >> k) & 1:
            gb.append(1)
        else:
            gb.append(0)
    tl.store(out_ptr + i, _silu_mul(xb, gb))


def silu_mul(x, g, out):
    _gate[(x.numel(),)](x, g, out)
    if not _told:
        _told.append(1)
        print("ATTACK triton_bool_bisect_silu_mul: values bisected with bool(block)", flush=True)
