# ATTACK (library, runs past the static check): torch's ATen operators by their public names,
# torch.ops.aten.softmax.int and copy_.default, reached through an alias of torch named `self`.
# An OpOverload call goes through torch/_ops.py before the torch function mode sees it, so a
# guard that looks one frame up sees torch, not the learner. A secure grader gives 0 points.
def softmax(x, out):
    self = torch  # noqa: F821 - the lab's setup imports torch
    aten = self.ops.aten
    aten.copy_.default(out, aten.softmax.int(x, -1))
