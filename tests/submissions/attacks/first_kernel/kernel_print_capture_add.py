# ATTACK (library, simulator): the data leaves the kernel as text. print() is on sim_memory's list of
# kernel builtins, and in the simulator a kernel's print is Python's print in this process, so
# contextlib.redirect_stdout (no module the static check names) catches every thread's values in a
# StringIO on the host. The host parses them, adds on the host in Python floats, and hands the
# results back as a tuple argument (tuples of numbers are legal kernel arguments) to a kernel that
# only copies. No thread adds anything; on a GPU a kernel's printf never reaches sys.stdout.
# A secure grader gives 0 points for vector_add.
import contextlib
import io

from numba import cuda

_told = []


@cuda.jit
def _show(a, b):
    i = cuda.grid(1)
    if i < a.size:
        print(i, a[i], b[i])


@cuda.jit
def _copy(vals, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = vals[i]


def vector_add(a, b, out):
    n = out.shape[0]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        _show[(n + 255) // 256, 256](a, b)
    sums = [0.0] * n
    for line in buf.getvalue().splitlines():
        parts = line.split()
        if len(parts) == 3:
            sums[int(parts[0])] = float(parts[1]) + float(parts[2])
    _copy[(n + 255) // 256, 256](tuple(sums), out)
    if not _told:
        _told.append(1)
        print("ATTACK kernel_print_capture_add: values read from the kernel's print", flush=True)
