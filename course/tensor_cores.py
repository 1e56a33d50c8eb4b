"""The Tensor Core kernels of the chapter *Tensor Cores* and of its lab (``tensor_core_gemm``).

Three CUDA C sources, compiled at run time by CuPy (NVRTC) for the GPU in hand:

- ``MMA_TILE_SOURCE``: one warp, one ``mma.sync.m16n8k16``, each lane filling its fragments
  from global memory by the layout PTX documents (what a matrix instruction computes).
- ``WMMA_SOURCE``: a GEMM on the WMMA instructions (``wmma.load``, ``wmma.mma``, ``wmma.store``,
  written as inline PTX, since some CuPy installations lack the ``crt/mma.h`` that ``<mma.h>``
  includes), float16 in, float32 out; it runs from compute capability 7.0 (a T4 is 7.5).
  ``WMMA_API_SOURCE`` is one tile with the C++ API ``nvcuda::wmma``, compiled with nvcc only.
- ``GEMM_SOURCE``: the reference GEMM, ``mma.sync`` through inline PTX, fed by ``cp.async``
  copies into a ring of shared-memory stages, ``ldmatrix`` loads from padded or XOR-swizzled
  tiles, fragments double-buffered in registers, one barrier per k-tile. A C++ template over the element type (float16 or
  bfloat16), the output type and the tile shape (``Config``); it needs compute capability 8.0.

Contract of every GEMM here: A is M x K and B is K x N, both row-major; C = A @ B is M x N,
row-major, sums in float32. K and N must be multiples of 8, so that every 16-byte copy of
8 elements starts on a 16-byte boundary and lies wholly inside or wholly outside the matrix;
M is free. All launchers need a GPU and CuPy; the sources compile with nvcc without one.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

ALIGN = 8  # K and N must be multiples of this: one 16-byte copy holds 8 two-byte elements

# --------------------------------------------------------------------------- one instruction
MMA_TILE_SOURCE = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>

// Two 16-bit values packed in one 32-bit register: lo in the low half, as PTX expects.
template <typename T> __device__ __forceinline__ unsigned pack2(T lo, T hi) {
    unsigned short a = *reinterpret_cast<unsigned short*>(&lo);
    unsigned short b = *reinterpret_cast<unsigned short*>(&hi);
    return (unsigned)a | ((unsigned)b << 16);
}

__device__ __forceinline__ void mma16816(float* d, const unsigned* a, const unsigned* b, __half) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void mma16816(float* d, const unsigned* a, const unsigned* b, __nv_bfloat16) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// D (16 x 8, float) = A (16 x 16, row-major) @ B (16 x 8, row-major), one warp of 32 threads.
// owner[r * 8 + c] gets the lane that holds D[r][c] in its accumulator registers.
template <typename T>
__global__ void mma_tile(const T* A, const T* B, float* D, int* owner) {
    const int lane = threadIdx.x;
    const int g = lane / 4, t = lane % 4;   // the lane's group (row) and its place in the group
    unsigned a[4], b[2];
    // A fragment: rows g and g + 8, columns 2t, 2t + 1 and the same plus 8
    a[0] = pack2(A[g * 16 + 2 * t],           A[g * 16 + 2 * t + 1]);
    a[1] = pack2(A[(g + 8) * 16 + 2 * t],     A[(g + 8) * 16 + 2 * t + 1]);
    a[2] = pack2(A[g * 16 + 2 * t + 8],       A[g * 16 + 2 * t + 9]);
    a[3] = pack2(A[(g + 8) * 16 + 2 * t + 8], A[(g + 8) * 16 + 2 * t + 9]);
    // B fragment: column g, rows 2t, 2t + 1 and the same plus 8
    b[0] = pack2(B[(2 * t) * 8 + g],     B[(2 * t + 1) * 8 + g]);
    b[1] = pack2(B[(2 * t + 8) * 8 + g], B[(2 * t + 9) * 8 + g]);
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    mma16816(d, a, b, T());
    // Accumulator: rows g and g + 8, columns 2t and 2t + 1
    D[g * 8 + 2 * t] = d[0];       D[g * 8 + 2 * t + 1] = d[1];
    D[(g + 8) * 8 + 2 * t] = d[2]; D[(g + 8) * 8 + 2 * t + 1] = d[3];
    owner[g * 8 + 2 * t] = lane;       owner[g * 8 + 2 * t + 1] = lane;
    owner[(g + 8) * 8 + 2 * t] = lane; owner[(g + 8) * 8 + 2 * t + 1] = lane;
}
"""
MMA_TILE_NAMES = {"float16": "mma_tile<__half>", "bfloat16": "mma_tile<__nv_bfloat16>"}


def fragment_owners() -> dict[str, np.ndarray]:
    """Which lane holds each element of the three fragments of ``mma.m16n8k16``, from the layout in
    PTX's documentation (the one ``MMA_TILE_SOURCE`` follows): A 16 x 16, B 16 x 8, C 16 x 8."""
    a = np.empty((16, 16), dtype=np.int32)
    b = np.empty((16, 8), dtype=np.int32)
    c = np.empty((16, 8), dtype=np.int32)
    for lane in range(32):
        g, t = divmod(lane, 4)
        for dr in (0, 8):
            for dc in (0, 8):
                a[g + dr, 2 * t + dc:2 * t + dc + 2] = lane
            c[g + dr, 2 * t:2 * t + 2] = lane
            b[2 * t + dr:2 * t + dr + 2, g] = lane
    return {"A": a, "B": b, "C": c}


# --------------------------------------------------------------------------- WMMA
WMMA_BM, WMMA_BN, WMMA_BK = 64, 64, 32
WMMA_THREADS = 128
WMMA_SOURCE = r"""
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
__device__ __forceinline__ void wmma_mma(float* d, const unsigned* a, const unsigned* b) {     // d += a b
    asm volatile("wmma.mma.sync.aligned.row.row.m16n16k16.f32.f32 {%0,%1,%2,%3,%4,%5,%6,%7}, "
                 "{%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19,%20,%21,%22,%23}, {%0,%1,%2,%3,%4,%5,%6,%7};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(a[4]), "r"(a[5]), "r"(a[6]), "r"(a[7]),
                   "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]), "r"(b[4]), "r"(b[5]), "r"(b[6]), "r"(b[7]));
}
__device__ __forceinline__ void wmma_store(float* p, const float* d, int ldm) {
    asm volatile("wmma.store.d.sync.aligned.row.m16n16k16.shared.f32 [%0], {%1,%2,%3,%4,%5,%6,%7,%8}, %9;\n"
                 :: "r"(smem_addr(p)), "f"(d[0]), "f"(d[1]), "f"(d[2]), "f"(d[3]),
                    "f"(d[4]), "f"(d[5]), "f"(d[6]), "f"(d[7]), "r"(ldm) : "memory");
}

// C (M x N, float) = A (M x K) @ B (K x N), half inputs, row-major, K and N multiples of 8.
// A block of 4 warps computes a 64 x 64 tile of C; each warp a 32 x 32 quarter of it, as
// 2 x 2 WMMA fragments of 16 x 16.
extern "C" __global__ void __launch_bounds__(128)
wmma_gemm(const half* __restrict__ A, const half* __restrict__ B, float* __restrict__ C,
          int M, int N, int K) {
    __shared__ __align__(32) half As[BM][BK + PAD];
    __shared__ __align__(32) half Bs[BK][BN + PAD];
    __shared__ __align__(32) float Cs[BM][BN + 4];
    const int tid = threadIdx.x, warp = tid / 32;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const int wr = (warp / 2) * 32, wc = (warp % 2) * 32;   // this warp's quarter of the tile

    float acc[2][2][8];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[i][j][e] = 0.0f;

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
        for (int j = 0; j < 2; ++j) wmma_store(&Cs[wr + 16 * i][wc + 16 * j], acc[i][j], BN + 4);
    __syncthreads();
    for (int e = tid; e < BM * BN; e += 128) {
        const int r = e / BN, c = e % BN;
        if (row0 + r < M && col0 + c < N) C[(size_t)(row0 + r) * N + col0 + c] = Cs[r][c];
    }
}
"""

# The same product with the C++ API of <mma.h> (nvcuda::wmma), which emits the instructions above.
# CuPy compiles it only where the CUDA headers include crt/mma.h (a full toolkit; some pip wheels
# leave it out), so the course runs WMMA_SOURCE and compiles this one with nvcc to compare.
WMMA_API_SOURCE = r"""
#include <mma.h>
#include <cuda_fp16.h>
using namespace nvcuda;

// One warp: C (16 x 16, float) = A (16 x 16) @ B (16 x 16), half inputs, all row-major.
extern "C" __global__ void wmma_tile(const half* A, const half* B, float* C) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
    wmma::fill_fragment(c, 0.0f);
    wmma::load_matrix_sync(a, A, 16);      // the warp loads the tile together; 16: the row stride
    wmma::load_matrix_sync(b, B, 16);
    wmma::mma_sync(c, a, b, c);            // c = a b + c on the Tensor Cores
    wmma::store_matrix_sync(C, c, 16, wmma::mem_row_major);
}
"""

# --------------------------------------------------------------------------- the pipelined GEMM
GEMM_SOURCE = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return (unsigned)__cvta_generic_to_shared(p);
}

// One 16-byte copy from global to shared memory that bypasses the registers (and the L1).
// With valid == false nothing is read and the 16 bytes are filled with zeros.
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" :: "n"(N));
}

// Four 8 x 8 matrices of 16-bit values from shared memory; lane l gives the address of row l % 8
// of matrix l / 8, and register i receives this lane's part of matrix i.
__device__ __forceinline__ void ldmatrix_x4(unsigned* r, unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
// The same, each matrix transposed on the way: rows of B (k) become the fragment's columns.
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned* r, unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

__device__ __forceinline__ void mma16816(float* d, const unsigned* a, const unsigned* b, __half) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void mma16816(float* d, const unsigned* a, const unsigned* b, __nv_bfloat16) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Two neighbouring outputs of a row; the pair is 8-byte aligned when N is even.
__device__ __forceinline__ void store2(float* p, float x, float y, bool both) {
    if (both) *reinterpret_cast<float2*>(p) = make_float2(x, y); else p[0] = x;
}
__device__ __forceinline__ void store2(__half* p, float x, float y, bool both) {
    if (both) *reinterpret_cast<__half2*>(p) = __floats2half2_rn(x, y); else p[0] = __float2half_rn(x);
}
__device__ __forceinline__ void store2(__nv_bfloat16* p, float x, float y, bool both) {
    if (both) *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(x, y); else p[0] = __float2bfloat16_rn(x);
}

// Byte offset, inside one tile in shared memory, of the 16-byte chunk c (8 elements) of row r, for
// a tile whose rows hold CPR chunks. Two layouts keep ldmatrix's 8 rows (same c, rows r..r+7) and
// cp.async's 16-byte stores in 8 different groups of 4 banks:
// - padded: every row is PAD elements longer than its data (memory lost: PAD / row length);
// - swizzled (XOR): rows are unpadded, and chunk c of row r is stored at place c ^ (r mod 8) of its
//   128-byte line (rows of 64 bytes share a line in pairs, so there r / 2 picks the mask).
template <int CPR, int PAD, bool SWIZZLE>
__device__ __forceinline__ unsigned tile_offset(int r, int c) {
    if constexpr (SWIZZLE) {
        static_assert(CPR == 4 || CPR % 8 == 0, "the swizzle needs rows of 64 bytes or multiples of 128");
        constexpr int SHIFT = CPR == 4 ? 1 : 0;   // rows sharing one 128-byte line share one mask
        constexpr int MASK = CPR == 4 ? 3 : 7;
        return (unsigned)(r * CPR * 16 + ((c ^ ((r >> SHIFT) & MASK)) * 16));
    } else {
        return (unsigned)(r * (CPR * 8 + PAD) * 2 + c * 16);
    }
}

// C (M x N, OutT) = A (M x K) @ B (K x N), T = __half or __nv_bfloat16, all row-major, sums in
// float32; K and N multiples of 8. A block computes a BM x BN tile of C with (BM/WM) x (BN/WN)
// warps, each a WM x WN part of it as (WM/16) x (WN/8) mma.sync tiles of 16 x 8. Tiles of A
// (BM x BK) and B (BK x BN) reach shared memory through a ring of STAGES buffers filled by
// cp.async; rows are padded by PAD elements, or XOR-swizzled (SWIZZLE, PAD 0), so that ldmatrix's
// 8 rows hit 8 different groups of banks.
template <typename T, typename OutT, int BM, int BN, int BK, int WM, int WN, int STAGES, int PAD,
          bool SWIZZLE = false>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32, 1)   // 1 block per SM suffices: 255 registers
tc_gemm(const T* __restrict__ A, const T* __restrict__ B, OutT* __restrict__ C, int M, int N, int K) {
    constexpr int WARPS_N = BN / WN;
    constexpr int THREADS = (BM / WM) * WARPS_N * 32;
    constexpr int MI = WM / 16, NI = WN / 8, KSTEPS = BK / 16;
    constexpr int A_CPR = BK / 8, B_CPR = BN / 8;                     // 16-byte chunks per row
    constexpr int A_ROW = (BK + PAD) * 2, B_ROW = (BN + PAD) * 2;     // bytes per row in shared memory
    constexpr int A_BYTES = BM * A_ROW, STAGE_BYTES = A_BYTES + BK * B_ROW;   // a stage: A's tile, then B's
    // Copies: each thread moves the same chunk column of rows tid / CPR, + RPP, + 2 RPP, ...
    constexpr int A_RPP = THREADS / A_CPR, B_RPP = THREADS / B_CPR;   // rows per pass of all threads
    constexpr int A_COPIES = BM / A_RPP, B_COPIES = BK / B_RPP;       // 16-byte copies per thread
    static_assert(THREADS % A_CPR == 0 && THREADS % B_CPR == 0 && BM % A_RPP == 0 && BK % B_RPP == 0,
                  "copies must divide evenly");
    static_assert(!SWIZZLE || (PAD == 0 && A_RPP % 8 == 0 && B_RPP % 8 == 0), "swizzle: no padding, passes of 8 rows");
    static_assert(NI % 2 == 0 && BK % 16 == 0 && BK >= 32 && STAGES >= 2, "tile shape: 2 k-steps or more");
    extern __shared__ __align__(128) unsigned char smem[];
    const unsigned smem0 = smem_addr(smem);

    // Grouped order: consecutive blocks walk down 8 tile rows before moving one tile column right,
    // so the blocks running together share tiles of A and of B in the L2 cache.
    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    const int per_group = 8 * tiles_n;
    const int first_m = (blockIdx.x / per_group) * 8;
    const int group_rows = min(tiles_m - first_m, 8);
    const int tile_m = first_m + (blockIdx.x % per_group) % group_rows;
    const int tile_n = (blockIdx.x % per_group) / group_rows;
    const int row0 = tile_m * BM, col0 = tile_n * BN;

    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int wm0 = (warp / WARPS_N) * WM, wn0 = (warp % WARPS_N) * WN;
    const int KT = (K + BK - 1) / BK;

    // Everything about the copies that does not change along k is computed once, here: the source
    // pointers (moved by a constant per k-tile), the destinations (the same in every stage, the
    // passes a constant apart) and which rows of A and columns of B lie inside the matrices.
    const int a_r = tid / A_CPR, a_c = tid % A_CPR, b_r = tid / B_CPR, b_c = tid % B_CPR;
    const T* a_src = A + (size_t)(row0 + a_r) * K + a_c * 8;
    const T* b_src = B + (size_t)b_r * N + col0 + b_c * 8;
    const size_t a_pass = (size_t)A_RPP * K, b_pass = (size_t)B_RPP * N;
    const unsigned a_dst = tile_offset<A_CPR, PAD, SWIZZLE>(a_r, a_c);
    const unsigned b_dst = A_BYTES + tile_offset<B_CPR, PAD, SWIZZLE>(b_r, b_c);
    unsigned a_rows_ok = 0;
#pragma unroll
    for (int p = 0; p < A_COPIES; ++p) a_rows_ok |= (unsigned)(row0 + a_r + p * A_RPP < M) << p;
    const bool b_col_ok = col0 + b_c * 8 < N;

    // Queue the copies of A's (then B's) part of the k-tile at k0 into the stage at byte offset
    // stage (no wait: they complete in the background), then step the source one k-tile on.
    auto load_a = [&](unsigned stage, int k0) {
        const bool k_ok = k0 + a_c * 8 < K;
#pragma unroll
        for (int p = 0; p < A_COPIES; ++p) {
            const bool ok = k_ok && (a_rows_ok >> p & 1);
            cp_async16(smem0 + stage + a_dst + p * A_RPP * A_ROW, ok ? a_src + p * a_pass : A, ok);
        }
        a_src += BK;
    };
    auto load_b = [&](unsigned stage, int k0) {
#pragma unroll
        for (int p = 0; p < B_COPIES; ++p) {
            const bool ok = b_col_ok && k0 + b_r + p * B_RPP < K;
            cp_async16(smem0 + stage + b_dst + p * B_RPP * B_ROW, ok ? b_src + p * b_pass : B, ok);
        }
        b_src += (size_t)BK * N;
    };

    // The lanes' ldmatrix addresses inside a stage, also computed once. A (x4): lanes 0-15 give
    // rows 0-15 of a 16 x 16 fragment at its first 8 columns, lanes 16-31 at the next 8; the
    // fragments i of the warp are 16 rows apart. B (x4.trans): lanes 8q..8q+7 give rows k of
    // matrix q, q = 0..3: k 0-7 and 8-15 of columns n..n+7, then of n+8..n+15 (two fragments j, j+1).
    // Moving 16 rows down keeps the swizzle's mask, so only the chunk (column) needs a table.
    unsigned a_ld[KSTEPS], b_ld[NI / 2];
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks)
        a_ld[ks] = tile_offset<A_CPR, PAD, SWIZZLE>(wm0 + lane % 16, ks * 2 + lane / 16);
#pragma unroll
    for (int j = 0; j < NI / 2; ++j)
        b_ld[j] = A_BYTES + tile_offset<B_CPR, PAD, SWIZZLE>(lane % 8 + (lane / 8 % 2) * 8, wn0 / 8 + 2 * j + lane / 16);

    unsigned a[2][MI][4], b[2][NI][2];   // fragments, double-buffered across the k-steps
    auto load_frags = [&](int buf, unsigned stage, int ks) {
        const unsigned base = smem0 + stage;
#pragma unroll
        for (int i = 0; i < MI; ++i) ldmatrix_x4(a[buf][i], base + a_ld[ks] + i * 16 * A_ROW);
#pragma unroll
        for (int j = 0; j < NI; j += 2) {
            unsigned r[4];
            ldmatrix_x4_trans(r, base + b_ld[j / 2] + ks * 16 * B_ROW);
            b[buf][j][0] = r[0]; b[buf][j][1] = r[1];
            b[buf][j + 1][0] = r[2]; b[buf][j + 1][1] = r[3];
        }
    };

    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

    // Fill all stages but one; one commit group per k-tile, empty past the end of K.
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < KT) { load_a(s * STAGE_BYTES, s * BK); load_b(s * STAGE_BYTES, s * BK); }
        cp_async_commit();
    }
    cp_async_wait<STAGES - 2>();         // k-tile 0 has landed, for this thread ...
    __syncthreads();                     // ... and for all
    unsigned read = 0, write = (STAGES - 1) * STAGE_BYTES;   // the stages of k-tiles kt and kt + STAGES - 1
    load_frags(0, read, 0);

    // One barrier per k-tile, placed before the last k-step's maths: by then the warp has loaded
    // the last fragments of tile kt, so it can wait for tile kt + 1, load that tile's first
    // fragments, and hide their latency behind the last k-step's mma.sync instead of stalling on
    // them at the top of the next tile.
#pragma unroll 1
    for (int kt = 0; kt < KT; ++kt) {
#pragma unroll
        for (int ks = 0; ks < KSTEPS; ++ks) {
            if (ks == KSTEPS - 1) {
                cp_async_wait<STAGES - 2>();   // this thread's copies of k-tile kt + 1 have landed ...
                __syncthreads();               // ... and everyone's; and all are done with tile kt - 1
                read = read + STAGE_BYTES == STAGES * STAGE_BYTES ? 0 : read + STAGE_BYTES;
            }
            load_frags((ks + 1) % 2, read, (ks + 1) % KSTEPS);   // the next step's fragments, early
            // Refill the stage that tile kt - 1 used (free since the last barrier) with tile
            // kt + STAGES - 1: A's part at the first k-step, B's at the second (with two k-steps, both
            // at the first), so that the copies' instructions are spread between the mma.sync.
            constexpr int B_STEP = KSTEPS > 2 ? 1 : 0;   // before the barrier at the last k-step
            if (ks == 0 && kt + STAGES - 1 < KT) load_a(write, (kt + STAGES - 1) * BK);
            if (ks == B_STEP) {
                if (kt + STAGES - 1 < KT) load_b(write, (kt + STAGES - 1) * BK);
                cp_async_commit();                      // one group per k-tile, empty past the end
                write = write + STAGE_BYTES == STAGES * STAGE_BYTES ? 0 : write + STAGE_BYTES;
            }
            // Serpentine order: consecutive mma.sync share a fragment of A or of B.
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int jj = 0; jj < NI; ++jj) {
                    const int j = i % 2 ? NI - 1 - jj : jj;
                    mma16816(acc[i][j], a[ks % 2][i], b[ks % 2][j], T());
                }
        }
    }
    cp_async_wait<0>();

    // Accumulator layout: lane (g, t) holds rows g and g + 8, columns 2t and 2t + 1 of each tile.
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int i = 0; i < MI; ++i) {
#pragma unroll
        for (int j = 0; j < NI; ++j) {
            const int r = row0 + wm0 + i * 16 + g, c = col0 + wn0 + j * 8 + 2 * t;
            if (c < N) {
                if (r < M) store2(C + (size_t)r * N + c, acc[i][j][0], acc[i][j][1], c + 1 < N);
                if (r + 8 < M) store2(C + (size_t)(r + 8) * N + c, acc[i][j][2], acc[i][j][3], c + 1 < N);
            }
        }
    }
}
"""

C_TYPES = {"float16": "__half", "bfloat16": "__nv_bfloat16", "float32": "float"}


@dataclass(frozen=True)
class Config:
    """A tile shape of ``tc_gemm``: block tile bm x bn, k-tile bk, warp tile wm x wn, stages, and the
    shared-memory layout: rows padded by ``pad`` elements, or XOR-swizzled (``swizzle``, pad 0)."""

    bm: int
    bn: int
    bk: int
    wm: int
    wn: int
    stages: int
    pad: int = 8  # elements added to each shared-memory row; 0 gives ldmatrix bank conflicts
    swizzle: bool = False  # unpadded rows, 16-byte chunks permuted by XOR: no conflicts, no memory lost

    def __post_init__(self):
        if self.swizzle and self.pad:
            raise ValueError("a swizzled layout has no padding")

    @property
    def threads(self) -> int:
        return (self.bm // self.wm) * (self.bn // self.wn) * 32

    @property
    def shared_bytes(self) -> int:
        """Dynamic shared memory of one block: every stage of the A and B tiles (2-byte elements)."""
        return 2 * self.stages * (self.bm * (self.bk + self.pad) + self.bk * (self.bn + self.pad))

    @property
    def label(self) -> str:
        layout = ", swizzled" if self.swizzle else "" if self.pad else ", no padding"
        return f"{self.bm}x{self.bn}, {self.threads // 32} warps, BK {self.bk}, {self.stages} stages{layout}"

    def name(self, dtype: str = "bfloat16", out: str = "float32") -> str:
        """The kernel's C++ name for these template arguments (NVRTC's name expression)."""
        return (f"tc_gemm<{C_TYPES[dtype]}, {C_TYPES[out]}, {self.bm}, {self.bn}, {self.bk}, "
                f"{self.wm}, {self.wn}, {self.stages}, {self.pad}" + (", true>" if self.swizzle else ">"))

    def instantiation(self, dtype: str = "bfloat16", out: str = "float32") -> str:
        """An explicit instantiation, so that nvcc compiles this variant from ``GEMM_SOURCE``."""
        t, o = C_TYPES[dtype], C_TYPES[out]
        return f"template __global__ void {self.name(dtype, out)}(const {t}*, const {t}*, {o}*, int, int, int);\n"


# Largest first: the first that fits the device is the fastest that runs there. On an H200 at 4096^3
# (bfloat16 in and out) both reach about 0.59 of cuBLAS: the large tile as one block of 8 warps per SM,
# the medium one as two blocks of 4 (2 x 96 KiB fit; with 4 stages, 128 KiB, only one does: 0.51).
CONFIGS = {
    "large": Config(bm=128, bn=256, bk=64, wm=64, wn=64, stages=3, pad=0, swizzle=True),   # 8 warps, 144 KiB
    "medium": Config(bm=128, bn=128, bk=64, wm=64, wn=64, stages=3, pad=0, swizzle=True),  # 4 warps, 96 KiB
}
# The lab's reference: the medium tile with plain double buffering (37 KiB: no opt-in needed).
LAB_CONFIG = Config(bm=128, bn=128, bk=32, wm=64, wn=64, stages=2)
# The chapter's steps, each one change from the one before.
STEP_CONFIGS = {
    "mma.sync, 2 stages, no padding": Config(128, 128, 32, 64, 64, 2, pad=0),
    "+ padded rows": LAB_CONFIG,
    "+ 5 stages": Config(128, 128, 32, 64, 64, 5),
    "+ 128x256 tile, 8 warps, BK 64": Config(128, 256, 64, 64, 64, 3),
    "+ swizzled rows instead of padded": CONFIGS["large"],
}


def fits(config: Config, max_shared_bytes: int) -> bool:
    return config.shared_bytes <= max_shared_bytes


def pick_config(max_shared_bytes: int | None = None) -> Config:
    """The first (fastest) of ``CONFIGS`` whose shared memory fits the device's per-block limit
    (with the opt-in); ``max_shared_bytes`` None asks the current GPU."""
    if max_shared_bytes is None:
        max_shared_bytes = device_limits()["max_shared_bytes"]
    for config in CONFIGS.values():
        if fits(config, max_shared_bytes):
            return config
    return LAB_CONFIG  # 37 KiB fits every GPU with mma.sync


# --------------------------------------------------------------------------- compiling
def device_limits() -> dict:
    """Compute capability (as 90 for 9.0) and the opt-in shared memory per block of the current GPU."""
    import cupy as cp

    return _limits(cp.cuda.Device().id)


@lru_cache(maxsize=None)
def _limits(device_id: int) -> dict:  # asked once per device: a launch should not query the driver
    import cupy as cp

    dev = cp.cuda.Device(device_id)
    return {"cc": int(dev.compute_capability),
            "max_shared_bytes": int(dev.attributes["MaxSharedMemoryPerBlockOptin"])}


def nvrtc_options(cc: int | None = None) -> tuple[str, ...]:
    """NVRTC's options: C++17, and machine code for this GPU's architecture (sm_90 for 9.0)."""
    cc = device_limits()["cc"] if cc is None else cc
    return ("-std=c++17", f"--gpu-architecture=sm_{cc}")


@lru_cache(maxsize=None)
def _module(source: str, names: tuple[str, ...] = ()):
    import cupy as cp

    return cp.RawModule(code=source, options=nvrtc_options(), name_expressions=names or None)


@lru_cache(maxsize=None)
def _gemm_kernel(config: Config, dtype: str, out: str):
    name = config.name(dtype, out)
    kernel = _module(GEMM_SOURCE, (name,)).get_function(name)
    if config.shared_bytes > 48 * 1024:  # past 48 KiB a kernel must opt in to more
        kernel.max_dynamic_shared_size_bytes = config.shared_bytes
    return kernel


def _check_shapes(M: int, N: int, K: int) -> None:
    if K % ALIGN or N % ALIGN:
        raise ValueError(f"K and N must be multiples of {ALIGN} (got K = {K}, N = {N})")


def launch_gemm(config: Config, dtype: str, out: str, a_ptr: int, b_ptr: int, c_ptr: int,
                M: int, N: int, K: int, stream=None) -> None:
    """Launch ``tc_gemm`` on raw device pointers: the one place the grid and shared memory are set."""
    _check_shapes(M, N, K)
    kernel = _gemm_kernel(config, dtype, out)
    blocks = -(-M // config.bm) * -(-N // config.bn)
    args = (np.uint64(a_ptr), np.uint64(b_ptr), np.uint64(c_ptr), np.int32(M), np.int32(N), np.int32(K))
    if stream is None:
        kernel((blocks,), (config.threads,), args, shared_mem=config.shared_bytes)
    else:
        with stream:
            kernel((blocks,), (config.threads,), args, shared_mem=config.shared_bytes)


# --------------------------------------------------------------------------- launchers (CuPy)
def mma_tile(A, B, D, owner) -> None:
    """D = A @ B for one 16 x 16 x 8 tile with one mma.sync (CuPy arrays; A, B float16)."""
    name = MMA_TILE_NAMES["float16"]
    _module(MMA_TILE_SOURCE, tuple(MMA_TILE_NAMES.values())).get_function(name)((1,), (32,), (A, B, D, owner))


def wmma_gemm(A, B, C) -> None:
    """C = A @ B with WMMA: A (M x K), B (K x N) float16 CuPy arrays, C float32 (M x N)."""
    M, K = A.shape
    N = B.shape[1]
    _check_shapes(M, N, K)
    kernel = _module(WMMA_SOURCE).get_function("wmma_gemm")
    kernel((-(-N // WMMA_BN), -(-M // WMMA_BM)), (WMMA_THREADS,),
           (A, B, C, np.int32(M), np.int32(N), np.int32(K)))


def mma_gemm(A, B, C, config: Config | None = None) -> None:
    """C = A @ B with ``tc_gemm``: A (M x K), B (K x N) float16 CuPy arrays, C float32 (M x N).
    ``config`` None: the lab's reference tile (``LAB_CONFIG``)."""
    M, K = A.shape
    N = B.shape[1]
    launch_gemm(config or LAB_CONFIG, "float16", "float32", A.data.ptr, B.data.ptr, C.data.ptr, M, N, K)


def best_mma_gemm(A, B, C) -> None:
    """``mma_gemm`` with the fastest tile that fits this GPU (``pick_config``)."""
    mma_gemm(A, B, C, pick_config())


# --------------------------------------------------------------------------- launchers (torch)
def _torch_stream():
    """torch's current stream as a CuPy stream, so the kernel runs in order with torch's work."""
    import warnings

    import cupy as cp
    import torch

    stream = torch.cuda.current_stream()
    try:
        return cp.cuda.Stream.from_external(stream)  # CuPy 14: any object with __cuda_stream__
    except (AttributeError, TypeError, ValueError):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return cp.cuda.ExternalStream(stream.cuda_stream)


TORCH_TYPES = {"torch.float16": "float16", "torch.bfloat16": "bfloat16", "torch.float32": "float32"}


def gemm_torch(a, b, c, config: Config | None = None) -> None:
    """c = a @ b on torch CUDA tensors with the reference mma.sync kernel, on torch's current stream.

    a (M x K) and b (K x N): bfloat16 or float16, contiguous, the same type; c (M x N), contiguous:
    float32, or the inputs' type (rounded once, at the end, as ``torch.matmul`` on bfloat16 does).
    ``config`` None: the fastest tile that fits the GPU (``pick_config``).
    """
    dtype, out = TORCH_TYPES.get(str(a.dtype)), TORCH_TYPES.get(str(c.dtype))
    if dtype not in ("float16", "bfloat16") or b.dtype != a.dtype or out not in ("float32", dtype):
        raise TypeError(f"a and b must be both bfloat16 or both float16, and c float32 or their type "
                        f"(got {a.dtype}, {b.dtype}, {c.dtype})")
    if not (a.is_contiguous() and b.is_contiguous() and c.is_contiguous()):
        raise ValueError("a, b and c must be contiguous (row-major)")
    M, K = a.shape
    N = b.shape[1]
    if b.shape[0] != K or tuple(c.shape) != (M, N):
        raise ValueError(f"shapes do not match: {tuple(a.shape)} @ {tuple(b.shape)} -> {tuple(c.shape)}")
    _check_shapes(M, N, K)
    launch_gemm(config or pick_config(), dtype, out, a.data_ptr(), b.data_ptr(), c.data_ptr(), M, N, K, _torch_stream())


# --------------------------------------------------------------------------- building with nvcc
MMA_TILE_INSTANTIATIONS = "".join(
    f"template __global__ void {name}(const {t}*, const {t}*, float*, int*);\n"
    for name, t in ((MMA_TILE_NAMES["float16"], "__half"), (MMA_TILE_NAMES["bfloat16"], "__nv_bfloat16")))


def gemm_source_for(configs, types=(("bfloat16", "bfloat16"), ("bfloat16", "float32"), ("float16", "float32"))) -> str:
    """``GEMM_SOURCE`` with explicit instantiations of ``configs`` for each (input, output) type, so
    that nvcc, which compiles only what is instantiated, builds each variant."""
    lines = dict.fromkeys(c.instantiation(d, o) for c in configs for d, o in types)  # each once, in order
    return GEMM_SOURCE + "".join(lines)


def nvcc_compile(source: str, arch: str, timeout: float = 300) -> tuple[bool, str]:
    """Compile ``source`` with nvcc for ``arch`` (e.g. "sm_90") to an object file, with ptxas's report
    of registers and spills. Returns (success, report); needs nvcc, not a GPU."""
    from .cuda_tools import nvcc

    status, log, _ = nvcc(source, ["-std=c++17", f"-arch={arch}", "-Xptxas", "-v"], timeout=timeout)
    return status == 0, log
