"""A latency-constrained search over the FBNet space for an RTX 2080 Ti at batch 64 (docs/nas.md).

Ten candidates "measured on the target" adapt the latency model; an evolution then keeps the best candidates
under the budget. The measured latencies come from HELP's public set, so the example runs anywhere; on your own
GPU, time the ten candidates instead. The score to maximise is a stand-in (parameters); use your accuracy
predictor. Run it: ``python docs/examples/nas_search.py``.
"""

from __future__ import annotations

import numpy as np

import perfpredict
from perfpredict.external.help import load_fbnet
from perfpredict.nas import adapt, fbnet

DEVICE, BATCH, BUDGET_MS = "RTX-2080-Ti", 64, 9.0


def search(generations: int = 10, population: int = 100, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = fbnet.example_input(BATCH)  # a meta tensor: predictions never read an input's values

    # 1. adapt to the target: ten candidates with their measured latency (here HELP's, from its 2080 Ti)
    help_set = load_fbnet()
    measured = rng.choice(len(help_set.choices), 10, replace=False)
    latency_model = adapt.adapt(
        [fbnet.build(help_set.choices[i].tolist()) for i in measured],
        x,
        help_set.latency_ms[(DEVICE, BATCH)][measured],
        device=DEVICE,
    )

    def predict(candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        cols = perfpredict.predict_models(
            (fbnet.build(c.tolist()) for c in candidates), x, device=DEVICE, adapted=latency_model
        )
        return cols["latency_ms"], cols["params"]  # params: a stand-in for your accuracy predictor

    # 2. evolution: the best candidates under the budget are the parents of the next generation
    pool = rng.integers(0, len(fbnet.OPS), (population, fbnet.LAYERS))
    for _ in range(generations):
        latency_ms, score = predict(pool)
        feasible = np.flatnonzero(latency_ms <= BUDGET_MS)
        parents = pool[feasible[np.argsort(score[feasible])[::-1][: population // 4]]]
        children = parents[rng.integers(0, len(parents), population - len(parents))].copy()
        mutate = rng.random(children.shape) < 2 / fbnet.LAYERS
        children[mutate] = rng.integers(0, len(fbnet.OPS), mutate.sum())
        pool = np.vstack([parents, children])
    latency_ms, score = predict(pool)
    best = np.flatnonzero(latency_ms <= BUDGET_MS)
    best = best[np.argmax(score[best])]
    return pool[best], latency_ms[best]


if __name__ == "__main__":
    choices, latency = search()
    print(f"best under {BUDGET_MS} ms: {[fbnet.OPS[c] for c in choices]}, predicted {latency:.2f} ms")
