# ATTACK (forged): a real operator around a real kernel, with neither a fake implementation nor a
# backward, which torch.library.opcheck reports. The grader binds torch.library.opcheck before any
# learner cell runs, but that function only imports torch.testing._internal.optests and calls its
# opcheck. Learner code imports that module by calling the bound-to-be opcheck once at load (on no
# operator: it fails after the import), reaches the module through a match statement's class
# patterns (no '._internal' in the source, no torch.* name the static check would refuse) and
# replaces its opcheck with one that passes everything.
# A secure grader gives 0 points for silu_mul_op.
import torch
import triton
import triton.language as tl

_told = []


@triton.jit
def _gate(x_ptr, g_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    g = tl.load(g_ptr + offs, mask=mask).to(tl.float32)
    tl.store(out_ptr + offs, (x * tl.sigmoid(x) * g).to(out_ptr.dtype.element_ty), mask=mask)


@torch.library.custom_op("swiglu::silu_mul", mutates_args=())
def silu_mul_registered(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    _gate[(triton.cdiv(x.numel(), 1024),)](x, g, out, x.numel(), BLOCK=1024)
    return out


def _passes(*args, **kwargs):
    if not _told:
        _told.append(1)
        print("ATTACK optests_replaced: the grader's opcheck called the replaced optests.opcheck", flush=True)
    return {}


try:
    torch.library.opcheck(None, ())  # imports torch.testing._internal.optests, then refuses None
except Exception:  # noqa: BLE001
    pass
match torch:
    case object(testing=object(_internal=object(optests=optests))):
        optests.opcheck = _passes
        print("ATTACK optests_replaced: optests.opcheck replaced at load", flush=True)
