"""A training step's graph, observed: AOTAutograd traces the forward and backward of a dynamo graph, and the joint
graph becomes one OpGraph (``aot_frontend.graph_from_joint``).

The trace runs on a copy (``observed_trace.observation_copy``: attention fused, as on a GPU, and a loss meta tensors
can differentiate) and only to observe: the caller runs the original graph module, so autograd behaves exactly as
without perfpredict (double backward included). Used by the torch.compile backend (``backends/torch_backend.py``)
and by capture without running (``capture.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from perfpredict.core.graph import OpGraph


def observe_training(
    gm: Any,
    example_inputs: list[Any],
    *,
    name: str,
    on_graph: Callable[[OpGraph], None],
    on_error: Callable[[BaseException], None] | None = None,
) -> None:
    """Hand the training OpGraph of ``gm`` to ``on_graph``; a failure goes to ``on_error`` (None: raise)."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.partitioners import default_partition

    from perfpredict.compiler_hooks.observed_trace import observation_copy

    seen = {"graph": False}

    def observe(graph_fn: Callable[[], OpGraph]) -> None:
        seen["graph"] = True
        try:
            on_graph(graph_fn())
        except Exception as err:
            if on_error is None:
                raise
            on_error(err)

    def partition(joint_module: Any, joint_inputs: Any, **kwargs: Any) -> Any:
        from perfpredict.compiler_hooks.aot_frontend import graph_from_joint

        observe(lambda: graph_from_joint(joint_module, gm, example_inputs, name=name))
        return default_partition(joint_module, joint_inputs, **kwargs)

    def forward_compiler(fw_module: Any, fw_inputs: Any) -> Any:
        if not seen["graph"]:  # nothing requires grad: AOT traced a forward-only graph
            from perfpredict.compiler_hooks.fx_frontend import graph_from_fx

            observe(
                lambda: graph_from_fx(fw_module, None, phase="training", name=name).with_run(
                    notes=("no input or parameter requires grad: the training step is forward-only",)
                )
            )
        return make_boxed_func(fw_module.forward)

    try:
        aot_autograd(
            fw_compiler=forward_compiler, bw_compiler=lambda m, _: make_boxed_func(m.forward), partition_fn=partition
        )(observation_copy(gm), example_inputs)
    except Exception as err:
        if on_error is None:
            raise
        on_error(err)
