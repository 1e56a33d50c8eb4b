# ATTACK (library): the guards judge the caller by its frame, looking through only the standard
# library (and torch/numpy/functorch for the torch mode); any other installed package's frame counts as
# "not the learner", so what it calls is allowed. jinja2 (installed with jupyter-book; not a module
# the static check names) compiles a template into code whose frames are jinja2's: the template calls
# the tensor methods softmax and copy_, which torch_math_mode lets through, and its compile/exec audit
# events come from jinja2's frames. No Triton kernel runs.
import jinja2

_T = jinja2.Environment().from_string("{{ out.copy_(x.softmax(1)) is none }}")
_told = []


def softmax(x, out):
    _T.render(x=x, out=out)
    if not _told:
        _told.append(1)
        print("ATTACK jinja_launder_softmax: softmax by torch, called from a jinja2 template", flush=True)
