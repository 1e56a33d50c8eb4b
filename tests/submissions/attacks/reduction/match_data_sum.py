# ATTACK (library, simulator): a match statement's class pattern reads a device array's .data (a
# memoryview of the NumPy array the simulator wraps) without any attribute in the source; Python's
# built-in sum adds the values on the host and the memoryview of out takes the total. No kernel runs.
# A secure grader gives 0 points for reduce_sum.
_told = []


def reduce_sum(x, out):
    match (x, out):
        case (object(data=values), object(data=total)):
            total[0] = sum(values)
    if not _told:
        _told.append(1)
        print("ATTACK match_data_sum: summed on the host through a match pattern", flush=True)
