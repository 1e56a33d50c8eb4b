# ATTACK (abort): an honest answer in a file named '..py' (its stem is '.': today its results.json is
# written to the --out folder itself, where the gradebook never looks).
# A secure grader: exits 0, grades it (2 points) and lists it in grades.csv.
from numba import cuda


@cuda.jit
def add_kernel(a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i] + b[i]


def vector_add(a, b, out):
    add_kernel[(out.size + 255) // 256, 256](a, b, out)

