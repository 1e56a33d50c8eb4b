// cudamalloc_demo.cu: allocate device memory, copy to it, run a kernel, copy back, free.
// Built and run by the chapter "Memory: host, device and cudaMalloc":
//     nvcc -arch=native -o cudamalloc_demo cudamalloc_demo.cu   (native: the GPU in this machine)
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

// Every CUDA runtime call returns a cudaError_t. This macro stops the program with
// the file, line, call and error name when a call does not return cudaSuccess.
#define CUDA_CHECK(call)                                                          \
    do {                                                                          \
        cudaError_t err_ = (call);                                                \
        if (err_ != cudaSuccess) {                                                \
            fprintf(stderr, "%s:%d: %s failed: %s (%s)\n", __FILE__, __LINE__,    \
                    #call, cudaGetErrorName(err_), cudaGetErrorString(err_));     \
            exit(EXIT_FAILURE);                                                   \
        }                                                                         \
    } while (0)

// x[i] = a * x[i] for every i < n.
__global__ void scale(float* x, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        x[i] = a * x[i];
    }
}

int main()
{
    const int n = 1000;
    const size_t bytes = n * sizeof(float);

    // Host memory: an ordinary malloc.
    float* h_x = (float*)malloc(bytes);
    for (int i = 0; i < n; ++i) {
        h_x[i] = (float)i;
    }

    // Device memory: cudaMalloc writes the address it allocated into d_x,
    // so it needs the address of d_x (a float**, passed as a void**).
    float* d_x = NULL;
    printf("before cudaMalloc: d_x = 0x%llx\n", (unsigned long long)(uintptr_t)d_x);
    CUDA_CHECK(cudaMalloc((void**)&d_x, bytes));
    printf("after  cudaMalloc: d_x = 0x%llx\n", (unsigned long long)(uintptr_t)d_x);

    CUDA_CHECK(cudaMemcpy(d_x, h_x, bytes, cudaMemcpyHostToDevice));   // host -> device

    const int threads = 256;
    const int blocks = (n + threads - 1) / threads;
    scale<<<blocks, threads>>>(d_x, 2.0f, n);
    CUDA_CHECK(cudaGetLastError());        // was the launch itself valid?
    CUDA_CHECK(cudaDeviceSynchronize());   // did the kernel run without an error?

    CUDA_CHECK(cudaMemcpy(h_x, d_x, bytes, cudaMemcpyDeviceToHost));   // device -> host

    int wrong = 0;
    for (int i = 0; i < n; ++i) {
        if (h_x[i] != 2.0f * (float)i) {
            ++wrong;
        }
    }
    printf("checked %d elements: %d wrong\n", n, wrong);

    CUDA_CHECK(cudaFree(d_x));
    free(h_x);

    // An error is a return value, not a crash: ask for far more memory than any GPU has.
    float* d_huge = NULL;
    cudaError_t err = cudaMalloc((void**)&d_huge, (size_t)1 << 50);   // 1 PiB
    printf("cudaMalloc of 1 PiB returned %d (%s): %s\n",
           (int)err, cudaGetErrorName(err), cudaGetErrorString(err));
    cudaGetLastError();   // reset the runtime's "last error" after the expected failure

    return wrong == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
