"""Small models for the parallel tests: a Llama-like decoder in plain torch whose projections can be built at 1/tp
of their width (one Megatron rank), Megatron's f and g operators, and a capture helper. Plain module (not a
conftest) so that the gloo worker processes can import it."""

from __future__ import annotations

import torch

nn = torch.nn

# distinct sizes, so that no two dimensions are equal by chance: batch 3, seq 10, hidden 48, 8 heads of 6,
# 4 key/value heads, MLP 80 wide
BATCH, SEQ, HIDDEN, HEADS, KV_HEADS, FFN = 3, 10, 48, 8, 4, 80


class Attention(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int, shards: int) -> None:
        super().__init__()
        self.dim = hidden // heads
        self.heads, self.kv_heads = heads // shards, kv_heads // shards
        self.q_proj = nn.Linear(hidden, self.heads * self.dim, bias=False)
        self.k_proj = nn.Linear(hidden, self.kv_heads * self.dim, bias=False)
        self.v_proj = nn.Linear(hidden, self.kv_heads * self.dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.dim, hidden, bias=False)

    def forward(self, x, enter, leave):
        b, s, _ = x.shape
        x = enter(x)
        q = self.q_proj(x).view(b, s, self.heads, self.dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.kv_heads, self.dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.kv_heads, self.dim).transpose(1, 2)
        repeat = self.heads // self.kv_heads
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
        out = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return leave(self.o_proj(out.transpose(1, 2).reshape(b, s, self.heads * self.dim)))


class Mlp(nn.Module):
    def __init__(self, hidden: int, ffn: int, shards: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, ffn // shards, bias=False)
        self.up_proj = nn.Linear(hidden, ffn // shards, bias=False)
        self.down_proj = nn.Linear(ffn // shards, hidden, bias=False)

    def forward(self, x, enter, leave):
        x = enter(x)
        return leave(self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x)))


class Layer(nn.Module):
    def __init__(self, shards: int, hidden: int, heads: int, kv_heads: int, ffn: int) -> None:
        super().__init__()
        self.input_layernorm = nn.RMSNorm(hidden)
        self.self_attn = Attention(hidden, heads, kv_heads, shards)
        self.post_attention_layernorm = nn.RMSNorm(hidden)
        self.mlp = Mlp(hidden, ffn, shards)

    def forward(self, x, enter, leave):
        x = x + self.self_attn(self.input_layernorm(x), enter, leave)
        return x + self.mlp(self.post_attention_layernorm(x), enter, leave)


class TinyDecoder(nn.Module):
    """Layers only (the input is hidden states), so every collective of a rank is a layer's. ``shards`` builds one
    tensor-parallel rank's projections; ``enter``/``leave`` are Megatron's f and g (identity by default)."""

    def __init__(
        self,
        layers: int = 2,
        shards: int = 1,
        hidden: int = HIDDEN,
        heads: int = HEADS,
        kv_heads: int = KV_HEADS,
        ffn: int = FFN,
    ) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Layer(shards, hidden, heads, kv_heads, ffn) for _ in range(layers))
        self.enter = self.leave = lambda x: x

    def forward(self, x):
        for layer in self.layers:
            x = layer(x, self.enter, self.leave)
        return x


def capture(model, phase: str, shape: tuple[int, ...] = (BATCH, SEQ, HIDDEN), device: str = "cpu", dtype=torch.float32):
    """perfpredict's graph of ``model`` called on one (batch, seq, hidden) tensor."""
    from perfpredict.api import featurize

    torch.manual_seed(0)
    x = torch.randn(shape, device=device, dtype=dtype)
    return featurize(model, (x,), phase=phase, name=f"{type(model).__name__}-{phase}")


class _ReduceBackward(torch.autograd.Function):
    """Megatron's f: identity forward, all-reduce of the input gradient backward."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        import torch.distributed as dist

        grad = grad.contiguous()
        dist.all_reduce(grad)
        return grad


class _ReduceForward(torch.autograd.Function):
    """Megatron's g: all-reduce forward, identity backward."""

    @staticmethod
    def forward(ctx, x):
        import torch.distributed as dist

        x = x.contiguous()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


def megatron_rank(full: TinyDecoder, rank: int, ranks: int) -> TinyDecoder:
    """One tensor-parallel rank of ``full``: its slice of every projection (column-parallel q, k, v, gate, up by
    rows of the weight; row-parallel o, down by columns), and f/g around each block."""
    part = TinyDecoder(layers=len(full.layers), shards=ranks)
    with torch.no_grad():
        for mine, whole in zip(part.layers, full.layers):
            for name in ("input_layernorm", "post_attention_layernorm"):
                getattr(mine, name).weight.copy_(getattr(whole, name).weight)
            for block, names, column in (
                (mine.self_attn, ("q_proj", "k_proj", "v_proj"), True),
                (mine.self_attn, ("o_proj",), False),
                (mine.mlp, ("gate_proj", "up_proj"), True),
                (mine.mlp, ("down_proj",), False),
            ):
                source = whole.self_attn if block is mine.self_attn else whole.mlp
                for name in names:
                    w = getattr(source, name).weight
                    n = (w.shape[0] if column else w.shape[1]) // ranks
                    piece = w[rank * n : (rank + 1) * n] if column else w[:, rank * n : (rank + 1) * n]
                    getattr(block, name).weight.copy_(piece)
    part.enter, part.leave = _ReduceBackward.apply, _ReduceForward.apply
    return part


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width, 2 * width)
        self.fc2 = nn.Linear(2 * width, width)

    def forward(self, x):
        return x + self.fc2(torch.relu(self.fc1(x)))


class ShardedNet(nn.Module):
    """What FSDP2 wraps layer by layer: parameters in the layers, and some at the root (embed, head)."""

    def __init__(self, width: int = 64, layers: int = 3) -> None:
        super().__init__()
        self.embed = nn.Linear(32, width)
        self.layers = nn.ModuleList(Block(width) for _ in range(layers))
        self.head = nn.Linear(width, 16)

    def forward(self, x):
        x = self.embed(x)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def bucketed_net() -> nn.Sequential:
    """Eight bias-free 1024x1024 linears (4 MiB of float32 gradients each): enough to close both of DDP's default
    caps (1 MiB for the first bucket, 25 MiB for the others)."""
    return nn.Sequential(*[nn.Linear(1024, 1024, bias=False) for _ in range(8)])
