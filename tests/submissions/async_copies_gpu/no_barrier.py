# MISTAKE: no __syncthreads() after the wait: a thread's wait covers its own copies only, so it may
# read values another thread has not copied yet, and refill a stage others still read.
import numpy as np

THREADS = 256        # threads per block
PER_THREAD = 8       # neighbouring outputs per thread
TILE = THREADS * PER_THREAD
STAGES = 3           # spans of x in each block's ring
BLOCKS_PER_SM = 2

# cp.async in inline PTX, as in the chapter (course/async_copies.py)
CP_ASYNC = r"""
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, int src_bytes) {
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(d), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_4(void* dst, const void* src, int src_bytes) {
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" :: "r"(d), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
#define CP_ASYNC_WAIT(n) asm volatile("cp.async.wait_group %0;\n" :: "n"(n) : "memory")

// the stencil's weights, w[j] = ((j - 8)^2 + 1) / 425: constants once the loop over j is unrolled
__device__ __forceinline__ float weight(int j) { return (float)((j - 8) * (j - 8) + 1) / 425.0f; }
"""

_kernel = None   # compiled on first use
_sms = None      # the GPU's SMs, looked up on first use


def stencil_pipeline(x, y):
    import cupy as cp

    global _kernel, _sms
    if _kernel is None:
        source = CP_ASYNC + r"""
        #define R 8
        #define PER_THREAD 8
        #define THREADS 256
        #define TILE (THREADS * PER_THREAD)
        #define SPAN (TILE + 2 * R)            // floats of x one tile reads
        #define CHUNKS (SPAN / 4)              // its copies of 16 bytes
        #define STAGES 3

        extern "C" __global__ void __launch_bounds__(THREADS)
        stencil_pipeline(const float* __restrict__ x, float* __restrict__ y, long long n) {
            extern __shared__ float4 smem[];
            float* ring = reinterpret_cast<float*>(smem);  // STAGES spans
            const int t = threadIdx.x;
            const long long tiles = (n + TILE - 1) / TILE;
            // this block's tiles: blockIdx.x + k * gridDim.x, for k = 0 .. mine - 1
            const long long mine = blockIdx.x < tiles ? (tiles - 1 - blockIdx.x) / gridDim.x + 1 : 0;
            const bool x16 = (reinterpret_cast<size_t>(x) & 15) == 0;
            const bool y16 = (reinterpret_cast<size_t>(y) & 15) == 0;

            auto issue = [&](long long k) {            // the copies of tile k's span into its stage
                const long long first = (blockIdx.x + k * gridDim.x) * TILE - R;
                float* stage = ring + (k % STAGES) * SPAN;
                for (int c = t; c < CHUNKS; c += THREADS) {
                    const long long i = first + 4 * c;
                    const long long left = n - i;     // values of x from i on
                    const int in = i < 0 ? 0 : (left >= 4 ? 4 : (int)max(left, 0LL));
                    if (x16) {
                        cp_async_16(stage + 4 * c, in > 0 ? x + i : x, 4 * in);
                    } else {
                        for (int j = 0; j < 4; ++j)
                            cp_async_4(stage + 4 * c + j, j < in ? x + i + j : x, j < in ? 4 : 0);
                    }
                }
            };

            for (int s = 0; s < STAGES - 1; ++s) {     // prologue: two tiles in flight
                if (s < mine) issue(s);
                cp_async_commit();                     // one group per step, even an empty one
            }
            for (long long k = 0; k < mine; ++k) {
                CP_ASYNC_WAIT(STAGES - 2);             // this thread's copies of tile k have landed
                if (k + STAGES - 1 < mine) issue(k + STAGES - 1);
                cp_async_commit();

                const float* src = ring + (k % STAGES) * SPAN + t * PER_THREAD;
                float v[PER_THREAD + 2 * R];
        #pragma unroll
                for (int q = 0; q < (PER_THREAD + 2 * R) / 4; ++q) {
                    const float4 f = reinterpret_cast<const float4*>(src)[q];
                    v[4 * q] = f.x; v[4 * q + 1] = f.y; v[4 * q + 2] = f.z; v[4 * q + 3] = f.w;
                }
                float out[PER_THREAD];
        #pragma unroll
                for (int o = 0; o < PER_THREAD; ++o) {
                    float s = 0.0f;
        #pragma unroll
                    for (int j = 0; j <= 2 * R; ++j) s = fmaf(weight(j), v[o + j], s);
                    out[o] = s;
                }
                const long long i0 = (blockIdx.x + k * gridDim.x) * TILE + t * PER_THREAD;
                if (y16 && i0 + PER_THREAD <= n) {
                    float4* dst = reinterpret_cast<float4*>(y + i0);
                    dst[0] = make_float4(out[0], out[1], out[2], out[3]);
                    dst[1] = make_float4(out[4], out[5], out[6], out[7]);
                } else {
        #pragma unroll
                    for (int o = 0; o < PER_THREAD; ++o)
                        if (i0 + o < n) y[i0 + o] = out[o];
                }
            }
        }
        """
        _kernel = cp.RawKernel(source, "stencil_pipeline", options=("-std=c++17",))
    if _sms is None:
        _sms = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["multiProcessorCount"]
    n = x.size
    tiles = (n + TILE - 1) // TILE
    blocks = min(tiles, BLOCKS_PER_SM * _sms)
    shared = STAGES * (TILE + 16) * 4        # 24.2 KiB: below 48 KiB, no opt-in needed
    _kernel((blocks,), (THREADS,), (x, y, np.int64(n)), shared_mem=shared)
