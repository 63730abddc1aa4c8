"""HuggingFace frontend: a hub id or a config.json becomes a torch model and example inputs, offline.

perfpredict ships the architecture fields of about 20 popular hub configs (``perfpredict/data/hf_configs``), so a
model can be built with no network access. Models are built on the ``meta`` device by default: a 7B model costs
no memory, and ``torch.compile`` still captures its graph with full shapes, which is all the predictors need.
"""

from __future__ import annotations

import copy
import functools
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfpredict.core.errors import InvalidInputError, UnknownModelError, close_matches, require

if TYPE_CHECKING:
    import torch

logger = logging.getLogger(__name__)
logger.addHandler(logging.NullHandler())

CONFIG_DIR = Path(__file__).resolve().parent.parent / "data" / "hf_configs"
DTYPES = ("float32", "float16", "bfloat16")
DEFAULT_SEQ_LEN = 128
DEFAULT_IMAGE_SIZE = 224

# RoBERTa-style models number positions from padding_idx + 1, so max_position_embeddings (514) overstates the
# longest usable sequence by pad_token_id + 1 (512 usable).
_PADDING_OFFSET_MODEL_TYPES = frozenset(
    {
        "roberta",
        "xlm-roberta",
        "xlm-roberta-xl",
        "camembert",
        "roberta-prelayernorm",
        "data2vec-text",
        "longformer",
        "ibert",
        "markuplm",
    }
)
# Encoder-decoder families whose encoder has its own class taking input_ids alone.
_ENCODER_CLASSES = {"t5": "T5EncoderModel", "mt5": "MT5EncoderModel", "umt5": "UMT5EncoderModel"}
# Text models whose stack reads a missing attention mask as ``None[:, None, None, :]`` under dynamo (it only builds
# the default mask when not compiling), so the capture falls back to eager there and loses the layers' ops: they get
# an explicit all-ones mask, as a tokenizer would pass.
_MASKED_MODEL_TYPES = frozenset({"switch_transformers"})
_KEPT_HEAD_SUFFIXES = ("ForCausalLM", "LMHeadModel", "ForImageClassification", "ForSequenceClassification")


@functools.lru_cache(maxsize=1)
def _index() -> dict[str, Any]:
    return json.loads((CONFIG_DIR / "index.json").read_text())


def known_models() -> list[str]:
    """The HuggingFace ids with a shipped config (their aliases are in :func:`model_aliases`)."""
    return sorted(_index()["models"], key=str.lower)


def model_aliases() -> dict[str, str]:
    """Short names accepted in place of a shipped id, mapped to that id."""
    return dict(_index()["aliases"])


def shipped_entry(model_id: str) -> dict[str, Any]:
    """The index entry (file, model_class, input kind, default size, family) of a shipped id or alias."""
    canonical = resolve_id(model_id)
    if canonical is None:
        raise _unknown_model(model_id)
    return dict(_index()["models"][canonical])


def resolve_id(name: str) -> str | None:
    """The canonical shipped id for an id or alias (case-insensitive), or None when nothing is shipped."""
    index = _index()
    key = name.strip().lower().removeprefix("https://huggingface.co/").removeprefix("hf.co/")
    for model_id in index["models"]:
        if model_id.lower() == key:
            return model_id
    for alias, model_id in index["aliases"].items():
        if alias.lower() == key:
            return model_id
    return None


def _unknown_model(name: str) -> UnknownModelError:
    choices = list(_index()["models"]) + list(_index()["aliases"])
    hint = close_matches(name, choices)
    near = f" Close shipped ids: {hint}." if hint else ""
    return UnknownModelError(
        f"no shipped config for HuggingFace id {name!r} (perfpredict works offline).{near} "
        f"Run `perfpredict models` for the list, or download the model's config.json and pass "
        f"--config path/to/config.json (in Python: load_config('path/to/config.json'))."
    )


def _looks_like_path(text: str) -> bool:
    return text.endswith(".json") or text.startswith(("/", "./", "../", "~")) or "\\" in text


def load_config(id_or_path: Any):
    """A ``transformers.PretrainedConfig`` for a shipped id or alias, a config.json path, or a folder holding one.

    ``config.name_or_path`` is set to the canonical id for shipped models, or to the file path otherwise.
    """
    transformers = require("transformers", "hf")
    if isinstance(id_or_path, transformers.PretrainedConfig):
        return id_or_path
    data, name = raw_config(id_or_path)
    return config_from_dict(data, name=name)


def raw_config(id_or_path: Any) -> tuple[dict[str, Any], str]:
    """(the config.json's fields, its canonical name) for a shipped id or alias, a path or a folder, read without
    importing transformers (the CLI's graph cache answers a repeated question from this alone)."""
    if not isinstance(id_or_path, (str, Path)):
        raise InvalidInputError(
            f"expected a HuggingFace id, a config.json path or a PretrainedConfig, got {type(id_or_path).__name__}"
        )
    path = Path(id_or_path).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            found = sorted(p.name for p in path.glob("*.json"))[:5]
            raise InvalidInputError(
                f"folder {str(id_or_path)!r} has no config.json; pass a folder that holds a HuggingFace config.json "
                f"or the path of the config file itself" + (f" (JSON files there: {', '.join(found)})" if found else "")
            )
        path = path / "config.json"
    if path.is_file():
        return _read_json(path), str(path)
    text = str(id_or_path)
    model_id = resolve_id(text)
    if model_id is not None:
        return _read_json(CONFIG_DIR / _index()["models"][model_id]["file"]), model_id
    if _looks_like_path(text):
        raise InvalidInputError(f"config file {text!r} does not exist; pass the path to a HuggingFace config.json")
    raise _unknown_model(text)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InvalidInputError(f"cannot read {str(path)!r} as a JSON config: {err}") from err
    if not isinstance(data, dict):
        raise InvalidInputError(f"{str(path)!r} is not a HuggingFace config (expected a JSON object)")
    return data


def config_from_dict(data: dict[str, Any], name: str = ""):
    """Build the ``PretrainedConfig`` subclass named by ``data["model_type"]``."""
    transformers = require("transformers", "hf")
    data = dict(data)
    model_type = data.pop("model_type", None)
    if not model_type:
        raise UnknownModelError(
            f"config {name!r} has no 'model_type' field, so perfpredict cannot tell which "
            "transformers architecture to build"
        )
    _check_sizes(data, name)
    mapping = transformers.CONFIG_MAPPING
    if model_type not in mapping:
        hint = close_matches(model_type, list(mapping.keys()), n=3, cutoff=0.75, substrings=False)
        raise UnknownModelError(
            f"model_type {model_type!r} in {name!r} is not known to transformers {transformers.__version__}"
            + (f" (close: {hint})" if hint else "")
            + "; upgrade transformers or check the config"
        )
    try:
        config = mapping[model_type](**data)
    except (TypeError, ValueError) as err:
        raise UnknownModelError(f"transformers rejected config {name!r}: {err}") from err
    config._name_or_path = name
    return config


# sizes and counts that must be positive where a config gives them (others use -1 or 0 as "none":
# deberta's max_relative_positions=-1, a sliding_window of 0)
_POSITIVE = frozenset(
    [
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "intermediate_size",
        "vocab_size",
        "head_dim",
        "max_position_embeddings",
        "n_embd",
        "n_layer",
        "n_head",
        "n_inner",
        "n_positions",
        "d_model",
        "d_ff",
        "d_kv",
        "num_layers",
        "num_heads",
        "encoder_layers",
        "decoder_layers",
        "encoder_attention_heads",
        "decoder_attention_heads",
        "encoder_ffn_dim",
        "decoder_ffn_dim",
        "ffn_dim",
        "num_local_experts",
        "num_experts",
        "num_experts_per_tok",
        "moe_intermediate_size",
        "image_size",
        "patch_size",
        "num_channels",
        "embed_dim",
    ]
)


def _check_sizes(data: dict[str, Any], name: str) -> None:
    """One line naming a size field that cannot be (``hidden_size=-64``), before transformers or torch sees it
    (torch would say "Trying to create tensor with negative dimension"); nested configs (text_config) too."""
    for key, value in data.items():
        if isinstance(value, dict):
            _check_sizes(value, f"{name}: {key}")
        elif key in _POSITIVE and isinstance(value, (int, float)) and not isinstance(value, bool) and value <= 0:
            raise InvalidInputError(
                f"config {name!r} has {key}={value!r}; it must be a positive number: fix {key} in the config"
            )


def input_kind(config) -> str:
    """``"text"`` (input_ids) or ``"vision"`` (pixel_values) for a config."""
    model_id = resolve_id(config.name_or_path or "") if config.name_or_path else None
    if model_id is not None:
        return _index()["models"][model_id]["input"]
    if getattr(config, "vocab_size", None):
        return "text"
    if getattr(config, "num_channels", None):
        return "vision"
    raise UnknownModelError(
        f"perfpredict builds text and vision models from HF configs; model_type {config.model_type!r} is neither "
        "(no vocab_size or num_channels). Pass the torch model to perfpredict.predict() instead"
    )


def _model_class_name(config) -> str:
    model_id = resolve_id(config.name_or_path) if config.name_or_path else None
    if model_id is not None:
        return _index()["models"][model_id]["model_class"]
    if config.model_type in _ENCODER_CLASSES:
        return _ENCODER_CLASSES[config.model_type]
    arch = (getattr(config, "architectures", None) or [""])[0]
    if arch.endswith(_KEPT_HEAD_SUFFIXES):
        return arch
    # Pre-training heads (masked LM, NSP) are not what is deployed; the base model is.
    return "AutoModel"


def declared_dtype(config) -> str | None:
    """The dtype a config (a PretrainedConfig or its raw JSON fields) says its weights are stored in
    (``"torch_dtype"``, ``"dtype"`` in transformers 5), as a canonical name, or None when it declares none (or one
    perfpredict does not run, such as float64)."""
    fields = (
        config
        if isinstance(config, dict)
        else {**getattr(config, "__dict__", {}), "dtype": getattr(config, "dtype", None)}
    )
    value = fields.get("dtype") or fields.get("torch_dtype")
    name = str(value).removeprefix("torch.") if value is not None else None
    return name if name in DTYPES else None


def torch_dtype(dtype: Any) -> torch.dtype:
    """Map "float32"/"fp16"/"bf16"/torch.dtype to a torch dtype, or raise listing the valid names."""
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    names = {
        "float32": torch.float32,
        "fp32": torch.float32,
        "float": torch.float32,
        "float16": torch.float16,
        "fp16": torch.float16,
        "half": torch.float16,
        "bfloat16": torch.bfloat16,
        "bf16": torch.bfloat16,
    }
    key = str(dtype).lower().removeprefix("torch.")
    if key not in names:
        raise InvalidInputError(f"unsupported dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    return names[key]


def build_model(config_or_id: Any, dtype: Any = "float32", device: Any = "meta", model_class: str | None = None):
    """Build the model for a config or shipped id on ``device`` (meta: no memory), in eval mode.

    Causal LMs get ``use_cache=False`` (a KV cache is generation state, not part of one forward pass). Without a
    ``model_class`` (a transformers class name, ``AutoModelFor...`` or a concrete one), T5 builds its encoder only,
    and other encoder-decoder configs their ``get_encoder()``: the decoder needs generation inputs. A seq2seq
    ``model_class`` builds both halves (:func:`with_decoder_inputs` gives the decoder its inputs).
    """
    transformers = require("transformers", "hf")
    import torch

    config = copy.deepcopy(load_config(config_or_id))
    if hasattr(config, "use_cache"):
        config.use_cache = False
    class_name = model_class or _model_class_name(config)
    cls = _transformers_class(transformers, class_name, config, asked=model_class is not None)
    with torch.device(device):
        try:
            if class_name.startswith("AutoModel"):
                model = cls.from_config(config, dtype=torch_dtype(dtype))
            else:
                model = cls._from_config(config, dtype=torch_dtype(dtype))
        except ValueError as exc:  # an Auto class with no mapping for this config type
            raise InvalidInputError(
                f"model_class {class_name!r} has no model for a {config.model_type!r} config ({exc}); name a head "
                "this architecture has (--model-class)"
            ) from None
    encoder_only = class_name == "AutoModel" and model_class is None
    if encoder_only and getattr(config, "is_encoder_decoder", False) and hasattr(model, "get_encoder"):
        model = model.get_encoder()
    return model.eval()


def _transformers_class(transformers: Any, class_name: str, config: Any, *, asked: bool) -> Any:
    """transformers' class ``class_name``, refused in one line where it is not one, or (a concrete class) is one
    for another architecture's config."""
    cls = getattr(transformers, class_name, None)
    if cls is None or not isinstance(cls, type):
        if not asked:
            raise UnknownModelError(
                f"transformers {transformers.__version__} has no {class_name}; upgrade transformers"
            )
        raise InvalidInputError(
            f"model_class {class_name!r} is not a transformers model class (transformers {transformers.__version__}); "
            "name one such as AutoModelForSequenceClassification, AutoModelForCausalLM or BertForPreTraining"
        )
    wanted = getattr(cls, "config_class", None)
    if asked and isinstance(wanted, type) and not isinstance(config, wanted):
        raise InvalidInputError(
            f"model_class {class_name!r} builds {wanted.__name__} models, not a {config.model_type!r} config; name "
            f"an AutoModelFor... class or a {type(config).__name__.removesuffix('Config')} one"
        )
    return cls


def needs_decoder_inputs(model: Any) -> bool:
    """Whether ``model`` runs a decoder that takes its own inputs (a seq2seq head such as T5's or Switch's)."""
    import inspect

    return "decoder_input_ids" in inspect.signature(model.forward).parameters


def with_decoder_inputs(config: Any, inputs: tuple) -> tuple:
    """``inputs`` (ids, and an attention mask where the model takes one) with decoder inputs of the same length, as
    a seq2seq head is called on them positionally: ``(input_ids, attention_mask, decoder_input_ids)``."""
    import torch

    ids = inputs[0]
    mask = inputs[1] if len(inputs) > 1 else torch.ones_like(ids)
    return (ids, mask, torch.zeros_like(ids))


def max_seq_len(config) -> int | None:
    """The longest sequence the config's position embeddings allow (None: no absolute limit)."""
    limit = getattr(config, "max_position_embeddings", None)
    if not isinstance(limit, int) or limit <= 0:
        return None
    if config.model_type in _PADDING_OFFSET_MODEL_TYPES:
        limit -= (getattr(config, "pad_token_id", None) or 0) + 1
    return limit


def _image_size_hw(config) -> tuple[int, int]:
    size = getattr(config, "image_size", None) or DEFAULT_IMAGE_SIZE
    if isinstance(size, (list, tuple)):
        return int(size[0]), int(size[-1])
    return int(size), int(size)


def _check_positive(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInputError(f"{what} must be a positive integer, got {value!r}")
    return value


def default_seq_len(config) -> int:
    model_id = resolve_id(config.name_or_path) if config.name_or_path else None
    if model_id is not None:
        return _index()["models"][model_id].get("default_seq_len", DEFAULT_SEQ_LEN)
    return min(DEFAULT_SEQ_LEN, max_seq_len(config) or DEFAULT_SEQ_LEN)


def example_inputs(
    config: Any, batch_size: int, seq_len: int | None = None, device: Any = "meta", dtype: Any = "float32"
) -> tuple:
    """Positional inputs for one forward pass: ``(input_ids,)`` for text, ``(pixel_values,)`` for vision.

    ``seq_len`` defaults to the shipped default (128 for encoders, 512 for LLMs). ``dtype`` is the model's dtype,
    which pixel values must match.
    """
    import torch

    config = load_config(config)
    batch_size = _check_positive(batch_size, "batch size")
    name = config.name_or_path or config.model_type
    if input_kind(config) == "vision":
        if seq_len is not None:
            raise InvalidInputError(
                f"a sequence length applies to text models; {name!r} is a vision model "
                f"(images of {_image_size_hw(config)[0]} px); drop --seq"
            )
        height_px, width_px = _image_size_hw(config)
        channels = getattr(config, "num_channels", 3) or 3
        return (torch.zeros((batch_size, channels, height_px, width_px), dtype=torch_dtype(dtype), device=device),)
    seq_len = default_seq_len(config) if seq_len is None else _check_positive(seq_len, "sequence length")
    limit = max_seq_len(config)
    if limit is not None and seq_len > limit:
        raise InvalidInputError(
            f"sequence length {seq_len} is longer than {name!r} allows ({limit} positions); use --seq {limit} or less"
        )
    ids = torch.zeros((batch_size, seq_len), dtype=torch.long, device=device)
    if config.model_type in _MASKED_MODEL_TYPES:
        return (ids, torch.ones((batch_size, seq_len), dtype=torch.long, device=device))
    return (ids,)


def model_from_hf(
    id_or_path: Any, batch_size: int = 1, seq_len: int | None = None, dtype: Any = "float32", device: Any = "meta"
):
    """``(model, example_inputs, name)`` for a shipped id, alias or config.json path, built on ``device``."""
    config = load_config(id_or_path)
    # Inputs first: they validate batch, seq and dtype cheaply before the model is built.
    torch_dtype(dtype)
    inputs = example_inputs(config, batch_size, seq_len, device=device, dtype=dtype)
    model = build_model(config, dtype=dtype, device=device)
    return model, inputs, config.name_or_path or config.model_type
