"""Protocol v3: round arithmetic, the timers, the CUDA-graph path and its profiler fallback (mocked CUDA)."""

from __future__ import annotations

import json
import types

import pytest
import torch

from perfpredict.core.errors import InvalidInputError
from perfpredict.profiling import protocol_v3, rounds, step_profile, timing
from perfpredict.profiling.monitor import Monitor


# -- rounds ----------------------------------------------------------------------------------------------------
def test_label_is_the_median_of_round_medians_with_its_spread():
    lab = rounds.label([10.0, 10.4, 9.8])
    assert lab.value == 10.0 and lab.rounds == 3
    assert lab.spread == pytest.approx((10.4 - 9.8) / 10.0)  # 0.06
    assert rounds.label([5.0]).spread == 0.0
    with pytest.raises(InvalidInputError):
        rounds.label([])


def _recs(*values, metric="device_ms"):
    return [{"status": "ok", metric: v} for v in values]


def test_policy_asks_for_min_rounds_then_more_while_the_spread_is_wide():
    p = rounds.RoundPolicy(min_rounds=3, max_rounds=5, max_spread=0.03)
    assert p.wants_more(_recs(1.0, 1.0))  # two rounds: not enough
    assert not p.wants_more(_recs(1.0, 1.01, 0.995))  # spread 1.5%: done after three
    assert p.wants_more(_recs(1.0, 1.10, 1.0))  # spread 10%: re-measure
    assert p.wants_more(_recs(1.0, 1.10, 1.0, 1.0))
    assert not p.wants_more(_recs(1.0, 1.10, 1.0, 1.0, 1.2))  # five rounds: the cap
    assert not p.wants_more([*_recs(1.0), {"status": "oom"}])  # a failed round ends the row
    with pytest.raises(InvalidInputError):
        rounds.RoundPolicy(min_rounds=4, max_rounds=3)


def test_interleave_measures_a_whole_block_per_round_and_resumes_from_stored_rounds():
    order: list[tuple[str, int]] = []
    finished: dict[str, int] = {}
    values = {"a": [1.0, 1.0, 1.0], "b": [1.0, 1.5, 1.0, 1.0, 1.0], "c": [2.0, 2.0, 2.0], "d": [3.0] * 3}

    def measure(key, recs):
        order.append((key, len(recs)))
        return {"status": "ok", "device_ms": values[key][len(recs)]}

    def finish(key, recs):
        finished[key] = len(recs)

    stored = {"c": _recs(2.0, 2.0)}  # a killed run left two rounds of c
    done = rounds.interleave(["a", "b", "c", "d"], stored, measure, finish, rounds.RoundPolicy(), block=3)
    assert done
    # block 1 is a, b, c: round 0 of a and b, (c resumes at round 2), then round 1 ...; d comes after the block
    assert order[:3] == [("a", 0), ("b", 0), ("c", 2)]
    assert order[3:5] == [("a", 1), ("b", 1)]
    assert finished == {"a": 3, "b": 5, "c": 3, "d": 3}  # b's spread stayed 50% until the cap
    assert order.index(("d", 0)) > order.index(("b", 4))


def test_interleave_stops_when_told():
    calls = []
    stop_after = iter([False, False, True])
    ok = rounds.interleave(
        ["a", "b"],
        {},
        lambda k, r: calls.append(k) or {"status": "ok", "device_ms": 1.0},
        lambda k, r: None,
        rounds.RoundPolicy(),
        block=2,
        stop=lambda: next(stop_after),
    )
    assert not ok and calls == ["a", "b"]


# -- timers ----------------------------------------------------------------------------------------------------
def test_blocked_timing_divides_a_block_by_its_steps(monkeypatch):
    calls = []
    samples, steps = timing.blocked_ms(lambda: calls.append(1), lambda: None, min_window_s=0.0, blocks=3)
    assert steps == 1 and len(samples) == 3 and len(calls) == 1 + 3  # one sizing step, then the blocks
    # a clock that a step advances by exactly 2 ms (a real sleep stretches on a loaded CI host)
    now = [0]
    monkeypatch.setattr(timing.time, "perf_counter_ns", lambda: now[0])

    def step() -> None:
        now[0] += 2_000_000

    samples, steps = timing.blocked_ms(step, lambda: None, min_window_s=0.02, blocks=2)
    assert steps == 10 and samples == [2.0, 2.0]  # 20 ms / 2 ms, each block's mean step


def test_host_enqueue_syncs_before_each_call_not_inside_it():
    log = []
    out = timing.host_enqueue_ms(lambda: log.append("call"), lambda: log.append("sync"), reps=2)
    assert log == ["sync", "call", "sync", "call", "sync"] and len(out) == 2


class _FakeEvent:
    """A CUDA event pair on a fake clock: each graph replay advances it by ``per_replay_ms``."""

    clock = [0.0]

    def __init__(self, enable_timing=False):
        self.t = None

    def record(self):
        self.t = self.clock[0]

    def synchronize(self):
        pass

    def elapsed_time(self, end):
        return end.t - self.t


@pytest.fixture
def fake_graph_cuda(monkeypatch):
    """torch.cuda's graph API stubbed: capture runs the step once; a replay costs 0.4 ms on a fake clock."""
    _FakeEvent.clock = [0.0]
    state = types.SimpleNamespace(captured=0, fail=None, replays=0)

    class Graph:
        def replay(self):
            state.replays += 1
            _FakeEvent.clock[0] += 0.4

    class GraphCtx:
        def __init__(self, graph):
            pass

        def __enter__(self):
            if state.fail:
                raise RuntimeError(state.fail)
            state.captured += 1

        def __exit__(self, *exc):
            return False

    class Null:
        def __init__(self, *a, **k):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def wait_stream(self, other):
            pass

    monkeypatch.setattr(torch.cuda, "CUDAGraph", Graph)
    monkeypatch.setattr(torch.cuda, "graph", GraphCtx)
    monkeypatch.setattr(torch.cuda, "Stream", Null)
    monkeypatch.setattr(torch.cuda, "stream", Null)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a: Null())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    return state


def test_graph_replay_fills_the_window_and_divides_by_the_replays(fake_graph_cuda):
    calls = []
    times, n, replay = timing.graph_replay_ms(lambda: calls.append(1), "cuda:0", min_window_ms=50.0, samples=3)
    assert len(calls) == 3 + 1  # three warm-up calls on the side stream, one under capture
    assert n == 125  # ceil(50 ms / 0.4 ms per replay)
    assert times == pytest.approx([0.4, 0.4, 0.4])
    assert fake_graph_cuda.replays == 1 + 3 * 125  # one sizing replay, then three event pairs


def test_capture_failure_raises_capture_failed(fake_graph_cuda):
    fake_graph_cuda.fail = "operation not permitted when stream is capturing"
    with pytest.raises(timing.CaptureFailed, match="not permitted"):
        timing.graph_replay_ms(lambda: None, "cuda:0")


# -- the profiler reduction ------------------------------------------------------------------------------------
def _event(name, start, end, parent=None, kernel=False):
    from torch.autograd import DeviceType

    return types.SimpleNamespace(
        name=name,
        cpu_parent=parent,
        device_type=DeviceType.CUDA if kernel else DeviceType.CPU,
        time_range=types.SimpleNamespace(start=start, end=end, elapsed_us=lambda s=start, e=end: e - s),
    )


def test_reduce_events_counts_top_level_aten_ops_and_kernels_per_step():
    m0, m1 = _event("perfpredict_step_0", 0, 100), _event("perfpredict_step_1", 200, 300)
    linear = _event("aten::linear", 10, 50, m0)
    addmm = _event("aten::addmm", 12, 48, linear)  # inside linear: not dispatched by the step itself
    relu = _event("aten::relu", 55, 60, m0)
    linear1, relu1 = _event("aten::linear", 210, 250, m1), _event("aten::relu", 255, 260, m1)
    kernels = [
        _event("gemm", 40, 70, kernel=True),
        _event("relu_k", 80, 90, kernel=True),  # step 0: 40 us busy
        _event("gemm", 240, 280, kernel=True),
        _event("relu_k", 285, 290, kernel=True),
    ]  # step 1
    prof = step_profile.reduce_events([m0, m1, linear, addmm, relu, linear1, relu1, *kernels], [], 2, cuda=True)
    assert prof.steps == 2 and prof.aten_op_count == 2 and prof.kernel_count == 2
    # kernel sums per step: 30 + 10 = 40 us and 40 + 5 = 45 us; median 42.5 us
    assert prof.kernel_sum_ms == pytest.approx(0.0425)
    # busy spans: 90 - 40 = 50 us and 290 - 240 = 50 us
    assert prof.busy_ms == pytest.approx(0.05)


def test_profile_step_on_cpu_counts_the_dispatched_ops():
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    prof = step_profile.profile_step(lambda: torch.relu(a @ b + 1), "cpu", steps=2)
    assert prof.steps == 2 and prof.aten_op_count == 3  # mm, add, relu
    assert prof.kernel_count is None and "aten::mm" in prof.per_op


# -- one round ---------------------------------------------------------------------------------------------------
FAST = protocol_v3.RoundSettings(
    warmup_min=2,
    warmup_max_s=0.05,
    sync_seconds=0.0,
    sync_floor_runs=3,
    blocked_window_s=0.0,
    blocked_samples=3,
    graph_window_ms=1.0,
    profile_steps=2,
)


def test_cpu_round_reports_wall_time_as_device_time():
    mon = Monitor("cpu", power_sample_interval_s=None)
    x = torch.randn(64, 64)
    mon.begin_window("r")
    m, replay = protocol_v3.measure_round(mon, lambda: x @ x, name="r", batch_size=4, settings=FAST)
    assert replay is None and m.device_method == "wall"
    assert m.device_ms == m.eager_ms > 0 and m.device_samples_ms == m.eager_samples_ms
    assert m.eager_sync_ms == m.latency_ms and m.runs == 3
    assert m.host_dispatch_ms is None and m.aten_op_count == 1 and m.kernel_count is None
    per_op = json.loads(m.op_times_json)  # per ATen op: calls, host self ms, device self ms per step
    assert per_op["aten::mm"][0] == 1 and per_op["aten::mm"][1] > 0
    row = m.to_row(with_samples=True)
    assert len(row["eager_samples_ms"]) == 3 and row["schema_version"] == 3


class _FakeCudaMonitor:
    """What measure_round needs of a Monitor, on a pretend GPU."""

    device, is_cuda = "cuda:0", True

    def __init__(self):
        self._cpu = Monitor("cpu", power_sample_interval_s=None)

    def timed_call(self, fn):
        fn()
        return 1.0

    def end_window(self, name, **kw):
        return self._cpu.end_window(name, **kw)

    def abort_window(self, name):
        self._cpu.abort_window(name)


def test_cuda_round_uses_graph_replay_when_capture_works(monkeypatch):
    mon = _FakeCudaMonitor()
    mon._cpu.begin_window("r")
    monkeypatch.setattr(timing, "synchronizer", lambda device: lambda: None)
    monkeypatch.setattr(timing, "graph_replay_ms", lambda fn, device, **kw: ([0.5, 0.52, 0.48], 100, "graph"))
    monkeypatch.setattr(
        step_profile,
        "profile_step",
        lambda fn, device, steps: step_profile.StepProfile(
            steps, aten_op_count=40, kernel_count=55, kernel_sum_ms=0.45, busy_ms=0.47
        ),
    )
    m, replay = protocol_v3.measure_round(mon, lambda: None, name="r", batch_size=1, settings=FAST)
    assert replay == "graph" and m.device_method == "cuda_graph" and m.graph_replays == 100
    assert m.device_ms == 0.5 and m.kernel_count == 55 and m.aten_op_count == 40
    assert m.host_dispatch_ms is not None and len(m.host_samples_ms) == FAST.host_reps
    assert m.capture_error is None


def test_cuda_round_falls_back_to_the_profilers_kernel_sum(monkeypatch):
    mon = _FakeCudaMonitor()
    mon._cpu.begin_window("r")
    monkeypatch.setattr(timing, "synchronizer", lambda device: lambda: None)

    def no_capture(fn, device, **kw):
        raise timing.CaptureFailed("RuntimeError: CUDA error: operation not permitted when stream is capturing")

    profiled = []
    monkeypatch.setattr(timing, "graph_replay_ms", no_capture)
    monkeypatch.setattr(
        step_profile,
        "profile_step",
        lambda fn, device, steps: (
            profiled.append(steps)
            or step_profile.StepProfile(steps, aten_op_count=12, kernel_count=20, kernel_sum_ms=1.25, busy_ms=1.4)
        ),
    )
    m, replay = protocol_v3.measure_round(mon, lambda: None, name="r", batch_size=1, settings=FAST)
    assert replay is None and m.device_method == "profiler"
    assert m.device_ms == 1.25 and m.device_busy_ms == 1.4 and "not permitted" in m.capture_error
    assert profiled == [3]  # profiled once, for the fallback and the counts together


def test_energy_window_runs_at_least_min_seconds_and_reports_per_step_energy():
    class Meter:
        energy_readable = True

        def __init__(self):
            self.log = []

        def begin_window(self, name):
            self.log.append(("begin", name))

        def end_window(self, name, runs, batch_size):
            self.log.append(("end", name, runs))
            return types.SimpleNamespace(
                energy_j=2.0 / runs,
                avg_power_w=300.0,
                energy_method="nvml_counter",
                energy_window_s=1.0,
                sampled_avg_power_w=None,
                power_samples=0,
            )

    meter, calls = Meter(), []
    out = protocol_v3.energy_window(meter, lambda: calls.append(1), batch_size=2, min_s=0.0)
    assert meter.log == [("begin", "energy"), ("end", "energy", 3)] and len(calls) == 3  # never fewer than 3 runs
    assert out["energy_j"] == pytest.approx(2.0 / 3) and out["energy_runs"] == 3
    silent = types.SimpleNamespace(energy_readable=False)
    assert protocol_v3.energy_window(silent, lambda: None, batch_size=1) == {}  # no counter: nothing invented
