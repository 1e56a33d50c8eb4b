# ATTACK (library, runs past the static check): the gate computed by NumPy inside an interpreted
# "kernel". In Triton's interpreter a loaded block's values are a NumPy array (block.handle.data); a
# match statement's class pattern reaches it without writing '.handle'. silu(x) * g is NumPy's
# (ndarray operators: float ** ndarray, /, *), written into a loaded block of out and stored. On a
# GPU this does not compile.
# A secure grader gives 0 points for silu_mul.
import math

import triton
import triton.language as tl

_told = []


@triton.jit
def _numpy_gate(x_ptr, g_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    g = tl.load(g_ptr + offs, mask=mask, other=0.0)
    y = tl.load(out_ptr + offs, mask=mask, other=0.0)
    match (x, g, y):
        case (object(handle=object(data=xs)), object(handle=object(data=gs)), object(handle=object(data=ys))):
            xf = xs.astype("float32")
            ys[...] = (xf / (1.0 + math.e ** -xf) * gs.astype("float32")).astype(ys.dtype)
    tl.store(out_ptr + offs, y, mask=mask)


def silu_mul(x, g, out):
    n = x.numel()
    if n:
        _numpy_gate[(triton.cdiv(n, 1024),)](x, g, out, n, BLOCK=1024)
    if not _told:
        _told.append(1)
        print("ATTACK match_handle_silu_mul: NumPy's gate inside an interpreted kernel", flush=True)
