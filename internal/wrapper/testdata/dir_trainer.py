"""A training loop whose checkpoints are directories, for the wrapper's tests.

--layout hf: Hugging Face Trainer's checkpoint-<step>/ (model, optimizer,
rng state, then trainer_state.json last); with --torch a real PyTorch model
and optimizer are trained and saved with torch.save.
--layout ds: DeepSpeed's global_step<N>/ and then the parent's "latest" file
naming the tag (stdlib only).

Each file is written in chunks with pauses, so a directory is half-written
for a while. Resumes from --resume_from_checkpoint (what --resume-arg adds),
reading the step from the directory. --stop-at S exits 0 after step S; with
--half the checkpoint of step S is left half-written (no marker), as a save
cut short. Facts (JSON) go to --facts.
"""
import argparse
import json
import os
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--layout", choices=["hf", "ds"], default="hf")
ap.add_argument("--torch", action="store_true")
ap.add_argument("--steps", type=int, default=40)
ap.add_argument("--every", type=int, default=10)
ap.add_argument("--period", type=float, default=0.05)
ap.add_argument("--stop-at", type=int, default=0)
ap.add_argument("--half", action="store_true")
ap.add_argument("--facts", required=True)
ap.add_argument("--resume_from_checkpoint", default="")
a = ap.parse_args()

ck = os.environ["ISCHED_CHECKPOINT_DIR"]
os.makedirs(ck, exist_ok=True)

model = opt = None
if a.torch:
    import torch
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def slow_write(path, data):
    with open(path, "wb") as f:
        for i in range(0, len(data), max(1, len(data) // 3)):
            f.write(data[i:i + max(1, len(data) // 3)])
            f.flush()
            time.sleep(0.1)


def payload(step, name):
    return ("%s step %d\n" % (name, step)).encode() * 200


def torch_bytes(obj):
    import io
    import torch
    b = io.BytesIO()
    torch.save(obj, b)
    return b.getvalue()


def save(step, half):
    if a.layout == "hf":
        d = os.path.join(ck, "checkpoint-%d" % step)
        os.makedirs(d, exist_ok=True)
        if a.torch:
            slow_write(os.path.join(d, "pytorch_model.bin"), torch_bytes(model.state_dict()))
            slow_write(os.path.join(d, "optimizer.pt"), torch_bytes(opt.state_dict()))
        else:
            slow_write(os.path.join(d, "model.safetensors"), payload(step, "model"))
            slow_write(os.path.join(d, "optimizer.pt"), payload(step, "optim"))
        slow_write(os.path.join(d, "rng_state.pth"), payload(step, "rng"))
        if half:
            return
        slow_write(os.path.join(d, "trainer_state.json"), json.dumps({"global_step": step}).encode())
    else:
        tag = "global_step%d" % step
        d = os.path.join(ck, tag)
        os.makedirs(d, exist_ok=True)
        slow_write(os.path.join(d, "mp_rank_00_model_states.pt"), payload(step, "model"))
        slow_write(os.path.join(d, "zero_pp_rank_0_mp_rank_00_optim_states.pt"), payload(step, "optim"))
        if half:
            return
        with open(os.path.join(ck, "latest.tmp"), "w") as f:
            f.write(tag)
        os.replace(os.path.join(ck, "latest.tmp"), os.path.join(ck, "latest"))


def load(d):
    if a.layout == "hf":
        with open(os.path.join(d, "trainer_state.json")) as f:
            step = json.load(f)["global_step"]
        if a.torch:
            import torch
            model.load_state_dict(torch.load(os.path.join(d, "pytorch_model.bin")))
            opt.load_state_dict(torch.load(os.path.join(d, "optimizer.pt")))
        return step
    with open(os.path.join(d, "mp_rank_00_model_states.pt"), "rb") as f:
        return int(f.readline().split()[2])


facts = {"resume_env": os.environ.get("ISCHED_RESUME_FROM", ""), "resume_arg": a.resume_from_checkpoint,
         "argv": sys.argv[1:], "start": 0}
start = load(a.resume_from_checkpoint) if a.resume_from_checkpoint else 0
facts["start"] = start
for step in range(start + 1, a.steps + 1):
    if a.torch:
        import torch
        x = torch.randn(8, 16)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    time.sleep(a.period)
    print("step %d/%d" % (step, a.steps), flush=True)
    stop = step == a.stop_at
    if step % a.every == 0 or (stop and a.half):
        save(step, stop and a.half)
    if stop:
        break
facts["end"] = step
with open(a.facts, "w") as f:
    json.dump(facts, f)
