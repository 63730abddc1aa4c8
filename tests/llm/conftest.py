"""Fixtures of the LLM tests."""

from __future__ import annotations

import json

import pytest
from tiny_llm import TINY_LLAMA


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory) -> str:
    """A folder holding the tiny Llama's config.json."""
    folder = tmp_path_factory.mktemp("tiny_llama")
    (folder / "config.json").write_text(json.dumps(TINY_LLAMA))
    return str(folder)
