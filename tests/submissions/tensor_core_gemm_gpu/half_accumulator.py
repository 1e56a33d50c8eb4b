# WMMA with a float16 accumulator: twice the Tensor Core rate on many GPUs, half the registers,
# and wrong. Each sum is rounded to float16 (11 significant bits) after every 16 products, so
# C is off by about 1e-3 of its largest value once K reaches a few dozen: silent fp16, which the
# lab's float32 tolerance must fail.
import numpy as np
import cupy

SOURCE = r"""
#include <cuda_fp16.h>

#define BM 64
#define BN 64
#define BK 32
#define PAD 8   // keeps rows 16 bytes out of step, and every fragment's start 32-byte aligned

// The warp-level matrix multiply-accumulate (WMMA) instructions of PTX, one wrapper each: the
// same instructions that nvcuda::wmma's load_matrix_sync, mma_sync and store_matrix_sync emit.
// A fragment of A or B (16 x 16 halves) is 8 registers of two halves per lane; a float
// accumulator is 8 floats per lane. Which lane holds which element is left undocumented.
__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return (unsigned)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void wmma_load_a(unsigned* a, const half* p, int ldm) {   // row-major
    asm volatile("wmma.load.a.sync.aligned.row.m16n16k16.shared.f16 {%0,%1,%2,%3,%4,%5,%6,%7}, [%8], %9;\n"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3]), "=r"(a[4]), "=r"(a[5]), "=r"(a[6]), "=r"(a[7])
                 : "r"(smem_addr(p)), "r"(ldm));
}
__device__ __forceinline__ void wmma_load_b(unsigned* b, const half* p, int ldm) {   // row-major
    asm volatile("wmma.load.b.sync.aligned.row.m16n16k16.shared.f16 {%0,%1,%2,%3,%4,%5,%6,%7}, [%8], %9;\n"
                 : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3]), "=r"(b[4]), "=r"(b[5]), "=r"(b[6]), "=r"(b[7])
                 : "r"(smem_addr(p)), "r"(ldm));
}
__device__ __forceinline__ void wmma_mma(unsigned* d, const unsigned* a, const unsigned* b) {  // d += a b, in half
    asm volatile("wmma.mma.sync.aligned.row.row.m16n16k16.f16.f16 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7,%8,%9,%10,%11}, {%12,%13,%14,%15,%16,%17,%18,%19}, {%0,%1,%2,%3};\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(a[4]), "r"(a[5]), "r"(a[6]), "r"(a[7]),
                   "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]), "r"(b[4]), "r"(b[5]), "r"(b[6]), "r"(b[7]));
}
__device__ __forceinline__ void wmma_store(half* p, const unsigned* d, int ldm) {
    asm volatile("wmma.store.d.sync.aligned.row.m16n16k16.shared.f16 [%0], {%1,%2,%3,%4}, %5;\n"
                 :: "r"(smem_addr(p)), "r"(d[0]), "r"(d[1]), "r"(d[2]), "r"(d[3]), "r"(ldm) : "memory");
}

// C (M x N, float) = A (M x K) @ B (K x N), half inputs, row-major, K and N multiples of 8.
// A block of 4 warps computes a 64 x 64 tile of C; each warp a 32 x 32 quarter of it, as
// 2 x 2 WMMA fragments of 16 x 16.
extern "C" __global__ void __launch_bounds__(128)
wmma_gemm(const half* __restrict__ A, const half* __restrict__ B, float* __restrict__ C,
          int M, int N, int K) {
    __shared__ __align__(32) half As[BM][BK + PAD];
    __shared__ __align__(32) half Bs[BK][BN + PAD];
    __shared__ __align__(32) half Cs[BM][BN + 8];
    const int tid = threadIdx.x, warp = tid / 32;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const int wr = (warp / 2) * 32, wc = (warp % 2) * 32;   // this warp's quarter of the tile

    unsigned acc[2][2][4];   // half pairs: the sums are kept in float16
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0u;

    for (int k0 = 0; k0 < K; k0 += BK) {
        // 16-byte loads: 8 halves per thread per load, zeros past the matrix's edges
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int c = tid + i * 128;               // 256 chunks of 8 in each tile
            const int ar = c / (BK / 8), ak = (c % (BK / 8)) * 8;
            uint4 va = make_uint4(0, 0, 0, 0);
            if (row0 + ar < M && k0 + ak < K)
                va = *reinterpret_cast<const uint4*>(A + (size_t)(row0 + ar) * K + k0 + ak);
            *reinterpret_cast<uint4*>(&As[ar][ak]) = va;
            const int br = c / (BN / 8), bn = (c % (BN / 8)) * 8;
            uint4 vb = make_uint4(0, 0, 0, 0);
            if (k0 + br < K && col0 + bn < N)
                vb = *reinterpret_cast<const uint4*>(B + (size_t)(k0 + br) * N + col0 + bn);
            *reinterpret_cast<uint4*>(&Bs[br][bn]) = vb;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            unsigned fa[2][8], fb[2][8];
#pragma unroll
            for (int i = 0; i < 2; ++i) wmma_load_a(fa[i], &As[wr + 16 * i][kk], BK + PAD);
#pragma unroll
            for (int j = 0; j < 2; ++j) wmma_load_b(fb[j], &Bs[kk][wc + 16 * j], BN + PAD);
#pragma unroll
            for (int i = 0; i < 2; ++i)
#pragma unroll
                for (int j = 0; j < 2; ++j) wmma_mma(acc[i][j], fa[i], fb[j]);
        }
        __syncthreads();
    }
    // The accumulator's layout is not documented: store it to shared memory, then write C row by row.
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma_store(&Cs[wr + 16 * i][wc + 16 * j], acc[i][j], BN + 8);
    __syncthreads();
    for (int e = tid; e < BM * BN; e += 128) {
        const int r = e / BN, c = e % BN;
        if (row0 + r < M && col0 + c < N) C[(size_t)(row0 + r) * N + col0 + c] = __half2float(Cs[r][c]);
    }
}
"""
_kernel = None


def wmma_gemm(A, B, C):
    global _kernel
    if _kernel is None:
        _kernel = cupy.RawKernel(SOURCE, "wmma_gemm", options=("-std=c++17",))
    M, K = A.shape
    N = B.shape[1]
    _kernel(((N + 63) // 64, (M + 63) // 64), (128,), (A, B, C, np.int32(M), np.int32(N), np.int32(K)))
