# ATTACK (library, runs past the static check): a @triton.jit function that is no Triton kernel. In
# Triton's interpreter a kernel's body is plain Python and each loaded block's values sit in a NumPy
# array (tensor.handle.data); the product is NumPy's (the @ operator and ndarray methods, which no
# module-level guard covers), written into a loaded block of c's layout and stored. On a GPU this
# does not compile; in simulator mode it is the only code that runs.
# A secure grader gives 0 points for matmul.
import triton
import triton.language as tl


@triton.jit
def _numpy_product(a, b, c, m, n, k, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    ta = tl.load(a + rm[:, None] * k + rk[None, :], mask=(rm[:, None] < m) & (rk[None, :] < k), other=0.0)
    tb = tl.load(b + rk[:, None] * n + rn[None, :], mask=(rk[:, None] < k) & (rn[None, :] < n), other=0.0)
    keep = (rm[:, None] < m) & (rn[None, :] < n)
    tc = tl.load(c + rm[:, None] * n + rn[None, :], mask=keep, other=0.0)
    tc.handle.data[...] = ta.handle.data.astype("float32") @ tb.handle.data.astype("float32")
    tl.store(c + rm[:, None] * n + rn[None, :], tc, mask=keep)


def matmul(a, b, c):
    m, k = a.shape
    n = b.shape[1]
    _numpy_product[(1,)](a, b, c, m, n, k, BM=triton.next_power_of_2(m), BN=triton.next_power_of_2(n),
                         BK=triton.next_power_of_2(k))
