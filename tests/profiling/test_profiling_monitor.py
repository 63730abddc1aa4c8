"""The profiler hook: CPU windows with a real model, the NVML path with pynvml mocked, RAPL from a fake sysfs."""

from __future__ import annotations

import importlib.util
import itertools
import statistics
import time

import pytest
import torch

from perfpredict.core.errors import InvalidInputError
from perfpredict.core.units import GIB, MIB
from perfpredict.profiling import cpu as cpu_probe
from perfpredict.profiling.measurement import Measurement, spread
from perfpredict.profiling.monitor import Monitor, measure_compiled


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).eval()


def test_measure_cpu_real_model():
    model, x = _mlp(), torch.randn(8, 64)
    mon = Monitor("cpu")
    with torch.no_grad():
        m = mon.measure(lambda: model(x), batch_size=8, min_runs=10, min_seconds=0.05, warmup_min=5)
    assert m.timer == "perf_counter_ns" and m.device == "cpu"
    assert m.runs >= 5 and len(m.samples_ms) == m.runs and m.warmup_runs >= 5
    assert m.latency_min_ms <= m.latency_ms <= m.latency_max_ms
    assert m.latency_cv is not None and m.latency_cv >= 0
    assert m.throughput_per_s == pytest.approx(8 / (m.latency_ms / 1e3))
    assert m.env.cpu_model and m.env.torch_threads >= 1 and m.env.torch_version == torch.__version__
    if cpu_probe.RaplCounter().available:
        assert m.energy_method == "rapl"
    else:  # never invented
        assert m.energy_j is None and m.avg_power_w is None and m.energy_method is None
    back = Measurement.from_row(m.to_row(with_samples=True))
    assert back == m


def test_peak_rss_counts_a_big_allocation():
    mon = Monitor("cpu")
    mon.begin_window("alloc")
    block = torch.ones(64 * MIB // 4)  # 64 MiB, touched
    m = mon.end_window("alloc")
    del block
    if m.memory_method == "rss_hwm":
        assert m.peak_memory_bytes >= 60 * MIB
    assert m.rss_peak_bytes >= m.rss_begin_bytes


def test_windows_errors():
    mon = Monitor("cpu")
    mon.begin_window("a")
    with pytest.raises(InvalidInputError, match="already open"):
        mon.begin_window("a")
    with pytest.raises(InvalidInputError, match="no open measurement window 'b'"):
        mon.end_window("b")
    assert mon.end_window("a", runs=2).runs == 2
    with pytest.raises(InvalidInputError, match="'cpu', 'cuda'"):
        Monitor("tpu")


def test_measure_compiled_on_cpu():
    model, x = _mlp(), torch.randn(4, 64)
    compiled = torch.compile(model, backend="eager")
    calls = []

    def slow(inputs):  # the compiled model and a 2 ms sleep: every timed call must take at least 2 ms
        calls.append(torch.is_grad_enabled())
        time.sleep(0.002)
        return compiled(inputs)

    m = measure_compiled(slow, (x,), min_runs=5, min_seconds=0.01, warmup_min=2)
    assert m.batch_size == 4  # read from the first input's leading size
    assert len(calls) == m.warmup_runs + m.runs and m.runs == len(m.samples_ms) >= 5  # every call was counted
    assert not any(calls)  # inference: run under no_grad
    assert min(m.samples_ms) >= 2.0 and m.latency_ms >= 2.0  # it timed the call: no sample is under the sleep
    assert m.latency_ms == statistics.median(m.samples_ms)
    calls.clear()
    measure_compiled(slow, (x,), grad=True, min_runs=1, min_seconds=0.0, warmup_min=1, floor_runs=1)
    assert calls and all(calls)  # grad=True: a training step's forward keeps its graph


def test_spread_statistics():
    # samples 1, 2, 3, 4: median 2.5, mean 2.5, population std sqrt(1.25) = 1.118, CV 1.118 / 2.5 = 0.447
    s = spread([4.0, 1.0, 3.0, 2.0])
    assert (s.median, s.minimum, s.maximum, s.mean) == (2.5, 1.0, 4.0, 2.5)
    assert s.cv == pytest.approx(0.4472, abs=1e-4)
    assert spread([5.0]).cv is None


def test_rapl_from_fake_sysfs(tmp_path):
    pkg = tmp_path / "intel-rapl:0"
    pkg.mkdir()
    (pkg / "name").write_text("package-0\n")
    (pkg / "energy_uj").write_text("999000000\n")
    (pkg / "max_energy_range_uj").write_text("1000000000\n")
    (tmp_path / "intel-rapl:0:0").mkdir()  # a subdomain: not counted twice
    counter = cpu_probe.RaplCounter(tmp_path)
    assert counter.available and len(counter.domains) == 1
    start = counter.read_uj()
    (pkg / "energy_uj").write_text("1000000\n")  # wrapped: 1e9 - 999e6 + 1e6 = 2e6 uJ = 2 J
    assert counter.joules_between(start, counter.read_uj()) == pytest.approx(2.0)
    mon = Monitor("cpu", rapl_root=tmp_path)
    (pkg / "energy_uj").write_text("0\n")
    mon.begin_window("w")
    (pkg / "energy_uj").write_text("3000000\n")  # 3 J over 3 runs: 1 J per call
    m = mon.end_window("w", runs=3)
    assert m.energy_method == "rapl" and m.energy_j == pytest.approx(1.0)
    assert m.avg_power_w == pytest.approx(3.0 / m.energy_window_s)


# -- NVML with pynvml mocked (no GPU needed) ------------------------------------------------------------------
@pytest.fixture
def fake_cuda(mocker):
    """Pretend torch has a GPU: the monitor's CUDA calls are stubbed, so only the NVML logic is exercised."""
    mocker.patch("torch.cuda.is_available", return_value=True)
    mocker.patch("torch.cuda.synchronize")
    mocker.patch("torch.cuda.reset_peak_memory_stats")
    mocker.patch("torch.cuda.memory_allocated", return_value=1000)
    mocker.patch("torch.cuda.max_memory_allocated", return_value=5000)
    mocker.patch("torch.cuda.max_memory_reserved", return_value=8192)
    mocker.patch("torch.cuda.get_device_name", return_value="NVIDIA H100 80GB HBM3")


def _mock_pynvml(mocker):
    if importlib.util.find_spec("pynvml") is not None:
        nv = mocker.patch("perfpredict.profiling.nvml.pynvml", autospec=True)
    else:  # nvidia-ml-py not installed: a plain mock stands in for the module
        nv = mocker.patch("perfpredict.profiling.nvml.pynvml", create=True)
    nv.nvmlDeviceGetPowerUsage.return_value = 200_000  # mW
    nv.nvmlDeviceGetMemoryInfo.return_value = mocker.Mock(used=3 * GIB)
    nv.nvmlDeviceGetClockInfo.return_value = 1980
    nv.nvmlDeviceGetEnforcedPowerLimit.return_value = 700_000
    nv.nvmlDeviceGetTemperature.return_value = 41
    nv.nvmlSystemGetDriverVersion.return_value = "550.54.15"
    return nv


def test_nvml_energy_counter_differenced(mocker, fake_cuda):
    nv = _mock_pynvml(mocker)
    nv.nvmlDeviceGetTotalEnergyConsumption.side_effect = [10_000, 14_000]  # mJ: begin, end
    mon = Monitor("cuda", energy_min_window_s=0.02, power_sample_interval_s=0.005)
    mon.begin_window("w")
    time.sleep(0.05)
    m = mon.end_window("w", runs=4, batch_size=2)
    # (14000 - 10000) mJ = 4 J over 4 runs: 1 J per call
    assert m.energy_method == "nvml_counter" and m.energy_j == pytest.approx(1.0)
    assert m.avg_power_w == pytest.approx(4.0 / m.energy_window_s)
    assert m.sampled_avg_power_w == pytest.approx(200.0) and m.power_samples >= 2  # the cross-check
    assert m.torch_max_allocated_bytes == 5000 and m.torch_max_reserved_bytes == 8192
    assert m.peak_memory_bytes == 4000  # 5000 peak - 1000 allocated at begin_window
    assert m.nvml_used_bytes == 3 * GIB
    assert m.env.driver_version == "550.54.15" and m.env.power_limit_w_before == 700.0
    assert m.env.sm_clock_mhz_after == 1980.0 and m.env.temperature_c_before == 41.0
    assert m.timer == "cuda_event" and m.device == "cuda:0"


def _counter_with_steps(nv, reads_per_step: int, step_mj: int = 1000) -> None:
    """NVML's energy counter as it behaves on an H100: it moves in steps, here one every ``reads_per_step`` reads."""
    reads = itertools.count()
    nv.nvmlDeviceGetTotalEnergyConsumption.side_effect = lambda *_: step_mj * (next(reads) // reads_per_step)


def test_measure_starts_and_ends_the_energy_window_on_counter_steps(mocker, fake_cuda):
    nv = _mock_pynvml(mocker)
    _counter_with_steps(nv, reads_per_step=4)
    mocker.patch.object(Monitor, "timed_call", lambda self, fn: (fn(), 1.0)[1])
    mon = Monitor("cuda", energy_min_window_s=0.0, power_sample_interval_s=None)
    mon.counter_poll_s = 0.0  # read the counter after every run, so the count below is exact
    m = mon.measure(lambda: None, warmup_min=1, min_runs=3, min_seconds=60, floor_runs=1)
    # Counter reads 0-3 give 0 mJ, 4-7 give 1000 and 8-11 give 2000. Read 0 opens the window; 1-4 wait for the
    # first step (3 extra warm-up runs); read 5 starts the energy window at 1000; after the 3 timed runs, reads 6-8
    # wait for the next step (2 more timed runs); read 9 closes it at 2000: 1 J over 5 runs.
    assert m.energy_method == "nvml_counter_aligned"
    assert m.runs == 5 and m.energy_j == pytest.approx(0.2)
    assert m.power_samples == 0 and m.sampled_avg_power_w is None  # the sampling thread was off


def test_measure_without_counter_steps_keeps_the_plain_window(mocker, fake_cuda):
    nv = _mock_pynvml(mocker)
    nv.nvmlDeviceGetTotalEnergyConsumption.return_value = 5000  # a counter that never moves
    mocker.patch.object(Monitor, "timed_call", lambda self, fn: (fn(), 1.0)[1])
    mon = Monitor("cuda", energy_min_window_s=0.0, power_sample_interval_s=None)
    m = mon.measure(lambda: None, warmup_min=1, min_runs=3, min_seconds=60, floor_runs=1)
    assert m.energy_method == "nvml_counter" and m.runs == 3 and m.energy_j == 0.0


def test_nvml_short_window_falls_back_to_sampling(mocker, fake_cuda):
    nv = _mock_pynvml(mocker)
    nv.nvmlDeviceGetTotalEnergyConsumption.side_effect = [0, 0, 50]
    mon = Monitor("cuda", energy_min_window_s=10.0, power_sample_interval_s=0.005)
    mon.begin_window("w")
    time.sleep(0.05)
    m = mon.end_window("w")
    assert m.energy_method == "power_sampling"
    assert m.avg_power_w == pytest.approx(200.0)  # a constant 200 W integrates to 200 W on average
    assert any("shorter than" in w for w in m.warnings)


def test_nvml_without_energy_counter_uses_sampling(mocker, fake_cuda):
    nv = _mock_pynvml(mocker)
    nv.nvmlDeviceGetTotalEnergyConsumption.side_effect = Exception("NVML_ERROR_NOT_SUPPORTED")
    mon = Monitor("cuda", energy_min_window_s=0.0, power_sample_interval_s=0.005)
    mon.begin_window("w")
    time.sleep(0.03)
    m = mon.end_window("w", runs=2)
    assert m.energy_method == "power_sampling"
    assert m.energy_j == pytest.approx(200.0 * m.energy_window_s / 2, rel=0.2)


def test_missing_nvml_warns_and_energy_is_none(mocker, fake_cuda):
    mocker.patch("perfpredict.profiling.nvml.pynvml", None)
    with pytest.warns(RuntimeWarning, match="NVML is not available"):
        mon = Monitor("cuda")
    mon.begin_window("w")
    m = mon.end_window("w")
    assert m.energy_j is None and m.energy_method is None and m.nvml_used_bytes is None
    assert m.torch_max_allocated_bytes == 5000 and m.env.driver_version is None


def test_nvml_init_failure_warns(mocker, fake_cuda):
    nv = _mock_pynvml(mocker)
    nv.nvmlInit.side_effect = Exception("NVML Shared Library Not Found")
    with pytest.warns(RuntimeWarning, match="could not be initialised"):
        mon = Monitor("cuda")
    assert not mon.energy_readable


def test_no_gpu_is_a_clear_error():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(InvalidInputError, match="no CUDA GPU"):
        Monitor("cuda")


def test_end_build_splits_the_cpu_peak_into_build_and_step():
    mon = Monitor("cpu")
    mon.begin_window("split")
    build = torch.ones(96 * MIB // 4)  # a 96 MiB "float32 build", freed before the steps
    del build
    mon.end_build("split")
    step = torch.ones(32 * MIB // 4)  # a 32 MiB step
    m = mon.end_window("split")
    del step
    if m.memory_method != "rss_hwm":
        pytest.skip("this kernel does not let a process reset its RSS high-water mark")
    assert m.build_peak_memory_bytes >= 90 * MIB
    # The step's 32 MiB, less what the split's malloc_trim returned below the window's starting level.
    assert 20 * MIB <= m.step_peak_memory_bytes < m.build_peak_memory_bytes
    assert m.peak_memory_bytes == m.build_peak_memory_bytes
    assert m.rss_peak_bytes >= m.rss_begin_bytes + m.build_peak_memory_bytes


def test_a_window_without_end_build_has_no_halves():
    mon = Monitor("cpu")
    mon.begin_window("whole")
    m = mon.end_window("whole")
    assert m.build_peak_memory_bytes is None and m.step_peak_memory_bytes is None


class _FakeAllocator:
    """torch.cuda's allocated / max-allocated counters, with reset_peak_memory_stats setting the max to now."""

    def __init__(self, allocated: int) -> None:
        self.allocated, self.max = allocated, allocated

    def set(self, allocated: int) -> None:
        self.allocated, self.max = allocated, max(self.max, allocated)

    def reset(self, *_: object) -> None:
        self.max = self.allocated


def test_end_build_splits_the_gpu_peak_and_keeps_the_window_totals(mocker, fake_cuda):
    alloc = _FakeAllocator(1000)
    mocker.patch("torch.cuda.memory_allocated", side_effect=lambda *_: alloc.allocated)
    mocker.patch("torch.cuda.max_memory_allocated", side_effect=lambda *_: alloc.max)
    mocker.patch("torch.cuda.max_memory_reserved", side_effect=lambda *_: alloc.max + 100)  # the cache on top
    mocker.patch("torch.cuda.reset_peak_memory_stats", side_effect=alloc.reset)
    mocker.patch("perfpredict.profiling.nvml.pynvml", None)
    with pytest.warns(RuntimeWarning, match="NVML is not available"):
        mon = Monitor("cuda")
    mon.begin_window("w")
    alloc.set(9000)  # float32 weights plus their bf16 copy
    alloc.set(5000)  # the float32 copy freed
    mon.end_build("w")
    alloc.set(7000)  # a step's activations over the resident weights
    alloc.set(5000)
    m = mon.end_window("w")
    assert (m.build_peak_memory_bytes, m.step_peak_memory_bytes, m.peak_memory_bytes) == (8000, 6000, 8000)
    assert m.torch_max_allocated_bytes == 9000  # the window's absolute peaks, across the split
    assert m.torch_max_reserved_bytes == 9100
