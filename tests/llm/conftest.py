"""Fixtures of the LLM tests: a tiny Llama config whose engine tables build in a fraction of a second."""

from __future__ import annotations

import json

import pytest

TINY_LLAMA = {
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 688,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "num_hidden_layers": 2,
    "vocab_size": 1000,
    "max_position_embeddings": 1024,
    "torch_dtype": "float16",
}


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory) -> str:
    """A folder holding the tiny Llama's config.json."""
    folder = tmp_path_factory.mktemp("tiny_llama")
    (folder / "config.json").write_text(json.dumps(TINY_LLAMA))
    return str(folder)
