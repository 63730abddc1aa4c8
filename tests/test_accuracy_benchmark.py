"""benchmarks/accuracy.py: a stored run is matched to today's features by an id that names the physics versions."""

import importlib.util
from pathlib import Path
from types import SimpleNamespace

from perfpredict.predictors.memory_model import GPU_MEMORY_MODEL_VERSION

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "accuracy.py"
_spec = importlib.util.spec_from_file_location("accuracy_benchmark", _PATH)
accuracy = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(accuracy)


def test_features_id_names_the_gpu_memory_model_for_gpu_rows_only():
    # The committed H100 runs were stored as ".../gpu-memory-2": the id must keep that spelling, or every stored
    # run would be reported stale, and must change when the GPU memory model does.
    cpu = accuracy.features_id(SimpleNamespace(devices=["cpu"]))
    gpu = accuracy.features_id(SimpleNamespace(devices=["H100-SXM"]))
    assert cpu == accuracy.features_id() and "gpu-memory" not in cpu
    assert gpu == f"{cpu}/gpu-memory-{GPU_MEMORY_MODEL_VERSION}"
