"""AOTAutograd joint graph (forward + backward, aten level) -> OpGraph for the training phase.

AOT describes each joint placeholder by the dynamo input it came from (``PlainAOTInput(idx)``) and each output
by what it is (``GradAOTOutput(grad_of=...)``); with dynamo's example inputs that tells which placeholders are
parameters and which outputs are parameter gradients.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from perfpredict.compiler_hooks.fx_frontend import graph_from_fx
from perfpredict.core.graph import OpGraph


def graph_from_joint(joint_module: Any, dynamo_gm: Any, dynamo_inputs: Sequence[Any], name: str = "") -> OpGraph:
    dynamo_placeholders = [n for n in dynamo_gm.graph.nodes if n.op == "placeholder"]
    params, trainable = _param_inputs(dynamo_placeholders, dynamo_inputs)
    joint_params: set[int] = set()
    joint_trainable: set[int] = set()
    for pos, node in enumerate(n for n in joint_module.graph.nodes if n.op == "placeholder"):
        desc = node.meta.get("desc")
        # torch >= 2.9 describes each joint input; before that, primals follow dynamo's inputs in order.
        idx = getattr(desc, "idx", None) if desc is not None else (pos if node.name.startswith("primals_") else None)
        if idx in params and not type(desc).__name__.startswith("Tangent"):
            joint_params.add(pos)
            if idx in trainable:
                joint_trainable.add(pos)
    return graph_from_fx(
        joint_module,
        None,
        phase="training",
        param_indices=joint_params,
        trainable_indices=joint_trainable,
        grad_param_indices=trainable,
        source="aot",
        name=name,
    )


def _param_inputs(placeholders: Sequence[Any], inputs: Sequence[Any]) -> tuple[set[int], set[int]]:
    """Dynamo input indices that are parameters or buffers, and the subset that trains."""
    import torch

    params: set[int] = set()
    trainable: set[int] = set()
    for i, node in enumerate(placeholders):
        example = inputs[i] if i < len(inputs) else None
        is_param = isinstance(example, torch.nn.Parameter) or "_parameters_" in node.name
        if is_param or "_buffers_" in node.name:
            params.add(i)
            if is_param and getattr(example, "requires_grad", True):
                trainable.add(i)
    return params, trainable
