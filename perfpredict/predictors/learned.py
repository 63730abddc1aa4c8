"""The predictor that serves a trained artifact.

A learned model (its contract: ``perfpredict/learning/learner.py``) predicts every target for a
TrainingSet-shaped input, in natural units, with an interval and an out-of-distribution score
(:class:`TargetPrediction`). :class:`LearnedPredictor` adapts a model class with ``from_files`` to
the predictor registry: it finds the artifact trained for the device, turns the user's OpGraph into a one-row
input, and falls back to the analytical predictor for targets the artifact was not trained on (CPU rows carry no
energy, say), saying so in the warnings.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from perfpredict.core.errors import ArtifactError
from perfpredict.core.report import MemoryBreakdown, Prediction
from perfpredict.predictors.base import MEASURED_BUILD_DTYPE, PredictorOutput, RunConfig
from perfpredict.predictors.feature_rows import single_row_set
from perfpredict.predictors.intervals import bracket

if TYPE_CHECKING:
    from perfpredict.core.graph import OpGraph
    from perfpredict.hardware.devices import Device

OOD_WARN_ABOVE = 3.0  # nearest-training-row distance, in units of the training set's own nearest-neighbour median


@dataclass
class TargetPrediction:
    value: np.ndarray
    low: np.ndarray
    high: np.ndarray
    ood: np.ndarray


class LearnedPredictor:
    """Serves the artifact of one learner class for whichever device a prediction asks about."""

    def __init__(self, learner_cls: Any) -> None:
        self.learner_cls = learner_cls
        self.name = learner_cls.name
        self.version = learner_cls.version
        self._loaded: dict[str, Any] = {}

    def learner_for(self, device: Device) -> Any:
        from perfpredict.predictors.artifacts import find_artifact, load_files

        name = device.parent or device.name
        if name not in self._loaded:
            folder = find_artifact(self.name, name)
            if folder is None:
                raise ArtifactError(
                    f"no {self.name!r} artifact trained for {name!r}; use predictor='analytical' or 'auto', or "
                    f"train one: perfpredict train --device {name} --predictor {self.name}"
                )
            manifest, files = load_files(folder, self.learner_cls.schema)
            self._loaded[name] = (self.learner_cls.from_files(manifest, files), manifest)
        return self._loaded[name][0]

    def _host_warning(self, device: Device) -> list[str]:
        """A CPU artifact describes the CPU it was measured on: say so when this one is different."""
        manifest = self._loaded[device.parent or device.name][1]
        trained_on = manifest.extra.get("cpu_model")
        if device.kind != "cpu" or not trained_on:
            return []
        from perfpredict.hardware.cpu_detection import cpu_model

        here = cpu_model()
        return (
            []
            if here == trained_on
            else [
                f"{self.name} for 'cpu' was trained on {trained_on!r}; this machine is {here!r}, so the prediction "
                "carries that machine's speed (train on your own rows with `perfpredict collect` and "
                "`perfpredict train`)"
            ]
        )

    def predict(self, graph: OpGraph, device: Device, config: RunConfig) -> PredictorOutput:
        from perfpredict.predictors.analytical import AnalyticalPredictor

        learner = self.learner_for(device)
        base = AnalyticalPredictor().predict(graph, device, config)
        measured_as = replace(config, weights_built_in=MEASURED_BUILD_DTYPE)  # what every training row did
        out = learner.predict(single_row_set(graph, device, measured_as))
        warnings: list[str] = self._host_warning(device)
        fallback = [
            t for t in ("latency_ms", "peak_memory_bytes", "energy_per_sample_j", "avg_power_w") if t not in out
        ]
        if fallback:
            warnings.append(
                f"{self.name} was not trained on {', '.join(fallback)} for {device.name}: those figures are analytical"
            )
        ood = max((float(p.ood[0]) for p in out.values()), default=0.0)
        if ood > OOD_WARN_ABOVE:
            warnings.append(
                f"input is far from the {self.name} training data (OOD score {ood:.1f}, warn above "
                f"{OOD_WARN_ABOVE:g}): treat the prediction with care"
            )
        latency = self._pred(out.get("latency_ms"), base.latency_ms)
        memory = self._pred(out.get("peak_memory_bytes"), base.peak_memory_bytes)
        if "peak_memory_bytes" in out:  # learned on allocator peaks (tensors): add the CUDA context and slack back
            load_change = _load_change_bytes(graph, device, measured_as, base.memory)
            memory = _shifted(
                memory,
                device.runtime_overhead_bytes + load_change,
                floor=graph.param_bytes + device.runtime_overhead_bytes,
            )
        power = self._pred(out.get("avg_power_w"), base.avg_power_w)
        batch = max(1, graph.batch_size)
        per_sample = out.get("energy_per_sample_j")
        energy = (
            self._pred(per_sample, base.energy_j.scaled(1 / batch)).scaled(batch)
            if per_sample is not None
            else Prediction(
                power.value * latency.value * 1e-3,
                "J",
                power.low * latency.low * 1e-3,
                power.high * latency.high * 1e-3,
                power.predictor,
                power.predictor_version,
            )
        )
        # the learned models predict totals only: the analytical breakdown (memory parts, per op, by kind, blocks)
        # stays as it is (the analytical output has no timeline or outside-ops label to carry over)
        return replace(
            base,
            latency_ms=latency,
            peak_memory_bytes=memory,
            energy_j=energy,
            avg_power_w=power,
            warnings=tuple(warnings),
        )

    def _pred(self, p: TargetPrediction | None, fallback: Prediction) -> Prediction:
        if p is None:
            return fallback
        value = float(p.value[0])
        low, high = bracket(value, float(p.low[0]), float(p.high[0]))
        return Prediction(
            value,
            fallback.unit,
            low,
            high,
            self.name,
            self.version,
            float(p.ood[0]),
        )


def _load_change_bytes(graph: OpGraph, device: Device, measured_as: RunConfig, memory: MemoryBreakdown) -> int:
    """How the weights' load changes the peak between the measured protocol and the config ``memory`` is for.

    The trees learned peaks of models built in float32 and then cast; a model loaded some other way keeps the
    learned step peak and swaps the load's analytical transient for its own.
    """
    from perfpredict.predictors.memory_model import memory_terms

    measured = memory_terms(graph, device, measured_as, memory.activations_peak_bytes).load_transient_bytes
    return memory.load_transient_bytes - measured


def _shifted(p: Prediction, offset: float, floor: float = 0.0) -> Prediction:
    """``p`` with ``offset`` added to its value and both interval ends, none below ``floor``."""
    return replace(
        p, value=max(p.value + offset, floor), low=max(p.low + offset, floor), high=max(p.high + offset, floor)
    )
