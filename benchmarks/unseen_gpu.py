"""Each GPU scored as an unseen one: the GPU device-time model refitted without any op row of that GPU.

The shipped device-time model (``perfpredict/predictors/artifacts/op-efficiency-gpu``) trains on the op rows of
every GPU that has some, NeuSight's test split included, so a GPU of NeuSight's end-to-end table is predicted from
its own op rows. What a user of a GPU that no row covers gets is the same fit without that GPU: its level in each
class then comes from its nearest covered neighbours, and the trees read it from its datasheet alone
(``gpu_efficiency``). :func:`models_without` makes that model for each GPU asked, by the very fit that makes the
shipped one (``gpu_op_efficiency.fit_shipped``, so it follows any change to that fit), on every labelled row whose
GPU is another one, from any source (NeuSight, Vidur, the project's own leases). A sibling board of the same chip
stays (Vidur's A100-80GB SXM rows when an A100 PCIe board is held out): it is another catalog GPU.

The models are kept out of the package: under ``<cache>/unseen-gpu/<digest>/<GPU>/`` (the perfpredict cache
folder), keyed by the digest of everything the fit reads (``benchmarks.inputs_digest``), so a rerun on the same code
and data fits nothing, and an edit anywhere in ``perfpredict`` or the rows refits.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # as a script too: benchmarks.* from this checkout
from benchmarks import gpu_op_efficiency, inputs_digest
from benchmarks.provenance import inputs_of

#: what the refitted models depend on: perfpredict, the fit's script, this one, and the rows the fit reads
FIT_SCRIPTS = ("benchmarks/gpu_op_efficiency.py", "benchmarks/unseen_gpu.py")
PREFIX = "two_timeline_without_"  # the registered predictor reading one GPU's refitted model


def fit_inputs() -> tuple[str, ...]:
    return inputs_of(__file__, (*FIT_SCRIPTS, *gpu_op_efficiency.training_inputs()))


def cache_folder(root: Path | None = None) -> Path:
    """``<root or the perfpredict cache>/unseen-gpu/<digest of the fit's inputs>``."""
    from perfpredict.caching.disk_store import cache_root

    return (root or cache_root()) / "unseen-gpu" / inputs_digest.digest(fit_inputs())


def models_without(gpus: Iterable[str], cache: Path | None = None) -> dict[str, object]:
    """For each GPU (a catalog name), the device-time model fitted on every labelled op row of the other GPUs:
    read from ``cache`` (default :func:`cache_folder`) where a model of today's inputs is there, else fitted and
    stored there; a GPU the shipped model has no row of is unseen already, and gets the shipped model. Each fit is
    the shipped model's: minutes on two cores."""
    from perfpredict.predictors.gpu_efficiency import GpuEfficiencyModel

    folder = cache or cache_folder()
    covered = shipped_gpus()
    models = {
        gpu: GpuEfficiencyModel.load(folder / gpu) if gpu in covered else GpuEfficiencyModel.load() for gpu in gpus
    }
    missing = [gpu for gpu, model in models.items() if model is None]
    if missing:
        a, cols = _training_rows()
        for gpu in missing:
            started = time.time()
            models[gpu] = fit_without(a, cols, gpu)
            manifest = {"kind": "gpu_op_efficiency_without", "without": gpu, "inputs": list(fit_inputs())}
            models[gpu].save(folder / gpu, manifest)
            print(f"  fitted without {gpu} in {time.time() - started:.0f} s -> {folder / gpu}", flush=True)
    return models


def shipped_gpus() -> set[str]:
    """The GPUs with op rows in the shipped model (its manifest): any other is unseen by the shipped model already,
    which is then its own refit."""
    import json

    from perfpredict.predictors.gpu_efficiency import ARTIFACT

    rows = json.loads((ARTIFACT / "manifest.json").read_text()).get("rows", {})
    return {key.split(":", 1)[1] for key, n in rows.items() if n}


def _training_rows():
    from perfpredict.learning import gpu_training_rows as tr

    frame = tr.load_frame()
    labelled = frame[frame["device_s"].notna()].reset_index(drop=True)
    return tr.arrays(frame), gpu_op_efficiency.Columns(labelled)


def fit_without(a, cols, gpu: str):
    """The shipped model's fit on every labelled row that is not ``gpu``'s."""
    return gpu_op_efficiency.fit_shipped(a, cols, np.flatnonzero(cols.device != gpu))


def predictor_without(gpu: str, model) -> str:
    """The name of a two-timeline predictor that reads ``model`` as its GPU device time (registered once per model
    and process)."""
    from perfpredict.predictors.registry import list_predictors, register_predictor
    from perfpredict.predictors.two_timeline import TwoTimelinePredictor

    name = f"{PREFIX}{gpu}@{id(model):x}"
    if name not in list_predictors():
        register_predictor(name)(lambda: TwoTimelinePredictor(gpu_efficiency=model))
    return name
