"""A decoder-only transformer built from a config, and the memory formulas of Part III.

The model follows the Llama layout (RMSNorm, rotary position embeddings, grouped-query
attention, a SwiGLU feed-forward block, an untied output head), so the published shapes
below give parameter counts that match the published models. Weights are random, drawn
from a seed: nothing is downloaded. The chapters *Where the memory goes*, *Serving*,
*Quantization* and *Export* all use it.

Formulas take a :class:`Config` and return plain numbers, so they run without torch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache


@dataclass(frozen=True)
class Config:
    vocab: int = 32000
    d_model: int = 4096
    n_layers: int = 32
    n_heads: int = 32
    n_kv_heads: int = 32  # fewer than n_heads: grouped-query attention (GQA)
    d_ff: int = 11008  # hidden width of the SwiGLU feed-forward block
    max_seq: int = 4096

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    def scaled(self, **changes) -> "Config":
        return replace(self, **changes)


# Published shapes: Llama 2 (Touvron et al., 2023, "Llama 2: Open Foundation and Fine-Tuned
# Chat Models", Table 1 and the released config.json files): 70B uses 8 key/value heads.
LLAMA2_7B = Config(vocab=32000, d_model=4096, n_layers=32, n_heads=32, n_kv_heads=32, d_ff=11008, max_seq=4096)
LLAMA2_13B = Config(vocab=32000, d_model=5120, n_layers=40, n_heads=40, n_kv_heads=40, d_ff=13824, max_seq=4096)
LLAMA2_70B = Config(vocab=32000, d_model=8192, n_layers=80, n_heads=64, n_kv_heads=8, d_ff=28672, max_seq=4096)
PUBLISHED = {"7B": LLAMA2_7B, "13B": LLAMA2_13B, "70B": LLAMA2_70B}

# A small model that runs anywhere (CPU in CI, any GPU), in well under a second per forward.
TINY = Config(vocab=1024, d_model=256, n_layers=4, n_heads=8, n_kv_heads=4, d_ff=704, max_seq=512)


# --------------------------------------------------------------------------- formulas
def layer_params(cfg: Config) -> int:
    """Weights of one decoder layer: Q and O projections (d x d), K and V (d x kv_dim),
    three feed-forward matrices (d x d_ff) and two RMSNorm gains (d each)."""
    attention = 2 * cfg.d_model * cfg.d_model + 2 * cfg.d_model * cfg.kv_dim
    feed_forward = 3 * cfg.d_model * cfg.d_ff
    return attention + feed_forward + 2 * cfg.d_model


def param_count(cfg: Config) -> int:
    """All weights: token embedding, the layers, the final norm and the output head."""
    return cfg.vocab * cfg.d_model + cfg.n_layers * layer_params(cfg) + cfg.d_model + cfg.d_model * cfg.vocab


def kv_bytes_per_token(cfg: Config, bytes_per_value: int = 2) -> int:
    """One token's keys and values, in every layer."""
    return 2 * cfg.n_layers * cfg.kv_dim * bytes_per_value


def kv_cache_bytes(cfg: Config, batch: int, seq: int, bytes_per_value: int = 2) -> int:
    return batch * seq * kv_bytes_per_token(cfg, bytes_per_value)


def flops_per_token(cfg: Config, context: int) -> int:
    """Forward FLOPs for one token that attends to ``context`` earlier tokens.

    Each weight is used in one multiply-add (2 FLOPs) per token; the embedding lookup is
    a read, not a product. Attention adds Q.K and weights.V: 2 x 2 x context x d per layer.
    """
    matmul_weights = cfg.n_layers * (layer_params(cfg) - 2 * cfg.d_model) + cfg.d_model * cfg.vocab
    return 2 * matmul_weights + 4 * cfg.n_layers * context * cfg.d_model


# --------------------------------------------------------------------------- the model
def build(cfg: Config, *, seed: int = 0, device="cpu", dtype=None):
    """A :class:`Decoder` with seeded random weights, in eval mode, on ``device``."""
    import torch

    torch.manual_seed(seed)
    # On a GPU the weights are drawn in ``dtype`` itself: a model built in float32 first needs
    # twice its memory (a 20-layer 7B shape: 17 GB, more than a 16 GB card has). CUDA draws
    # the same random numbers for either dtype, so the weights equal float32's rounded.
    direct = dtype is not None and torch.device(device).type == "cuda"
    default = torch.get_default_dtype()
    try:
        if direct:
            torch.set_default_dtype(dtype)
        with torch.device(device):
            model = _modules()(cfg)
    finally:
        torch.set_default_dtype(default)
    if dtype is not None:
        model = model.to(dtype)
    return model.eval()


@lru_cache(maxsize=None)
def _modules():
    """The torch classes, defined on first use so this module imports without torch."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class RMSNorm(nn.Module):
        def __init__(self, d: int, eps: float = 1e-5) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(d))
            self.eps = eps

        def forward(self, x):
            scale = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
            return (x.float() * scale).to(x.dtype) * self.weight

    def rotate(x, cos, sin):
        """Rotary embedding: rotate pairs (x1, x2) of each head by a position's angle."""
        x1, x2 = x[..., ::2], x[..., 1::2]
        out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
        return out.flatten(-2)

    class Layer(nn.Module):
        def __init__(self, cfg: Config) -> None:
            super().__init__()
            d, kv = cfg.d_model, cfg.kv_dim
            self.cfg = cfg
            self.attn_norm = RMSNorm(d)
            self.q = nn.Linear(d, d, bias=False)
            self.k = nn.Linear(d, kv, bias=False)
            self.v = nn.Linear(d, kv, bias=False)
            self.o = nn.Linear(d, d, bias=False)
            self.ff_norm = RMSNorm(d)
            self.gate = nn.Linear(d, cfg.d_ff, bias=False)
            self.up = nn.Linear(d, cfg.d_ff, bias=False)
            self.down = nn.Linear(cfg.d_ff, d, bias=False)

        def forward(self, x, cos, sin, cache_k=None, cache_v=None, slots=None, positions=None):
            cfg = self.cfg
            B, T, _ = x.shape
            h = self.attn_norm(x)
            q = self.q(h).view(B, T, cfg.n_heads, cfg.head_dim).transpose(1, 2)
            k = self.k(h).view(B, T, cfg.n_kv_heads, cfg.head_dim).transpose(1, 2)
            v = self.v(h).view(B, T, cfg.n_kv_heads, cfg.head_dim).transpose(1, 2)
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
            if cache_k is None:
                mask = None
                causal = True
            else:
                # Write this step's keys and values at each row's positions, then attend
                # over the cache up to the longest row, masking what a row has not reached.
                rows = slots[:, None].expand(B, T)
                cache_k[rows, :, positions] = k.transpose(1, 2).to(cache_k.dtype)
                cache_v[rows, :, positions] = v.transpose(1, 2).to(cache_v.dtype)
                length = int(positions.max()) + 1
                k = cache_k[slots, :, :length].to(q.dtype)
                v = cache_v[slots, :, :length].to(q.dtype)
                key_pos = torch.arange(length, device=x.device)
                mask = (key_pos[None, None, :] <= positions[:, :, None])[:, None]  # B,1,T,L
                causal = False
            group = cfg.n_heads // cfg.n_kv_heads
            if group > 1:
                k = k.repeat_interleave(group, dim=1)
                v = v.repeat_interleave(group, dim=1)
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
            x = x + self.o(a.transpose(1, 2).reshape(B, T, cfg.d_model))
            h = self.ff_norm(x)
            return x + self.down(F.silu(self.gate(h)) * self.up(h))

    class Decoder(nn.Module):
        """``forward(tokens)`` for a whole prompt; with a :class:`KVCache`, one step of
        generation for rows that sit at different positions."""

        def __init__(self, cfg: Config) -> None:
            super().__init__()
            self.cfg = cfg
            self.embed = nn.Embedding(cfg.vocab, cfg.d_model)
            self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg.n_layers))
            self.norm = RMSNorm(cfg.d_model)
            self.head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)
            for p in self.parameters():
                if p.dim() == 2:  # 1/sqrt(fan-in) keeps activations of order one at any depth
                    nn.init.normal_(p, std=1.0 / math.sqrt(p.shape[1]))
            half = cfg.head_dim // 2
            inv_freq = 1.0 / (10000.0 ** (torch.arange(half, dtype=torch.float32) / half))
            self.register_buffer("inv_freq", inv_freq, persistent=False)

        def forward(self, tokens, cache=None, slots=None, positions=None):
            B, T = tokens.shape
            if positions is None:
                positions = torch.arange(T, device=tokens.device).expand(B, T)
            angles = positions[..., None].float() * self.inv_freq  # B,T,half
            cos = angles.cos()[:, None].to(self.embed.weight.dtype)
            sin = angles.sin()[:, None].to(self.embed.weight.dtype)
            x = self.embed(tokens)
            if cache is None:
                for layer in self.layers:
                    x = layer(x, cos, sin)
            else:
                with _attention_without_per_shape_plans(x.device):
                    for i, layer in enumerate(self.layers):
                        x = layer(x, cos, sin, cache.k[i], cache.v[i], slots, positions)
            return self.head(self.norm(x))

    return Decoder


def _attention_without_per_shape_plans(device):
    """The caller's attention kernels, less cuDNN's, for the cached (masked) path on a GPU.

    With a cache, attention changes shape at every step: one more key, often another batch.
    torch's first choice for masked bf16 attention on Hopper is cuDNN's fused kernel, which
    builds an execution plan for each new shape; on an H200 that took 50-780 ms per shape
    against a 10 ms decode step (Lab 17 measures it). The memory-efficient kernel needs no
    plan. If the caller allowed cuDNN alone, that choice stands.
    """
    import contextlib

    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if device.type != "cuda":
        return contextlib.nullcontext()
    allowed = [kernel for kernel, on in ((SDPBackend.FLASH_ATTENTION, torch.backends.cuda.flash_sdp_enabled()),
                                         (SDPBackend.EFFICIENT_ATTENTION, torch.backends.cuda.mem_efficient_sdp_enabled()),
                                         (SDPBackend.MATH, torch.backends.cuda.math_sdp_enabled())) if on]
    return sdpa_kernel(allowed) if allowed else contextlib.nullcontext()


def __getattr__(name):
    if name == "Decoder":
        return _modules()
    raise AttributeError(name)


class KVCache:
    """Keys and values of every layer for ``slots`` sequences of up to ``max_seq`` tokens.

    ``k[layer]`` has shape (slots, n_kv_heads, max_seq, head_dim); a generation step writes
    its rows' keys at their positions and reads everything before them.
    """

    def __init__(self, cfg: Config, slots: int, max_seq: int, *, device="cpu", dtype=None) -> None:
        import torch

        dtype = dtype or torch.float32
        shape = (slots, cfg.n_kv_heads, max_seq, cfg.head_dim)
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(cfg.n_layers)]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(cfg.n_layers)]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k + self.v)


# --------------------------------------------------------------------------- memory budget
# What fits on a GPU: weights, activations and KV cache against its memory (the budget
# calculator of the chapter *Where the memory goes*).
GiB = 1 << 30


def weight_bytes(cfg: Config, bytes_per_value: float = 2) -> float:
    """Bytes of all weights stored with ``bytes_per_value`` bytes each (4 fp32, 2 bf16, 1 int8)."""
    return param_count(cfg) * bytes_per_value


def prefill_activation_bytes(cfg: Config, batch: int, seq: int, bytes_per_value: int = 2) -> int:
    """Peak bytes of temporary tensors while :class:`Decoder` runs one prompt of ``seq`` tokens
    per row, for ``batch`` rows, writing a :class:`KVCache` (inference: nothing is kept for a
    backward pass). Weights and the cache are not included.

    Only the tensors alive at one moment count, so the peak is the largest of three moments:

    * attention: the layer input, the normalised input, Q, the keys and values repeated to all
      heads, the attention output (6 d values per token), the causal mask (one byte per key per
      token) and its copy in the activation dtype made by ``scaled_dot_product_attention``;
    * feed-forward: the attention's tensors are still referenced by the layer's local
      variables, plus the second residual, the second normalised input (7 d values per token in
      all) and three ``d_ff``-wide tensors (silu(gate), up and their product); just before, the
      second RMSNorm holds two fp32 copies of its input (8 d bytes per token);
    * output head: the last hidden state, its normalised copy and the logits for every
      position (2 d + V values per token).

    Every moment also holds the rotary tables (fp32 angles plus cos and sin, ``head_dim``
    values per token in all). Assumes a fused attention kernel (flash, memory-efficient or
    cuDNN), which never stores a ``seq x seq`` score matrix per head.
    """
    tokens, p, d = batch * seq, bytes_per_value, cfg.d_model
    rope = tokens * cfg.head_dim * (2 + p)  # fp32 angles (head_dim / 2 values) + cos + sin
    attention = tokens * (6 * d * p + seq * (1 + p))
    norm = tokens * (6 * d * p + 8 * d + seq)  # two fp32 copies inside the second RMSNorm
    feed_forward = tokens * (p * (7 * d + 3 * cfg.d_ff) + seq)
    head = tokens * p * (2 * d + cfg.vocab)
    return rope + max(attention, norm, feed_forward, head)


def memory_budget(cfg: Config, gpu_bytes: float, *, weight_bytes_per_value: float = 2,
                  kv_bytes_per_value: float = 2, reserve: float = 0.10, prefill_tokens: int = 0,
                  act_bytes_per_value: int = 2) -> dict:
    """Split ``gpu_bytes`` of device memory into weights, working room and KV cache.

    ``reserve`` is the fraction kept back for what the formulas do not model: the CUDA
    context, library workspaces, the allocator's rounding and fragmentation. With
    ``prefill_tokens`` > 0, room is also kept for the activations of one prompt of that many
    tokens (:func:`prefill_activation_bytes`, batch 1). Returns a dict of bytes, with
    ``kv_tokens``: how many tokens' keys and values fit in what is left (0 if the weights
    alone do not fit).
    """
    usable = gpu_bytes * (1 - reserve)
    weights = weight_bytes(cfg, weight_bytes_per_value)
    activations = prefill_activation_bytes(cfg, 1, prefill_tokens, act_bytes_per_value) if prefill_tokens else 0
    per_token = kv_bytes_per_token(cfg, kv_bytes_per_value)
    room = usable - weights - activations
    return {"gpu": gpu_bytes, "usable": usable, "weights": weights, "activations": activations,
            "kv_room": max(room, 0), "kv_per_token": per_token, "kv_tokens": max(int(room // per_token), 0)}


def max_batch(cfg: Config, gpu_bytes: float, context: int, **budget_options) -> int:
    """How many sequences of ``context`` tokens fit in the KV cache (see :func:`memory_budget`
    for the options: weight and KV bytes per value, reserve, prefill room)."""
    return memory_budget(cfg, gpu_bytes, **budget_options)["kv_tokens"] // context


def max_context(cfg: Config, gpu_bytes: float, batch: int, **budget_options) -> int:
    """The longest context that ``batch`` sequences can each reach before the KV cache fills
    the memory (see :func:`memory_budget`). It may exceed ``cfg.max_seq``, the length the model
    was trained for; cap it there yourself."""
    return memory_budget(cfg, gpu_bytes, **budget_options)["kv_tokens"] // batch
