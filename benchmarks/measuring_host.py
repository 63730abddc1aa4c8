"""Score a CPU dataset on the CPU that measured it, not on the CPU that runs the benchmark.

The catalog's ``cpu`` is whatever this host's /proc says (``hardware/cpu_detection.py``). A benchmark that scores
rows measured elsewhere on it predicts for the wrong machine: ``data/v3/cpu-amd-epyc-2c`` was measured on a 2-vCPU
EPYC with native bf16 (its bf16 GEMMs ran at 2.5x its fp32 ones), and scored on a 2-vCPU EPYC without AVX512_BF16
the analytical predictor's CPU MAPE went 50% -> 305% and xgboost's (whose features hold analytical time shares)
23.7% -> 32.0%, with nothing changed but the VM. A dataset folder's ``host_device.json`` (written by the collector,
``perfpredict/profiling/host_record.py``; for that dataset, reconstructed) records the measuring CPU under the name
``cpu`` (an op-row subfolder such as ``ops/`` reads its parent's); loading it makes every ``get_device("cpu")`` in
this process that CPU.
"""

from __future__ import annotations

from pathlib import Path

from perfpredict.profiling.host_record import HOST_DEVICE_FILE


def pin(folder: str | Path) -> str:
    """Load ``folder``'s measuring-host record, if it has one, and say which CPU ``cpu`` now is (a report's
    header line)."""
    from perfpredict.hardware.devices import get_device, load_device_file
    from perfpredict.hardware.user_config import calibrated_profile_path

    calibrated = calibrated_profile_path()
    if calibrated is not None:  # its ceilings and host costs are this machine's, and would replace the record's
        raise SystemExit(
            f"a calibrated host profile is in use ({calibrated}): it would score {folder} as this machine; "
            "unset PERFPREDICT_HOST_PROFILE, or point XDG_CONFIG_HOME at a folder without host_profile.json"
        )
    here = Path(folder)
    record = next((d / HOST_DEVICE_FILE for d in (here, here.parent) if (d / HOST_DEVICE_FILE).exists()), None)
    if record is None:
        return f"cpu: this host's /proc ({get_device('cpu').notes.split(';')[0]}): {here} records no measuring CPU"
    load_device_file(record)
    cpu = get_device("cpu")
    peaks = ", ".join(f"{k} {v / 1e9:.0f}" for k, v in sorted(cpu.peak_flops_per_s.items()))
    return f"cpu: the measuring host ({record}: {peaks} GFLOP/s), not this one's /proc"
