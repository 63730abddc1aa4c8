"""The shape of a decoder-only LLM as a serving engine runs it, read from its HuggingFace config.json fields.

A vLLM-class engine does not run the HuggingFace module tree: it runs its own model code, one fused kernel per
step of a block (``engine_graph``). What that code needs from the config is a handful of sizes, read here from the
raw fields (no transformers import, so an engine answer starts in well under a second):

- attention: heads, key/value heads (GQA/MQA), head size, a bias on q/k/v (Qwen2), a sliding window where the
  config turns one on (Mistral-7B-v0.1: 4,096 tokens; Qwen2 declares one but ``use_sliding_window`` is false);
- the MLP: gated (SwiGLU: gate and up projections, then down) or plain (GPT-2, OPT: fc1, activation, fc2), and a
  mixture of experts (Mixtral: ``num_local_experts``, ``num_experts_per_tok``);
- the norm: RMSNorm (Llama family) or LayerNorm (GPT-2 family);
- the vocabulary, tied embeddings, and the positions the model was trained for (vLLM's default max_model_len).

A field the config.json leaves out is what transformers would give it, its config class's default
(``compiler_hooks.hf_defaults``): Gemma-2's configs leave out ``tie_word_embeddings``, and Gemma2Config ties them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from perfpredict.core.errors import InvalidInputError, UnknownModelError

#: model types whose blocks are Llama's (RMSNorm, rotary, gated SiLU MLP or its MoE); vLLM runs each with the same
#: fused kernels (its llama.py, mistral via llama, mixtral.py, qwen2.py)
GATED = frozenset({"llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "gemma2", "granite", "internlm2", "phi3"})
#: model types with a LayerNorm and a plain two-linear MLP (vLLM's gpt2.py, opt.py, gpt_neox.py, ...)
PLAIN = frozenset({"gpt2", "opt", "gpt_neox", "gptj", "falcon", "bloom", "starcoder2", "phi"})
SUPPORTED = GATED | PLAIN


@dataclass(frozen=True)
class DecoderSpec:
    """Sizes of one decoder-only LLM (units: counts of features, heads, tokens)."""

    name: str
    model_type: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    gated_mlp: bool
    rms_norm: bool
    qkv_bias: bool
    experts: int  # 0: a dense MLP
    experts_per_token: int
    window: int | None  # the sliding window an engine honours, else None
    max_positions: int | None
    tied_embeddings: bool
    declared_dtype: str | None

    @property
    def q_features(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_features(self) -> int:
        return self.kv_heads * self.head_dim

    def layer_params(self) -> int:
        """Weights of one block (norms included)."""
        attn = self.hidden * (self.q_features + 2 * self.kv_features) + self.q_features * self.hidden
        attn += (self.q_features + 2 * self.kv_features) if self.qkv_bias else 0
        mlp = (3 if self.gated_mlp else 2) * self.hidden * self.intermediate
        if self.experts:
            mlp = self.experts * mlp + self.hidden * self.experts  # the experts and the router
        return attn + mlp + 2 * self.hidden * (1 if self.rms_norm else 2)

    def params(self) -> int:
        """Every weight: the blocks, the embedding, the LM head unless tied, the final norm."""
        embed = self.vocab * self.hidden
        return self.layers * self.layer_params() + embed * (1 if self.tied_embeddings else 2) + self.hidden


def spec_of(fields: dict[str, Any], name: str = "") -> DecoderSpec:
    """The DecoderSpec of a config.json's fields (a field it leaves out: its config class's default, as transformers
    reads it: ``compiler_hooks.hf_defaults``); refuses an architecture no engine block exists for."""
    from perfpredict.compiler_hooks.hf_defaults import with_defaults

    fields = with_defaults(fields)
    model_type = str(fields.get("model_type", ""))
    if model_type not in SUPPORTED:
        raise UnknownModelError(
            f"the vLLM-class engine has no block for model_type {model_type!r} (it covers "
            f"{', '.join(sorted(SUPPORTED))}); use --engine hf, which traces the model itself"
        )
    layers = _first(fields, "num_hidden_layers", "n_layer", "num_layers")
    hidden = _first(fields, "hidden_size", "n_embd", "d_model")
    heads = _first(fields, "num_attention_heads", "n_head")
    if not (layers and hidden and heads):
        raise InvalidInputError(f"config {name!r} has no decoder geometry (layers, hidden size, heads)")
    gated = model_type in GATED
    inter = _first(fields, "intermediate_size", "n_inner", "ffn_dim") or (4 * hidden if not gated else 0)
    experts = int(fields.get("num_local_experts") or fields.get("num_experts") or 0)
    return DecoderSpec(
        name=name or model_type,
        model_type=model_type,
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=int(fields.get("num_key_value_heads") or heads),
        head_dim=int(fields.get("head_dim") or hidden // heads),
        intermediate=int(inter),
        vocab=int(fields.get("vocab_size") or 0),
        gated_mlp=gated,
        rms_norm=gated,
        qkv_bias=model_type == "qwen2" or bool(fields.get("attention_bias")),
        experts=experts,
        experts_per_token=int(fields.get("num_experts_per_tok") or 0) if experts else 0,
        window=_window(fields),
        max_positions=_first(fields, "max_position_embeddings", "n_positions", "max_sequence_length"),
        tied_embeddings=bool(fields.get("tie_word_embeddings", True)),  # PretrainedConfig's own default
        declared_dtype=fields.get("torch_dtype") if isinstance(fields.get("torch_dtype"), str) else None,
    )


def spec_from(model_or_config: Any) -> DecoderSpec:
    """A DecoderSpec from a shipped id or alias, a config.json path, a ``PretrainedConfig`` or a HF model."""
    config = getattr(model_or_config, "config", model_or_config)
    if hasattr(config, "to_dict"):  # a PretrainedConfig: no need to read a file
        return spec_of(config.to_dict(), getattr(config, "name_or_path", "") or "")
    if isinstance(config, dict):
        return spec_of(config, str(config.get("_name_or_path") or config.get("model_type", "config")))
    from perfpredict.compiler_hooks.hf_frontend import raw_config

    fields, name = raw_config(config)
    return spec_of(fields, name)


def _window(fields: dict[str, Any]) -> int | None:
    """The sliding window an engine applies: declared and not switched off (Qwen2 declares one, unused)."""
    window = fields.get("sliding_window")
    if not window or fields.get("use_sliding_window") is False:
        return None
    return int(window)


def _first(fields: dict[str, Any], *names: str) -> int | None:
    for name in names:
        value = fields.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None
