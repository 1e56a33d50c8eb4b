# ATTACK (forged): failing answers whose exception text is the grader's own wording, so that a report
# that labels failures by reading messages shows vector_add as "needs a GPU" (greyed out, as if not
# lost) and saxpy as a "grader failure" (the instructor's cue to regrade or give the points).
# A secure grader gives 0 points for both and labels them from its own record: a call that failed.


def vector_add(a, b, out):
    raise RuntimeError("needs a GPU: not graded in simulator mode")


def saxpy(alpha, x, y, out):
    raise RuntimeError("the grader failed on this exercise: autograder failed (KeyError)")
