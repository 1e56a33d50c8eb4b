# ATTACK (library, simulator): x arrives on the host. numpy.* is forbidden, and guarded as module
# functions, but a NumPy array's operators and methods (+=, slicing, .copy) are no module function:
# the neighbour sum is computed on the host and uploaded with copy_to_device (uploads are the point of
# the lab). No kernel runs.
def chunked_neighbor_sum(x, chunk, out):
    r = x.copy()
    r[1:] += x[:-1]
    r[:-1] += x[1:]
    out.copy_to_device(r)
    print("ATTACK host_ops_neighbor: summed on the host with ndarray operators", flush=True)
