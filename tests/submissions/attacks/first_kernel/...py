# ATTACK (abort): an honest answer in a file named '...py' (its stem is '..': today its folder is the
# parent of the --out folder, so results.json and output.log land outside it).
# A secure grader: exits 0, grades it (2 points) inside the --out folder, writes nothing outside.
from numba import cuda


@cuda.jit
def add_kernel(a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i] + b[i]


def vector_add(a, b, out):
    add_kernel[(out.size + 255) // 256, 256](a, b, out)

