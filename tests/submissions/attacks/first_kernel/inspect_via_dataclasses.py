# ATTACK (library, simulator): a module another module holds as an attribute is that module, imported or
# not: dataclasses.inspect is inspect, and inspect.getclosurevars reads a function's closure in the
# standard library's own code (attribute syntax: no getattr, no audit event). The device array's
# __len__ closes over the simulator's function that returns its NumPy memory; the add is done on the host.
import dataclasses


def vector_add(a, b, out):
    cv = dataclasses.inspect.getclosurevars(type(out).__len__)
    view = cv.nonlocals["_view"]
    view(out)[...] = view(a) + view(b)
    print("ATTACK inspect_via_dataclasses: added on the host through inspect.getclosurevars", flush=True)
