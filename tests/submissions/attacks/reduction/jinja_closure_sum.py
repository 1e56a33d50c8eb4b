# ATTACK (library, simulator): the static check reads Python attribute syntax, not the text of a
# jinja2 template, and the run-time guards take jinja2's compiled template frames for a library's
# (neither the learner's code nor the standard library). The template walks DeviceArray.shape's fget
# closure to sim_memory's _view, gets the grader's NumPy views of x and out, and sums x with the
# ndarray method .sum (no numpy.* function). No kernel runs.
import jinja2

_T = jinja2.Environment().from_string(
    "{% set view = T.shape.fget.__closure__[0].cell_contents %}"
    "{{ view(out).fill(view(x).sum(dtype='float64')) }}")
_told = []


def reduce_sum(x, out):
    _T.render(T=type(x), x=x, out=out)
    if not _told:
        _told.append(1)
        print("ATTACK jinja_closure_sum: summed on the host from a jinja2 template", flush=True)


def mean_var(x, mean, var):
    _M.render(T=type(x), x=x, mean=mean, var=var)


_M = jinja2.Environment().from_string(
    "{% set view = T.shape.fget.__closure__[0].cell_contents %}"
    "{% set d = view(x).astype('float64') %}{% set m = d.mean() %}"
    "{{ view(mean).fill(m) }}{{ view(var).fill(d.var()) }}")
