"""Few-shot adaptation: the simulation by hand, the zero-shot point, recovering known parameters, refusals, and
HELP's measured candidates."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import spearmanr

import perfpredict
from perfpredict.core.errors import InvalidInputError
from perfpredict.hardware.devices import get_device
from perfpredict.nas import adapt, fbnet
from perfpredict.nas.candidates import Candidates
from perfpredict.predictors import timeline


def test_the_host_runs_ahead_at_most_queue_depth_kernels():
    h = np.array([[1.0], [1.0], [1.0]])
    d = np.array([[3.0], [0.1], [3.0]])
    # depth 1: op 1 is enqueued once op 0 ends (4), op 2 once op 1 ends (4.1) and its dispatch is done (5): 5 + 3
    assert adapt.simulate(h, d, np.array([1]))[0] == pytest.approx(8.0)
    # a deep queue: op 2 is enqueued at 3 and starts when op 1 ends at 4.1: 7.1, as timeline.overlapped says
    assert adapt.simulate(h, d, np.array([1024]))[0] == pytest.approx(7.1)
    assert timeline.overlapped(h, d).wall_s[0] == pytest.approx(7.1)
    both = adapt.simulate(np.hstack([h, h]), np.hstack([d, d]), np.array([1, 1024]))
    np.testing.assert_allclose(both, [8.0, 7.1])


def _parts(choices_list, device="TITAN-RTX", batch=64):
    run = Candidates()
    out = []
    for choices in choices_list:
        arrays = run.arrays(fbnet.build(choices, device="meta"), (fbnet.example_input(batch),))
        out.append(adapt.node_parts(arrays, get_device(device), batch))
    return out


_RNG = np.random.default_rng(3)
SPACE = [_RNG.integers(0, 9, 22).tolist() for _ in range(30)]


def test_the_zero_shot_point_is_the_predictors_eager_latency():
    parts = _parts(SPACE[:3])
    cols = perfpredict.predict_models(
        (fbnet.build(c, device="meta") for c in SPACE[:3]), (fbnet.example_input(64),), device="TITAN-RTX"
    )
    np.testing.assert_allclose(adapt.zero_shot("TITAN-RTX").latency_ms(parts), cols["latency_ms"], rtol=1e-12)


def test_known_parameters_are_recovered_from_their_own_latencies():
    # synthetic labels: what a known model gives, not measurements; the fit must find a model that ranks them
    truth = adapt.AdaptedLatency(
        "TITAN-RTX", host_scale=1.3, memory_scale=1.2, depthwise_scale=10.0, queue_depth=2, offset_ms=1.0
    )
    parts = _parts(SPACE)
    labels = truth.latency_ms(parts)
    fitted = adapt.fit(parts[:10], labels[:10], "TITAN-RTX")
    assert fitted.shots == 10 and fitted.log_rmse < 0.02
    assert spearmanr(fitted.latency_ms(parts[10:]), labels[10:]).statistic > 0.97
    # a shallow queue (the truth's 2 and the 8 next to it fit these labels alike), far from the zero-shot 1,024
    assert fitted.queue_depth <= 8 and 5.0 < fitted.depthwise_scale < 20.0
    zero = adapt.zero_shot("TITAN-RTX").latency_ms(parts[10:])
    assert (
        np.abs(np.log(fitted.latency_ms(parts[10:]) / labels[10:])).mean() < np.abs(np.log(zero / labels[10:])).mean()
    )


def test_bad_measurements_and_devices_are_refused():
    parts = _parts(SPACE[:3])
    with pytest.raises(InvalidInputError, match="at least 3"):
        adapt.fit(parts[:2], [1.0, 2.0], "TITAN-RTX")
    with pytest.raises(InvalidInputError, match="positive"):
        adapt.fit(parts, [1.0, -2.0, 3.0], "TITAN-RTX")
    arrays = Candidates(reuse=None).arrays(fbnet.build(SPACE[0], device="meta"), (fbnet.example_input(2),))
    with pytest.raises(InvalidInputError, match="GPU"):
        adapt.node_parts(arrays, get_device("cpu"), 2)


def test_ten_measured_help_candidates_rank_the_rest():
    help_data = pytest.importorskip("perfpredict.external.help")
    pytest.importorskip("pyarrow")
    data = help_data.load_fbnet()
    rng = np.random.default_rng(0)
    picked = rng.choice(len(data.choices), 70, replace=False)
    shots, rest = picked[:10], picked[10:]
    measured = data.latency_ms[("RTX-2080-Ti", 64)]
    model = adapt.adapt(
        (fbnet.build(data.choices[i].tolist(), device="meta") for i in shots),
        (fbnet.example_input(64),),
        measured[shots],
        device="RTX-2080-Ti",
    )
    assert not model.learned_device  # fitted on the datasheet basis (the module's docstring says why)
    cols = perfpredict.predict_models(
        (fbnet.build(data.choices[i].tolist(), device="meta") for i in rest),
        (fbnet.example_input(64),),
        device="RTX-2080-Ti",
        adapted=model,
    )
    assert spearmanr(cols["latency_ms"], measured[rest]).statistic > 0.95
