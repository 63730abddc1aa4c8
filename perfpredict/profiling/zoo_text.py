"""The zoo's text families: encoders (BERT, RoBERTa, DistilBERT, DeBERTa-v2, T5), GPT-2 and decoders (Llama, Mistral, Qwen2)."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from perfpredict.profiling.zoo_family import SEQ_RANGE, TEXT_DEPTHS, TEXT_WIDTHS, Family, heads_for
from perfpredict.profiling.zoo_hf import LABELS, TRANSFORMER_FIELDS, HfModel, ffn_width

_VOCAB = {"tiny": (1024, 4096), "cpu": (1024, 4096, 8192), "gpu": (30522, 32000, 50257)}


def _text_sample(rng: random.Random, profile: str) -> dict[str, Any]:
    hidden = rng.choice(TEXT_WIDTHS[profile])
    return {
        "hidden": hidden,
        "layers": rng.choice(TEXT_DEPTHS[profile]),
        "heads": heads_for(rng, hidden),
        "expansion": rng.choice((2, 3, 4)),
        "vocab": rng.choice(_VOCAB[profile]),
    }


def _decoder_sample(rng: random.Random, profile: str) -> dict[str, Any]:
    p = _text_sample(rng, profile)
    p["kv_heads"] = rng.choice([k for k in (1, 2, 4, 8) if p["heads"] % k == 0])
    return p


def _max_pos(p: Mapping[str, Any]) -> int:
    return SEQ_RANGE[1]


def _no_limit(p: Mapping[str, Any]) -> None:
    return None


# Config fields: the BERT-style names, and the renamed ones of DistilBERT, GPT-2 and T5.
_ENCODER = {**TRANSFORMER_FIELDS, "vocab_size": "vocab"}
_DECODER = {**_ENCODER, "num_key_value_heads": "kv_heads"}
_DISTILBERT = {
    "dim": "hidden",
    "n_layers": "layers",
    "n_heads": "heads",
    "hidden_dim": ffn_width,
    "vocab_size": "vocab",
}
_GPT2 = {"n_embd": "hidden", "n_layer": "layers", "n_head": "heads", "n_inner": ffn_width, "vocab_size": "vocab"}
_T5 = {
    "d_model": "hidden",
    "d_kv": lambda p: p["hidden"] // p["heads"],
    "d_ff": ffn_width,
    "num_layers": "layers",
    "num_heads": "heads",
    "vocab_size": "vocab",
}
_POSITIONS = {"max_position_embeddings": SEQ_RANGE[1]}
_NO_CACHE = {"use_cache": False}  # the zoo measures whole-sequence steps, never generation
_ENCODER_FIXED = {**_POSITIONS, **LABELS}
_ROBERTA_FIXED = {**LABELS, "pad_token_id": 1, "max_position_embeddings": SEQ_RANGE[1] + 2}  # after the padding index
_DEBERTA_FIXED = {
    **_ENCODER_FIXED,
    "relative_attention": True,
    "pos_att_type": ["p2c", "c2p"],
    "position_buckets": 256,
    "max_relative_positions": -1,
}
_GPT2_FIXED = {**_NO_CACHE, "n_positions": SEQ_RANGE[1], "bos_token_id": 0, "eos_token_id": 0}
_DECODER_FIXED = {**_POSITIONS, **_NO_CACHE, "tie_word_embeddings": False}
_CLS = "AutoModelForSequenceClassification"
_LM = "AutoModelForCausalLM"

_TINY = {"expansion": 2, "heads": 2, "hidden": 32, "layers": 1, "vocab": 128}
_TINY_DECODER = {**_TINY, "kv_heads": 1}


def _text(name: str, build: HfModel, sample=_text_sample, smallest=_TINY, max_seq=_max_pos) -> Family:
    return Family(name, "text", sample, build, smallest, max_seq)


def _decoder(name: str, config: str) -> Family:
    return _text(name, HfModel(config, _LM, _DECODER, _DECODER_FIXED), _decoder_sample, _TINY_DECODER)


# Registered by perfpredict.profiling.zoo, in this order.
FAMILIES: list[Family] = [
    _text("bert", HfModel("BertConfig", _CLS, _ENCODER, _ENCODER_FIXED)),
    _text("roberta", HfModel("RobertaConfig", _CLS, _ENCODER, _ROBERTA_FIXED)),
    _text("distilbert", HfModel("DistilBertConfig", _CLS, _DISTILBERT, _ENCODER_FIXED)),
    _text("deberta_v2", HfModel("DebertaV2Config", _CLS, _ENCODER, _DEBERTA_FIXED)),
    _text("gpt2", HfModel("GPT2Config", _LM, _GPT2, _GPT2_FIXED)),
    _decoder("llama", "LlamaConfig"),
    _decoder("mistral", "MistralConfig"),
    _decoder("qwen2", "Qwen2Config"),
    # T5's encoder has no task head (the zoo's classification head pools it), and relative positions no limit
    _text(
        "t5_encoder",
        HfModel("T5Config", "AutoModelForTextEncoding", _T5, _NO_CACHE, head_width="hidden"),
        max_seq=_no_limit,
    ),
]
