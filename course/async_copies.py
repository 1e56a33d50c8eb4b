"""Asynchronous copies (``cp.async``) in CUDA C, for the chapter *Asynchronous copies and pipelines*.

Two kernels, each built from one source with a few switches, so that the chapter can change one
thing at a time and measure it:

- an FP32 SGEMM (``C = A @ B``) with 128 x 128 block tiles, 256 threads, 8 x 8 outputs per
  thread in warp tiles, whose tiles reach shared memory either through registers (loads, then
  stores) or with ``cp.async``, in 1 to 4 stages;
- a 1D stencil of radius 8 (``y[i] = sum_j w[j] x[i + j - 8]``, zeros outside ``x``) whose
  tiles are loaded the same two ways, by a fixed number of blocks that walk over the array.

``sgemm_async(A, B, C)`` is the course's fastest SGEMM, with the contract of Lab 7's SGEMM
exercises: device arrays, float32, any shape. Everything that launches needs CuPy and a GPU;
the sources themselves are plain text, compiled with nvcc on any machine by ``nvcc_compile``.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

ASYNC_CC = (8, 0)  # cp.async came with compute capability 8.0 (Ampere)

# --------------------------------------------------------------------------- cp.async in PTX
# The three instructions, each wrapped in a device function. The source size operand (the last
# one of cp.async) says how many of the bytes to read; the rest of the destination is filled
# with zeros: that is how tiles past the matrix's edge are padded without a branch.
CP_ASYNC_CU = r"""
__device__ __forceinline__ unsigned shared_address(const void* p) {
    // cp.async wants a shared-memory address (32 bits), not a generic pointer
    unsigned a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, int src_bytes) {
    // 16 bytes global -> shared, around the registers and the L1 (.cg); src_bytes < 16: zero fill
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(shared_address(dst)), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_4(void* dst, const void* src, int src_bytes) {
    // 4 bytes: the smallest copy; .ca (through the L1) is the only form for fewer than 16
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n"
                 :: "r"(shared_address(dst)), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
    // close a group: every cp.async this thread issued since the last commit
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
#define CP_ASYNC_WAIT(n) asm volatile("cp.async.wait_group %0;\n" :: "n"(n) : "memory")
"""

# --------------------------------------------------------------------------- SGEMM
SGEMM_BODY = r"""
// Switches, defined before this text: BK (8 or 16), STAGES (1 to 4), ASYNC (0: tiles through
// registers; 1: cp.async), A_VEC (1: A copied 16 bytes at a time and kept as it lies in memory,
// row by row; 0: 4 bytes at a time, transposed), FIXED_STAGE (1: the stage a tile sits in is a
// constant in the FMA loop), SWIZZLE (0, or a number of block rows that walk B together),
// MIN_BLOCKS. A block of 256 threads computes a 128 x 128 tile of C. Its 8 warps are arranged
// 4 (rows) x 2 (columns), each owning 32 x 64 outputs; in a warp, the 32 lanes are arranged
// 4 x 8, each lane owning 8 rows and two groups of 4 neighbouring columns (8 x 8 outputs).
#define BM 128
#define BN 128
#if A_VEC
#define AK (BK + 4)                  // As[s][r][p]: a row of the tile; +4: 4 rows hit 16 banks each
#define A_STAGE (BM * AK)
#else
#define AS_STRIDE (BM + 4)           // As[s][p][r], transposed; +4 spreads its stores over the banks
#define A_STAGE (BK * AS_STRIDE)
#endif
#define B_STAGE (BK * BN)

extern "C" __global__ void __launch_bounds__(256, MIN_BLOCKS)
sgemm_async(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
            int m, int n, int k) {
    extern __shared__ float4 smem4[];                 // STAGES tiles of A, then STAGES of B
    float* As = reinterpret_cast<float*>(smem4);
    float* Bs = As + STAGES * A_STAGE;                // Bs[s][p][c] = B[k0 + p][col0 + c]
    const int t = threadIdx.x, warp = t / 32, lane = t % 32;
    int bx = blockIdx.x, by = blockIdx.y;
#if SWIZZLE
    {   // groups of SWIZZLE block rows: the blocks running at once share fewer panels of B
        const int id = by * gridDim.x + bx, per_group = SWIZZLE * gridDim.x;
        const int first = (id / per_group) * SWIZZLE, rows = min(SWIZZLE, (int)gridDim.y - first);
        by = first + (id % per_group) % rows;
        bx = (id % per_group) / rows;
    }
#endif
    const int row0 = by * BM, col0 = bx * BN;
#if A_VEC
    const int tr = (warp / 2) * 32 + lane / 8;        // the thread's rows: tr + 4 i, i = 0..7
#define OUT_ROW(i) (tr + 4 * (i))
#else
    const int tr = (warp / 2) * 32 + (lane / 8) * 4;  // rows tr .. tr + 3 and tr + 16 .. tr + 19
#define OUT_ROW(i) (tr + ((i) % 4) + 16 * ((i) / 4))
#endif
    const int tc = (warp % 2) * 64 + (lane % 8) * 4;  // columns tc .. tc + 3 and tc + 32 .. tc + 35
    // 16-byte copies need every row to start on a 16-byte boundary.
    const bool b_vec = (n % 4 == 0) && (reinterpret_cast<size_t>(B) % 16 == 0);
    const int ktiles = (k + BK - 1) / BK;

#if ASYNC
    // What a thread copies stays the same from tile to tile, but for the step along k: its
    // rows of A and columns of B (checked against m and n once), and where they start.
#if A_VEC
    const bool a_vec = (k % 4 == 0) && (reinterpret_cast<size_t>(A) % 16 == 0);
#define A_COPIES (BK * BM / 1024)                      // of 16 bytes per thread per tile
#define A_ROW_STEP (1024 / BK)                         // rows between a thread's copies
    const int a_r = t / (BK / 4), a_c = (t % (BK / 4)) * 4;
#else
#define A_COPIES (BK * BM / 256)                       // of 4 bytes
#define A_ROW_STEP (256 / BK)
    const int a_r = t / BK, a_c = t % BK;
#endif
#define B_COPIES (BK * BN / 1024)
    const int b_r = t / (BN / 4), b_c = (t % (BN / 4)) * 4;
    unsigned a_rows_in = 0;                            // bit r: row a_r + r A_ROW_STEP is inside A
#pragma unroll
    for (int r = 0; r < A_COPIES; ++r) a_rows_in |= (row0 + a_r + r * A_ROW_STEP < m) << r;
    const float* a_src = A + (size_t)(row0 + a_r) * k + a_c;
    const float* b_src = B + (size_t)b_r * n + col0 + b_c;
    const int b_cols_in = n - (col0 + b_c);            // columns of B from this thread's first on
    auto load_tile = [&](int kt, int s) {              // issue the copies of tile kt into stage s
        const int k0 = kt * BK;
        float* as = As + s * A_STAGE;
        float* bs = Bs + s * B_STAGE + b_r * BN + b_c;
#pragma unroll
        for (int r = 0; r < A_COPIES; ++r) {
            const float* src = a_src + (size_t)r * A_ROW_STEP * k + k0;
            const bool row_in = (a_rows_in >> r) & 1;
#if A_VEC
            float* dst = as + (a_r + r * A_ROW_STEP) * AK + a_c;   // A: 16 bytes, rows as they are
            if (a_vec) {
                const bool in = row_in && k0 + a_c < k;
                cp_async_16(dst, in ? src : A, in ? 16 : 0);
            } else {
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const bool in = row_in && k0 + a_c + j < k;
                    cp_async_4(dst + j, in ? src + j : A, in ? 4 : 0);
                }
            }
#else
            const bool in = row_in && k0 + a_c < k;               // A: 4 bytes, transposed
            cp_async_4(as + a_c * AS_STRIDE + a_r + r * A_ROW_STEP, in ? src : A, in ? 4 : 0);
#endif
        }
#pragma unroll
        for (int r = 0; r < B_COPIES; ++r) {                       // B: 16 bytes (4 floats)
            const float* src = b_src + (size_t)(k0 + r * (1024 / BN)) * n;
            float* dst = bs + r * (1024 / BN) * BN;
            const bool row_in = k0 + b_r + r * (1024 / BN) < k;
            if (b_vec) {
                const bool in = row_in && b_cols_in > 0;          // n % 4 == 0: all four or none
                cp_async_16(dst, in ? src : B, in ? 16 : 0);
            } else {
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const bool in = row_in && j < b_cols_in;
                    cp_async_4(dst + j, in ? src + j : B, in ? 4 : 0);
                }
            }
        }
    };
#else
    float ra[BK * BM / 256];                          // a tile's share of each thread, in registers
    float4 rb[BK * BN / 1024];
    auto fetch_tile = [&](int kt) {                   // global -> registers
        const int k0 = kt * BK;
#pragma unroll
        for (int r = 0; r < BK * BM / 256; ++r) {
            const int e = t + 256 * r, ar = e / BK, ac = e % BK;
            ra[r] = (row0 + ar < m && k0 + ac < k) ? A[(size_t)(row0 + ar) * k + k0 + ac] : 0.0f;
        }
#pragma unroll
        for (int r = 0; r < BK * BN / 1024; ++r) {
            const int e = t + 256 * r, br = e / (BN / 4), bc = (e % (BN / 4)) * 4;
            const int hr = k0 + br, hc = col0 + bc;
            if (b_vec) {
                rb[r] = (hr < k && hc < n) ? *reinterpret_cast<const float4*>(B + (size_t)hr * n + hc)
                                           : make_float4(0.f, 0.f, 0.f, 0.f);
            } else {
                const float* row = B + (size_t)hr * n;
                rb[r].x = (hr < k && hc < n) ? row[hc] : 0.0f;
                rb[r].y = (hr < k && hc + 1 < n) ? row[hc + 1] : 0.0f;
                rb[r].z = (hr < k && hc + 2 < n) ? row[hc + 2] : 0.0f;
                rb[r].w = (hr < k && hc + 3 < n) ? row[hc + 3] : 0.0f;
            }
        }
    };
    auto store_tile = [&](int s) {                    // registers -> shared memory
        float* as = As + s * A_STAGE;
        float* bs = Bs + s * B_STAGE;
#pragma unroll
        for (int r = 0; r < BK * BM / 256; ++r) {
            const int e = t + 256 * r, ar = e / BK, ac = e % BK;
            as[ac * AS_STRIDE + ar] = ra[r];
        }
#pragma unroll
        for (int r = 0; r < BK * BN / 1024; ++r) {
            const int e = t + 256 * r, br = e / (BN / 4), bc = (e % (BN / 4)) * 4;
            *reinterpret_cast<float4*>(bs + br * BN + bc) = rb[r];
        }
    };
#endif

    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;

    auto compute_tile = [&](int s) {                  // 64 FMAs per 4 shared loads of 16 bytes
        const float* as = As + s * A_STAGE;
        const float* bs = Bs + s * B_STAGE;
#if A_VEC
#pragma unroll
        for (int p4 = 0; p4 < BK; p4 += 4) {          // 4 steps of k: 8 + 4 x 2 loads of 16 bytes
            float4 a4[8];
#pragma unroll
            for (int i = 0; i < 8; ++i) a4[i] = *reinterpret_cast<const float4*>(as + (tr + 4 * i) * AK + p4);
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const float4 b0 = *reinterpret_cast<const float4*>(bs + (p4 + q) * BN + tc);
                const float4 b1 = *reinterpret_cast<const float4*>(bs + (p4 + q) * BN + tc + 32);
                const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    const float a = q == 0 ? a4[i].x : q == 1 ? a4[i].y : q == 2 ? a4[i].z : a4[i].w;
#pragma unroll
                    for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a, b[j], acc[i][j]);
                }
            }
        }
#else
#pragma unroll
        for (int p = 0; p < BK; ++p) {
            const float4 a0 = *reinterpret_cast<const float4*>(as + p * AS_STRIDE + tr);
            const float4 a1 = *reinterpret_cast<const float4*>(as + p * AS_STRIDE + tr + 16);
            const float4 b0 = *reinterpret_cast<const float4*>(bs + p * BN + tc);
            const float4 b1 = *reinterpret_cast<const float4*>(bs + p * BN + tc + 32);
            const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
#endif
    };
#if FIXED_STAGE
    // One copy of the FMA loop per stage, each with its shared-memory offsets as constants.
    auto compute_stage = [&](int s) {
        switch (s) {
            case 0: compute_tile(0); break;
#if STAGES > 1
            case 1: compute_tile(1); break;
#endif
#if STAGES > 2
            case 2: compute_tile(2); break;
#endif
#if STAGES > 3
            case 3: compute_tile(3); break;
#endif
        }
    };
#else
#define compute_stage compute_tile
#endif

#if ASYNC && STAGES == 1
    for (int kt = 0; kt < ktiles; ++kt) {             // copy, wait for it, compute: no overlap
        load_tile(kt, 0);
        cp_async_commit();
        CP_ASYNC_WAIT(0);
        __syncthreads();
        compute_tile(0);
        __syncthreads();
    }
#elif ASYNC
    // Prologue: STAGES - 1 tiles in flight. Every iteration commits one group (empty past the
    // last tile), so "at most STAGES - 2 groups pending" always means "tile kt has landed".
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < ktiles) load_tile(s, s);
        cp_async_commit();
    }
    for (int kt = 0; kt < ktiles; ++kt) {
        CP_ASYNC_WAIT(STAGES - 2);                    // this thread's copies of tile kt are done
        __syncthreads();                              // everyone's are; and tile kt - 1 is used up
        const int next = kt + STAGES - 1;             // refill the stage tile kt - 1 used
        if (next < ktiles) load_tile(next, next % STAGES);
        cp_async_commit();
        compute_stage(kt % STAGES);
    }
#elif STAGES == 1
    for (int kt = 0; kt < ktiles; ++kt) {             // load, store, compute: the load stalls
        fetch_tile(kt);
        store_tile(0);
        __syncthreads();
        compute_tile(0);
        __syncthreads();
    }
#else
    // Double buffering through registers (the pre-Ampere way): the loads of tile kt + 1 are
    // issued before the FMAs of tile kt, and stored to the other stage after them.
    if (ktiles > 0) { fetch_tile(0); store_tile(0); }
    __syncthreads();
    for (int kt = 0; kt < ktiles; ++kt) {
        if (kt + 1 < ktiles) fetch_tile(kt + 1);
        compute_stage(kt % 2);
        if (kt + 1 < ktiles) store_tile((kt + 1) % 2);
        __syncthreads();
    }
#endif

    // Write the 8 x 8 outputs: 16-byte stores where a row of C allows them.
    const bool c_vec = (n % 4 == 0) && (reinterpret_cast<size_t>(C) % 16 == 0);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int row = row0 + OUT_ROW(i);
        if (row >= m) continue;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int col = col0 + tc + 32 * h;
            float* dst = C + (size_t)row * n + col;
            if (c_vec && col + 3 < n) {
                *reinterpret_cast<float4*>(dst) =
                    make_float4(acc[i][4 * h], acc[i][4 * h + 1], acc[i][4 * h + 2], acc[i][4 * h + 3]);
            } else {
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    if (col + j < n) dst[j] = acc[i][4 * h + j];
            }
        }
    }
}
"""

SGEMM_THREADS = 256
SGEMM_TILE = 128


@dataclass(frozen=True)
class SgemmVariant:
    """One build of the SGEMM: the step along k, the number of stages, and how tiles are copied."""
    bk: int = 8
    stages: int = 1
    asynchronous: bool = False
    min_blocks: int = 2  # blocks per SM the compiler must leave registers for (__launch_bounds__)
    a_vec: bool = False  # A copied 16 bytes at a time, rows kept as they are (cp.async only)
    fixed_stage: bool = False  # one FMA loop per stage, its offsets constants
    swizzle: int = 0  # block rows walked together (0: row after row)

    @property
    def needs_cc(self) -> tuple[int, int]:
        return ASYNC_CC if self.asynchronous else (7, 0)

    def source(self) -> str:
        if self.a_vec and not self.asynchronous:
            raise ValueError("the row-by-row tile of A is built for cp.async only")
        head = (f"#define BK {self.bk}\n#define STAGES {self.stages}\n#define ASYNC {int(self.asynchronous)}\n"
                f"#define MIN_BLOCKS {self.min_blocks}\n#define A_VEC {int(self.a_vec)}\n"
                f"#define FIXED_STAGE {int(self.fixed_stage)}\n#define SWIZZLE {self.swizzle}\n")
        return head + (CP_ASYNC_CU if self.asynchronous else "") + SGEMM_BODY

    def shared_bytes(self) -> int:
        a_tile = SGEMM_TILE * (self.bk + 4) if self.a_vec else self.bk * (SGEMM_TILE + 4)
        return 4 * self.stages * (a_tile + self.bk * SGEMM_TILE)

    def label(self) -> str:
        how = "cp.async" if self.asynchronous else "through registers"
        extra = ", A by rows" if self.a_vec else ""
        extra += ", constant offsets" if self.fixed_stage else ""
        return f"BK {self.bk}, {self.stages} stage{'s' if self.stages > 1 else ''}, {how}{extra}"


# The chapter's steps after Lab 7's kernel, one change each; the last is the reference.
SGEMM_STEPS = {
    "warp tiles, 16-byte shared loads": SgemmVariant(8, 1, False),
    "BK 16": SgemmVariant(16, 1, False),
    "double buffer through registers": SgemmVariant(16, 2, False, fixed_stage=True),
    "cp.async, 1 stage": SgemmVariant(16, 1, True),
    "cp.async, 2 stages": SgemmVariant(16, 2, True),
    "2 stages, constant offsets": SgemmVariant(16, 2, True, fixed_stage=True),
}
# The build each step changes (the register double buffer is a side branch from "BK 16").
SGEMM_PARENT = {
    "warp tiles, 16-byte shared loads": "Lab 7, CUDA C",
    "BK 16": "warp tiles, 16-byte shared loads",
    "double buffer through registers": "BK 16",
    "cp.async, 1 stage": "BK 16",
    "cp.async, 2 stages": "cp.async, 1 stage",
    "2 stages, constant offsets": "cp.async, 2 stages",
}
# The reference: 0.82 to 0.84 of cuBLAS at 4096^3 on an H200 (CuPy 14.2, CUDA 13), where the
# 1-stage kernel reached 0.79 and the 3- and 4-stage ones 0.82; the chapter measures them all.
REFERENCE = SGEMM_STEPS["2 stages, constant offsets"]


@lru_cache(maxsize=None)
def sgemm_kernel(variant: SgemmVariant):
    """The compiled kernel (a cupy.RawKernel), allowed the dynamic shared memory it needs."""
    import cupy as cp

    kernel = cp.RawKernel(variant.source(), "sgemm_async", options=("-std=c++17",))
    kernel.max_dynamic_shared_size_bytes = variant.shared_bytes()  # above 48 KiB needs this
    return kernel


def launch_sgemm(variant: SgemmVariant, A, B, C) -> None:
    """C = A @ B with one variant; A, B, C: float32 device arrays (CuPy, Numba, PyTorch), C-contiguous."""
    import cupy as cp

    A, B, C = cp.asarray(A), cp.asarray(B), cp.asarray(C)
    m, k = A.shape
    n = B.shape[1]
    if m == 0 or n == 0:
        return
    grid = ((n + SGEMM_TILE - 1) // SGEMM_TILE, (m + SGEMM_TILE - 1) // SGEMM_TILE)
    sgemm_kernel(variant)(grid, (SGEMM_THREADS,), (A, B, C, np.int32(m), np.int32(n), np.int32(k)),
                          shared_mem=variant.shared_bytes())


def sgemm_async(A, B, C) -> None:
    """The reference SGEMM with asynchronous copies: C = A @ B (Lab 7's contract; needs cc 8.0)."""
    launch_sgemm(REFERENCE, A, B, C)


# --------------------------------------------------------------------------- stencil
RADIUS = 8
STENCIL_THREADS = 256
PER_THREAD = 8  # consecutive outputs per thread
STENCIL_TILE = STENCIL_THREADS * PER_THREAD  # outputs per tile
STENCIL_WEIGHTS = (np.arange(-RADIUS, RADIUS + 1) ** 2 + 1.0).astype(np.float32)
STENCIL_WEIGHTS /= STENCIL_WEIGHTS.sum()

STENCIL_BODY = r"""
// Switches: STAGES (1 to 4), ASYNC (0: through registers; 1: cp.async; 2: cp.async written with
// the C++ primitives of <cuda_pipeline_primitives.h>). y[i] = sum_j w[j] x[i + j - R], with
// x = 0 outside [0, n). A fixed grid of blocks walks over the tiles of y; the tiles of x
// (TILE + 2R floats, 16-byte aligned because R is a multiple of 4) pass through shared memory.
#define R 8
#define PER_THREAD 8
#define TILE (256 * PER_THREAD)
#define SPAN (TILE + 2 * R)                // floats of x a tile needs
#define CHUNKS (SPAN / 4)                  // of 16 bytes

__constant__ float w[2 * R + 1];

extern "C" __global__ void __launch_bounds__(256)
stencil(const float* __restrict__ x, float* __restrict__ y, int n) {
    extern __shared__ float4 smem4[];      // STAGES tiles of SPAN floats
    float* xs = reinterpret_cast<float*>(smem4);
    const int t = threadIdx.x;
    const int tiles = (n + TILE - 1) / TILE;
    const bool vec = reinterpret_cast<size_t>(x) % 16 == 0;   // a view at an odd offset is not

    auto load_tile = [&](int tile, int s) {                   // x[tile * TILE - R, ... + SPAN)
        float* dst = xs + s * SPAN;
        const long long first = (long long)tile * TILE - R;
        for (int c = t; c < CHUNKS; c += 256) {
            const long long i = first + 4 * c;
            const long long left = n - i;                      // floats of x from i on
            const int valid = i < 0 ? 0 : (left >= 4 ? 4 : (left > 0 ? (int)left : 0));
#if ASYNC
            if (vec) {
                const float* src = valid > 0 ? x + i : x;
#if ASYNC == 2
                __pipeline_memcpy_async(dst + 4 * c, src, 16, 16 - 4 * valid);   // zero-fills the rest
#else
                cp_async_16(dst + 4 * c, src, 4 * valid);
#endif
            } else {
                for (int j = 0; j < 4; ++j) {
                    const bool in = j < valid;
#if ASYNC == 2
                    __pipeline_memcpy_async(dst + 4 * c + j, in ? x + i + j : x, 4, in ? 0 : 4);
#else
                    cp_async_4(dst + 4 * c + j, in ? x + i + j : x, in ? 4 : 0);
#endif
                }
            }
#else
            float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
            if (vec && valid == 4) {
                v = *reinterpret_cast<const float4*>(x + i);
            } else {
                if (valid > 0) v.x = x[i];
                if (valid > 1) v.y = x[i + 1];
                if (valid > 2) v.z = x[i + 2];
                if (valid > 3) v.w = x[i + 3];
            }
            *reinterpret_cast<float4*>(dst + 4 * c) = v;
#endif
        }
    };

    auto compute_tile = [&](int tile, int s) {                // 8 outputs from 24 values
        const float* src = xs + s * SPAN + t * PER_THREAD;
        float v[PER_THREAD + 2 * R];
#pragma unroll
        for (int q = 0; q < (PER_THREAD + 2 * R) / 4; ++q) {
            const float4 f = reinterpret_cast<const float4*>(src)[q];
            v[4 * q] = f.x; v[4 * q + 1] = f.y; v[4 * q + 2] = f.z; v[4 * q + 3] = f.w;
        }
        float out[PER_THREAD];
#pragma unroll
        for (int o = 0; o < PER_THREAD; ++o) {
            float s_ = 0.0f;
#pragma unroll
            for (int j = 0; j <= 2 * R; ++j) s_ = fmaf(w[j], v[o + j], s_);
            out[o] = s_;
        }
        const long long i0 = (long long)tile * TILE + t * PER_THREAD;
        if (i0 + PER_THREAD <= n && reinterpret_cast<size_t>(y) % 16 == 0) {
            reinterpret_cast<float4*>(y + i0)[0] = make_float4(out[0], out[1], out[2], out[3]);
            reinterpret_cast<float4*>(y + i0)[1] = make_float4(out[4], out[5], out[6], out[7]);
        } else {
#pragma unroll
            for (int o = 0; o < PER_THREAD; ++o)
                if (i0 + o < n) y[i0 + o] = out[o];
        }
    };

#if ASYNC == 2
#define COMMIT() __pipeline_commit()
#define WAIT(n) __pipeline_wait_prior(n)
#elif ASYNC
#define COMMIT() cp_async_commit()
#define WAIT(n) CP_ASYNC_WAIT(n)
#endif

#if ASYNC && STAGES > 1
    // The block's tiles are blockIdx.x, blockIdx.x + gridDim.x, ...: the j-th of them is tile_of(j).
    auto tile_of = [&](int j) { return blockIdx.x + j * gridDim.x; };
    const int mine = tiles > (int)blockIdx.x ? (tiles - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < mine) load_tile(tile_of(s), s);
        COMMIT();
    }
    for (int j = 0; j < mine; ++j) {
        WAIT(STAGES - 2);
        __syncthreads();
        const int next = j + STAGES - 1;
        if (next < mine) load_tile(tile_of(next), next % STAGES);
        COMMIT();
        compute_tile(tile_of(j), j % STAGES);
    }
#else
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {   // load, wait, compute
        load_tile(tile, 0);
#if ASYNC
        COMMIT();
        WAIT(0);
#endif
        __syncthreads();
        compute_tile(tile, 0);
        __syncthreads();
    }
#endif
}
"""


@dataclass(frozen=True)
class StencilVariant:
    stages: int = 1
    asynchronous: bool = False
    cpp: bool = False  # the C++ primitives (__pipeline_memcpy_async) instead of inline PTX

    @property
    def needs_cc(self) -> tuple[int, int]:
        return ASYNC_CC if self.asynchronous else (7, 0)

    def source(self) -> str:
        mode = (2 if self.cpp else 1) if self.asynchronous else 0
        head = f"#define STAGES {self.stages}\n#define ASYNC {mode}\n"
        if self.cpp:
            return head + "#include <cuda_pipeline_primitives.h>\n" + STENCIL_BODY
        return head + (CP_ASYNC_CU if self.asynchronous else "") + STENCIL_BODY

    def shared_bytes(self) -> int:
        return 4 * self.stages * (STENCIL_TILE + 2 * RADIUS)

    def label(self) -> str:
        if not self.asynchronous:
            return "through registers"
        how = "cp.async (C++ primitives)" if self.cpp else "cp.async"
        return f"{how}, {self.stages} stage{'s' if self.stages > 1 else ''}"


STENCIL_STEPS = {
    "through registers": StencilVariant(1, False),
    "cp.async, 1 stage": StencilVariant(1, True),
    "cp.async, 2 stages": StencilVariant(2, True),
    "cp.async, 3 stages": StencilVariant(3, True),
    "cp.async, 4 stages": StencilVariant(4, True),
}


@lru_cache(maxsize=None)
def stencil_kernel(variant: StencilVariant):
    """(the cupy.RawModule's kernel, its module); the weights are copied into constant memory."""
    import cupy as cp

    module = cp.RawModule(code=variant.source(), options=("-std=c++17",))
    w = module.get_global("w")  # a MemoryPointer to the __constant__ array
    cp.ndarray(STENCIL_WEIGHTS.shape, cp.float32, w)[...] = cp.asarray(STENCIL_WEIGHTS)
    kernel = module.get_function("stencil")
    kernel.max_dynamic_shared_size_bytes = variant.shared_bytes()
    return kernel


def launch_stencil(variant: StencilVariant, x, y, blocks: int | None = None) -> None:
    """y = the stencil of x (float32 device vectors). ``blocks``: how many blocks walk the tiles
    (default: one per tile)."""
    import cupy as cp

    x, y = cp.asarray(x), cp.asarray(y)
    n = x.size
    tiles = (n + STENCIL_TILE - 1) // STENCIL_TILE
    if tiles == 0:
        return
    grid = min(tiles, blocks) if blocks else tiles
    stencil_kernel(variant)((grid,), (STENCIL_THREADS,), (x, y, np.int32(n)),
                            shared_mem=variant.shared_bytes())


def stencil_reference(x: np.ndarray) -> np.ndarray:
    """The stencil in float64, zeros outside x."""
    xp = np.pad(np.asarray(x, dtype=np.float64), RADIUS)
    w = STENCIL_WEIGHTS.astype(np.float64)
    n = len(x)
    return sum(w[j] * xp[j:j + n] for j in range(2 * RADIUS + 1))


# --------------------------------------------------------------------------- building without a GPU
def nvcc_compile(source: str, arch: str = "sm_90", timeout: float = 180) -> tuple[bool, str]:
    """Compile ``source`` to PTX with nvcc for ``arch`` (no GPU needed): (True, the PTX) or
    (False, nvcc's errors)."""
    from .cuda_tools import nvcc

    status, log, ptx = nvcc(source, [f"-arch={arch}", "-std=c++17"], ptx=True, timeout=timeout)
    return (True, ptx) if status == 0 else (False, log)
