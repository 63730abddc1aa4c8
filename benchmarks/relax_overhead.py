"""The PredictPerformance pass's time as a share of tvm.compile time, for BERT-base (12 layers, seq 128).

    .venv/bin/python benchmarks/relax_overhead.py [--layers 12] [--seq 128] [--repeats 3]

Compiles the Relax module from ``from_exported_program`` with ``relax_pipeline=Sequential([PredictPerformance,
default])`` for target llvm, ``--repeats`` times; the pass records its own wall time. Also prints the full-size
FX / Relax totals side by side (the full-size consistency check the test suite runs at reduced depth).
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")

    import torch
    import tvm
    from transformers import BertConfig, BertModel
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    import perfpredict
    from perfpredict.backends import relax_pass
    from perfpredict.compiler_hooks.relax_frontend import graph_from_relax

    model = BertModel(BertConfig(num_hidden_layers=args.layers)).eval()
    ids = torch.randint(0, 1000, (1, args.seq))
    mod = from_exported_program(torch.export.export(model, (ids,)), keep_params_as_input=False)
    pass_s, compile_s = [], []
    for _ in range(args.repeats):
        seq = tvm.transform.Sequential(
            [relax_pass.PredictPerformance(device="H100-SXM"), relax.get_pipeline("default")]
        )
        start = time.perf_counter()
        tvm.compile(mod, target="llvm", relax_pipeline=seq)
        compile_s.append(time.perf_counter() - start)
        pass_s.append(relax_pass.LAST_PASS_SECONDS[0])
    share = [p / c for p, c in zip(pass_s, compile_s)]
    print(
        f"BERT-base layers={args.layers} seq={args.seq}: tvm.compile median {statistics.median(compile_s):.2f} s "
        f"(min {min(compile_s):.2f}), PredictPerformance median {statistics.median(pass_s) * 1e3:.1f} ms "
        f"(min {min(pass_s) * 1e3:.1f}), share median {statistics.median(share):.2%} (max {max(share):.2%})"
    )
    fx = perfpredict.featurize(model, (ids,))
    rx = graph_from_relax(mod)
    from perfpredict.graph_report import report_for_graph

    for name, g in (("fx", fx), ("relax", rx)):
        lat = report_for_graph(g, device="H100-SXM").latency_ms.value
        print(
            f"{name:>6}: FLOPs {g.total_flops:.6g}  bytes {g.total_bytes:.6g}  nodes {len(g.nodes)}  "
            f"H100 analytical {lat:.4f} ms"
        )


if __name__ == "__main__":
    main()
