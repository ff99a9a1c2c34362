#!/usr/bin/env python3
"""A real, small PyTorch training job that isched can measure, checkpoint,
move and resume.

    python3 train_mnistlike.py --epochs 2 --batch 32 --steps-per-epoch 50 --ckpt-dir ckpt

It trains a small CNN on 1x28x28 images (MNIST-like) or torchvision's
ResNet-18 (--model resnet18, 10 classes, random weights) on 3xSxS images,
from torchvision's FakeData: random images with deterministic labels,
generated on the fly, so nothing is downloaded. With --data digits it uses
scikit-learn's bundled 8x8 digits instead (if scikit-learn is installed),
upscaled to the input size.

This is the plain-PyTorch example. isched hooks (the isched package:
installed with `pip install ./python`, else found in this repository's
python/, in $ISCHED_HELPER_DIR (a directory with isched.py or the isched
package; isched submit sets it to where the site installed it) or in
/usr/share/isched (the Debian package) or /usr/local/share/isched (make
install); without the isched wrapper every call
is a no-op):

- isched.step(step, total=...) after every optimizer step, so the wrapper
  and the coordinator see progress and iteration times;
- isched.should_checkpoint() every step: the wrapper's request (before a
  move, or before the time limit) is answered with a checkpoint right away;
  --ckpt-every N also checkpoints every N steps;
- isched.save(torch.save...) writes checkpoints atomically and records them;
- isched.resume_path(): on a new attempt (requeue, move) training continues
  from the lineage's last checkpoint: model, optimizer, step and RNG state,
  so a moved run ends with the same step count as an unmoved one;
- isched.device(): the device the wrapper chose ("cpu" on the local cluster,
  whose GPUs are emulated).

Training is deterministic for a given --seed (data order per epoch, model
initialisation, dropout), also across a resume.
"""

import argparse
import json
import os
import sys
import time


def _import_isched():
    try:
        import isched  # noqa: PLC0415
        return isched
    except ImportError:
        pass
    here = os.path.dirname(os.path.abspath(__file__))
    for d in (os.environ.get("ISCHED_HELPER_DIR"), os.path.join(here, "..", "python"), "/usr/share/isched", "/usr/local/share/isched"):
        if d and (os.path.exists(os.path.join(d, "isched.py")) or os.path.exists(os.path.join(d, "isched", "__init__.py"))):
            sys.path.insert(0, d)
            import isched  # noqa: PLC0415
            return isched
    sys.exit("train_mnistlike: the isched package was not found (pip install ./python, or set ISCHED_HELPER_DIR or PYTHONPATH)")


isched = _import_isched()

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class SmallCNN(nn.Module):
    """Two convolutions and two linear layers: the classic MNIST network."""

    def __init__(self, in_channels=1, num_classes=10, size=28):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.drop = nn.Dropout(0.25)
        self.fc1 = nn.Linear(64 * (size // 4) * (size // 4), 128)
        self.fc2 = nn.Linear(128, num_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = self.drop(torch.flatten(x, 1))
        return self.fc2(F.relu(self.fc1(x)))


def build_model(name, channels, size):
    if name == "cnn":
        return SmallCNN(channels, 10, size)
    import torchvision  # noqa: PLC0415

    try:
        return torchvision.models.resnet18(weights=None, num_classes=10)
    except TypeError:  # torchvision < 0.13
        return torchvision.models.resnet18(pretrained=False, num_classes=10)


def build_data(kind, n, channels, size, seed):
    if kind == "digits":
        try:
            from sklearn.datasets import load_digits  # noqa: PLC0415
        except ImportError:
            sys.exit("train_mnistlike: --data digits needs scikit-learn (apt install python3-sklearn)")
        d = load_digits()
        x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0
        x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False).repeat(1, channels, 1, 1)
        y = torch.tensor(d.target, dtype=torch.long)
        reps = (n + len(y) - 1) // len(y)
        return torch.utils.data.TensorDataset(x.repeat(reps, 1, 1, 1)[:n], y.repeat(reps)[:n])
    import torchvision  # noqa: PLC0415
    import torchvision.transforms as T  # noqa: PLC0415

    return torchvision.datasets.FakeData(size=n, image_size=(channels, size, size), num_classes=10,
                                         transform=T.ToTensor(), random_offset=seed)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps-per-epoch", type=int, default=50, help="optimizer steps per epoch (dataset size = steps x batch)")
    ap.add_argument("--ckpt-dir", default=os.environ.get("ISCHED_CHECKPOINT_DIR", ""), help="checkpoint directory (default: the wrapper's)")
    ap.add_argument("--ckpt-every", type=int, default=0, help="also checkpoint every N steps (0: only on request and at the end)")
    ap.add_argument("--model", choices=["cnn", "resnet18"], default="cnn")
    ap.add_argument("--image-size", type=int, default=0, help="input size (default 28 for cnn, 32 for resnet18)")
    ap.add_argument("--data", choices=["fake", "digits"], default="fake")
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--optimizer", choices=["sgd", "momentum", "adam"], default="momentum")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (default: SLURM_CPUS_PER_TASK, else all)")
    ap.add_argument("--result", default="", help="write final facts (step, loss, parameter checksum) as JSON here")
    a = ap.parse_args(argv)

    threads = a.threads or int(os.environ.get("SLURM_CPUS_PER_TASK", "0") or 0)
    if threads > 0:
        torch.set_num_threads(threads)
    torch.manual_seed(a.seed)
    size = a.image_size or (28 if a.model == "cnn" else 32)
    channels = 1 if a.model == "cnn" else 3
    device = torch.device(isched.device())
    model = build_model(a.model, channels, size).to(device)
    if a.optimizer == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=a.lr / 10)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9 if a.optimizer == "momentum" else 0.0)
    data = build_data(a.data, a.steps_per_epoch * a.batch, channels, size, a.seed)
    total = a.epochs * a.steps_per_epoch

    isched.install_signal_handlers()
    step = 0
    rp = isched.resume_path()
    if rp is None and a.ckpt_dir:
        last = os.path.join(a.ckpt_dir, "last.pt")
        rp = last if os.path.isfile(last) else None  # running without the wrapper
    if rp:
        state = torch.load(rp, map_location=device)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        # map_location moved the RNG states onto the device too; the setters
        # take CPU byte tensors (a resume on a GPU failed without .cpu())
        torch.set_rng_state(state["rng"].cpu())
        if device.type == "cuda" and state.get("cuda_rng") is not None:
            torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda_rng"]])
        step = state["step"]
        isched.resumed(step, rp)
        print("resumed from %s at step %d" % (rp, step), flush=True)

    def save():
        if not a.ckpt_dir:
            return None
        os.makedirs(a.ckpt_dir, exist_ok=True)
        state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "rng": torch.get_rng_state(), "step": step,
                 "cuda_rng": torch.cuda.get_rng_state_all() if device.type == "cuda" else None}
        return isched.save(lambda p: torch.save(state, p), os.path.join(a.ckpt_dir, "last.pt"), step=step)

    print("training %s on %s: %d epochs x %d steps, batch %d, input %dx%dx%d, resuming at step %d" % (
        a.model, device, a.epochs, a.steps_per_epoch, a.batch, channels, size, size, step), flush=True)
    model.train()
    loss_v = float("nan")
    stopped = False
    t_start = time.time()
    while step < total and not stopped:
        epoch = step // a.steps_per_epoch
        # the same order for an epoch whether or not the run was resumed
        g = torch.Generator().manual_seed(a.seed * 1000003 + epoch)
        loader = torch.utils.data.DataLoader(data, batch_size=a.batch, shuffle=True, generator=g, drop_last=True)
        skip = step - epoch * a.steps_per_epoch
        for i, (x, y) in enumerate(loader):
            if i < skip:
                continue
            x, y = x.to(device), y.to(device)
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            step += 1
            loss_v = loss.item()
            isched.step(step, epoch=epoch, loss=loss_v, samples=step * a.batch, total=total,
                        epochs=a.epochs, steps_per_epoch=a.steps_per_epoch)
            if isched.should_checkpoint() or (a.ckpt_every and step % a.ckpt_every == 0):
                save()
            if isched.stop_requested():
                # SIGTERM (requeue, preemption, time limit): the request was
                # answered above; leave now so the move is quick
                stopped = True
                break
            if step >= total:
                break
    if not stopped:
        save()
    checksum = float(sum(p.detach().double().sum().item() for p in model.parameters()))
    facts = {"step": step, "total": total, "loss": loss_v, "param_checksum": checksum, "stopped": stopped,
             "seconds": round(time.time() - t_start, 3), "device": str(device)}
    print("done: " + json.dumps(facts), flush=True)
    if a.result:
        with open(a.result + ".tmp", "w") as f:
            json.dump(facts, f)
        os.replace(a.result + ".tmp", a.result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
