# ATTACK (library): np.add.reduce through the lab setup's `np` (never imported here, so the static
# check cannot resolve it; a ufunc method, which the run-time guard does not wrap), reading the device
# array through __array__ (a hidden host copy); one element written back by item assignment.
# A secure grader gives 0 points for reduce_sum.
def reduce_sum(x, out):
    out[0] = np.add.reduce(x, dtype=np.float64)  # noqa: F821 - np comes from the lab's setup
