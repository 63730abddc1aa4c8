"""A field a config.json leaves out is what transformers gives it, its config class's default, for the readers of raw
fields too (the vLLM-class engine): Gemma-2's configs leave out ``tie_word_embeddings``, and were costed untied."""

from __future__ import annotations

import json

import pytest

from perfpredict.compiler_hooks import hf_defaults

# google/gemma-2-2b's config.json (architecture fields): no tie_word_embeddings, as Google ships it; the checkpoint
# has no lm_head weight (the LM head is the embedding), and transformers' Gemma2Config ties by default
GEMMA2_2B = {
    "architectures": ["Gemma2ForCausalLM"],
    "model_type": "gemma2",
    "head_dim": 256,
    "hidden_size": 2304,
    "intermediate_size": 9216,
    "max_position_embeddings": 8192,
    "num_attention_heads": 8,
    "num_hidden_layers": 26,
    "num_key_value_heads": 4,
    "sliding_window": 4096,
    "torch_dtype": "float32",
    "vocab_size": 256000,
}


def test_the_shipped_defaults_are_the_installed_transformers_ones():
    """``python -m perfpredict.compiler_hooks.hf_defaults`` rewrites the file when transformers changes a default."""
    pytest.importorskip("transformers")
    from perfpredict.llm.decoder_spec import SUPPORTED

    shipped = json.loads(hf_defaults.DEFAULTS_FILE.read_text())["defaults"]
    assert shipped == hf_defaults.generate(tuple(SUPPORTED))["defaults"]
    assert shipped["gemma2"]["tie_word_embeddings"] is True and "head_dim" not in shipped["llama"]  # derived there


def test_a_gemma2_config_without_the_field_counts_its_embedding_once(tmp_path):
    from perfpredict.llm.decoder_spec import spec_from
    from perfpredict.llm.generation import predict_generation

    path = tmp_path / "config.json"
    path.write_text(json.dumps(GEMMA2_2B))
    spec = spec_from(str(path))
    assert spec.tied_embeddings
    # a block: q, k, v, o = 2,304 x (8 + 2 x 4) x 256 + 8 x 256 x 2,304 = 14,155,776; the gated MLP 3 x 2,304 x 9,216
    # = 63,700,992; two norms 2 x 2,304: 77,861,376 each, 26 of them; the embedding 256,000 x 2,304 = 589,824,000
    # once (the LM head is the same weight); the final norm 2,304
    embedding = 256_000 * 2_304
    assert spec.params() == 26 * 77_861_376 + embedding + 2_304 == 2_614_222_080
    report = predict_generation(str(path), device="L4", engine="vllm", dtype="bfloat16", prompt_tokens=16, new_tokens=2)
    # in bfloat16: 2,614,222,080 x 2 bytes; untied it was 589,824,000 x 2 = 1.18 GB more
    assert report.weights_bytes == 2_614_222_080 * 2


def test_a_field_the_config_gives_wins_and_a_derived_one_is_left_to_derive():
    tied_off = hf_defaults.with_defaults({**GEMMA2_2B, "tie_word_embeddings": False})
    assert tied_off["tie_word_embeddings"] is False
    llama = hf_defaults.with_defaults({"model_type": "llama", "hidden_size": 2048, "num_attention_heads": 32})
    assert "head_dim" not in llama and llama["tie_word_embeddings"] is False  # head_dim: 2,048 / 32, as Llama derives
    assert hf_defaults.with_defaults({"model_type": "internlm2"}) == {"model_type": "internlm2"}  # no class: no guess
