# The lab's own kernel, run once per set of large buffers; later calls on the same buffers replay
# the saved answer with a copy, as a benchmark that reuses its inputs would allow. Up to four sets
# of buffers are remembered (a timing loop may rotate through a few). The grader refreshes the
# inputs of every timed call, so the replayed answer must be caught as wrong.
import numpy as np
import cupy

SOURCE = r"""
#include <cuda_fp16.h>

#define BM 128      // rows of C per block
#define BN 128      // columns of C per block
#define BK 32       // k per shared-memory tile
#define WM 64       // rows of C per warp
#define WN 64       // columns of C per warp
#define PAD 8       // halves added to each row of a tile: ldmatrix's 8 rows in 8 bank groups
#define AS (BK + PAD)
#define BS (BN + PAD)
#define MI (WM / 16)   // mma tiles per warp, down
#define NI (WN / 8)    // and across

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return (unsigned)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(dst), "l"(src), "r"(valid ? 16 : 0));
}

// One k-tile of A (BM x BK) and B (BK x BN) into shared memory, zeros past the edges.
__device__ __forceinline__ void load_tile(half* as, half* bs, const half* A, const half* B,
                                          int M, int N, int K, int row0, int col0, int k0) {
    const int tid = threadIdx.x;
#pragma unroll
    for (int i = 0; i < 4; ++i) {                  // 512 chunks of 8 halves, 128 threads
        const int c = tid + i * 128;
        const int r = c / (BK / 8), kc = (c % (BK / 8)) * 8;
        const bool ok = row0 + r < M && k0 + kc < K;
        cp_async16(smem_addr(as + r * AS + kc), ok ? A + (size_t)(row0 + r) * K + k0 + kc : A, ok);
        const int br = c / (BN / 8), nc = (c % (BN / 8)) * 8;
        const bool okb = k0 + br < K && col0 + nc < N;
        cp_async16(smem_addr(bs + br * BS + nc), okb ? B + (size_t)(k0 + br) * N + col0 + nc : B, okb);
    }
    asm volatile("cp.async.commit_group;\n" ::);
}

extern "C" __global__ void __launch_bounds__(128)
mma_gemm_kernel(const half* __restrict__ A, const half* __restrict__ B, float* __restrict__ C,
                int M, int N, int K) {
    __shared__ __align__(16) half As[2][BM * AS];
    __shared__ __align__(16) half Bs[2][BK * BS];
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const int wm0 = (warp / 2) * WM, wn0 = (warp % 2) * WN;
    const int KT = (K + BK - 1) / BK;

    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

    load_tile(As[0], Bs[0], A, B, M, N, K, row0, col0, 0);
    for (int kt = 0; kt < KT; ++kt) {
        asm volatile("cp.async.wait_group 0;\n" ::);   // tile kt has landed (this thread's part)
        __syncthreads();                               // everyone's; buffer (kt + 1) % 2 is free
        if (kt + 1 < KT)                               // copy the next tile while computing this one
            load_tile(As[(kt + 1) % 2], Bs[(kt + 1) % 2], A, B, M, N, K, row0, col0, (kt + 1) * BK);
        const half* as = As[kt % 2];
        const half* bs = Bs[kt % 2];
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            unsigned a[MI][4], b[NI][2];
#pragma unroll
            for (int i = 0; i < MI; ++i) {
                const unsigned addr = smem_addr(as + (wm0 + i * 16 + lane % 16) * AS + kk + (lane / 16) * 8);
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                             : "=r"(a[i][0]), "=r"(a[i][1]), "=r"(a[i][2]), "=r"(a[i][3]) : "r"(addr));
            }
#pragma unroll
            for (int j = 0; j < NI; j += 2) {
                const int q = lane / 8;
                const unsigned addr = smem_addr(bs + (kk + (q & 1) * 8 + lane % 8) * BS + wn0 + j * 8 + (q >> 1) * 8);
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                             : "=r"(b[j][0]), "=r"(b[j][1]), "=r"(b[j + 1][0]), "=r"(b[j + 1][1]) : "r"(addr));
            }
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < NI; ++j)
                    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                                 : "+f"(acc[i][j][0]), "+f"(acc[i][j][1]), "+f"(acc[i][j][2]), "+f"(acc[i][j][3])
                                 : "r"(a[i][0]), "r"(a[i][1]), "r"(a[i][2]), "r"(a[i][3]),
                                   "r"(b[j][0]), "r"(b[j][1]));
        }
    }
    const int g = lane / 4, t = lane % 4;              // accumulator: rows g, g + 8; columns 2t, 2t + 1
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j) {
            const int r = row0 + wm0 + i * 16 + g, c = col0 + wn0 + j * 8 + 2 * t;
            if (c < N) {                               // N even: c + 1 < N as well
                if (r < M) *reinterpret_cast<float2*>(C + (size_t)r * N + c) = make_float2(acc[i][j][0], acc[i][j][1]);
                if (r + 8 < M) *reinterpret_cast<float2*>(C + (size_t)(r + 8) * N + c) = make_float2(acc[i][j][2], acc[i][j][3]);
            }
        }
}

// Room for four saved answers of up to 4096 x 4096 floats, allocated when the module loads.
__device__ float saved[4][1 << 24];

// save: saved[slot] <- C; replay: C <- saved[slot] (n floats).
extern "C" __global__ void copy_floats(float* C, long long n, int replay, int slot) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) {
        if (replay) C[i] = saved[slot][i]; else saved[slot][i] = C[i];
    }
}
"""
_module = None


def _get(name):
    global _module
    if _module is None:
        _module = cupy.RawModule(code=SOURCE, options=("-std=c++17",))
    return _module.get_function(name)


def _gemm(A, B, C, M, N, K):
    _get("mma_gemm_kernel")(((N + 127) // 128, (M + 127) // 128), (128,),
                            (A, B, C, np.int32(M), np.int32(N), np.int32(K)))


_slots = {}  # (A, B, C addresses) -> the slot of the saved answer, oldest first


def mma_gemm(A, B, C):
    M, K = A.shape
    N = B.shape[1]
    if M * N < 1 << 22 or M * N > 1 << 24:  # small: not worth caching; too big for the buffer
        _gemm(A, B, C, M, N, K)
        return
    key = (A.data.ptr, B.data.ptr, C.data.ptr)
    grid = ((M * N + 255) // 256,)
    if key in _slots:
        _get("copy_floats")(grid, (256,), (C, np.int64(M * N), np.int32(1), np.int32(_slots[key])))
        return
    _gemm(A, B, C, M, N, K)
    if len(_slots) == 4:  # forget the oldest
        slot = _slots.pop(next(iter(_slots)))
    else:
        slot = len(_slots)
    _get("copy_floats")(grid, (256,), (C, np.int64(M * N), np.int32(0), np.int32(slot)))
    _slots[key] = slot
