"""benchmarks/gpu_lease.py: the stage schedule cuts an overrunning stage and runs the rest; the pack holds what the
lease added; the whole lease runs end to end on the CPU (the dry run) and its pack files into data/ once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # the benchmarks package lives at the repository root
    sys.path.insert(0, str(REPO))

from benchmarks import gpu_lease, lease_import, lease_stages  # noqa: E402
from benchmarks import lease_runner as lr  # noqa: E402
from perfpredict.core.errors import InvalidInputError  # noqa: E402

PY = sys.executable


def _py(code: str):
    return lambda budget: [PY, "-c", code]


def test_an_overrunning_stage_is_cut_and_the_next_still_runs(tmp_path):
    marker = tmp_path / "b-ran"
    stages = [
        lr.Stage("a", 1.5, _py("import time; time.sleep(600)")),
        lr.Stage("b", 4.0, _py(f"open({str(marker)!r}, 'w').write('header')")),
        lr.Stage(
            "deaf", 1.5, _py("import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(600)")
        ),
        lr.Stage("c", 1.0, _py("print('never')")),
    ]
    manifest: dict = {}
    packs = []
    t0 = time.monotonic()
    results = lr.run_stages(
        stages,
        total_s=8.0,
        reserve_s=0.5,
        manifest=manifest,
        manifest_path=tmp_path / "run.json",
        log_path=tmp_path / "lease.log",
        after_stage=lambda: packs.append(json.loads((tmp_path / "run.json").read_text())),
        min_stage_s=1.0,
        kill_grace_s=1.0,
    )
    took = time.monotonic() - t0
    status = {r.name: r.status for r in results}
    # cut at its deadline, not after its ten-minute sleep (the bounds tell the two apart on any host, however busy)
    assert status["a"] == "cut" and results[0].seconds < 300
    assert status["b"] == "ok" and marker.read_text() == "header"  # the stage after a cut one runs
    assert status["deaf"] == "cut" and results[2].exit_code == -9  # SIGINT ignored: SIGKILL after the grace
    assert status["c"].startswith("skipped: no time left")  # its window closed while 'deaf' was being killed
    assert took < 900  # the budget held: the stages' sleeps alone would take half an hour
    assert len(packs) == 4  # packed after every stage, skipped ones included
    assert [s["status"] for s in packs[0]["stages"]] == ["cut", "pending", "pending", "pending"]  # headers first
    saved = json.loads((tmp_path / "run.json").read_text())
    assert [s["status"] for s in saved["stages"]] == [r.status for r in results]
    log = (tmp_path / "lease.log").read_text()
    assert "a: start" in log and "c: skipped" in log


def _run(tmp_path, stages, *, total_s, **kw):
    return lr.run_stages(
        stages,
        total_s=total_s,
        reserve_s=1.0,
        manifest={},
        manifest_path=tmp_path / "run.json",
        log_path=tmp_path / "lease.log",
        min_stage_s=1.0,
        **kw,
    )


def test_a_stage_that_cannot_start_or_pack_costs_only_itself(tmp_path):
    def broken_pack():
        raise OSError("disk full")

    stages = [
        lr.Stage("missing", 5.0, lambda budget: [str(tmp_path / "no-such-program")]),
        lr.Stage("next", 5.0, _py("pass")),
    ]
    results = _run(tmp_path, stages, total_s=20.0, after_stage=broken_pack)
    assert results[0].status.startswith("failed: ") and results[1].status == "ok"
    assert (tmp_path / "lease.log").read_text().count("OSError: disk full") == 2


def test_a_stage_that_ends_early_leaves_its_time_to_the_next(tmp_path):
    stages = [lr.Stage("quick", 5.0, _py("pass")), lr.Stage("next", 2.0, _py("pass"))]
    results = _run(tmp_path, stages, total_s=30.0)
    assert results[1].limit_s > 4.0  # 5 + 2 s of schedule, of which 'quick' used about one
    assert results[0].budget_s == pytest.approx(5.0 - 2.0, abs=0.5)  # its limit less 40% (the 5 s margin is more)


def test_the_pack_holds_only_what_the_lease_added(tmp_path):
    committed = tmp_path / "data" / "v3" / "gpu-x"
    (committed / "ops").mkdir(parents=True)
    (committed / "ops" / "rows.jsonl").write_text('{"key": "k1", "device": "gpu-x"}\n')
    (committed / "ops" / "rounds.jsonl").write_text('{"key": "k1", "round": 0}\n')  # not seeded: not rows
    work = tmp_path / "work" / "gpu-x"
    offsets = lr.seed(work, committed)
    assert offsets == {"ops/rows.jsonl": 33} and not (work / "ops" / "rounds.jsonl").exists()
    with open(work / "ops" / "rows.jsonl", "a") as f:
        f.write('{"key": "k2", "device": "gpu-x"}\n')
    (work / "generation").mkdir()
    (work / "generation" / "rows.jsonl").write_text('{"key": "g1"}\n')
    assert lr.seed(work, committed) == offsets  # seeded once: a second run on the machine keeps the offsets
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    lr.write_json(run_dir / "run.json", {"lease_id": "L", "slug": "gpu-x", "stages": []})
    out = tmp_path / "out"
    lr.pack(out, run_dir, "gpu-x", work, offsets)
    assert sorted(p.name for p in out.iterdir()) == ["lease.tgz", "summary.txt"]
    with tarfile.open(out / "lease.tgz") as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    assert files["lease/data/v3/gpu-x/ops/rows.jsonl"] == b'{"key": "k2", "device": "gpu-x"}\n'
    assert files["lease/data/v3/gpu-x/generation/rows.jsonl"] == b'{"key": "g1"}\n'
    assert "lease/run.json" in files and not any("seed.json" in n for n in files)
    assert "ops/rows.jsonl: +1 lines" in (out / "summary.txt").read_text()


def test_nvidia_smi_query_rows_parse():
    # the format of `nvidia-smi --query-gpu=... --format=csv,noheader,nounits` (one GPU)
    line = "NVIDIA H100 80GB HBM3, 580.159.04, P0, 1980, 2619, 1980, 2619, 71.22, 700.00, 700.00, 31, 0, 81559, 0\n"
    (gpu,) = lease_stages.parse_nvsmi_csv(line)
    assert gpu["name"] == "NVIDIA H100 80GB HBM3" and gpu["clocks.sm"] == 1980.0 and gpu["power.limit"] == 700.0
    assert lease_stages.parse_nvsmi_csv("nvidia-smi: not found\n") == []


def test_the_env_stage_on_a_gpu_records_the_device(tmp_path, monkeypatch):
    import torch

    line = "NVIDIA H100 80GB HBM3, 580.159.04, P0, 1980, 2619, 1980, 2619, 71.22, 700.00, 700.00, 31, 0, 81559, 0\n"
    monkeypatch.setattr(lease_stages, "_run", lambda argv, timeout_s=30.0: line if "--format" in " ".join(argv) else "")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: "NVIDIA H100 80GB HBM3")
    props = SimpleNamespace(
        name="NVIDIA H100 80GB HBM3",
        major=9,
        minor=0,
        multi_processor_count=132,
        total_memory=85e9,
        L2_cache_size=2**25,
    )
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: props)
    info = lease_stages.snapshot_env(tmp_path, "before", "cuda:0")
    assert info["slug"] == "nvidia-h100-80gb-hbm3" and info["sm_count"] == 132 and info["capability"] == "9.0"
    assert info["gpus"][0]["clocks.sm"] == 1980.0
    assert json.loads((tmp_path / "before.json").read_text())["slug"] == "nvidia-h100-80gb-hbm3"


def test_the_env_stage_without_cuda_says_so_and_stops_the_gpu_stages(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as stop:
        lease_stages.snapshot_env(tmp_path, "before", "cuda:0")
    assert stop.value.code == 3
    info = json.loads((tmp_path / "before.json").read_text())
    assert "slug" not in info and "CUDA" in info["error"]


@pytest.mark.parametrize("device", ["cuda:0", "cpu"])
def test_the_model_stage_is_a_valid_collect_command(device, tmp_path):
    from perfpredict.cli.entry import build_parser
    from perfpredict.profiling.collect_engine import CollectConfig

    argv = lease_stages.models_argv(PY, device, tmp_path, 60.0)
    assert argv[:4] == [PY, "-m", "perfpredict", "collect"]
    args = build_parser().parse_args(argv[3:])
    cfg = CollectConfig(
        out=Path(args.out), device=args.device, families=args.families, dtypes=args.dtypes, batches=args.batches
    )  # validates the families, dtypes and batches as the command will
    assert args.protocol_version == 3 and args.budget_minutes == pytest.approx(1.0) and args.no_compact
    if device != "cpu":
        assert cfg.dtypes == ("bfloat16",) and {"llama", "vit", "resnet"} <= set(cfg.families)


def _seed_one_done_op(seed_data: Path, slug: str) -> str:
    """A committed op row for the plan's first op (a fixture: its label is not a measurement), so the dry run
    must skip it."""
    from benchmarks.lease_stages import CPU_MAX_FLOPS, CPU_MAX_IO_BYTES
    from perfpredict.profiling import op_plan

    first = op_plan.lease_plan(max_io_bytes=CPU_MAX_IO_BYTES, max_flops=CPU_MAX_FLOPS)[0].op.to_key()
    folder = seed_data / "v3" / slug / "ops"
    folder.mkdir(parents=True)
    row = {"schema_version": 2, "key": first, "device": slug, "status": "ok", "row_kind": "op", "device_ms": 1.0}
    (folder / "rows.jsonl").write_text(json.dumps(row) + "\n")
    return first


@pytest.mark.slow
def test_the_dry_run_runs_every_stage_and_its_pack_files_into_data(tmp_path):
    from benchmarks.lease_stages import CPU_MODEL_ROWS, CPU_OPS
    from perfpredict.profiling import dataset as ds
    from perfpredict.profiling.collect_engine import device_slug
    from perfpredict.profiling.op_instances import OpInstance

    slug = device_slug("cpu")
    skipped_key = _seed_one_done_op(tmp_path / "seed", slug)
    out = tmp_path / "out"
    # Shares a busy host can meet (each stage tens of times what it takes on an idle one): the dry run's stages end
    # when their work is done (CPU_OPS op rows, CPU_MODEL_ROWS model rows, two generation rows), so an idle run takes
    # a small fraction of the 1,806 s and a loaded one still finishes every stage; the timeout is a hang guard.
    cmd = ["bash", str(REPO / "benchmarks" / "gpu_lease.sh"), str(out), "--device", "cpu", "--budget-s", "1806"]
    cmd += ["--reserve-s", "6", "--shares", "env=180,ops=540,models=360,generation=540,env_after=180"]
    cmd += ["--work", str(tmp_path / "work"), "--seed-data", str(tmp_path / "seed")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=2400, env={**os.environ, "PY": PY})
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    assert sorted(p.name for p in out.iterdir()) == ["lease.log", "lease.tgz", "summary.txt"]  # 3 files, 0 folders
    unpacked = tmp_path / "unpacked"
    with tarfile.open(out / "lease.tgz") as tar:
        tar.extractall(unpacked, filter="data")
    lease = unpacked / "lease"
    run = json.loads((lease / "run.json").read_text())
    assert run["slug"] == slug and [s["name"] for s in run["stages"]] == [
        "env",
        "ops",
        "models",
        "generation",
        "env_after",
    ]
    assert all(s["status"] == "ok" for s in run["stages"]), run["stages"]  # each ended on its own, none was cut
    assert {"before.json", "after.json", "before-nvidia-smi.txt"} <= {p.name for p in (lease / "env").iterdir()}
    data = lease / "data" / "v3" / slug
    ops = ds.read_jsonl(data / "ops" / "rows.jsonl")[0]
    assert 0 < len(ops) <= CPU_OPS and skipped_key not in {r["key"] for r in ops}  # the committed row: not again
    rounds = ds.read_jsonl(data / "ops" / "rounds.jsonl", required=("key",))[0]
    for r in ops:
        assert r["row_kind"] == "op" and r["status"] == "ok" and r["protocol_version"] == 3
        assert r["source_key"].startswith("lease_plan/") and r["device_ms"] > 0 and r["flops"] is not None
        op = OpInstance.from_key(r["key"])
        assert (r["kind"], r["dtype"], r["in_bytes"]) == (op.kind, op.dtype(), op.io_bytes()) and r["out_bytes"] > 0
        assert sum(x["key"] == r["key"] for x in rounds) == r["rounds"]
    plan = json.loads((data / "ops" / "plan.json").read_text())
    assert plan["plan_version"] >= 1 and plan["ops"] > len(ops)
    models = ds.read_jsonl(data / "rows.jsonl")[0]
    assert len(models) == CPU_MODEL_ROWS and all(r["protocol_version"] == 3 and r["family"] == "mlp" for r in models)
    gens = ds.read_jsonl(data / "generation" / "rows.jsonl")[0]
    assert gens and gens[0]["status"] == "ok" and gens[0]["tokens_per_s"] > 0
    assert json.loads((data / "generation" / "plan.json").read_text())["specs"]

    dest = tmp_path / "data"
    first = lease_import.import_lease(out, dest)
    filed = dest / "v3" / slug
    assert first.added["ops/rows.jsonl"] == len(ops) and first.added["generation/rows.jsonl"] == len(gens)
    assert first.compacted["ops"] == len(ops) and (filed / "ops" / "rows.parquet").is_file()
    assert ds.read_jsonl(filed / "ops" / "rows.jsonl")[0] == []  # folded into the Parquet file
    assert len(ds.load_dataset(filed / "ops").rows) == len(ops) and len(ds.load_dataset(filed).rows) == len(models)
    aside = filed / "leases" / run["lease_id"]
    recorded = json.loads((aside / "run.json").read_text())
    assert recorded["command"].startswith("gpu_lease.py run") and recorded["lease_command"].startswith(
        f"bash benchmarks/gpu_lease.sh {out} --device cpu"
    )
    assert (aside / "ops-plan.json").is_file() and (aside / "env" / "after.json").is_file()
    assert json.loads((aside / "import.json").read_text())["from"].endswith("lease.tgz")
    again = lease_import.import_lease(out / "lease.tgz", dest)
    assert set(again.added.values()) == {0}  # importing twice adds nothing


def test_import_refuses_what_is_not_a_lease_pack(tmp_path):
    with pytest.raises(InvalidInputError, match="no lease.tgz"):
        lease_import.import_lease(tmp_path, tmp_path / "data")
    bad = tmp_path / "lease.tgz"
    with tarfile.open(bad, "w:gz") as tar:
        tar.add(__file__, arcname="lease/other.py")
    with pytest.raises(InvalidInputError, match="no lease/run.json"):
        lease_import.import_lease(bad, tmp_path / "data")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    lr.write_json(run_dir / "run.json", {"lease_id": "L", "slug": None, "stages": []})
    lr.pack(tmp_path / "out", run_dir, None, None, {})
    with pytest.raises(InvalidInputError, match="found no device"):
        lease_import.import_lease(tmp_path / "out", tmp_path / "data")


def test_logs_merge_as_a_multiset(tmp_path):
    src, dest = tmp_path / "src", tmp_path / "dest"
    src.mkdir()
    dest.mkdir()
    line = {"key": "k", "device": "d", "round": 0}
    (dest / "attempts.jsonl").write_text(json.dumps(line) + "\n")
    (src / "attempts.jsonl").write_text((json.dumps(line) + "\n") * 2)  # the first again, then a retry
    assert lease_import.merge_log(src, dest, "attempts.jsonl") == 1
    assert lease_import.merge_log(src, dest, "attempts.jsonl") == 0


def test_the_import_files_the_rounds_gzipped_and_reads_them_back(tmp_path):
    """The rounds are most of a device's bytes: the import keeps them as rounds.jsonl.gz, and a second import of
    the same lease reads that archive and adds nothing."""
    import gzip

    run_dir, work = tmp_path / "run", tmp_path / "work" / "gpu-x"
    run_dir.mkdir()
    (work / "ops").mkdir(parents=True)
    lr.write_json(run_dir / "run.json", {"lease_id": "L1", "slug": "gpu-x", "stages": []})
    lines = "".join(
        json.dumps({"key": "k1", "device": "gpu-x", "round": i}, separators=(",", ":")) + "\n" for i in range(3)
    )
    (work / "ops" / "rounds.jsonl").write_text(lines)
    lr.pack(tmp_path / "out", run_dir, "gpu-x", work, {})
    filed = tmp_path / "data" / "v3" / "gpu-x" / "ops"
    first = lease_import.import_lease(tmp_path / "out", tmp_path / "data", compact=False)
    assert first.added["ops/rounds.jsonl"] == 3 and not (filed / "rounds.jsonl").exists()
    archived = (filed / "rounds.jsonl.gz").read_bytes()
    assert [json.loads(x) for x in gzip.decompress(archived).splitlines()] == [json.loads(x) for x in lines.split()]
    again = lease_import.import_lease(tmp_path / "out", tmp_path / "data", compact=False)
    assert again.added["ops/rounds.jsonl"] == 0 and (filed / "rounds.jsonl.gz").read_bytes() == archived


def test_the_cli_checks_its_options():
    with pytest.raises(SystemExit):
        gpu_lease.parser().parse_args(["run", "out", "--shares", "warp=10"])
    with pytest.raises(SystemExit):
        gpu_lease.parser().parse_args(["run", "out", "--stages", "ops,roofline"])
    args = gpu_lease.parser().parse_args(["run", "out", "--shares", "ops=100", "--stages", "ops"])
    assert args.shares["ops"] == 100 and args.shares["generation"] == gpu_lease.DEFAULT_SHARES["generation"]
    assert sum(gpu_lease.DEFAULT_SHARES.values()) + 15 == 530  # the stages fill the budget less the reserve


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="needs a CUDA GPU")
def test_a_short_lease_on_the_gpu(tmp_path):
    """On a GPU (the first minutes of a lease, if one wants the check): a 150-second run of every stage."""
    from perfpredict.profiling import dataset as ds

    out = tmp_path / "out"
    cmd = [PY, str(REPO / "benchmarks" / "gpu_lease.py"), "run", str(out), "--budget-s", "150", "--reserve-s", "8"]
    cmd += ["--shares", "env=12,ops=50,models=30,generation=40,env_after=10", "--work", str(tmp_path / "work")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:]
    with tarfile.open(out / "lease.tgz") as tar:
        tar.extractall(tmp_path / "x", filter="data")
    run = json.loads((tmp_path / "x" / "lease" / "run.json").read_text())
    data = tmp_path / "x" / "lease" / "data" / "v3" / run["slug"]
    ops = ds.read_jsonl(data / "ops" / "rows.jsonl")[0]
    assert len(ops) > 100 and sum(r["device_method"] == "cuda_graph" for r in ops) > 0.9 * len(ops)
