"""A CPU collection records the CPU that measured it (profiling/host_record.py), as a device file the catalog loads."""

import dataclasses
import functools
import json

import pytest

from perfpredict.hardware import devices
from perfpredict.hardware.device_types import frozen_mapping
from perfpredict.profiling import host_record

_DETECTED = devices.detect_local_cpu


def test_a_cpu_collection_records_its_cpu_and_the_catalog_reads_it_back(tmp_path):
    host_record.record_host_cpu(tmp_path, "cpu")
    host_record.record_host_cpu(tmp_path / "gpu", "cuda")  # a GPU's rows name their GPU already
    assert not (tmp_path / "gpu").exists()
    (name,) = devices.load_device_file(tmp_path / host_record.HOST_DEVICE_FILE)
    cpu, detected = devices.get_device(name), _DETECTED()
    assert name == "cpu" and dict(cpu.peak_flops_per_s) == dict(detected.peak_flops_per_s)
    assert (cpu.boost_clock_mhz, cpu.sm_count, cpu.l2_bytes) == (
        detected.boost_clock_mhz,
        detected.sm_count,
        detected.l2_bytes,
    )


def test_a_folder_resumed_on_another_cpu_keeps_its_first_record_and_warns(tmp_path, monkeypatch):
    host_record.record_host_cpu(tmp_path, "cpu")
    first = (tmp_path / host_record.HOST_DEVICE_FILE).read_text()

    @functools.cache
    def other():
        real = _DETECTED()
        return dataclasses.replace(real, peak_flops_per_s=frozen_mapping({"fp32": 1e12, "bf16": 2e12}))

    monkeypatch.setattr("perfpredict.hardware.cpu_detection.detect_local_cpu", other)
    with pytest.warns(UserWarning, match="was started on another CPU"):
        host_record.record_host_cpu(tmp_path, "cpu")
    assert (tmp_path / host_record.HOST_DEVICE_FILE).read_text() == first
    assert json.loads(first)["devices"][0]["peak_flops_per_s"] != {"fp32": 1e12, "bf16": 2e12}
