"""HELP's FBNet latency set (github.com/HayeonLee/HELP, MIT): convert it once, then read it.

HELP (Lee et al., NeurIPS'21) published 5,000 FBNet-space architectures (``data/fbnet/arch.pt``: 22 choices each,
indices into :data:`perfpredict.nas.fbnet.OPS`) and their latency in milliseconds on five desktop GPUs at batch 1,
32 and 64 (``data/fbnet/latency/<gpu>_<batch>.pt``), of the CIFAR-100 variant of the space. ``convert`` reads those
files as data only (``torch.load(weights_only=True)``) and writes two parquet tables; ``load_fbnet`` reads them
back. Conversion command (from a clone of HELP)::

    python -m perfpredict.external.help /path/to/HELP data/external/help
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from perfpredict.core.errors import InvalidInputError, require

#: HELP's file prefix -> (perfpredict catalog name, what HELP calls it)
GPUS = {
    "1080ti": ("GTX-1080-Ti", "NVIDIA GeForce GTX 1080 Ti"),
    "2080ti": ("RTX-2080-Ti", "NVIDIA GeForce RTX 2080 Ti"),
    "titan_rtx": ("TITAN-RTX", "NVIDIA Titan RTX"),
    "titanx": ("GTX-TITAN-X", "NVIDIA Titan X"),
    "titanxp": ("TITAN-Xp", "NVIDIA Titan Xp"),
}
BATCHES = (1, 32, 64)
DEFAULT_DIR = Path(__file__).resolve().parents[2] / "data" / "external" / "help"
ARCHS_FILE = "fbnet_archs.parquet"
LATENCY_FILE = "fbnet_latency.parquet"


@dataclass(frozen=True)
class FBNetSet:
    """HELP's FBNet set: ``choices`` [architectures, 22] and measured ``latency_ms`` per (catalog GPU, batch)."""

    choices: np.ndarray
    latency_ms: dict[tuple[str, int], np.ndarray]
    dataset: str = "cifar100"

    @property
    def settings(self) -> list[tuple[str, int]]:
        """The (catalog GPU, batch) pairs measured, in HELP's GPU order and ascending batch."""
        return sorted(self.latency_ms, key=lambda k: ([g for g, _ in GPUS.values()].index(k[0]), k[1]))


def convert(help_dir: Path, out_dir: Path) -> tuple[int, int]:
    """Write ``fbnet_archs.parquet`` and ``fbnet_latency.parquet`` from a HELP checkout; (archs, latency rows)."""
    import torch

    pd = require("pandas", "data")
    src = Path(help_dir) / "data" / "fbnet"
    meta = torch.load(src / "metainfo.pt", weights_only=True)
    archs = torch.load(src / "arch.pt", weights_only=True)
    if meta.get("dataset") != "cifar100":
        raise InvalidInputError(
            f"HELP's FBNet set says dataset {meta.get('dataset')!r}; this converter expects cifar100"
        )
    if [a["op_idx_list"] for a in meta["arch"]] != archs:
        raise InvalidInputError(f"{src}: arch.pt and metainfo.pt list different architectures; re-clone HELP")
    choices = np.array(archs, dtype=np.uint8)
    table = pd.DataFrame({f"layer_{i:02d}": choices[:, i] for i in range(choices.shape[1])})
    table.insert(0, "arch_index", np.arange(len(choices), dtype=np.int32))
    rows = []
    for prefix, (device, _) in GPUS.items():
        for batch in BATCHES:
            latency = np.asarray(torch.load(src / "latency" / f"{prefix}_{batch}.pt", weights_only=True), dtype=float)
            if latency.shape != (len(choices),):
                raise InvalidInputError(f"{prefix}_{batch}.pt holds {latency.shape} values for {len(choices)} archs")
            rows.append(
                pd.DataFrame(
                    {
                        "arch_index": np.arange(len(choices), dtype=np.int32),
                        "help_gpu": prefix,
                        "device": device,
                        "batch_size": np.int16(batch),
                        "latency_ms": latency,
                    }
                )
            )
    latency = pd.concat(rows, ignore_index=True)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    table.to_parquet(out_dir / ARCHS_FILE, index=False, compression="zstd")
    latency.to_parquet(out_dir / LATENCY_FILE, index=False, compression="zstd")
    return len(table), len(latency)


def load_fbnet(folder: Path = DEFAULT_DIR) -> FBNetSet:
    """HELP's FBNet set from the converted tables (``pip install "perfpredict[data]"`` for pandas and pyarrow)."""
    pd = require("pandas", "data")
    folder = Path(folder)
    if not (folder / ARCHS_FILE).exists():
        raise InvalidInputError(
            f"{str(folder / ARCHS_FILE)!r} does not exist; convert HELP's set with "
            "`python -m perfpredict.external.help /path/to/HELP data/external/help`"
        )
    archs = pd.read_parquet(folder / ARCHS_FILE).sort_values("arch_index")
    choices = archs[[c for c in archs.columns if c.startswith("layer_")]].to_numpy(dtype=np.int64)
    latency = pd.read_parquet(folder / LATENCY_FILE)
    by_setting = {}
    for (device, batch), rows in latency.groupby(["device", "batch_size"], sort=False):
        rows = rows.sort_values("arch_index")
        by_setting[(str(device), int(batch))] = rows["latency_ms"].to_numpy(dtype=float)
    return FBNetSet(choices=choices, latency_ms=by_setting)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("help_dir", type=Path, help="a clone of github.com/HayeonLee/HELP")
    parser.add_argument("out_dir", type=Path, nargs="?", default=DEFAULT_DIR)
    args = parser.parse_args(argv)
    archs, rows = convert(args.help_dir, args.out_dir)
    print(f"{archs} architectures, {rows} latency rows -> {args.out_dir}")


if __name__ == "__main__":
    main()
