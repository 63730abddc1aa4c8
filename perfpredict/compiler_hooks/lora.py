"""LoRA fine-tuning: the model wrapped with peft's adapters before it is captured.

``peft.get_peft_model`` freezes every base weight and adds two low-rank matrices beside each target linear
(``lora_A``: rank x in, ``lora_B``: out x rank); its forward is ``base(x) + lora_B(lora_A(x)) * scaling``. peft
builds the adapters on the base weights' device, so a model on the meta device gets meta adapters and nothing is
allocated. The capture then sees what a LoRA step runs: the frozen base matmuls with no weight gradient, the
adapters' small matmuls and their gradients, and the trainable parameters (only the adapters: no optimizer state for
the base). ``lora_alpha`` only scales the adapters' output, so it changes no cost. peft keeps the adapters in float32
beside a half-precision base (``autocast_adapter_dtype=True``, its default).
"""

from __future__ import annotations

from typing import Any

from perfpredict.core.errors import InvalidInputError, require

ALL_LINEAR = "all-linear"


def targets_of(text: str | None) -> Any:
    """peft's ``target_modules`` from ``"q_proj,v_proj"`` or ``"all-linear"`` (None: peft's default for the
    architecture, e.g. q_proj and v_proj for Llama)."""
    if text is None:
        return None
    if text.strip() == ALL_LINEAR:
        return ALL_LINEAR
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise InvalidInputError(f"lora_targets={text!r} names no module; give e.g. 'q_proj,v_proj' or 'all-linear'")
    return names


def with_lora(model: Any, rank: int, targets: str | None) -> Any:
    """``model`` with LoRA adapters of ``rank`` on ``targets`` (peft), its base frozen."""
    require("peft", "llm")
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules=targets_of(targets))
    try:
        return get_peft_model(model, config)
    except ValueError as err:  # peft: no module matched, or no default targets for this architecture
        first = str(err).strip().splitlines()[0][:200]
        raise InvalidInputError(
            f"peft cannot add LoRA adapters to {type(model).__name__} ({first}); name the target modules with "
            "lora_targets (--lora-targets q_proj,v_proj, or all-linear)"
        ) from err


def describe(rank: int, targets: str | None, trainable: int, total: int) -> str:
    """The assumption line a LoRA run states."""
    where = targets or "peft's default targets for the architecture"
    return (
        f"LoRA (peft) rank {rank} on {where}: {trainable:,} trainable parameters of {total:,} "
        f"({trainable / max(total, 1):.2%}); the base is frozen (no gradient, no optimizer state); lora_alpha "
        "scales the adapters' output only and changes no cost"
    )
