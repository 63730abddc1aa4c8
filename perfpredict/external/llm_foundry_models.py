"""The MPT models behind llm-foundry's throughput tables, built as llm-foundry ran them and captured as OpGraphs.

The runs (``scripts/train/benchmarking/submit_benchmarks.py``) trained ``scripts/train/yamls/pretrain/mpt-<size>.yaml``
with ``attn_impl: flash`` and every other model field at llm-foundry's ``MPTConfig`` defaults:
``learned_pos_emb=True`` (ALiBi off), ``no_bias=False`` (biases on every linear and LayerNorm), a fused ``Wqkv``,
the ``mptmlp`` FFN (GELU, ``expansion_ratio`` 4), ``low_precision_layernorm``, tied input and output embeddings,
vocabulary 50,368. The published parameter counts confirm it: 70B at 2,048 tokens has 64,862,437,376 = 80 layers
x (12 x 8192^2 + 13 x 8192) + (50,368 + 2,048) x 8192 + 2 x 8192 (:func:`param_count` reproduces every row's).

transformers' ``MptForCausalLM`` is not that program: it hard-codes linears without bias, always adds an ALiBi
bias and a (seq x seq) causal mask, and runs attention as matmul + softmax + matmul (eager). So the model here is
a plain ``torch.nn`` module with llm-foundry's structure, sized from a transformers ``MptConfig`` (the HF config
of MPT: ``d_model``, ``n_heads``, ``n_layers``, ``expansion_ratio``, ``max_seq_len``, ``vocab_size``), run as
llm-foundry v0.4 (the version of the tables' runs) runs it:

- attention through its ``flash_attn_fn``: q, k and v gathered out of the padded batch
  (``bert_padding.unpad_input``, an index select each: nothing is padded here, but the copies are made), one
  fused causal attention (``flash_attn_varlen_func``, flash-attn 2.x; captured as torch's FlashAttention-2 op,
  ``_scaled_dot_product_flash_attention(is_causal=True)``, one fused op, which on a Hopper GPU runs no faster than
  FlashAttention-2's published rates: ``predictors.attention_kernels``), and the output scattered back
  (``pad_input``);
- the loss: ``ComposerMPTCausalLM``'s default ``fused_crossentropy`` (flash-attn's one-pass cross-entropy on the
  bf16 logits), captured as cross-entropy on the bf16 logits, with no float32 copy of them.
"""

from __future__ import annotations

from typing import Any

from perfpredict.core.graph import OpGraph

VOCAB = 50368
#: llm-foundry's yamls, scripts/train/yamls/pretrain/mpt-<size>.yaml: (d_model, n_heads, n_layers)
SIZES = {
    "125m": (768, 12, 12),
    "350m": (1024, 16, 24),
    "760m": (1536, 12, 24),
    "1b": (2048, 16, 24),
    "3b": (2560, 20, 32),
    "7b": (4096, 32, 32),
    "13b": (5120, 40, 40),
    "30b": (7168, 56, 48),
    "70b": (8192, 64, 80),
}


def config(size: str, seq_len: int) -> Any:
    """The transformers ``MptConfig`` of one of llm-foundry's sizes at ``seq_len`` (its ``max_seq_len``)."""
    from transformers import MptConfig

    if size not in SIZES:
        raise ValueError(f"unknown MPT size {size!r}; choose one of {', '.join(SIZES)}")
    d_model, heads, layers = SIZES[size]
    return MptConfig(
        d_model=d_model,
        n_heads=heads,
        n_layers=layers,
        expansion_ratio=4,
        max_seq_len=seq_len,
        vocab_size=VOCAB,
        no_bias=False,
        attn_config={"attn_impl": "flash", "alibi": False},
        name_or_path=f"mpt-{size}",
        use_cache=False,
    )


def param_count(cfg: Any) -> int:
    """Parameters of llm-foundry's MPT (what the tables' NumParams counts): per layer the four linears' weights and
    biases (12 d^2 + 9 d) and two LayerNorms (4 d); the tied token and learned position embeddings; the final
    LayerNorm."""
    d, layers = cfg.d_model, cfg.n_layers
    return layers * (12 * d * d + 13 * d) + (cfg.vocab_size + cfg.max_seq_len) * d + 2 * d


def build(cfg: Any, dtype: str = "bfloat16") -> Any:
    """llm-foundry's MPT for ``cfg`` on the meta device, in train mode."""
    import torch

    model_class = _classes()
    with torch.device("meta"):
        model = model_class(cfg).to(getattr(torch, dtype))
    return model.train()


def inputs(batch: int, seq: int) -> tuple:
    """Token ids and labels on meta."""
    import torch

    ids = torch.zeros((batch, seq), dtype=torch.long, device="meta")
    return ids, ids


def capture(size: str, batch: int, seq: int, dtype: str = "bfloat16") -> OpGraph:
    """The training step's OpGraph (two layers traced, the others copied: ``hf_capture.traced_stack``)."""
    from perfpredict.compiler_hooks.featurize import featurize
    from perfpredict.compiler_hooks.hf_capture import traced_stack

    cfg = config(size, seq)

    def trace(model: Any, _cfg: Any) -> OpGraph:
        return featurize(model, inputs(batch, seq), phase="training", name=f"mpt-{size}")

    return traced_stack(cfg, lambda c: build(c, dtype), trace)


def _classes() -> Any:
    """The module classes, defined on first use (torch is imported lazily)."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    class Attention(nn.Module):
        def __init__(self, d: int, heads: int) -> None:
            super().__init__()
            self.heads = heads
            self.Wqkv = nn.Linear(d, 3 * d)
            self.out_proj = nn.Linear(d, d)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, s, d = x.shape
            tokens = torch.arange(b * s, device=x.device)  # every token kept: no padding in these runs
            q, k, v = (t.reshape(b * s, d).index_select(0, tokens) for t in self.Wqkv(x).chunk(3, dim=-1))
            q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
            out = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, is_causal=True)[0]  # flash_attn 2
            out = out.transpose(1, 2).reshape(b * s, d)
            out = torch.zeros_like(out).index_copy(0, tokens, out)  # pad_input
            return self.out_proj(out.view(b, s, d))

    class MLP(nn.Module):
        def __init__(self, d: int, ratio: int) -> None:
            super().__init__()
            self.up_proj = nn.Linear(d, ratio * d)
            self.down_proj = nn.Linear(ratio * d, d)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.down_proj(F.gelu(self.up_proj(x)))

    class Block(nn.Module):
        def __init__(self, d: int, heads: int, ratio: int) -> None:
            super().__init__()
            self.norm_1 = nn.LayerNorm(d)
            self.attn = Attention(d, heads)
            self.norm_2 = nn.LayerNorm(d)
            self.ffn = MLP(d, ratio)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = x + self.attn(self.norm_1(x))
            return x + self.ffn(self.norm_2(x))

    class Transformer(nn.Module):
        def __init__(self, cfg: Any) -> None:
            super().__init__()
            d = cfg.d_model
            self.wte = nn.Embedding(cfg.vocab_size, d)
            self.wpe = nn.Embedding(cfg.max_seq_len, d)
            self.blocks = nn.ModuleList(Block(d, cfg.n_heads, int(cfg.expansion_ratio)) for _ in range(cfg.n_layers))
            self.norm_f = nn.LayerNorm(d)

    class MPTForCausalLM(nn.Module):
        def __init__(self, cfg: Any) -> None:
            super().__init__()
            self.transformer = Transformer(cfg)

        def forward(self, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
            t = self.transformer
            positions = torch.arange(ids.shape[1], device=ids.device)
            x = t.wte(ids) + t.wpe(positions)
            for block in t.blocks:
                x = block(x)
            logits = F.linear(t.norm_f(x), t.wte.weight)  # the tied output embedding
            return F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1))

    return MPTForCausalLM
