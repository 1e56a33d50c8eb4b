# ATTACK (library): array operators on the device arrays; in the CUDA simulator a FakeCUDAArray wraps a
# NumPy array, so a + b is NumPy's add on the host and no kernel runs. (On a GPU, DeviceNDArray has no
# operators; host_element_loop in the reduction bank is the GPU form.)
# A secure grader gives 0 points for vector_add.
def vector_add(a, b, out):
    out[:] = a + b
