"""The unlabelled graph corpus: >= 10,000 sampled specs whose OpGraphs are regenerated on demand, never stored.

Tracing one graph takes 1-5 s on a 2-core host (about 8 CPU-hours for 10,000), so the corpus is committed as a
compact, gzipped spec list (``data/graph_corpus/specs-v1.jsonl.gz``, one key per line, plus ``manifest.json`` with
its SHA-256) and :func:`corpus_graphs` regenerates any slice deterministically on the meta device, for
semi-supervised pretraining. :func:`perfpredict.profiling.zoo.graph_corpus_specs` re-derives the same list from
the seed; the file guards against a sampler change (the manifest's ``zoo_version`` and hash say which).
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from perfpredict.core.errors import InvalidInputError
from perfpredict.profiling import zoo

DEFAULT_DIR = Path("data") / "graph_corpus"
SPECS_FILE = "specs-v1.jsonl.gz"


def write_corpus(folder: str | Path = DEFAULT_DIR, n: int = 10_000, seed: int = 0, profile: str = "gpu") -> Path:
    """Sample ``n`` specs and write them (gzipped, deterministic bytes) with a manifest; returns the spec file."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    keys = [s.to_key() for s in zoo.graph_corpus_specs(n, seed=seed, profile=profile)]
    text = "\n".join(keys) + "\n"
    path = folder / SPECS_FILE
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as f:
        f.write(text.encode())
    families: dict[str, int] = {}
    for s in keys:
        fam = json.loads(s)["family"]
        families[fam] = families.get(fam, 0) + 1
    manifest = {
        "specs": n,
        "seed": seed,
        "profile": profile,
        "zoo_version": zoo.ZOO_VERSION,
        "sha256_keys": hashlib.sha256(text.encode()).hexdigest(),
        "families": families,
        "regenerate": f"perfpredict zoo graphs --n {n} --seed {seed} --profile {profile}",
    }
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return path


def load_corpus_specs(path: str | Path = DEFAULT_DIR / SPECS_FILE) -> list[zoo.ModelSpec]:
    path = Path(path)
    if not path.exists():
        raise InvalidInputError(f"graph corpus {str(path)!r} does not exist; create it with `perfpredict zoo graphs`")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [zoo.ModelSpec.from_key(line) for line in f if line.strip()]


def corpus_graphs(specs: list[zoo.ModelSpec], start: int = 0, stop: int | None = None) -> Iterator[tuple[str, Any]]:
    """``(key, OpGraph)`` for ``specs[start:stop]``, traced on the meta device (no memory, no weights)."""
    from perfpredict.profiling.graph_features import spec_graph

    for spec in specs[start:stop]:
        yield spec.to_key(), spec_graph(spec)
