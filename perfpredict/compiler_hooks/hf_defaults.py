"""What transformers gives a config field the config.json leaves out, for the readers that do not import it.

A config.json holds only what its author wrote; transformers fills every other field from its config class's
defaults (``Gemma2Config(tie_word_embeddings=True, head_dim=256, ...)``). A reader of the raw fields that guesses
instead costs another model: the vLLM-class engine (``llm/decoder_spec``) read a Gemma-2 config, which leaves out
``tie_word_embeddings`` as Google's checkpoints do (their LM head is the embedding), as untied, and counted
256,000 x 2,304 weights (1.2 GB in bfloat16) twice. :func:`with_defaults` fills the fields a raw reader reads from
the config class of the config's own ``model_type``, as transformers would; the defaults ship in
``data/hf_configs/defaults.json`` (reading transformers costs seconds), and a test keeps that file equal to what the
installed transformers says for the engine's model types (``python -m perfpredict.compiler_hooks.hf_defaults`` rewrites
it; name model types to add others).

Only ``__init__`` defaults are taken, never a built config's values: a field a class derives from others (Llama's
``head_dim``, hidden size over heads) has the default None there and is left for the reader to derive.
"""

from __future__ import annotations

import functools
import inspect
import json
from pathlib import Path
from typing import Any

DEFAULTS_FILE = Path(__file__).resolve().parent.parent / "data" / "hf_configs" / "defaults.json"
#: the fields the raw readers read (``llm.decoder_spec.spec_of``), under every spelling a family uses
FIELDS = (
    "num_hidden_layers",
    "n_layer",
    "num_layers",
    "hidden_size",
    "n_embd",
    "d_model",
    "num_attention_heads",
    "n_head",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "n_inner",
    "ffn_dim",
    "num_local_experts",
    "num_experts",
    "num_experts_per_tok",
    "vocab_size",
    "attention_bias",
    "sliding_window",
    "use_sliding_window",
    "max_position_embeddings",
    "n_positions",
    "max_sequence_length",
    "tie_word_embeddings",
)


@functools.lru_cache(maxsize=1)
def _shipped() -> dict[str, dict[str, Any]]:
    return json.loads(DEFAULTS_FILE.read_text())["defaults"]


def with_defaults(fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` with every field of :data:`FIELDS` it leaves out taken from its ``model_type``'s config class."""
    return {**_shipped().get(str(fields.get("model_type", "")), {}), **fields}


def class_defaults(model_type: str) -> dict[str, Any] | None:
    """The ``__init__`` defaults of :data:`FIELDS` (None left out) of transformers' config class for
    ``model_type``; None where transformers has no such class."""
    import transformers

    if model_type not in transformers.CONFIG_MAPPING:
        return None
    params = inspect.signature(transformers.CONFIG_MAPPING[model_type].__init__).parameters
    return {name: params[name].default for name in FIELDS if name in params and params[name].default is not None}


def generate(model_types: tuple[str, ...]) -> dict[str, Any]:
    """The defaults file's contents for ``model_types``, from the installed transformers."""
    import transformers

    found = {t: class_defaults(t) for t in sorted(model_types)}
    return {
        "_about": "transformers' config-class defaults of the fields perfpredict reads from a raw config.json "
        "(perfpredict.compiler_hooks.hf_defaults); regenerate with python -m perfpredict.compiler_hooks.hf_defaults",
        "transformers": transformers.__version__,
        "defaults": {t: d for t, d in found.items() if d is not None},
    }


def main(model_types: list[str]) -> None:
    """Rewrite the defaults file for ``model_types`` (none given: the model types it holds now)."""
    DEFAULTS_FILE.write_text(json.dumps(generate(tuple(model_types or _shipped())), indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
