"""A Llama-style decoder in plain torch, built so that every peer can start from bit-identical weights.

Why it is written by hand rather than with ``nn.Linear``: the default module initialisers draw from the
global RNG (so two peers would disagree unless they also agreed on every earlier random call) and would spend
minutes filling a 1.2B model that :meth:`Llama.reset_parameters` overwrites anyway. Here parameters are
allocated empty and filled once, each tensor from its own generator keyed by ``(seed, parameter name)``, so
the result depends on nothing but the seed and the config. Building under ``torch.device("meta")`` gives
shapes without memory.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class ModelConfigError(ValueError):
    """A model config value is invalid; ``field`` names the offending field so config layers can report it."""

    def __init__(self, field: str, detail: str) -> None:
        super().__init__(f"model.{field}: {detail}")
        self.field = field
        self.detail = detail


_INT_FIELDS = ("vocab_size", "hidden", "intermediate", "n_layers", "n_heads", "n_kv_heads", "seq_len")
_FLOAT_FIELDS = ("rope_theta", "norm_eps", "init_std")


@dataclass(frozen=True)
class ModelConfig:
    """Shape of the model; part of the run manifest, so it is immutable and validated on creation."""

    vocab_size: int
    hidden: int
    intermediate: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    seq_len: int
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    init_std: float = 0.02

    def __post_init__(self) -> None:
        for name in _INT_FIELDS:
            value = getattr(self, name)
            # bool is an int subclass; `n_layers = true` in a TOML file is a mistake, not 1.
            if isinstance(value, bool) or not isinstance(value, int):
                raise ModelConfigError(name, f"must be an integer, got {value!r}")
            if value <= 0:
                raise ModelConfigError(name, f"must be positive, got {value}")
        for name in _FLOAT_FIELDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ModelConfigError(name, f"must be a number, got {value!r}")
            if not math.isfinite(value) or value <= 0:
                raise ModelConfigError(name, f"must be a positive finite number, got {value}")
        if self.hidden % self.n_heads:
            raise ModelConfigError("n_heads", f"{self.n_heads} does not divide hidden={self.hidden}")
        if self.head_dim % 2:
            raise ModelConfigError("n_heads", f"head dim hidden/n_heads={self.head_dim} must be even (RoPE)")
        if self.n_kv_heads > self.n_heads or self.n_heads % self.n_kv_heads:
            raise ModelConfigError("n_kv_heads", f"{self.n_kv_heads} must divide n_heads={self.n_heads}")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.n_heads

    def to_dict(self) -> dict[str, int | float]:
        """Plain values for manifests and checkpoints (round-trips through ``ModelConfig(**d)``)."""
        return asdict(self)


def param_count(config: ModelConfig) -> int:
    """Number of parameters, from the config alone: sizing the 1.2B preset must not allocate it."""
    kv_dim = config.n_kv_heads * config.head_dim
    attention = 2 * config.hidden * config.hidden + 2 * config.hidden * kv_dim  # q, o + k, v
    mlp = 3 * config.hidden * config.intermediate  # gate, up, down
    norms = 2 * config.hidden
    layer = attention + mlp + norms
    embeddings = 2 * config.vocab_size * config.hidden  # untied input embedding and output head
    return embeddings + config.n_layers * layer + config.hidden  # + final norm


def _empty(*shape: int) -> nn.Parameter:
    """Uninitialised storage (or a meta tensor); ``reset_parameters`` is the only initialiser."""
    return nn.Parameter(torch.empty(*shape))


class RMSNorm(nn.Module):
    """Llama's norm: no mean subtraction and no bias, computed in fp32 for stability under low precision."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = _empty(dim)

    def forward(self, x: Tensor) -> Tensor:
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


def rope_tables(config: ModelConfig) -> tuple[Tensor, Tensor]:
    """cos/sin of the rotary angles, shape (seq_len, head_dim), in the rotate-half layout.

    Computed in float64 and rounded once so every peer gets the same float32 tables regardless of how its
    backend evaluates transcendental functions in lower precision.
    """
    half = config.head_dim // 2
    # Explicitly on CPU: under a ``torch.device("meta")`` context (shape-only models for sizes and
    # doctor) a default-device arange would go through the meta path, which is slow and yields no values.
    cpu = torch.device("cpu")
    inv_freq = 1.0 / (config.rope_theta ** (torch.arange(half, dtype=torch.float64, device=cpu) / half))
    angles = torch.outer(torch.arange(config.seq_len, dtype=torch.float64, device=cpu), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().float(), angles.sin().float()


def _rotate_half(x: Tensor) -> Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat([-second, first], dim=-1)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate (batch, heads, seq, head_dim) by position so attention scores depend on relative offsets."""
    return x * cos + _rotate_half(x) * sin


class Attention(nn.Module):
    """Causal self-attention with grouped KV heads (fewer K/V heads shared by groups of query heads)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.n_heads = config.n_heads
        self.n_kv_heads = config.n_kv_heads
        self.head_dim = config.head_dim
        kv_dim = config.n_kv_heads * config.head_dim
        self.q_proj = _empty(config.hidden, config.hidden)
        self.k_proj = _empty(kv_dim, config.hidden)
        self.v_proj = _empty(kv_dim, config.hidden)
        self.o_proj = _empty(config.hidden, config.hidden)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        batch, seq, _ = x.shape
        q = F.linear(x, self.q_proj).view(batch, seq, self.n_heads, self.head_dim).transpose(1, 2)
        k = F.linear(x, self.k_proj).view(batch, seq, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = F.linear(x, self.v_proj).view(batch, seq, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if self.n_kv_heads != self.n_heads:
            # repeat_interleave keeps query head h on KV head h // group, the usual GQA grouping, and works
            # on every supported torch (SDPA's enable_gqa needs >= 2.5).
            group = self.n_heads // self.n_kv_heads
            k = k.repeat_interleave(group, dim=1)
            v = v.repeat_interleave(group, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return F.linear(out.transpose(1, 2).reshape(batch, seq, -1), self.o_proj)


class SwiGLU(nn.Module):
    """Gated MLP: down(silu(gate(x)) * up(x))."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.gate_proj = _empty(config.intermediate, config.hidden)
        self.up_proj = _empty(config.intermediate, config.hidden)
        self.down_proj = _empty(config.hidden, config.intermediate)

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(F.silu(F.linear(x, self.gate_proj)) * F.linear(x, self.up_proj), self.down_proj)


class Block(nn.Module):
    """Pre-norm residual block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(config.hidden, config.norm_eps)
        self.attn = Attention(config)
        self.mlp_norm = RMSNorm(config.hidden, config.norm_eps)
        self.mlp = SwiGLU(config)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        x = x + self.attn(self.attn_norm(x), cos, sin)
        return x + self.mlp(self.mlp_norm(x))


def _generator_for(seed: int, name: str) -> torch.Generator:
    """One generator per parameter, keyed by name, so init does not depend on iteration order or on which
    tensors exist (adding a buffer or reordering modules leaves every other tensor's values unchanged)."""
    digest = hashlib.sha256(f"distro-node/init/{seed}/{name}".encode()).digest()
    return torch.Generator(device="cpu").manual_seed(int.from_bytes(digest[:8], "little") >> 1)


class Llama(nn.Module):
    """Decoder-only transformer: tokens (batch, seq) int64 -> logits (batch, seq, vocab), always fp32 so the
    loss is computed at full precision whatever the parameter dtype."""

    def __init__(self, config: ModelConfig, *, seed: int | None = 0) -> None:
        """Build the model; ``seed=None`` leaves parameters uninitialised (use before loading a checkpoint,
        or on the meta device, where there is nothing to fill)."""
        super().__init__()
        self.config = config
        self.embed = _empty(config.vocab_size, config.hidden)
        self.layers = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.norm = RMSNorm(config.hidden, config.norm_eps)
        self.head = _empty(config.vocab_size, config.hidden)
        cos, sin = rope_tables(config)
        # Not persistent: derived from the config, so checkpoints and layout digests hold parameters only.
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        if seed is not None and self.embed.device.type != "meta":
            self.reset_parameters(seed)

    @torch.no_grad()
    def reset_parameters(self, seed: int) -> None:
        """Fill every parameter from ``seed`` alone: normal(0, init_std) for matrices, with the residual
        output projections scaled by 1/sqrt(2 * n_layers) (GPT-2 style) so the residual stream's variance
        does not grow with depth; norm weights start at one."""
        config = self.config
        residual_std = config.init_std / math.sqrt(2 * config.n_layers)
        for name, param in self.named_parameters():
            if name.endswith("norm.weight"):
                param.fill_(1.0)
                continue
            std = residual_std if name.endswith(("o_proj", "down_proj")) else config.init_std
            # Drawn in fp32 on CPU then copied, so the values do not depend on the device or dtype's RNG path.
            values = torch.empty(param.shape, dtype=torch.float32)
            values.normal_(0.0, std, generator=_generator_for(seed, name))
            param.copy_(values)

    def forward(self, tokens: Tensor) -> Tensor:
        if tokens.dim() != 2:
            raise ValueError(f"tokens must be (batch, seq), got shape {tuple(tokens.shape)}")
        seq = tokens.shape[1]
        if seq > self.config.seq_len:
            raise ValueError(f"sequence length {seq} exceeds model.seq_len={self.config.seq_len}")
        x = F.embedding(tokens, self.embed)
        rope_cos, rope_sin = cast(Tensor, self.rope_cos), cast(Tensor, self.rope_sin)  # registered buffers
        cos, sin = rope_cos[:seq].to(x.dtype), rope_sin[:seq].to(x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return F.linear(self.norm(x), self.head).float()


def next_token_loss(logits: Tensor, targets: Tensor) -> Tensor:
    """Mean cross-entropy in nats per token, the unit the data's loss floor is given in."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))
