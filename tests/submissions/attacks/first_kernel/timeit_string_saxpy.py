# ATTACK (library, runs past the static check): saxpy on the host, written as a string that the timeit
# module compiles and runs. No exec/eval/compile in this file (timeit calls them, from its own frames, so
# the audit hook does not blame this file), and the copies run in code the guard does not know as the
# learner's ('<timeit-src>'), so the device-array guard lets them through.
# A secure grader gives 0 points for saxpy: host maths is not a kernel.
import timeit

_STMT = "out.copy_to_device((alpha * x.copy_to_host().astype('float64') + y.copy_to_host()).astype('float32'))"
_told = []


def saxpy(alpha, x, y, out):
    timeit.timeit(_STMT, number=1, globals={"alpha": alpha, "x": x, "y": y, "out": out})
    if not _told:
        _told.append(1)
        print("ATTACK timeit_string_saxpy: saxpy ran on the host inside timeit", flush=True)
