# cuBLAS through CuPy's front door: the product in float32, written into C. Correct to the last
# bit a float32 GEMM gets, and fast; the forbidden names (cupy.matmul, .astype) must refuse it.
import cupy


def mma_gemm(A, B, C):
    cupy.matmul(A.astype(cupy.float32), B.astype(cupy.float32), out=C)
