"""Device catalog: lookup, datasheet numbers, MIG slices, the local CPU, user overrides and measured ceilings."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from perfpredict.core.errors import InvalidInputError, PerfPredictError, UnknownDeviceError
from perfpredict.hardware import cpu_detection, devices
from perfpredict.hardware.devices import (
    GIB,
    MIB,
    Device,
    apply_ceilings,
    get_device,
    list_devices,
    load_device_file,
    local_cpu,
)

REQUIRED = [
    "V100-SXM2-16GB",
    "V100-SXM2-32GB",
    "V100-PCIe-16GB",
    "A100-40GB",
    "A100-80GB",
    "A100-40GB-PCIe",
    "A100-80GB-PCIe",
    "H100-SXM",
    "H100-PCIe",
    "H100-NVL",
    "H200",
    "B200",
    "L4",
    "L40S",
    "T4",
    "RTX-4090",
    "GH200",
    "A10G",
    "H20",
]


@pytest.fixture(autouse=True)
def clean_catalog(monkeypatch):
    for var in ("PERFPREDICT_DEVICES", "PERFPREDICT_MEASURED_DIR"):
        monkeypatch.delenv(var, raising=False)
    devices.reset_catalog()
    yield
    devices.reset_catalog()


# -- lookup ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, canonical",
    [
        ("h100", "H100-SXM"),
        ("H100-SXM5-80GB", "H100-SXM"),
        ("h100_sxm", "H100-SXM"),
        ("H100 SXM", "H100-SXM"),
        ("NVIDIA H100 80GB HBM3", "H100-SXM"),  # torch.cuda.get_device_name() on an H100 SXM
        ("NVIDIA GeForce RTX 4090", "RTX-4090"),
        ("Tesla T4", "T4"),
        ("a100 40gb", "A100-40GB"),
        ("A100-SXM4-80GB", "A100-80GB"),
        ("local_cpu", "cpu"),
    ],
)
def test_get_device_matches_names_and_aliases(name, canonical):
    assert get_device(name).name == canonical


def test_unknown_device_lists_close_names():
    with pytest.raises(UnknownDeviceError) as info:
        get_device("H10-SXM")
    message = str(info.value)
    assert "'H10-SXM'" in message and "H100-SXM" in message
    assert "perfpredict devices" in message
    assert isinstance(info.value, PerfPredictError) and isinstance(info.value, KeyError)


def test_catalog_holds_required_devices_with_sane_numbers():
    by_name = {d.name: d for d in list_devices()}
    assert set(REQUIRED) <= set(by_name)
    for d in by_name.values():
        assert d.memory_bytes > 0 and d.memory_bandwidth_bytes_per_s > 0 and d.tdp_w > 0
        assert d.peak_flops_per_s["fp32"] > 0 and set(d.peak_flops_per_s) <= set(devices.FLOP_KEYS)
        assert 0 < d.idle_power_w < d.tdp_w
        assert d.sources
        for alias in d.aliases:  # every alias leads back to its own device
            assert get_device(alias).name == d.name


def test_datasheet_numbers_match_per_sm_arithmetic():
    a100, h100 = get_device("A100-80GB"), get_device("H100-SXM")
    # A100: 108 SMs x 2048 dense FP16 FLOP/clk/SM x 1.41 GHz = 311.9 TF ~ 312 TF
    assert a100.peak_flops_per_s["fp16_tensor"] == pytest.approx(108 * 2048 * 1.41e9, rel=0.01)
    # H100 SXM: 132 SMs x 4096 FLOP/clk/SM x 1.83 GHz (tensor spec clock) = 989.4 TF
    assert h100.peak_flops_per_s["bf16_tensor"] == pytest.approx(132 * 4096 * 1.83e9, rel=0.001)
    assert h100.memory_bytes == 81559 * MIB  # nvidia-smi's memory.total, not the marketed 80 GB
    assert h100.memory_bandwidth_bytes_per_s == 3.35e12
    assert h100.l2_bytes == 50 * MIB
    assert h100.launch_overhead_s == pytest.approx(3e-6)
    assert h100.runtime_overhead_bytes == 512 * MIB


def test_the_serving_gpus_public_sets_cover_have_their_datasheet_numbers_links_and_prices():
    from perfpredict.hardware import cost
    from perfpredict.parallel.interconnect import interconnect_for

    gh200, a10g, h20, l40s = (get_device(n) for n in ("NVIDIA GH200 480GB", "A10G", "H20", "L40S"))
    assert gh200.name == "GH200" and gh200.memory_bytes == 96 * GIB and gh200.memory_bandwidth_bytes_per_s == 4.0e12
    # the superchip's GPU is an H100's: 132 SMs x 4096 FLOP/clk/SM x 1.83 GHz = 989.4 TF dense BF16
    assert gh200.peak_flops_per_s["bf16_tensor"] == pytest.approx(132 * 4096 * 1.83e9, rel=0.001)
    assert gh200.tdp_w == 1000 and gh200.idle_power_w == 125  # the module's upper setting; idle 12.5% of it
    # A10G: 80 SMs x 128 FP32 lanes x 2 x 1.71 GHz = 35.0 TF; GeForce-rate tensor cores 80 x 512 x 1.71 GHz = 70 TF
    assert a10g.peak_flops_per_s["fp32"] == pytest.approx(80 * 128 * 2 * 1.71e9, rel=0.001)
    assert a10g.peak_flops_per_s["fp16_tensor"] == pytest.approx(80 * 512 * 1.71e9, rel=0.001)
    assert a10g.memory_bandwidth_bytes_per_s == 600e9 and a10g.memory_bytes == 23028 * MIB
    # H20: Hopper with its tensor rate capped at 148 TF (15% of an H100 SXM's 989), 96 GB at 4 TB/s, 400 W
    assert h20.peak_flops_per_s["bf16_tensor"] == 148e12 and h20.peak_flops("float8_e4m3fn", True)[0] == 296e12
    assert h20.memory_bytes == 96 * GIB and h20.tdp_w == 400 and h20.arch == "hopper"
    assert l40s.peak_flops_per_s["fp8_tensor"] == 733e12
    for d in (gh200, a10g, h20, l40s):
        assert "[src]" in d.sources or "[secondary]" in d.sources
    links = {d.name: interconnect_for(d) for d in (gh200, a10g, h20)}
    assert links["A10G"].intra.name == "pcie" and links["H20"].intra.name == "nvlink"
    assert links["GH200"].intra_per_direction_gb_per_s == 450
    assert cost.price_usd_per_hour(gh200) == 1.5 and cost.price_usd_per_hour(a10g) == 1.0
    assert cost.price_usd_per_hour(h20) is None  # no public Western price


def test_peak_flops_picks_tensor_core_keys():
    h100 = get_device("H100-SXM")
    assert h100.peak_flops("bfloat16", tensor_core=True) == (989.4e12, "bf16_tensor")
    assert h100.peak_flops("float32", tensor_core=True) == (494.7e12, "tf32_tensor")
    assert h100.peak_flops("float32", tensor_core=False) == (66.9e12, "fp32")
    assert h100.peak_flops("float8_e4m3fn", tensor_core=True) == (1978.9e12, "fp8_tensor")
    assert get_device("T4").peak_flops("float16", tensor_core=True) == (65e12, "fp16_tensor")
    # A100 has no FP8 tensor cores: FP8 falls back to the FP16 tensor rate
    assert get_device("A100-40GB").peak_flops("float8_e5m2", tensor_core=True) == (312e12, "fp16_tensor")


# -- MIG ------------------------------------------------------------------------------------------------------------


def test_mig_tables_are_consistent():
    for d in list_devices():
        if not d.mig_profiles:
            continue
        full = [p for p in d.mig_profiles if p.compute_slices == 7]
        assert len(full) == 1 and full[0].memory_slices == 8 and full[0].sm_count <= d.sm_count
        for p in d.mig_profiles:
            assert 0 < p.memory_bytes <= d.memory_bytes and 0 < p.sm_count <= full[0].sm_count
            assert p.max_instances == 1 if p.name.endswith("+me") else p.max_instances >= 1
    assert {d.name for d in list_devices() if d.mig_profiles} == {
        "A100-40GB",
        "A100-80GB",
        "A100-40GB-PCIe",
        "A100-80GB-PCIe",
        "H100-SXM",
        "H100-PCIe",
        "H100-NVL",
        "H200",
        "B200",
    }
    assert get_device("H100-PCIe").mig_profile("7g.80gb").sm_count == 114
    assert get_device("A100-40GB").mig_profile("1g.5gb").memory_bytes == int(4.75 * GIB)


def test_unknown_blackwell_sm_counts_are_derived_and_labelled():
    p = get_device("B200").mig_profile("3g.90gb")
    assert p.sm_count == 63  # floor(3 x 148 / 7) = floor(63.4)
    assert "derived" in p.note


def test_with_mig_scales_compute_bandwidth_and_power():
    h100 = get_device("H100-SXM")
    s = h100.with_mig("1g.10gb")
    assert s.name == "H100-SXM/1g.10gb" and s.parent == "H100-SXM" and s.mig_profiles == ()
    assert s.peak_flops_per_s["fp32"] == pytest.approx(66.9e12 * 16 / 132)  # 16 of 132 SMs = 8.11 TF
    assert s.memory_bandwidth_bytes_per_s == pytest.approx(3.35e12 / 8)  # 1 of 8 memory slices = 419 GB/s
    assert s.l2_bytes == 50 * MIB // 8
    assert s.memory_bytes == int(9.75 * GIB)
    assert s.tdp_w == pytest.approx(700 / 7)  # 1 of 7 compute slices = 100 W
    assert s.boost_clock_mhz == h100.boost_clock_mhz
    assert get_device("h100/1G.10GB") == s
    assert get_device("NVIDIA H100 80GB HBM3 MIG 1g.10gb") == s  # nvidia-smi's MIG device name


def test_with_mig_rejects_unknown_profile_and_non_mig_devices():
    with pytest.raises(InvalidInputError, match="1g.10gb"):
        get_device("H100-SXM").with_mig("1g.5gb")
    with pytest.raises(InvalidInputError, match="no MIG profiles"):
        get_device("L4").with_mig("1g.5gb")


# -- local CPU ------------------------------------------------------------------------------------------------------


def test_local_cpu_returns_sane_numbers():
    cpu = local_cpu()
    assert cpu.name == "cpu" and cpu.kind == "cpu" and get_device("local-cpu") == cpu
    assert 1e9 < cpu.peak_flops_per_s["fp32"] < 1e15  # 1 GFLOP/s .. 1 PFLOP/s
    assert cpu.peak_flops_per_s["fp64"] == pytest.approx(cpu.peak_flops_per_s["fp32"] / 2)
    assert cpu.memory_bytes > 256 * MIB and cpu.memory_bandwidth_bytes_per_s > 0
    assert cpu.launch_overhead_s == pytest.approx(5e-6) and cpu.source == "estimate"
    assert cpu.peak_flops("float32", tensor_core=True)[1] == "fp32"  # no tensor cores on a plain CPU


def test_detect_cpu_from_fake_proc(monkeypatch):
    files = {
        "/proc/cpuinfo": "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Fake Xeon\ncpu MHz\t\t: 3000.000\n"
        "siblings\t: 4\ncpu cores\t: 2\nflags\t\t: fpu sse2 avx avx2 fma\n\nprocessor\t: 1\n",
        "/proc/meminfo": "MemTotal:       16384000 kB\n",
    }
    monkeypatch.setattr(cpu_detection, "_read_text", lambda path: files.get(str(path), ""))
    monkeypatch.setattr(cpu_detection.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    devices.detect_local_cpu.cache_clear()
    cpu = devices.detect_local_cpu()
    # 4 logical CPUs / (4 siblings / 2 cores) = 2 cores; 2 x 3.0 GHz x 32 FLOP/cycle (avx2+fma) = 192 GFLOP/s
    assert cpu.sm_count == 2
    assert cpu.peak_flops_per_s["fp32"] == pytest.approx(192e9)
    assert cpu.memory_bytes == 16384000 * 1024
    assert cpu.vendor == "intel"
    assert cpu.memory_bandwidth_bytes_per_s == pytest.approx(2 * 20e9)  # at least 2 channels x 20 GB/s
    # no AVX512_BF16: bf16 is widened to fp32 in software, far below the fp32 peak
    assert cpu.peak_flops("bfloat16", tensor_core=False) == (pytest.approx(0.15 * 192e9), "bf16")

    files["/proc/cpuinfo"] = files["/proc/cpuinfo"].replace("avx2 fma", "avx2 fma avx512f avx512_bf16")
    devices.detect_local_cpu.cache_clear()
    assert devices.detect_local_cpu().peak_flops_per_s["bf16"] == pytest.approx(2 * 192e9)  # VDPBF16PS


@pytest.mark.parametrize(
    "flags, flop_per_cycle",
    [({"avx512f", "avx2", "fma"}, 32), ({"avx2", "fma"}, 32), ({"avx"}, 16), ({"sse2"}, 8), (set(), 8)],
)
def test_fp32_flop_per_cycle_from_flags(flags, flop_per_cycle):
    assert cpu_detection._fp32_flop_per_cycle(flags) == flop_per_cycle


# -- user device files ----------------------------------------------------------------------------------------------


def test_user_override_merges_field_by_field(tmp_path):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"h100": {"memory_bandwidth_gb_per_s": 3000, "peak_tflops": {"fp32": 60}}}))
    assert load_device_file(path) == ["H100-SXM"]
    h100 = get_device("H100-SXM")
    assert h100.memory_bandwidth_bytes_per_s == 3000e9
    assert h100.peak_flops_per_s["fp32"] == 60e12
    assert h100.peak_flops_per_s["bf16_tensor"] == 989.4e12  # other FLOP keys kept
    assert h100.memory_bytes == 81559 * MIB and len(h100.mig_profiles) == 7  # other fields kept


def test_user_yaml_adds_a_device_with_defaults(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(
        "devices:\n"
        "  - name: MyAccel\n"
        "    aliases: [my-accel-v2]\n"
        "    memory_gib: 32\n"
        "    memory_bandwidth_gb_per_s: 1200\n"
        "    peak_tflops: {fp32: 40, bf16_tensor: 400}\n"
        "    tdp_w: 300\n"
        "    price_usd_per_hour: 1.5\n"
    )
    load_device_file(path)
    d = get_device("my_accel_v2")
    assert d.name == "MyAccel" and d.memory_bytes == 32 * GIB
    assert d.idle_power_w == pytest.approx(0.125 * 300)  # default: 12.5% of TDP
    assert d.launch_overhead_s == pytest.approx(3e-6) and d.kind == "gpu"
    assert d.peak_flops("bfloat16", tensor_core=True) == (400e12, "bf16_tensor")


def test_bad_user_file_raises_and_leaves_catalog_usable(tmp_path):
    typo = tmp_path / "typo.json"
    typo.write_text(json.dumps({"devices": [{"name": "H100-SXM", "memory_bandwith_gb_per_s": 1}]}))
    with pytest.raises(InvalidInputError, match="memory_bandwidth_gb_per_s"):
        load_device_file(typo)
    incomplete = tmp_path / "incomplete.json"
    incomplete.write_text(json.dumps([{"name": "NewThing", "memory_gib": 8}]))
    with pytest.raises(InvalidInputError, match="NewThing"):
        load_device_file(incomplete)
    assert get_device("H100-SXM").memory_bandwidth_bytes_per_s == 3.35e12


def test_env_device_files_are_read_on_first_load(tmp_path, monkeypatch):
    path = tmp_path / "env.json"
    path.write_text(json.dumps({"L4": {"tdp_w": 75}}))
    monkeypatch.setenv("PERFPREDICT_DEVICES", str(path))
    devices.reset_catalog()
    assert get_device("L4").tdp_w == 75


# -- measured ceilings ----------------------------------------------------------------------------------------------

CEILINGS = {
    "device": "NVIDIA H100 80GB HBM3",
    "ceilings": {
        "hbm_bandwidth_bytes_per_s": {"min": 2.9e12, "median": 3.0e12, "max": 3.1e12},
        "fp32_flops_per_s": {"min": 50e12, "median": 55e12, "max": 60e12},
        "launch_overhead_s": {"min": 2.2e-6, "median": 2.5e-6, "max": 4e-6},
        "l1_bandwidth_bytes_per_s": {"min": 1, "median": 2, "max": 3},  # no Device field: ignored
    },
    "method": "recorded fixture for tests, not a measurement",
}


def test_measured_ceilings_override_bandwidth_and_label_it(tmp_path):
    path = tmp_path / "h100_ceilings.json"
    path.write_text(json.dumps(CEILINGS))
    d = apply_ceilings(get_device("H100-SXM"), path)
    assert d.memory_bandwidth_bytes_per_s == 3.1e12  # the max: best sustained
    assert d.peak_flops_per_s["fp32"] == 60e12
    assert d.launch_overhead_s == 2.2e-6  # an overhead's best is its min
    assert d.peak_flops_per_s["bf16_tensor"] == 989.4e12  # not measured: datasheet kept
    assert {"memory_bandwidth_bytes_per_s", "launch_overhead_s", "peak_flops_per_s.fp32"} <= d.measured
    assert d.source == "measured:h100_ceilings.json"


def test_measured_dir_is_applied_to_the_catalog(tmp_path, monkeypatch):
    (tmp_path / "h100.json").write_text(json.dumps(CEILINGS))
    (tmp_path / "slice.json").write_text(json.dumps({**CEILINGS, "device": "A100-40GB/1g.5gb"}))  # not a full GPU
    (tmp_path / "broken.json").write_text("{not json")
    monkeypatch.setenv("PERFPREDICT_MEASURED_DIR", str(tmp_path))
    devices.reset_catalog()
    with pytest.warns(UserWarning, match="broken.json"):
        h100 = get_device("H100-SXM")
    assert h100.memory_bandwidth_bytes_per_s == 3.1e12 and h100.source == "measured:h100.json"
    assert get_device("A100-40GB").source == "datasheet"
    # a MIG slice of a measured GPU scales the measured bandwidth: 3.1 TB/s / 8
    assert get_device("H100-SXM/1g.10gb").memory_bandwidth_bytes_per_s == pytest.approx(3.1e12 / 8)


def test_bad_ceilings_raise():
    with pytest.raises(InvalidInputError, match="hbm_bandwidth_bytes_per_s"):
        apply_ceilings(get_device("H100-SXM"), {"ceilings": {"hbm_bandwidth_bytes_per_s": {"max": -1}}})
    with pytest.raises(InvalidInputError, match="mapping"):
        apply_ceilings(get_device("H100-SXM"), {"ceilings": [1, 2]})
    with pytest.raises(InvalidInputError, match="no usable ceilings"):
        apply_ceilings(get_device("H100-SXM"), {"ceilings": {"l1_bandwidth_bytes_per_s": 1.0}})


def test_ceilings_measured_elsewhere_warn():
    with pytest.warns(UserWarning, match="A100"):
        apply_ceilings(get_device("H100-SXM"), {"device": "A100-40GB", "ceilings": {"fp32_flops_per_s": 1e13}})


def test_device_modules_import_light():
    code = (
        "import sys, perfpredict.hardware.devices, perfpredict.hardware.mig, perfpredict.hardware.carbon, perfpredict.hardware.cost; "
        "print(sorted(m for m in ('torch', 'yaml') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_device_is_frozen_and_hashable():
    with pytest.raises(AttributeError):
        get_device("T4").tdp_w = 1  # type: ignore[misc]
    assert isinstance(get_device("T4"), Device)
    assert {get_device("T4"): 1}[get_device("tesla t4")] == 1  # usable as a cache key


def test_shipped_h100_ceilings_are_applied_by_default(shipped_ceilings):
    # perfpredict/data/measured/h100-sxm.json, from benchmarks/results/roofline_h100-sxm.md
    h100 = get_device("H100-SXM")
    assert h100.source == "measured:h100-sxm.json"
    assert {"memory_bandwidth_bytes_per_s", "peak_flops_per_s.bf16_tensor"} <= h100.measured
    # measured sustained rates sit below the datasheet's, within the bands the suite's checks allow
    assert 0.7 * 3.35e12 < h100.memory_bandwidth_bytes_per_s < 3.35e12
    assert 0.7 * 989.4e12 < h100.peak_flops_per_s["bf16_tensor"] < 989.4e12
    assert get_device("A100-80GB").source == "datasheet"


def test_memory_is_named_by_its_type_gddr_cards_are_not_called_hbm():
    from perfpredict.kernels.plot import _ceilings_from

    assert get_device("L4").memory_label == get_device("T4").memory_label == "GDDR6"
    assert get_device("H100-SXM").memory_label == "HBM3" and get_device("A100-80GB").memory_label == "HBM2e"
    assert get_device("A100-40GB/1g.5gb").memory_label == "HBM2"  # a MIG slice keeps its parent's memory
    assert all(d.memory_type for d in list_devices() if d.kind == "gpu")
    _, bandwidth = _ceilings_from(get_device("L4"), None)
    assert bandwidth[0][0] == "GDDR6"
