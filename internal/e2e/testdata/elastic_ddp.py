"""An elastic data-parallel run for TestElasticOnCluster: plain PyTorch
DDP over gloo (WORLD_SIZE > 1), written as docs/elastic.md tells a script
to, on the lab's emulated GPUs:

    python3 elastic_ddp.py --steps N --facts F [--step-work S]

Every optimizer step sees the same global batch (8 samples) at any world
size: isched.global_batches picks it by samples seen, isched.rank_batches
gives this rank its share in micro-batches of 4. A checkpoint (rank 0,
when isched asks and every 50 steps) holds the unwrapped model, the
optimizer, the step and the samples seen; an attempt resumes from
isched.resume_path() whatever the world size that wrote it. A GPU's
compute is emulated: a step sleeps step-work / world size. Rank 0 appends
one JSON line per step to F: step, samples, world size, global batch,
loss.
"""

import argparse
import contextlib
import json
import os
import time

import torch
import torch.distributed as dist

import isched

N = 256


def data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(N, 8, generator=g, dtype=torch.float64)
    return x, (x @ torch.linspace(-1, 1, 8, dtype=torch.float64).reshape(8, 1)).tanh()


def total(value):
    t = torch.tensor([float(value)], dtype=torch.float64)
    if dist.is_initialized():
        dist.all_reduce(t)
    return t.item()


def save(net, opt, step, samples, path):
    state = {"model": getattr(net, "module", net).state_dict(), "opt": opt.state_dict(), "step": step, "samples": samples}
    isched.save(lambda p: torch.save(state, p), path, step=step)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--facts", required=True)
    ap.add_argument("--step-work", type=float, default=0.2)
    a = ap.parse_args()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        dist.init_process_group("gloo")
    rank, size, _ = isched.world()
    torch.manual_seed(1)
    base = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)).double()
    opt = torch.optim.SGD(base.parameters(), lr=0.05, momentum=0.9)
    step = samples = 0
    if isched.resume_path():
        state = torch.load(isched.resume_path())
        base.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step, samples = state["step"], state["samples"]
        isched.resumed(step, isched.resume_path())
    net = torch.nn.parallel.DistributedDataParallel(base) if size > 1 else base
    x, y = data()
    ckdir = os.environ.get("ISCHED_CHECKPOINT_DIR", ".")
    batches = isched.global_batches(N, 8, samples=samples, seed=7)
    while step < a.steps:
        micro = isched.rank_batches(next(batches), 4)
        loss_sum, seen = 0.0, 0
        for j, idx in enumerate(micro):
            sync = j == len(micro) - 1 or size == 1
            with contextlib.nullcontext() if sync else net.no_sync():
                loss = torch.nn.functional.mse_loss(net(x[idx]), y[idx]) / len(micro)
                loss.backward()
            loss_sum, seen = loss_sum + loss.item(), seen + len(idx)
        opt.step()
        opt.zero_grad()
        time.sleep(a.step_work / size)
        loss, batch = total(loss_sum) / size, int(total(seen))
        step, samples = step + 1, samples + batch
        isched.step(step, samples=samples, loss=loss, total=a.steps)
        if rank == 0:
            with open(a.facts, "a") as f:
                f.write(json.dumps({"step": step, "samples": samples, "world": size, "batch": batch, "loss": loss}) + "\n")
            if isched.should_checkpoint() or step % 50 == 0:
                save(net, opt, step, samples, os.path.join(ckdir, "ckpt-%06d.pt" % step))
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
