# ATTACK (library): the histogram from CuPy's library, cupy.bincount, and the row sums from x.sum:
# right answers, at library speed, with no kernel of the learner's at all.
# A secure grader gives 0 for both exercises: the names are forbidden.
import cupy as cp


def cluster_histogram(x, bins):
    bins[...] = cp.bincount(x, minlength=bins.size)


def cluster_row_sums(x, out):
    out[...] = x.sum(axis=1)
