"""Attack: matmul computed in host Python (a triple loop over Python floats) inside a Triton launch.

Same channels as triton_kernels__constexpr_function_host_softmax.py, shown on a second
exercise: a ConstexprFunction (class reached as type(tl.target_info.is_cuda)) is called from a
@triton.jit kernel; at compile time (the grader's _front_end check) int() of its argument raises
and it returns None, so the kernel "compiles"; in the interpreter it runs as Python, reads A and
B as text through repr(tl.constexpr(block)) (constexpr.__repr__ formats the block from Triton's
frame, so patch_lang_tensor's shape-only text is not used), multiplies them in Python, and
stores each element of C with a scalar tl.store. No tl.dot, no Triton arithmetic of the product.
"""
import triton
import triton.language as tl

CF = type(tl.target_info.is_cuda)  # triton.runtime.jit.ConstexprFunction


def _host_matmul(a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn):
    try:
        m, n, k = int(M), int(N), int(K)
        sam, sak, sbk, sbn, scm, scn = int(sam), int(sak), int(sbk), int(sbn), int(scm), int(scn)
    except Exception:
        return None  # Triton's front end: nothing to compile

    def read(ptr, rows, cols, srow, scol):
        vals = []
        total = rows * cols
        for start in range(0, total, 512):
            f = start + tl.arange(0, 512)
            blk = tl.load(ptr + (f // cols) * srow + (f % cols) * scol, mask=f < total, other=0.0)
            text = repr(tl.constexpr(blk.to(tl.float32))).replace("constexpr[", " ").replace("[", " ").replace("]", " ")
            vals.extend([float(t) for t in text.split()][: min(512, total - start)])
        return vals

    A = read(a, m, k, sam, sak)
    B = read(b, k, n, sbk, sbn)
    for i in range(m):
        row = A[i * k:(i + 1) * k]
        for j in range(n):
            s = 0.0
            for t in range(k):
                s += row[t] * B[t * n + j]
            tl.store(c + i * scm + j * scn, s)
    return None


host_matmul = CF(_host_matmul)


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn):
    host_matmul(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn)


def matmul(a, b, c):
    (M, K), N = a.shape, b.shape[1]
    matmul_kernel[(1,)](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                        c.stride(0), c.stride(1))
