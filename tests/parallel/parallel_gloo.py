"""What torch.distributed really sends, on CPU: two gloo processes run a Megatron-style tensor-parallel decoder,
DDP, and FSDP2, with every collective's size recorded. ``run_all`` spawns them once and returns rank 0's logs."""

from __future__ import annotations

import os
import socket

import torch
import torch.distributed as dist
from parallel_models import BATCH, HIDDEN, SEQ, ShardedNet, TinyDecoder, bucketed_net, megatron_rank

WORLD = 2


class Recorder:
    """Wraps the torch.distributed calls the frameworks make; each call logs (kind, phase, bytes)."""

    def __init__(self) -> None:
        self.phase = "forward"
        self.calls: list[tuple[str, str, int]] = []
        for name, kind in (
            ("all_reduce", "all_reduce"),
            ("all_gather_single", "all_gather"),
            ("all_gather_into_tensor", "all_gather"),
            ("reduce_scatter_single", "reduce_scatter"),
            ("reduce_scatter_tensor", "reduce_scatter"),
        ):
            if hasattr(dist, name):
                setattr(dist, name, self._wrap(getattr(dist, name), kind))

    def _wrap(self, fn, kind: str):
        def call(*args, **kwargs):
            tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
            # nccl-tests' S: the buffer (all-reduce), the gathered output, the scattered input: the largest tensor
            size = max(t.numel() * t.element_size() for t in tensors)
            self.calls.append((kind, self.phase, size))
            return fn(*args, **kwargs)

        return call

    def take(self) -> list[tuple[str, str, int]]:
        out, self.calls = self.calls, []
        return out


def _tensor_parallel(rank: int, rec: Recorder) -> dict:
    torch.manual_seed(0)
    full = TinyDecoder()
    part = megatron_rank(full, rank, WORLD)
    x = torch.randn(BATCH, SEQ, HIDDEN)
    rec.phase = "forward"
    out = part(x)
    rec.phase = "backward"
    out.square().mean().backward()
    calls = rec.take()
    return {"calls": calls, "matches_full_model": bool(torch.allclose(out, full(x), atol=1e-5))}


def _ddp(rec: Recorder) -> dict:
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(bucketed_net())
    steps: list[list[int]] = []

    def hook(state, bucket):
        steps[-1].append(bucket.buffer().numel() * bucket.buffer().element_size())
        return allreduce_hook(state, bucket)

    model.register_comm_hook(None, hook)
    for _ in range(2):  # the first step runs one bucket; DDP rebuilds them in gradient-ready order after it
        steps.append([])
        model(torch.randn(4, 1024)).sum().backward()
    rec.take()
    return {"buckets": steps, "param_bytes": sum(p.numel() * p.element_size() for p in model.parameters())}


def _fsdp(rec: Recorder) -> dict:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = ShardedNet()
    total = sum(p.numel() for p in model.parameters())
    mesh = init_device_mesh("cpu", (WORLD,))
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters())
    rec.phase = "forward"
    out = model(torch.randn(4, 32))
    rec.phase = "backward"
    out.sum().backward()
    calls = rec.take()
    opt.step()
    local = sum(p.to_local().numel() for p in model.parameters())
    state = sum(
        v.to_local().numel() for s in opt.state.values() for v in s.values() if hasattr(v, "to_local") and v.dim() > 0
    )
    return {"calls": calls, "params": total, "local_params": local, "local_optimizer_values": state}


def _worker(rank: int, port: int, queue) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        rec = Recorder()
        result = {"tp": _tensor_parallel(rank, rec), "ddp": _ddp(rec), "fsdp": _fsdp(rec)}
        queue.put((rank, result))
    except Exception as err:  # noqa: BLE001 - report the failure to the parent instead of hanging it
        queue.put((rank, {"error": repr(err)}))
    finally:
        dist.destroy_process_group()


def run_all(timeout_s: float = 120.0) -> dict:
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(r, port, queue)) for r in range(WORLD)]
    for p in procs:
        p.start()
    results = dict(queue.get(timeout=timeout_s) for _ in procs)
    for p in procs:
        p.join(timeout_s)
    return results[0]
