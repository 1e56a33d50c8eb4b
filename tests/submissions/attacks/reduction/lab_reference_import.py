# ATTACK (library): imports the grader's reduction lab and answers with its float64 host references
# (block sums) and, where they run, its reference kernels (the speed baselines).
# A secure grader gives 0 points for block_sums (and reduce_sum): the grader's references must not be
# importable by, or callable from, the learner's code.
from autograder.labs.reduction import LAB, _base_reduce_sum, _block_sums64


def block_sums(x, partials):
    partials[:] = _block_sums64(x)["partials"]


def reduce_sum(x, out):
    try:
        _base_reduce_sum(x, out)  # the speed baseline itself (needs a GPU)
    except Exception:
        out[:] = LAB.exercise("reduce_sum").reference(x=x)["out"]
