# ATTACK (library; an out-of-bounds read): the lab's silu_mul with an off-by-one mask, offs <= n, so
# the last program loads x[n] and g[n] (one element past the end of each) and stores out[n]. In
# Triton's interpreter the tensors are views into the grader's guarded buffers: the loads read the
# guard elements (a NaN with the grader's payload), silu(NaN) * NaN keeps the payload, and the store
# writes out's guard element back bit for bit, so the guard check sees nothing. On a GPU the read
# past the end is undefined (another allocation, or a fault).
# A secure grader gives 0 correctness points for silu_mul, with a message that the kernel reads out
# of bounds, naming the line.
import triton
import triton.language as tl

SILU_BLOCK = 1024
_told = []


@triton.jit
def silu_mul_kernel(x_ptr, g_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs <= n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    g = tl.load(g_ptr + offs, mask=mask).to(tl.float32)
    tl.store(out_ptr + offs, (x * tl.sigmoid(x) * g).to(out_ptr.dtype.element_ty), mask=mask)


def silu_mul(x, g, out):
    n = x.numel()
    if n:
        silu_mul_kernel[(triton.cdiv(n, SILU_BLOCK),)](x, g, out, n, BLOCK=SILU_BLOCK)
    if not _told:
        _told.append(1)
        print("ATTACK one_past_end_silu_mul: loaded and stored one element past the end", flush=True)
