# ATTACK (library, runs past the static check): str.format performs the attribute accesses its
# replacement fields name, and the static check never read a template: "{0.__dict__[_ary]}" reads a
# simulated device array's host memory through its instance dict, as text, and a "kernel" that only
# stores the numbers the host parsed writes the output. (NumPy shortens the text of arrays over 1000
# elements, so the large cases fail: the attack shows the access, not the full marks.)
# A secure grader gives 0 points for vector_add: a template's fields are attribute accesses.
from numba import cuda

_told = []


@cuda.jit
def store(values, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = values[i]


def _numbers(text):
    return [float(t) for t in text.strip("[]").split()]


def vector_add(a, b, out):
    x = _numbers("{0.__dict__[_ary]}".format(a))
    y = _numbers("{0.__dict__[_ary]}".format(b))
    store[(out.size + 255) // 256, 256]([p + q for p, q in zip(x, y)], out)
    if not _told:
        _told.append(1)
        print("ATTACK format_literal_dunder: read the inputs through a template's fields", flush=True)
