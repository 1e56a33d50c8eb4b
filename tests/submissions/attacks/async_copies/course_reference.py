# ATTACK (library, GPU): launches the course's own reference kernel (course/async_copies.py, the
# speed baseline) instead of writing one, with the reference's own grid.
# A secure grader gives 0 points for stencil_pipeline: the course's and the grader's code are not
# importable by the learner's code.
from course.async_copies import StencilVariant, launch_stencil


def stencil_pipeline(x, y):
    launch_stencil(StencilVariant(3, True), x, y, 264)
