# ATTACK (library): imports the grader's own lab module and answers with its reference kernels (the
# baselines the speed is measured against); where those cannot run (the CUDA simulator), with the lab's own
# reference function applied to the device arrays.
# A secure grader gives 0 points for vector_add (and saxpy): the grader's references must not be
# importable by, or callable from, the learner's code.
import autograder.labs.first_kernel as _lab


def vector_add(a, b, out):
    try:
        _lab._base_add(a, b, out)
    except Exception:
        out[:] = _lab.LAB.exercise("vector_add").reference(a=a, b=b)["out"]


def saxpy(alpha, x, y, out):
    try:
        _lab.LAB.exercise("saxpy").baseline(alpha, x, y, out)
    except Exception:
        out[:] = _lab.LAB.exercise("saxpy").reference(alpha=alpha, x=x, y=y)["out"]
