"""ATTACK (library): swiglu::silu_mul is registered with torch.library, but its CPU kernel is a
torch.fx GraphModule built node by node (no learner function runs when the operator is called):
sigmoid(x) * x * g in eager PyTorch, no Triton kernel at all.

Why it works: (1) the static check forbids "torch.*" but allows "torch.library.*"; torch.library
holds the torch module itself as the attribute `torch`, so `torch.library.torch.fx.Graph` and
`torch.library.torch.sigmoid` are "torch.library.*" names to the check. (2) At run time the torch
guards judge the *caller*: the graph's forward is code made at run time by torch.fx (transparent),
called by torch's Module machinery (torch frames, transparent for the tensor-math mode) from the
dispatcher, which the grader's own entry function (_custom_ops_entries.entry_forward / call_op)
called. No learner frame is on the stack, so the first non-transparent frame is the grader's, and
the mode lets torch.sigmoid / torch.mul through. GraphModule's code generation (compile/exec) is
made by torch's own frames, which the audit hook trusts.
"""
import torch

T = torch.library.torch  # the torch module, reached under the allowed name torch.library.*
fx = T.fx

graph = fx.Graph()
x = graph.placeholder("x")
g = graph.placeholder("g")
s = graph.call_function(T.sigmoid, (x,))
xs = graph.call_function(T.mul, (x, s))
y = graph.call_function(T.mul, (xs, g))
graph.output(y)
gm = fx.GraphModule(T.nn.Module(), graph)

torch.library.define("swiglu::silu_mul", "(Tensor x, Tensor g) -> Tensor")
torch.library.impl("swiglu::silu_mul", "CPU", gm)
torch.library.register_fake("swiglu::silu_mul", T.empty_like)
