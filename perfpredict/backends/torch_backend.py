"""The ``perfpredict`` torch.compile backend: observe the graph, predict, and hand the graph on unchanged.

``torch.compile(model, backend="perfpredict", options={...})`` finds this function through the
``torch_dynamo_backends`` entry point, so no import is needed. Options:

- every field of :class:`perfpredict.request.Request` but ``source``, with the same defaults as every other door:
  ``device`` ("H100-SXM"), ``predictor`` ("auto", the two-timeline model), ``mode`` ("eager", "cuda_graph",
  "compiled" or "compiled_cuda_graph": how the predicted step runs), ``phase`` ("inference" or "training"),
  ``optimizer`` ("adamw"), ``tf32`` (False), ``precision`` (a training recipe: the bytes its weights, gradients and
  optimizer state hold per parameter), ``host``, ``parallel`` (a multi-GPU plan: the graph is one rank's
  micro-batch, and the report a ParallelReport), ``max_latency_ms`` / ``min_throughput_per_s`` (MIG targets),
  ``weights_built_in`` ("auto": float32, the dtype a module in hand was built in before its cast to the run dtype;
  None if loaded in it), ``model_name``, ``grid_g_per_kwh``, ``workload_calls``, ``top_ops``. ``dtype``, ``batch``
  and ``seq`` describe inputs the compiled graph already has: they are refused, naming the fix;
- ``report``: a path (.json, .html, .txt) or a callable that receives each PerfReport;
- ``inner``: "eager" (default) or "inductor", the backend that really compiles the graph;
- ``strict``: raise perfpredict's own errors instead of warning once and falling back;
- ``measure``: also run the compiled graph under the profiler and put the measurement beside the prediction
  (``report.measured``: the predicted-vs-actual view; inference only). Without a ``device`` option the
  prediction is then for the device the inputs live on, so the two compare like with like.

Graph breaks: all subgraphs compiled during one call of the compiled function add up into one report, which is
re-delivered as each subgraph arrives (so after the first call it covers the whole function).
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from dataclasses import dataclass, field
from typing import Any

from perfpredict.core.errors import InvalidInputError, PerfPredictError
from perfpredict.request import Request, field_names

logger = logging.getLogger(__name__)
logger.addHandler(logging.NullHandler())

#: the backend's own options; every other option is a Request field
_OWN_OPTIONS = ("report", "inner", "strict", "measure")
#: Request fields a compiled graph fixes already: (field, what to do instead)
_FIXED_BY_GRAPH = {
    "dtype": "cast the model and its inputs (model.to(torch.bfloat16)) before torch.compile",
    "batch": "call the compiled model on inputs of that batch",
    "seq": "call the compiled model on inputs of that length",
    "attn_implementation": "build the model with attn_implementation=... (or model.set_attn_implementation) before "
    "torch.compile",
    "model_class": "build the model with the head wanted (AutoModelForSequenceClassification.from_config(...)) "
    "before torch.compile",
    "lora_rank": "wrap the model with peft's get_peft_model(model, LoraConfig(r=...)) before torch.compile",
    "lora_targets": "wrap the model with peft's get_peft_model(model, LoraConfig(target_modules=...)) first",
}
_WARNED: set[str] = set()


@dataclass
class BackendOptions:
    """The backend's own options, and the Request its other options make (the graph is its source)."""

    request: Request = field(default_factory=Request)
    report: Any = None
    inner: str = "eager"
    strict: bool = False
    measure: bool = False

    @classmethod
    def parse(cls, options: dict[str, Any] | None) -> BackendOptions:
        options = dict(options or {})
        valid = sorted({*field_names(), *_OWN_OPTIONS} - {"source"})
        unknown = sorted(set(options) - set(valid))
        if unknown:
            raise InvalidInputError(f"unknown perfpredict option(s) {unknown!r}; valid: {valid}")
        for name, fix in _FIXED_BY_GRAPH.items():
            if options.get(name) is not None:
                raise InvalidInputError(
                    f"option {name}={options[name]!r} cannot change a graph torch.compile has captured: {fix}"
                )
        own = {k: options.pop(k) for k in _OWN_OPTIONS if k in options}
        opts = cls(request=Request.of(**options), **own)
        if opts.inner not in ("eager", "inductor"):
            raise InvalidInputError(f"option inner={opts.inner!r} is not 'eager' or 'inductor'")
        if opts.measure and opts.request.parallel is not None:
            raise InvalidInputError(
                "options measure=True and parallel=... do not combine: the measurement is this machine's one device; "
                "drop one of them"
            )
        return opts


@dataclass
class _Session:
    """The subgraphs compiled during one top-level call of a compiled function.

    The call is recognised by its wrapper frame's id plus weak references to the call's tensor arguments: the
    frame itself is never kept, since it would keep the user's inputs alive, and a frame id alone can be reused
    by the next call.
    """

    call: tuple
    graphs: list = field(default_factory=list)
    measurements: list = field(default_factory=list)

    def same_call(self, call: tuple) -> bool:
        if not call or not self.call or call[0] != self.call[0] or len(call[1]) != len(self.call[1]):
            return False
        return all(mine() is not None and mine() is theirs() for mine, theirs in zip(self.call[1], call[1]))


_CURRENT: list[_Session] = []


def perfpredict_backend(gm: Any, example_inputs: list[Any], options: dict[str, Any] | None = None, **_: Any) -> Any:
    """A torch.compile backend: predict performance of ``gm``, then compile it with the inner backend."""
    strict = bool((options or {}).get("strict", False))
    from perfpredict.render.delivery import forget

    forget()  # a failure below must not leave the previous model's report as the last one
    try:
        opts = BackendOptions.parse(options)
        opts.request = opts.request.but(model_name=opts.request.model_name or _frame_name())
    except PerfPredictError as err:
        if strict:
            raise
        _warn_once(err)
        inner = (options or {}).get("inner")  # a typo elsewhere must not silently drop inductor
        return _inner(gm, example_inputs, BackendOptions(inner=inner if inner in ("eager", "inductor") else "eager"))
    if opts.request.phase == "training":
        if opts.measure:
            _warn_once(
                NotImplementedError(
                    "options={'measure': True} measures inference graphs; time a training "
                    "step with perfpredict.profiling.monitor.Monitor instead"
                )
            )
        return _training(gm, example_inputs, opts)
    compiled = _inner(gm, example_inputs, opts)
    try:
        from perfpredict.compiler_hooks.fx_frontend import graph_from_fx

        if opts.measure and "device" not in (options or {}):
            opts.request = opts.request.but(device=_local_device(example_inputs))  # compare like with like

        graph = graph_from_fx(gm, example_inputs, name=opts.request.model_name)
        measurement = _measure(compiled, example_inputs) if opts.measure else None
        _observe(graph, opts, measurement)
    except Exception as err:
        if opts.strict:
            raise
        _warn_once(err)
    return compiled


def _frame_name() -> str:
    """The compiled module's class name (or the function's name), from the frame dynamo is translating: the
    backend receives only the GraphModule. The frame is the module's ``forward`` (its first argument the module,
    whatever it is called), or, for a module torch.compile enters through its own wrapper (``nn.Sequential``: the
    frame is ``torch._dynamo.external_utils``'s ``inner(*args, **kwargs)``), that wrapper holding the module as
    ``fn``; the report was titled "inner". Dynamo's translator is private API, so any failure gives ""."""
    try:
        import torch
        from torch._dynamo.symbolic_convert import InstructionTranslator

        tx = InstructionTranslator.current_tx()
        code, local = tx.f_code, tx.f_locals
        if code.co_filename.replace("\\", "/").endswith("torch/_dynamo/external_utils.py") and "fn" in local:
            return _callable_name(local["fn"])
        first = local.get(code.co_varnames[0]) if code.co_argcount else None
        return type(first).__name__ if isinstance(first, torch.nn.Module) else code.co_name
    except Exception:  # noqa: BLE001 - a name is a nicety; the prediction goes on without it
        return ""


def _callable_name(fn: Any) -> str:
    """A module's class name, a function's own name."""
    import torch

    if isinstance(fn, torch.nn.Module):
        return type(fn).__name__
    return getattr(fn, "__name__", type(fn).__name__)


def _local_device(example_inputs: list[Any]) -> str:
    """The catalog name of the device the inputs live on: "cpu", or the CUDA device's own name."""
    from perfpredict.profiling.monitor import tensor_device

    device = tensor_device(list(example_inputs))
    if device == "cpu":
        return "cpu"
    import torch

    return torch.cuda.get_device_name(int(device.split(":")[1]) if ":" in device else 0)


def _measure(compiled: Any, example_inputs: list[Any]) -> Any:
    """Run the compiled subgraph under the profiler's protocol (warm-up, >= 30 runs or >= 1 s) on its inputs."""
    from perfpredict.profiling.monitor import measure_compiled

    return measure_compiled(compiled, example_inputs)


def _observe(graph: Any, opts: BackendOptions, measurement: Any = None) -> None:
    """Add one subgraph to its session, re-predict the session's whole graph, and deliver the report."""
    from perfpredict.core.graph import merge_graphs
    from perfpredict.pipeline import predict
    from perfpredict.render.delivery import deliver

    session = _session()
    session.graphs.append(graph)
    if measurement is not None:
        session.measurements.append(measurement)
    merged = merge_graphs(session.graphs, name=opts.request.model_name)
    # NB: an OpGraph source means "auto" weights: float32, as a module in hand was built before its cast
    report = predict(opts.request.but(source=merged))
    if opts.measure and session.measurements:
        report = _with_measurement(report, session.measurements, opts)
    deliver(report, opts.report)


def _with_measurement(report: Any, measurements: list[Any], opts: BackendOptions) -> Any:
    """The report with the measured subgraphs (summed) beside the prediction."""
    import dataclasses

    from perfpredict.core.report import MeasuredVsPredicted

    latency = sum(m.latency_ms for m in measurements)
    energies = [m.energy_j for m in measurements]
    memories = [m.peak_memory_bytes for m in measurements if m.peak_memory_bytes is not None]
    note = "" if len(measurements) == 1 else f"{len(measurements)} subgraphs measured one by one and summed"
    if report.device.split("/")[0] not in (measurements[0].env.device_name, "cpu") and measurements[0].device == "cpu":
        note = (note + "; " if note else "") + (
            f"measured on this machine's CPU, predicted for {report.device}: "
            "pass options={'device': 'cpu'} to compare like with like"
        )
    return dataclasses.replace(
        report,
        measured=MeasuredVsPredicted(
            device=measurements[0].env.device_name,
            latency_ms=latency,
            latency_min_ms=sum(m.latency_min_ms for m in measurements),
            latency_cv=measurements[0].latency_cv if len(measurements) == 1 else None,
            peak_memory_bytes=float(max(memories)) if memories else None,
            energy_j=sum(energies) if all(e is not None for e in energies) else None,
            avg_power_w=measurements[0].avg_power_w if len(measurements) == 1 else None,
            runs=min(m.runs for m in measurements),
            latency_error_pct=(report.latency_ms.value - latency) / latency * 100,
            note=note,
        ),
    )


def _session() -> _Session:
    """The session of the outermost dynamo-wrapped call on the stack; a new one when that call changed."""
    call = _current_call()
    if _CURRENT and _CURRENT[0].same_call(call):
        return _CURRENT[0]
    _CURRENT[:] = [_Session(call)]
    return _CURRENT[0]


def _current_call() -> tuple:
    """(id of the outermost eval_frame wrapper frame, weakrefs to the torch.compile context that made the wrapper and
    to its tensor arguments); () outside dynamo. The context tells two compiled models apart that are called one
    after the other with the same input: the second call's frame may reuse the first one's id."""
    import weakref

    suffix = os.path.join("_dynamo", "eval_frame.py")
    found = None
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name in ("compile_wrapper", "_fn") and code.co_filename.endswith(suffix):
            found = frame
        frame = frame.f_back
    if found is None:
        return ()
    refs = []
    context = [found.f_locals.get("self", found.f_locals.get("callback"))]  # the wrapper's closure: one per compile
    for value in context + list(found.f_locals.get("args", ())) + list(found.f_locals.get("kwargs", {}).values()):
        try:
            refs.append(weakref.ref(value))
        except TypeError:
            continue  # ints, strings, None: no identity worth tracking
    key = id(found)
    del found
    return (key, tuple(refs))


def _inner(gm: Any, example_inputs: list[Any], opts: BackendOptions) -> Any:
    if opts.inner == "inductor":
        from torch._inductor.compile_fx import compile_fx

        return compile_fx(gm, example_inputs)
    return gm.forward


def _training(gm: Any, example_inputs: list[Any], opts: BackendOptions) -> Any:
    """Observe the training step's joint graph (``aot_observe``), report it, and run ``gm`` with the inner backend."""
    from perfpredict.compiler_hooks.aot_observe import observe_training

    observe_training(
        gm,
        example_inputs,
        name=opts.request.model_name,
        on_graph=lambda graph: _observe(graph, opts),
        on_error=None if opts.strict else _warn_once,
    )
    return _inner(gm, example_inputs, opts)


def _warn_once(err: BaseException) -> None:
    message = (
        f"perfpredict could not predict this graph ({type(err).__name__}: {err}); the model runs unchanged. "
        "Pass options={'strict': True} to raise instead."
    )
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)
    logger.debug("perfpredict backend failure", exc_info=err)
