"""benchmarks/predicted_vs_actual.py: the report joins predictions to measurements, tensors to tensors, and says
when the predictions were taken after the measurement they are compared with."""

import importlib.util
from pathlib import Path

from perfpredict.core.units import GIB

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "predicted_vs_actual.py"
_spec = importlib.util.spec_from_file_location("predicted_vs_actual", _PATH)
pva = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pva)


def _predictions(created: str) -> dict:
    row = {
        "model": "m",
        "dtype": "bfloat16",
        "batch": 8,
        "predictor": "analytical",
        "latency_ms": 2.0,
        "peak_memory_bytes": 3 * GIB,
        "energy_j": 1.0,
    }
    return {
        "device_name": "H100-SXM",
        "created": created,
        "commit": "abc",
        "torch_version": "2.13.0",
        "rows": [row, {**row, "batch": 32}],
    }


MEASURED = {
    "created": "2026-11-22T13:04:57+00:00",
    "device_name": "NVIDIA H100 80GB HBM3",
    "torch_version": "2.11",
    "cuda": "13.0",
    "rows": [
        {
            "model": "m",
            "dtype": "bfloat16",
            "batch": 8,
            "status": "ok",
            "latency_ms": 4.0,
            "peak_memory_bytes": 2.5 * GIB,
            "energy_j": 2.0,
        }
    ],
}


def test_report_compares_tensor_memory_and_marks_unmeasured_rows():
    text = pva.report(_predictions("2026-11-22T13:01:39+00:00"), MEASURED, "cmd")
    # 3 GiB predicted less the H100's 512 MiB runtime overhead is the 2.5 GiB measured: +0%
    assert "| m | bfloat16 | 8 | analytical | 2.000 | 4.000 | -50% | 2.500 | 2.500 | +0% |" in text
    assert "| m | bfloat16 | 32 | analytical | 2.000 | not measured |" in text
    assert "latency 50.0% (1 rows), memory 0.0% (1 rows)" in text
    assert "after the measurement" not in text  # a forecast, taken before the GPU run


def test_predictions_taken_after_the_measurement_say_they_are_a_post_hoc_check():
    text = pva.report(_predictions("2026-11-23T12:00:00+00:00"), MEASURED, "cmd")
    assert "**after the measurement**" in text and "post-hoc" in text
