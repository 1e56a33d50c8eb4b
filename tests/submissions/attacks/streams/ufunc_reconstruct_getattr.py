# ATTACK (library, simulator): a private function of a library the guards trust reads attributes for its
# caller; the static check now refuses private names and vendored serialisers in imports.
# numpy.core._ufunc_reconstruct(module, name) = getattr(__import__(module, fromlist=[name]), name):
# a trusted numpy frame calls getattr with our name. Planting any object in sys.modules makes it
# an arbitrary getattr. Used to pull _host_view out of HostArray.__len__'s closure.
from numpy.core import _ufunc_reconstruct as _r

box = []
box.append(_r)


def chunked_neighbor_sum(x, chunk, out):
    rec = box[0]
    mods = rec("sys", "modules")

    def ga(o, n):
        mods["zz_tmp_obj"] = o
        return rec("zz_tmp_obj", n)

    fn = ga(type(x), "__len__")
    cell = ga(fn, "__closure__")[0]
    host_view = ga(cell, "cell_contents")
    v = host_view(x)
    r = v + 0
    r[1:] += v[:-1]
    r[:-1] += v[1:]
    out.copy_to_device(r)
    print("ATTACK a1: summed on the host via _ufunc_reconstruct getattr", flush=True)
