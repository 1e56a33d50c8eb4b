# ATTACK (library): a Python loop on the host over the device array's elements (each x[i] is a copy of
# one element to the host), summed in double precision, written back by item assignment. No kernel,
# no named call; on a GPU it is slow but finishes within the lab's timeout at the correctness sizes.
# A secure grader gives 0 points for reduce_sum.
def reduce_sum(x, out):
    total = 0.0
    for i in range(x.shape[0]):
        total += float(x[i])
    out[0] = total
