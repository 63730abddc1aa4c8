"""benchmarks/measuring_host.py: a CPU dataset is scored on the CPU that measured it, whatever CPU runs the
benchmark (the analytical CPU MAPE went 50% -> 305% between two EPYC VMs, one with native bf16, one without)."""

import dataclasses
import functools
import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from benchmarks import measuring_host
from perfpredict.hardware import devices
from perfpredict.hardware.device_types import frozen_mapping

ROOT = Path(__file__).resolve().parents[2]
DATASET = ROOT / "data" / "v3" / "cpu-amd-epyc-2c"
_spec = importlib.util.spec_from_file_location("accuracy_benchmark_host", ROOT / "benchmarks" / "accuracy.py")
accuracy = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(accuracy)


_DETECTED = devices.detect_local_cpu


def _runner(bf16_share: float, clock_mhz: float):
    """A CPU running the benchmark: an AVX2-only EPYC (bf16 emulated) or one with native bf16."""

    @functools.cache  # the catalog clears it on a reset, as it does the real one's
    def detect():
        fp32 = 2 * clock_mhz * 1e6 * 32
        real = _DETECTED()
        peaks = {"fp32": fp32, "fp64": fp32 / 2, "bf16": bf16_share * fp32}
        return dataclasses.replace(real, peak_flops_per_s=frozen_mapping(peaks), boost_clock_mhz=clock_mhz)

    return detect


def _recorded_peaks() -> dict[str, float]:
    (record,) = json.loads((DATASET / measuring_host.HOST_DEVICE_FILE).read_text())["devices"]
    return record["peak_flops_per_s"]


@pytest.mark.parametrize("runner", [_runner(0.15, 2445.4), _runner(2.0, 3700.0)], ids=["avx2", "native-bf16"])
def test_the_cpu_dataset_is_predicted_for_its_measuring_host_on_any_runner(monkeypatch, runner):
    monkeypatch.setattr(devices, "detect_local_cpu", runner)
    devices.reset_catalog()
    before = dict(devices.get_device("cpu").peak_flops_per_s)
    line = measuring_host.pin(DATASET)
    assert dict(devices.get_device("cpu").peak_flops_per_s) == _recorded_peaks() != before
    assert "measuring host" in line and "bf16 332" in line
    # the stored runs are keyed on those peaks: a run stored from an unpinned runner is not reported beside them
    pinned_id = accuracy.features_id(SimpleNamespace(devices=["cpu"]))
    devices.reset_catalog()
    assert accuracy.features_id(SimpleNamespace(devices=["cpu"])) != pinned_id


def test_an_op_row_subfolder_reads_its_datasets_record_and_a_folder_without_one_says_so(monkeypatch, tmp_path):
    monkeypatch.setattr(devices, "detect_local_cpu", _runner(0.15, 2445.4))
    devices.reset_catalog()
    detected = dict(devices.get_device("cpu").peak_flops_per_s)
    assert "records no measuring CPU" in measuring_host.pin(tmp_path)
    assert dict(devices.get_device("cpu").peak_flops_per_s) == detected
    measuring_host.pin(DATASET / "ops")
    assert dict(devices.get_device("cpu").peak_flops_per_s) == _recorded_peaks()
