# ATTACK (abort): an honest answer in a file named grades.csv.py: its folder in the --out folder would be
# 'grades.csv', the gradebook's own name.
# A secure grader: exits 0, grades it (2 points), grades.csv stays a file listing every submission.
from numba import cuda


@cuda.jit
def add_kernel(a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i] + b[i]


def vector_add(a, b, out):
    add_kernel[(out.size + 255) // 256, 256](a, b, out)

