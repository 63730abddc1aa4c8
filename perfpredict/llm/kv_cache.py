"""The KV cache: its geometry from a HuggingFace config, and its bytes at a context length.

bytes = 2 (K and V) x layers x kv_heads x head_dim x tokens x batch x bytes per value, where a layer with a sliding
window keeps at most ``window`` tokens. ``num_key_value_heads`` below ``num_attention_heads`` is GQA (MQA at 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from perfpredict.core.errors import InvalidInputError
from perfpredict.core.ops import DTYPE_BYTES


@dataclass(frozen=True)
class KvGeometry:
    layers: int
    kv_heads: int
    head_dim: int
    windows: tuple[int | None, ...]  # per layer: the sliding window, or None for full attention
    max_positions: int | None

    def tokens_held(self, tokens: int) -> int:
        """Tokens summed over the layers that the cache holds at a context of ``tokens``."""
        return sum(tokens if w is None else min(tokens, w) for w in self.windows)


def kv_geometry(config: Any) -> KvGeometry:
    """The cache's shape for a decoder config (Llama, Mistral, Qwen2, GPT-2, Mixtral, ...)."""
    layers = _first(config, "num_hidden_layers", "n_layer", "num_layers")
    heads = _first(config, "num_attention_heads", "n_head")
    hidden = _first(config, "hidden_size", "n_embd")
    if not (layers and heads and hidden):
        raise InvalidInputError(
            f"{getattr(config, 'model_type', 'this')} config has no decoder geometry "
            "(layers, heads, hidden size): is it a decoder-only LLM?"
        )
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    window = getattr(config, "sliding_window", None)
    uses_window = window is not None and getattr(config, "use_sliding_window", True)
    kinds = getattr(config, "layer_types", None) or ["sliding_attention" if uses_window else "full_attention"] * layers
    windows = tuple(int(window) if k == "sliding_attention" and window else None for k in kinds)
    positions = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    return KvGeometry(int(layers), int(kv_heads), int(head_dim), windows, positions)


def kv_cache_bytes(geometry: KvGeometry, tokens: int, batch: int, kv_dtype: str) -> int:
    """Bytes of the K and V cache for ``batch`` sequences at ``tokens`` of context."""
    if kv_dtype not in DTYPE_BYTES:
        raise InvalidInputError(f"kv dtype {kv_dtype!r} is not one of {', '.join(sorted(DTYPE_BYTES))}")
    return 2 * geometry.kv_heads * geometry.head_dim * geometry.tokens_held(tokens) * batch * DTYPE_BYTES[kv_dtype]


def _first(config: Any, *names: str) -> int | None:
    for name in names:
        value = getattr(config, name, None)
        if isinstance(value, int):
            return value
    return None
