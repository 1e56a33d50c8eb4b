# ATTACK (library, runs past the static check): host_element_loop where library code touches the device
# array. statistics.fmean iterates x (each element read by the statistics module's frame, not this file's)
# and the total is written by collections.abc.MutableMapping.update, whose frame does out[0] = total.
# No NumPy name, no named copy, no element access from this file.
# A secure grader gives 0 points for reduce_sum: a host sum is not a kernel.
import collections.abc
import statistics

_told = []


def reduce_sum(x, out):
    total = statistics.fmean(x) * len(x)
    collections.abc.MutableMapping.update(out, [(0, total)])
    if not _told:
        _told.append(1)
        print("ATTACK stdlib_frames_sum: summed on the host through statistics.fmean", flush=True)
