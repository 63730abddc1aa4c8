"""The web page's training inputs: the multi-GPU plan at scale and the training-memory options, each mapped to the
same Request field or plan key that `perfpredict predict --training` fills (``cli/parallel.py``, ``cli/model_args.py``).

An input left at its default ("default", 0, unticked) is left out of the question, so the Request keeps its own
default, as a flag not given does. The page's handler (``app.answer``) names every input once; these functions build
the widgets and read them back.
"""

from __future__ import annotations

from typing import Any

from perfpredict.parallel.plan import COMM_DTYPES, FSDP_STRATEGIES, SCHEDULES

#: the page's training-at-scale fields (issue 46), each a plan key (its CLI flag in parentheses in the widget's
#: label); a field at the value here is left out
SCALE_FIELDS = {
    "cp": 1,
    "global_batch": 0,
    "microbatches": 1,
    "schedule": "1f1b",
    "virtual_stages": 1,
    "fsdp_strategy": "full_shard",
    "shard_group": 0,
    "fsdp_param_dtype": "default",
    "fsdp_reduce_dtype": "default",
    "float8_all_gather": False,
    "zero_stage": 0,
    "gpus_per_node": 8,
    "nvlink_domain": 0,
    "inter_node_gbps": 0,
    "sp": False,
    "async_tp": False,
}
#: the activation-checkpointing choice that takes its k from the "every k blocks" field
EVERY_K = "every-k"


def scale_inputs(gr: Any, ui: dict[str, Any]) -> None:
    """The "training at scale" accordion: schedule, batch, FSDP and ZeRO, the network, context and async TP."""
    with gr.Accordion(
        "training at scale (optional): schedule, FSDP and ZeRO, network, context and async TP", open=False
    ):
        with gr.Row():
            ui["cp"] = gr.Number(value=1, precision=0, minimum=1, label="context parallel (cp)", elem_id="cp")
            ui["global_batch"] = gr.Number(
                value=0, precision=0, minimum=0, label="global batch, samples (0: from the micro-batches)"
            )
            ui["microbatches"] = gr.Number(
                value=1,
                precision=0,
                minimum=1,
                label="micro-batches per step (pipeline; without pp: gradient accumulation)",
                elem_id="microbatches",
            )
            ui["schedule"] = gr.Dropdown(list(SCHEDULES), value="1f1b", label="pipeline schedule")
            ui["virtual_stages"] = gr.Number(value=1, precision=0, minimum=1, label="virtual stages (interleaved)")
        with gr.Row():
            ui["fsdp_strategy"] = gr.Dropdown(list(FSDP_STRATEGIES), value="full_shard", label="FSDP strategy")
            ui["shard_group"] = gr.Number(
                value=0, precision=0, minimum=0, label="HYBRID_SHARD shard group (0: a node's dp ranks)"
            )
            dtypes = ["default", *COMM_DTYPES]
            ui["fsdp_param_dtype"] = gr.Dropdown(dtypes, value="default", label="FSDP param dtype (gathers)")
            ui["fsdp_reduce_dtype"] = gr.Dropdown(dtypes, value="default", label="FSDP reduce dtype")
            ui["float8_all_gather"] = gr.Checkbox(value=False, label="float8 all-gather (FSDP, float8 tensorwise)")
            ui["zero_stage"] = gr.Dropdown(
                [0, 1, 2, 3], value=0, label="ZeRO stage instead of FSDP (0: DDP)", elem_id="zero_stage"
            )
        with gr.Row():
            ui["gpus_per_node"] = gr.Number(value=8, precision=0, minimum=1, label="GPUs per node")
            ui["nvlink_domain"] = gr.Number(value=0, precision=0, minimum=0, label="NVLink domain (0: a node)")
            ui["inter_node_gbps"] = gr.Number(value=0, minimum=0, label="network Gb/s per GPU (0: catalog)")
            ui["sp"] = gr.Checkbox(value=False, label="sequence parallel (with tp)")
            ui["async_tp"] = gr.Checkbox(value=False, label="async TP (with sp)")


def parallel_plan(dp: Any, tp: Any, pp: Any, fsdp: bool, **scale: Any) -> dict | None:
    """The multi-GPU plan the page's fields ask for; None for one GPU. ``scale``: the fields of
    :data:`SCALE_FIELDS`, each left out at its default."""
    plan: dict[str, Any] = {k: int(v) for k, v in (("dp", dp), ("tp", tp), ("pp", pp)) if v and int(v) > 1}
    if fsdp:
        plan["fsdp"] = True
    for key, value in scale.items():
        if value in (None, "") or value == SCALE_FIELDS[key]:
            continue
        if isinstance(SCALE_FIELDS[key], bool | str):
            plan[key] = value
        else:
            plan[key] = float(value) if key == "inter_node_gbps" else int(value)
    return plan or None


def training_memory_inputs(gr: Any, ui: dict[str, Any]) -> None:
    """The training-memory and fine-tuning options (Request fields), as `perfpredict predict --training` has them."""
    from perfpredict.hardware.precision import FLOAT8_RECIPES, OPTIMIZER_IMPLS

    with gr.Accordion("training memory and fine-tuning (phase training)", open=False):
        with gr.Row():
            ui["activation_checkpointing"] = gr.Dropdown(
                ["default", "none", "full", "selective-op", EVERY_K],
                value="default",
                label="activation checkpointing (default: the model's own)",
                elem_id="activation_checkpointing",
            )
            ui["checkpoint_every"] = gr.Number(
                value=2, precision=0, minimum=1, label="every k blocks (with every-k)", elem_id="checkpoint_every"
            )
            ui["float8"] = gr.Dropdown(list(FLOAT8_RECIPES), value="none", label="float8 linears", elem_id="float8")
            ui["optimizer_impl"] = gr.Dropdown(
                ["default", *OPTIMIZER_IMPLS],
                value="default",
                label="optimizer implementation",
                elem_id="optimizer_impl",
            )
            ui["offload_optimizer"] = gr.Checkbox(value=False, label="ZeRO-Offload (optimizer on the CPU)")
            ui["power_limit_w"] = gr.Number(value=0, minimum=0, label="power limit, W (0: the board's)")
        with gr.Row():
            ui["lora_rank"] = gr.Number(
                value=0, precision=0, minimum=0, label="LoRA rank (0: full)", elem_id="lora_rank"
            )
            ui["lora_targets"] = gr.Textbox(
                value="",
                label="LoRA target modules (q_proj,v_proj or all-linear; empty: peft's default)",
                elem_id="lora_targets",
            )
            ui["qlora"] = gr.Checkbox(value=False, label="QLoRA (NF4 base)", elem_id="qlora")


def choice_given(choice: Any) -> Any:
    """A selector's choice, or None for "default" (the option left out)."""
    return None if choice in (None, "", "default") else choice


def training_options(page: dict[str, Any]) -> dict[str, Any]:
    """The Request fields of the training-memory inputs that differ from their defaults ("default", 0: left out)."""
    checkpointing = choice_given(page.get("activation_checkpointing"))
    if checkpointing == EVERY_K:  # its k from the field beside it, as --activation-checkpointing every-K
        every = page.get("checkpoint_every")
        checkpointing = f"every-{int(every) if every not in (None, '') else 2}"
    given = {
        "activation_checkpointing": checkpointing,
        "float8": choice_given(page.get("float8")) if page.get("float8") not in (None, "none") else None,
        "lora_rank": int(page["lora_rank"]) if page.get("lora_rank") else None,
        "lora_targets": (page.get("lora_targets") or "").strip() or None,
        "qlora": bool(page.get("qlora")) or None,
        "optimizer_impl": choice_given(page.get("optimizer_impl")),
        "offload_optimizer": bool(page.get("offload_optimizer")) or None,
        "power_limit_w": float(page["power_limit_w"]) if page.get("power_limit_w") else None,
    }
    return {name: value for name, value in given.items() if value is not None}
