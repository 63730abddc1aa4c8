"""Fixtures of the web page's tests."""

from __future__ import annotations

import json

import pytest
from tiny_llm import TINY_LLAMA


@pytest.fixture(scope="session")
def tiny_llama_upload(tmp_path_factory) -> str:
    """The tiny Llama's config.json as the page receives an upload: a file path."""
    path = tmp_path_factory.mktemp("upload") / "config.json"
    path.write_text(json.dumps(TINY_LLAMA))
    return str(path)
