"""The copy of a dynamo graph that AOTAutograd traces to observe a training step.

AOT decomposes each op by the tracing host's kernels, and captures run on CPU or meta tensors, not on the GPU the
prediction is for. Two decompositions there misstate a training step, so this copy calls other ops in their
place. The graph the user's model runs is never touched: only the observed copy is rewritten.

- **Attention.** CPU's fused SDPA kernel refuses dropout, so every transformer trained with attention dropout
  (BERT, RoBERTa, GPT-2, ...) came out as QK^T, softmax, dropout and PV, whose saved [batch, heads, seq, seq]
  tensors made a 4k-token BERT step look like 60-1,800 GiB. A GPU runs memory-efficient or flash attention
  (both take dropout), which saves only the output and one log-sum-exp per query; the H100 measured 2-78 GiB for
  those rows. The copy calls ``aten._scaled_dot_product_efficient_attention``, the fused kernel that takes every
  SDPA argument; its meta kernel and autograd formula give the fused forward and backward nodes. Where a CPU
  really runs the math path, the memory model adds the scores back
  (:func:`perfpredict.predictors.memory_model.cpu_math_attention_bytes`), reading ``dropout_p`` off the node.
- **Cross-entropy.** On meta tensors ``aten::nll_loss`` reaches a meta kernel with no autograd formula, so a loss
  that is the graph's only output gave no backward at all: the zoo's plain-torch families (VGG, DenseNet,
  MnasNet, MLP) were "trained" forward-only, and DenseNet's training memory was predicted 94% low. The copy
  calls ``log_softmax`` and ``aten.nll_loss_forward``, the two ops a CPU trace decomposes it into, whose autograd
  formula works on every device (``F.nll_loss`` likewise).
"""

from __future__ import annotations

from typing import Any

# torch's Reduction enum, which aten.nll_loss_forward takes as an int
_REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}


def _fused_sdpa(
    query: Any,
    key: Any,
    value: Any,
    attn_mask: Any = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Any:
    """SDPA's signature and result, through the fused kernel."""
    import torch

    if enable_gqa and key.shape[-3] != query.shape[-3]:
        # Grouped-query attention: the fused kernels read shared K/V heads in place; repeating them here adds
        # copies a GPU would not make, a small overestimate next to what it replaces.
        groups = query.shape[-3] // key.shape[-3]
        key, value = key.repeat_interleave(groups, -3), value.repeat_interleave(groups, -3)
    bias = None
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            attn_mask = torch.where(attn_mask, 0.0, float("-inf"))
        bias = attn_mask.to(query.dtype).expand(*query.shape[:-1], key.shape[-2])
    return torch.ops.aten._scaled_dot_product_efficient_attention(
        query, key, value, bias, True, dropout_p, is_causal, scale=scale
    )[0]


def _cross_entropy(input: Any, target: Any, *args: Any, **kwargs: Any) -> Any:
    """F.cross_entropy for class-index targets as log_softmax + aten.nll_loss_forward (others: unchanged).

    F.cross_entropy's arguments after ``target`` are F.nll_loss's five, then ``label_smoothing``.
    """
    import torch

    label_smoothing = args[5] if len(args) > 5 else kwargs.get("label_smoothing", 0.0)
    if label_smoothing or target.is_floating_point():
        return torch.nn.functional.cross_entropy(input, target, *args, **kwargs)
    kwargs.pop("label_smoothing", None)
    logp = torch.log_softmax(input, 1 if input.dim() > 1 else 0)
    return _nll_loss(logp, target, *args[:5], **kwargs)


def _nll_loss(
    input: Any,
    target: Any,
    weight: Any = None,
    size_average: Any = None,
    ignore_index: int = -100,
    reduce: Any = None,
    reduction: str = "mean",
) -> Any:
    """F.nll_loss through aten.nll_loss_forward, whose autograd formula works on meta tensors."""
    import torch

    if size_average is not None or reduce is not None or reduction not in _REDUCTIONS:
        return torch.nn.functional.nll_loss(input, target, weight, size_average, ignore_index, reduce, reduction)
    if input.dim() > 2:  # (N, C, d1, ...) -> (N * d1 * ..., C): nll_loss_forward takes at most 2-D input
        input, flat_target = input.movedim(1, -1).reshape(-1, input.shape[1]), target.reshape(-1)
    else:
        flat_target = target
    loss = torch.ops.aten.nll_loss_forward(input, flat_target, weight, _REDUCTIONS[reduction], ignore_index)[0]
    return loss.reshape(target.shape) if reduction == "none" else loss


def _replacements() -> dict[Any, Any]:
    import torch

    return {
        torch.nn.functional.scaled_dot_product_attention: _fused_sdpa,
        torch._C._nn.scaled_dot_product_attention: _fused_sdpa,
        torch.nn.functional.cross_entropy: _cross_entropy,
        torch.nn.functional.nll_loss: _nll_loss,
    }


def observation_copy(gm: Any) -> Any:
    """A copy of ``gm`` for AOT to trace, with the replacements above; ``gm`` itself is unchanged.

    The copy shares ``gm``'s parameters and submodules (no weights are copied), except the graph modules that hold
    ops to replace: the bodies of higher-order ops such as dynamo's ``tag_activation_checkpoint`` (a checkpointed
    layer's attention lives there) are copied and rewritten too. Returns ``gm`` when nothing in it needs replacing.
    """
    import copy

    import torch

    swaps = _replacements()
    bodies = {
        node.target: _rewritten(getattr(gm, node.target), swaps)
        for node in gm.graph.nodes
        if node.op == "get_attr" and isinstance(getattr(gm, node.target, None), torch.fx.GraphModule)
    }
    bodies = {name: body for name, body in bodies.items() if body is not getattr(gm, name)}
    if not bodies and not any(n.op == "call_function" and n.target in swaps for n in gm.graph.nodes):
        return gm
    graph = copy.deepcopy(gm.graph)
    for node in graph.nodes:
        if node.op == "call_function" and node.target in swaps:
            node.target = swaps[node.target]
    copied = torch.fx.GraphModule(gm, graph)
    for name, body in bodies.items():
        setattr(copied, name, body)
    copied.meta = getattr(gm, "meta", {})
    return copied


def _rewritten(body: Any, swaps: dict[Any, Any]) -> Any:
    """``body`` (a higher-order op's graph module) with its ops replaced, or ``body`` itself where none are."""
    return observation_copy(body) if swaps else body
