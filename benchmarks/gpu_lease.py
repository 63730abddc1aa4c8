"""The one prepared GPU lease script: the first command of any session that gets a GPU, then two commands to keep
what it measured.

    run(command="bash benchmarks/gpu_lease.sh \\"$OUT\\"", timeout_s=570)     # the device tool, one call
    python benchmarks/gpu_lease.py import <files_at>                          # here, then commit data/v3/

``run OUT`` spends at most ``--budget-s`` (530) seconds, in stages that each have a share of it and are cut cleanly
at its end (:mod:`benchmarks.lease_runner`):

| stage | share | what |
|---|---:|---|
| ``env`` | 15 s | nvidia-smi, driver, CUDA, torch and transformers versions, clocks, power limit, temperature |
| ``ops`` | 240 s | bf16/fp16 op rows of the planned shapes (:mod:`perfpredict.profiling.op_plan`), most valuable first |
| ``models`` | 90 s | ``perfpredict collect --device cuda`` (protocol v3): bf16 transformer and vision rows |
| ``generation`` | 155 s | HF ``generate`` with a static cache: TTFT, per-token time, tokens/s, eager then compiled |
| ``env_after`` | 15 s | the environment again: clocks, power and temperature after the load |

and leaves 15 s to pack. Everything lands in ``OUT`` as ``lease.tgz`` (the rows, the logs, the environment),
``lease.log`` and ``summary.txt``, packed again after every stage. The work folder (``--work``, default
``/tmp/perfpredict-lease``) is seeded from this repository's committed rows of the same GPU, so a run skips what
earlier leases measured and extends the plans; a second run on the same machine resumes the first.

``--device cpu`` is the dry run: the same stages and code on plans sized for a CPU, each stage ending once it has
measured a few rows (``tests/benchmark_suite/test_gpu_lease.py`` runs it end to end). ``import`` files a returned ``lease.tgz`` under ``data/v3/<gpu-slug>/``
(:mod:`benchmarks.lease_import`).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import shlex
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import lease_runner as lr
from benchmarks.lease_stages import models_argv

REPO = Path(__file__).resolve().parents[1]
SCRIPT = Path(__file__).resolve()
DEFAULT_SHARES = {"env": 15.0, "ops": 240.0, "models": 90.0, "generation": 155.0, "env_after": 15.0}
EXIT_MARGIN_S = {"env": 2.0, "ops": 6.0, "models": 25.0, "generation": 10.0, "env_after": 2.0}
MEASURING = ("ops", "models", "generation")


def _shares(text: str) -> dict[str, float]:
    shares = dict(DEFAULT_SHARES)
    for item in filter(None, (t.strip() for t in text.split(","))):
        name, _, value = item.partition("=")
        if name not in shares:
            raise argparse.ArgumentTypeError(f"--shares: unknown stage {name!r}; stages: {', '.join(shares)}")
        try:
            shares[name] = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"--shares: {item!r} is not STAGE=SECONDS") from None
    return shares


def _stage_list(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    bad = [n for n in names if n not in MEASURING]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"--stages: {bad or text!r} not among {', '.join(MEASURING)}")
    return names


def lease_stages(args: argparse.Namespace, state: dict) -> list[lr.Stage]:
    """The stages of one run; ``state`` gains ``work_slug`` once the env stage has found the device."""
    py, here = sys.executable, str(SCRIPT)
    run_dir = state["run_dir"]

    def env(when: str):
        return lambda budget: [
            py,
            here,
            "stage",
            "env",
            "--device",
            args.device,
            "--into",
            str(run_dir / "env"),
            "--when",
            when,
        ]

    def stage(name: str, folder_of):  # the stage's own clock starts before its imports: an absolute deadline
        return lambda budget: [
            *(py, here, "stage", name, "--device", args.device),
            *("--folder", str(folder_of()), "--until", f"{time.time() + budget:.1f}"),
        ]

    makers = {
        "env": env("before"),
        "ops": stage("ops", lambda: state["work_slug"]),
        "models": lambda budget: models_argv(py, args.device, state["work_slug"], budget),
        "generation": stage("generation", lambda: state["work_slug"] / "generation"),
        "env_after": env("after"),
    }
    names = ["env", *[s for s in MEASURING if s in args.stages], "env_after"]
    return [lr.Stage(n, args.shares[n], makers[n], EXIT_MARGIN_S[n]) for n in names]


def cmd_run(args: argparse.Namespace) -> int:
    out, work = Path(args.out), Path(args.work)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    lease_id = f"{stamp}-{'cpu' if args.device == 'cpu' else 'gpu'}"
    run_dir = work / "runs" / lease_id
    run_dir.mkdir(parents=True, exist_ok=True)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    os.environ["PYTHONUNBUFFERED"] = "1"
    state: dict = {"run_dir": run_dir, "work_slug": None, "offsets": {}}
    manifest = {
        "lease_id": lease_id,
        "command": shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "lease_command": os.environ.get("PERFPREDICT_LEASE_COMMAND"),  # as typed, when run by gpu_lease.sh
        "device": args.device,
        "budget_s": args.budget_s,
        "reserve_s": args.reserve_s,
        "shares": args.shares,
        "started_at": stamp,
        "slug": None,
        "device_name": None,
    }
    manifest_path = run_dir / lr.MANIFEST_NAME

    def after_stage() -> None:
        if state["work_slug"] is None and (run_dir / "env" / "before.json").is_file():
            env = json.loads((run_dir / "env" / "before.json").read_text())
            if env.get("slug"):
                manifest.update(slug=env["slug"], device_name=env.get("device_name"))
                state["work_slug"] = work / "data" / "v3" / env["slug"]
                state["offsets"] = lr.seed(state["work_slug"], Path(args.seed_data) / "v3" / env["slug"])
                manifest["seeded_rows_from"] = str(Path(args.seed_data) / "v3" / env["slug"])
                lr.write_json(manifest_path, manifest)
        lr.pack(out, run_dir, manifest["slug"], state["work_slug"], state["offsets"])

    def skip(stage: lr.Stage) -> str | None:
        if stage.name in MEASURING and state["work_slug"] is None:
            return "no device (the env stage found none; see lease.log)"
        return None

    lr.run_stages(
        lease_stages(args, state),
        total_s=args.budget_s,
        reserve_s=args.reserve_s,
        manifest=manifest,
        manifest_path=manifest_path,
        log_path=run_dir / lr.LOG_NAME,
        after_stage=after_stage,
        skip=skip,
    )
    print((out / lr.SUMMARY_NAME).read_text(), end="")
    return 0


def cmd_stage(args: argparse.Namespace) -> int:
    from benchmarks import lease_stages

    if args.until is None:
        args.until = time.time() + 60.0
    if args.name == "env":
        lease_stages.snapshot_env(Path(args.into), args.when, args.device)
    elif args.name == "ops":
        lease_stages.run_ops(Path(args.folder), args.device, args.until - time.time())
    else:
        lease_stages.run_generation(Path(args.folder), args.device, args.until - time.time())
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from benchmarks.lease_import import import_lease

    summary = import_lease(Path(args.files_at), Path(args.data))
    print(summary.text())
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpu_lease.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run the lease's stages and pack the results into OUT")
    r.add_argument("out", help="the folder the results are packed into ($OUT under the device tool)")
    r.add_argument("--device", default="cuda", help="cuda (default), cuda:N, or cpu for the dry run")
    r.add_argument("--budget-s", type=float, default=530.0, help="wall seconds for everything (default 530)")
    r.add_argument("--reserve-s", type=float, default=15.0, help="of the budget, kept for the last packing (15)")
    r.add_argument(
        "--shares", type=_shares, default=dict(DEFAULT_SHARES), help="STAGE=SECONDS,... (default: the docstring's)"
    )
    r.add_argument("--stages", type=_stage_list, default=list(MEASURING), help="ops,models,generation (default all)")
    r.add_argument("--work", default="/tmp/perfpredict-lease", help="the work folder (kept between runs)")
    r.add_argument("--seed-data", default=str(REPO / "data"), help="the committed datasets to skip (default data/)")
    r.set_defaults(func=cmd_run)
    s = sub.add_parser("stage", help="(used by run) one stage in its own process")
    s.add_argument("name", choices=("env", "ops", "generation"))
    s.add_argument("--device", default="cuda")
    s.add_argument("--into", default=".")
    s.add_argument("--when", default="before")
    s.add_argument("--folder", default=".")
    s.add_argument("--until", type=float, default=None, help="stop starting work at this Unix time")
    s.set_defaults(func=cmd_stage)
    i = sub.add_parser("import", help="file a returned lease.tgz under data/v3/<gpu-slug>/")
    i.add_argument("files_at", help="the device tool's files_at folder (or the lease.tgz itself)")
    i.add_argument("--data", default=str(REPO / "data"), help="the data folder to file into (default data/)")
    i.set_defaults(func=cmd_import)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if getattr(args, "device", "cpu") == "cuda":
        args.device = "cuda:0"
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
