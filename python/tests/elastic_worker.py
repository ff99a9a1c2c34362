"""One rank of test_elastic.py's plain PyTorch run (DDP over gloo when
WORLD_SIZE > 1), written as docs/training-scripts.md tells a script to:

    python3 elastic_worker.py OUT_JSON CKPT STOP_AT GLOBAL_BATCH BATCH_PER_RANK

Trains a tiny float64 MLP with SGD + momentum on a fixed synthetic data set
up to optimizer step STOP_AT, resuming from ISCHED_RESUME_FROM when set (a
checkpoint of any world size), then saves CKPT: the unwrapped model (no
DDP "module." prefix), the optimizer, the step and the samples seen. The
global batches come from isched.global_batches (by samples seen, so the
order does not depend on the world size), this rank's micro-batches from
isched.rank_batches. Rank 0 writes OUT_JSON: per step the step, samples,
mean loss over the global batch and the global batch it measured
(micro-batch sizes summed over the ranks), the accumulation, and the final
weights.
"""

import contextlib
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import isched  # noqa: E402

N = 36  # not a multiple of the global batch: batches cross epoch ends


def data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(N, 4, generator=g, dtype=torch.float64)
    return x, (x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]], dtype=torch.float64)).tanh()


def model():
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)).double()


def total(value):
    """The sum of value over the ranks (value itself alone)."""
    t = torch.tensor([float(value)], dtype=torch.float64)
    if dist.is_initialized():
        dist.all_reduce(t)
    return t.item()


def train_step(net, opt, micro, x, y):
    """One optimizer step over this rank's micro-batches; (loss, batch)."""
    loss_sum, seen = 0.0, 0
    for j, idx in enumerate(micro):
        last = j == len(micro) - 1
        ctx = net.no_sync() if isinstance(net, torch.nn.parallel.DistributedDataParallel) and not last else contextlib.nullcontext()
        with ctx:
            loss = torch.nn.functional.mse_loss(net(x[idx]), y[idx]) / len(micro)
            loss.backward()
        loss_sum += loss.item()
        seen += len(idx)
    opt.step()
    opt.zero_grad()
    return total(loss_sum) / isched.world()[1], int(total(seen))


def main(out, ckpt, stop_at, global_batch, per_rank):
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        dist.init_process_group("gloo")
    rank, size, _ = isched.world()
    base = model()
    opt = torch.optim.SGD(base.parameters(), lr=0.05, momentum=0.9)
    step, samples = 0, 0
    if isched.resume_path():
        state = torch.load(isched.resume_path())
        base.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step, samples = state["step"], state["samples"]
        isched.resumed(step, isched.resume_path())
    net = torch.nn.parallel.DistributedDataParallel(base) if size > 1 else base
    x, y = data()
    log = []
    batches = isched.global_batches(N, global_batch, samples=samples, seed=7)
    while step < stop_at:
        micro = isched.rank_batches(next(batches), per_rank)
        loss, seen = train_step(net, opt, micro, x, y)
        step, samples = step + 1, samples + seen
        isched.step(step, samples=samples, loss=loss)
        log.append({"step": step, "samples": samples, "loss": loss, "global_batch": seen, "accumulation": len(micro)})
    unwrapped = getattr(net, "module", net)
    if rank == 0:
        state = {"model": unwrapped.state_dict(), "opt": opt.state_dict(), "step": step, "samples": samples}
        isched.save(lambda p: torch.save(state, p), ckpt, step=step)
        weights = torch.cat([p.detach().flatten() for p in unwrapped.parameters()]).tolist()
        with open(out, "w") as f:
            json.dump({"world_size": size, "log": log, "weights": weights,
                       "keys": sorted(unwrapped.state_dict())}, f)
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    o, c, s, g, b = sys.argv[1:6]
    main(o, c, int(s), int(g), int(b))
