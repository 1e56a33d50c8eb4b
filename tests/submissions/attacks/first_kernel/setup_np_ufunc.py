# ATTACK (library): the lab's setup already bound `np` (import numpy as np), so this file never imports
# NumPy and the static check cannot resolve np.add; np.add is a ufunc, which the run-time guard does not
# wrap; it reads the device arrays through __array__ (a hidden copy to the host); the result goes back
# with a slice assignment. Works in the simulator and on a GPU.
# A secure grader gives 0 points for vector_add.
def vector_add(a, b, out):
    out[:] = np.add(a, b)  # noqa: F821 - np comes from the lab's setup
