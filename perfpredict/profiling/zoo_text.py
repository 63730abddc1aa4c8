"""The zoo's text families: encoders (BERT, RoBERTa, DistilBERT, DeBERTa-v2, T5), GPT-2 and decoders (Llama, Mistral, Qwen2)."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from perfpredict.profiling.zoo_family import (
    NUM_LABELS,
    SEQ_RANGE,
    TEXT_DEPTHS,
    TEXT_WIDTHS,
    Family,
    classification_head,
    heads_for,
    hf,
)

FAMILIES: list[Family] = []  # registered by perfpredict.profiling.zoo, in this order


def _text_sample(widths: dict[str, Sequence[int]], depths: dict[str, Sequence[int]]):
    def sample(rng: random.Random, profile: str) -> dict[str, Any]:
        hidden = rng.choice(widths[profile])
        return {
            "hidden": hidden,
            "layers": rng.choice(depths[profile]),
            "heads": heads_for(rng, hidden),
            "expansion": rng.choice((2, 3, 4)),
            "vocab": rng.choice(_VOCAB[profile]),
        }

    return sample


_VOCAB = {"tiny": (1024, 4096), "cpu": (1024, 4096, 8192), "gpu": (30522, 32000, 50257)}


def _max_pos(p: Mapping[str, Any]) -> int:
    return SEQ_RANGE[1]


def _bert(p, info):
    t = hf()
    cfg = t.BertConfig(
        hidden_size=p["hidden"],
        num_hidden_layers=p["layers"],
        num_attention_heads=p["heads"],
        intermediate_size=p["hidden"] * p["expansion"],
        vocab_size=p["vocab"],
        max_position_embeddings=SEQ_RANGE[1],
        num_labels=NUM_LABELS,
    )
    return t.BertForSequenceClassification(cfg)


def _roberta(p, info):
    t = hf()
    cfg = t.RobertaConfig(
        hidden_size=p["hidden"],
        num_hidden_layers=p["layers"],
        num_attention_heads=p["heads"],
        intermediate_size=p["hidden"] * p["expansion"],
        vocab_size=p["vocab"],
        pad_token_id=1,
        max_position_embeddings=SEQ_RANGE[1] + 2,
        num_labels=NUM_LABELS,
    )
    return t.RobertaForSequenceClassification(cfg)


def _distilbert(p, info):
    t = hf()
    cfg = t.DistilBertConfig(
        dim=p["hidden"],
        n_layers=p["layers"],
        n_heads=p["heads"],
        hidden_dim=p["hidden"] * p["expansion"],
        vocab_size=p["vocab"],
        max_position_embeddings=SEQ_RANGE[1],
        num_labels=NUM_LABELS,
    )
    return t.DistilBertForSequenceClassification(cfg)


def _deberta(p, info):
    t = hf()
    cfg = t.DebertaV2Config(
        hidden_size=p["hidden"],
        num_hidden_layers=p["layers"],
        num_attention_heads=p["heads"],
        intermediate_size=p["hidden"] * p["expansion"],
        vocab_size=p["vocab"],
        max_position_embeddings=SEQ_RANGE[1],
        relative_attention=True,
        pos_att_type=["p2c", "c2p"],
        position_buckets=256,
        max_relative_positions=-1,
        num_labels=NUM_LABELS,
    )
    return t.DebertaV2ForSequenceClassification(cfg)


def _gpt2(p, info):
    t = hf()
    cfg = t.GPT2Config(
        n_embd=p["hidden"],
        n_layer=p["layers"],
        n_head=p["heads"],
        n_inner=p["hidden"] * p["expansion"],
        vocab_size=p["vocab"],
        n_positions=SEQ_RANGE[1],
        use_cache=False,
        bos_token_id=0,
        eos_token_id=0,
    )
    return t.GPT2LMHeadModel(cfg)


def _decoder(cls_name: str, cfg_name: str):
    def build(p, info):
        t = hf()
        cfg = getattr(t, cfg_name)(
            hidden_size=p["hidden"],
            num_hidden_layers=p["layers"],
            num_attention_heads=p["heads"],
            num_key_value_heads=p["kv_heads"],
            intermediate_size=p["hidden"] * p["expansion"],
            vocab_size=p["vocab"],
            max_position_embeddings=SEQ_RANGE[1],
            use_cache=False,
            tie_word_embeddings=False,
        )
        return getattr(t, cls_name)(cfg)

    return build


def _decoder_sample(rng: random.Random, profile: str) -> dict[str, Any]:
    p = _text_sample(TEXT_WIDTHS, TEXT_DEPTHS)(rng, profile)
    p["kv_heads"] = rng.choice([k for k in (1, 2, 4, 8) if p["heads"] % k == 0])
    return p


def _t5(p, info):
    import torch

    t = hf()
    d_kv = p["hidden"] // p["heads"]
    cfg = t.T5Config(
        d_model=p["hidden"],
        d_kv=d_kv,
        d_ff=p["hidden"] * p["expansion"],
        num_layers=p["layers"],
        num_heads=p["heads"],
        vocab_size=p["vocab"],
        use_cache=False,
    )
    return classification_head(t.T5EncoderModel(cfg), p["hidden"], pool="mean", torch=torch)


_TEXT_PARAMS = ("expansion", "heads", "hidden", "layers", "vocab")
_TINY_TEXT = {"hidden": 32, "layers": 1, "heads": 2, "expansion": 2, "vocab": 128}
for _name, _build in (
    ("bert", _bert),
    ("roberta", _roberta),
    ("distilbert", _distilbert),
    ("deberta_v2", _deberta),
    ("gpt2", _gpt2),
):
    FAMILIES.append(
        Family(
            _name,
            "text",
            "transformers",
            _TEXT_PARAMS,
            _text_sample(TEXT_WIDTHS, TEXT_DEPTHS),
            _build,
            dict(_TINY_TEXT),
            _max_pos,
        )
    )
for _name, _cls, _cfg in (
    ("llama", "LlamaForCausalLM", "LlamaConfig"),
    ("mistral", "MistralForCausalLM", "MistralConfig"),
    ("qwen2", "Qwen2ForCausalLM", "Qwen2Config"),
):
    FAMILIES.append(
        Family(
            _name,
            "text",
            "transformers",
            _TEXT_PARAMS + ("kv_heads",),
            _decoder_sample,
            _decoder(_cls, _cfg),
            {**_TINY_TEXT, "kv_heads": 1},
            _max_pos,
        )
    )
FAMILIES.append(
    Family(
        "t5_encoder",
        "text",
        "transformers",
        _TEXT_PARAMS,
        _text_sample(TEXT_WIDTHS, TEXT_DEPTHS),
        _t5,
        dict(_TINY_TEXT),
        lambda p: None,
    )
)
