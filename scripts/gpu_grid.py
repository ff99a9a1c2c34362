"""gpu-check's prediction grid: isched's GPU memory and time predictions
against what a real GPU measures (scripts/gpu-check grid).

For each model (ResNet-18, ResNet-50 at 224x224; GPT-2 small built from its
configuration, no weights downloaded, 256 tokens), precision (fp32, bf16
autocast) and batch size (8, 16, 32, 64, and the largest the static model
says fits), it compares

  static     `isched estimate --receipts none` on the model's summary
             (isched.summary, the code of scripts/model_summary.py) and a
             catalogue entry for this GPU: the memory the job must fit in
  profiled   `isched profile --local` of the same training at the two
             smallest batches (a short measured window each, under
             isched-wrapper), then `isched estimate` over those receipts:
             measured at 8 and 16, fitted at 32 and 64

with the truth: a fresh training process per batch under isched-wrapper
(Adam, at least 20 steps and 2 s of timed steps after 10 untimed ones) that reports torch's
max_memory_reserved and nvidia-smi's per-process figure for its own pid at
its plateau, and its median step time (torch.cuda.synchronize() each step).

Targets (issue 30): static memory never under the truth and at most 15 %
over; profiled memory never under and within 5 %; profiled time within
10 %. Each row says by how much. The verdict functions (verdicts) are pure:
the self-test runs them on a recorded grid (scripts/testdata/gpu-check/grid).
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

MIB = 1 << 20
BATCHES = (8, 16, 32, 64)
PROFILED_FROM = (8, 16)
PRECISIONS = ("fp32", "bf16")
STEPS, WARMUP, TIMED_SECONDS = 20, 10, 2.0
SAMPLES = 6400  # per epoch, for the estimate's hours (not compared)

TARGETS = {
    "static_mem": {"min": 0.0, "max": 0.15},
    "profiled_mem": {"min": 0.0, "max": 0.05},
    "profiled_time": {"min": -0.10, "max": 0.10},
}

# Peak dense FLOP/s by GPU name (fp32 without tensor cores; bf16 tensor
# cores, dense), from the vendors' data sheets: the static time model's
# assumption when no probe measured the node type (the row then says
# "unmeasured"). Unknown GPUs get the H100's.
PEAKS = {
    "H200": (67e12, 989e12), "H100": (67e12, 989e12), "A100": (19.5e12, 312e12),
    "V100": (15.7e12, 125e12), "L40S": (91.6e12, 362e12), "A10": (31.2e12, 125e12),
}

# Model zoo: name -> (builder, one sample's input shape, input dtype, vocab).
# small=True: sizes a CPU runs in seconds (the pipeline check without a GPU).
SEQ = 256


def models(small):
    img = [3, 32, 32] if small else [3, 224, 224]
    seq = 16 if small else SEQ
    return {
        "resnet18": ("torchvision:resnet18", img, "float32", 0),
        "resnet50": ("torchvision:resnet50", img, "float32", 0),
        "gpt2": ("gpt2", [seq], "int64", 1000 if small else 50257),
    }


class CausalLM:
    """GPT-2 from its configuration (transformers), random weights. The
    summary's forward returns the logits; training passes labels and
    takes the model's own loss (shift, fp32 cross-entropy), as a
    Hugging Face training loop does."""

    @staticmethod
    def build(small):
        import torch  # noqa: PLC0415
        from transformers import GPT2Config, GPT2LMHeadModel  # noqa: PLC0415

        cfg = (GPT2Config(n_layer=2, n_embd=64, n_head=2, n_positions=64, vocab_size=1000) if small
               else GPT2Config(n_positions=1024, vocab_size=50257))  # gpt2 "small": 12 x 768, 124 M
        cfg.use_cache = False

        class LM(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.hf = GPT2LMHeadModel(cfg)

            def forward(self, ids, labels=None):
                out = self.hf(input_ids=ids, labels=labels, use_cache=False)
                return out.loss if labels is not None else out.logits

        return LM()


def build(name, small):
    spec, shape, dtype, vocab = models(small)[name]
    if spec == "gpt2":
        return CausalLM.build(small), shape, dtype, vocab
    import torchvision.models as tvm  # noqa: PLC0415

    return getattr(tvm, spec.split(":", 1)[1])(weights=None), shape, dtype, vocab


# ----------------------------------------------------------------- training


def cmd_train(a, gc):
    """One training process (run under isched-wrapper): `steps` steps (0:
    until stopped), a line per step, then a report of its memory and
    step times to --out."""
    import torch  # noqa: PLC0415

    small = a.device == "cpu"
    model, shape, dtype, vocab = build(a.model, small)
    dev = torch.device("cuda:0" if a.device == "cuda" else a.device)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    model = model.to(dev).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(0)
    if dtype == "float32":
        x = torch.randn([a.batch] + shape, generator=g).to(dev)
        y = torch.randint(0, 1000, (a.batch,), generator=g).to(dev)
    else:
        x = torch.randint(0, vocab, [a.batch] + shape, generator=g).to(dev)
        y = None
    half = a.precision == "bf16"

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=half):
            loss = model(x, labels=x) if y is None else torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    times, n = [], 0

    def enough():
        # --steps at least, and --seconds of timed steps (the first WARMUP
        # are not timed: cuDNN's and the allocator's first steps are slow)
        if a.steps == 0:
            return False
        return n >= 10 * a.steps or n >= a.steps and sum(times[WARMUP:]) >= a.seconds

    while not enough():
        t0 = time.perf_counter()
        loss = step()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        n += 1
        print("step %d loss %.4f" % (n, loss.item()), flush=True)
    rep = {"pid": os.getpid(), "model": a.model, "batch": a.batch, "precision": a.precision, "steps": n,
           "step_seconds": times[WARMUP:] if len(times) > WARMUP else times}
    if dev.type == "cuda":
        apps = gc.parse_compute_apps(gc.smi(gc.QUERY_APPS, "--format=csv"))
        mine = [p["used_bytes"] for p in apps if p["pid"] == os.getpid() and p["used_bytes"] is not None]
        rep.update(device_name=torch.cuda.get_device_name(dev),
                   max_memory_reserved=torch.cuda.max_memory_reserved(dev),
                   max_memory_allocated=torch.cuda.max_memory_allocated(dev),
                   smi_process_bytes=sum(mine) if mine else None, torch=torch.__version__)
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(rep, f)
    return 0


# ------------------------------------------------------------------ driver


def write_site(path, gpu, device):
    """A one-node-type catalogue for the GPU here (the static model's cap
    is its memory); on the CPU (the pipeline check) a CPU node type, whose
    figures are host RSS."""
    fp32, bf16 = next((v for k, v in PEAKS.items() if k in (gpu["name"] or "")), PEAKS["H100"])
    nt = {"name": "this-gpu", "kind": "gpu", "cpu_model": "-", "cores": os.cpu_count() or 1,
          "host_memory_bytes": 64 << 30, "gpu_model": gpu["name"], "gpus_per_node": 1,
          "device_memory_bytes": gpu["total_bytes"], "gres": "gpu",
          "peak_flops": {"fp32": fp32, "bf16": bf16}, "efficiency": {"fp32": 0.5, "bf16": 0.3},
          "half_batch": 4, "cost_per_gpu_hour": 1.0}
    if device == "cpu":
        nt = {"name": "this-gpu", "kind": "cpu", "cpu_model": "-", "cores": os.cpu_count() or 1,
              "host_memory_bytes": gpu["total_bytes"], "peak_flops": {"fp32": 1e11, "bf16": 1e11},
              "efficiency": {"fp32": 0.3, "bf16": 0.3}, "half_batch": 1, "cost_per_node_hour": 1.0}
    site = {"v": 1, "name": "gpu-check", "currency": "gpu-hours", "node_types": [nt],
        "partitions": [{"name": "gpu", "node_types": ["this-gpu"], "node_count": 1, "max_time": "1-00:00:00",
                        "default": True}]}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(site, f)


def summarize(name, small, path):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from isched import summary  # noqa: PLC0415  (scripts/isched.py finds python/isched)

    model, shape, dtype, vocab = build(name, small)
    s = summary.summarize(model, shape, 2, dtype, vocab or 1000, name, layers=False)
    summary.write(s, path)
    return s


class Grid:
    def __init__(self, gc, a, tmp, gpu):
        self.gc, self.a, self.tmp, self.gpu = gc, a, tmp, gpu
        self.me = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu-check")
        self.site = os.path.join(tmp, "site.json")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "ISCHED_"))}
        self.env.update(HOME=os.path.join(tmp, "home"), XDG_DATA_HOME=os.path.join(tmp, "data"),
                        ISCHED_CLUSTER="gpucheck", PYTHONUNBUFFERED="1")
        if gpu.get("index") is not None:
            self.env["CUDA_VISIBLE_DEVICES"] = str(gpu["index"])
        self.receipts = os.path.join(tmp, "data", "isched", "gpucheck", "profiled-receipts.jsonl")
        self.deadline = time.time() + a.budget
        self.result = {"gpu": gpu, "targets": TARGETS, "steps": STEPS, "warmup": WARMUP, "seq": SEQ,
                       "configs": [], "notes": []}

    def left(self):
        return self.deadline - time.time()

    def trainer(self, name, batch, prec, steps, out):
        return [self.a.python, self.me, "grid-train", "--model", name, "--batch", str(batch), "--precision", prec,
                "--steps", str(steps), "--seconds", str(TIMED_SECONDS if steps else 0), "--device", self.a.device,
                "--out", out]

    def isched(self, *args):
        r = subprocess.run([self.a.isched, *args], env=self.env, capture_output=True, text=True, timeout=240,
                           stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            raise RuntimeError("isched %s: exit %d: %s" % (args[0], r.returncode, r.stderr.strip()[-4000:]))
        return r

    def estimate(self, model_json, prec, batches, receipts):
        r = self.isched("estimate", "--model", model_json, "--site", self.site, "--samples", str(SAMPLES),
                        "--epochs", "1", "--batch", ",".join(map(str, batches)), "--optimizer", "adam",
                        "--precision", prec, "--receipts", receipts, "--state", "none", "--json")
        return {row["batch"]: row for row in json.loads(r.stdout)}

    def profile(self, name, model_json, prec):
        t0 = time.time()
        cmd = self.trainer(name, "{batch}", prec, 0, os.path.join(self.tmp, "profile-%s-%s.json" % (name, prec)))
        r = self.isched("profile", "--local", "--model", model_json, "--site", self.site, "--node-type", "this-gpu",
                        "--batches", ",".join(map(str, PROFILED_FROM)), "--optimizer", "adam", "--precision", prec,
                        "--window", self.a.window, "--warmup-iters", str(WARMUP), "--grace", "5s",
                        "--startup-timeout", "3m", "--wrapper", self.a.wrapper,
                        "--iter-pattern", r"^step (?P<step>\d+) ", "--", *cmd)
        return {"seconds": round(time.time() - t0, 1), "stderr": r.stderr.strip()[-2000:]}

    def truth(self, name, batch, prec, steps=STEPS):
        out = os.path.join(self.tmp, "truth-%s-%s-%d.json" % (name, prec, batch))
        summ = out + ".summary"
        t0 = time.time()
        try:
            r, s = self.gc.run_wrapped(self.a.wrapper, self.trainer(name, batch, prec, steps, out), self.env, summ,
                                       timeout=150)
        except subprocess.TimeoutExpired as e:
            return {"batch": batch, "error": "timed out after %ds" % e.timeout, "seconds": round(time.time() - t0, 1)}
        rec = {"batch": batch, "exit": r.returncode, "seconds": round(time.time() - t0, 1)}
        try:
            rec.update(self.gc.load(out))
        except (OSError, ValueError):
            tail = (r.stderr or "")[-1500:]
            rec["error"] = "out of memory" if "OutOfMemory" in tail or "out of memory" in tail else tail
            rec["stderr"] = tail
            return rec
        steps = rec.pop("step_seconds", [])
        if steps:
            rec["step_median_s"] = statistics.median(steps)
            rec["step_spread_s"] = [min(steps), max(steps)]
        procs = ((s or {}).get("gpu") or {}).get("procs") or []
        rec["wrapper_process_bytes"] = max((p["peak_bytes"] for p in procs), default=None)
        rec["wrapper_rss_bytes"] = (s or {}).get("peak_rss_bytes")
        return rec

    def config(self, name, model_json, prec):
        c = {"model": name, "precision": prec, "rows": []}
        self.result["configs"].append(c)
        c["static"] = self.estimate(model_json, prec, BATCHES, "none")
        c["profiled"] = {}
        try:
            c["profile"] = self.profile(name, model_json, prec)
            c["profiled"] = self.estimate(model_json, prec, BATCHES, self.receipts)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            # the truth and the static rows still count
            self.result["notes"].append("%s %s: profile: %s" % (name, prec, e))
        for b in BATCHES:
            if self.left() < 20:
                self.result["notes"].append("budget spent before %s %s batch %d" % (name, prec, b))
                break
            c["rows"].append(self.truth(name, b, prec))
            self.save()
        return c

    def largest(self, c, model_json):
        """The largest batch the static model says fits, run for real."""
        st = c["static"]
        per = (st[64]["memory_bytes"] - st[32]["memory_bytes"]) / 32
        fixed = st[32]["memory_bytes"] - per * 32
        b = int((self.gpu["total_bytes"] - fixed) // per) if per > 0 else 0
        if b <= 64:
            return
        c["largest_static"] = b
        c["static"].update(self.estimate(model_json, c["precision"], [b], "none"))
        c["profiled"].update(self.estimate(model_json, c["precision"], [b], self.receipts))
        c["rows"].append(self.truth(c["model"], b, c["precision"], steps=WARMUP + 5))
        self.save()

    def save(self):
        if self.a.out:
            with open(self.a.out, "w", encoding="utf-8") as f:
                json.dump(self.result, f, indent=1, sort_keys=True)

    def run(self):
        write_site(self.site, self.gpu, self.a.device)
        os.makedirs(self.env["HOME"], exist_ok=True)
        small = self.a.device == "cpu"
        names = [n for n in self.a.models.split(",") if n]
        done, built = [], {}
        for name in names:
            mj = os.path.join(self.tmp, name + ".json")
            try:
                self.result.setdefault("summaries", {})[name] = summarize(name, small, mj)
                built[name] = mj
            except Exception as e:  # noqa: BLE001 - a model that cannot be built here is a note, not a crash
                self.result["notes"].append("%s: no summary: %s: %s" % (name, type(e).__name__, e))
        # a GPU not yet warm (clocks, lazy CUDA modules) made the first
        # profile of each grid run slow (ResNet-50 bf16 at batch 8 on an H100:
        # 33.5 ms/iter profiled, 18.8 ms in a fresh process right after):
        # one short discarded training first
        if built:
            name = next(iter(built))
            self.truth(name, PROFILED_FROM[0], "fp32", steps=WARMUP + 5)
        # every model in fp32 first, then bf16: a budget cut loses a precision, not a model
        precs = [p for p in getattr(self.a, "precisions", ",".join(PRECISIONS)).split(",") if p]
        bad = [p for p in precs if p not in PRECISIONS]
        if bad:
            raise ValueError("--precisions: %s: not one of %s" % (",".join(bad), ",".join(PRECISIONS)))
        for prec in precs:
            for name, mj in built.items():
                if self.left() < 60:
                    self.result["notes"].append("budget spent before %s %s" % (name, prec))
                    continue
                try:
                    done.append((self.config(name, mj, prec), mj))
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    self.result["notes"].append("%s %s: %s" % (name, prec, e))
                self.save()
        for c, mj in done:
            if self.left() < 60 or not self.a.largest:
                break
            try:
                self.largest(c, mj)
            except (RuntimeError, subprocess.TimeoutExpired, KeyError) as e:
                self.result["notes"].append("largest %s %s: %s" % (c["model"], c["precision"], e))
        if self.a.receipts_out and os.path.exists(self.receipts):
            with open(self.receipts, encoding="utf-8") as src, open(self.a.receipts_out, "w", encoding="utf-8") as dst:
                dst.write(src.read())
        self.save()
        return self.result


# ---------------------------------------------------------------- verdicts


def _iter_s(row):
    """An estimate --json row's seconds per iteration: iter_s, or
    iter_seconds in grids recorded before it was renamed."""
    v = row.get("iter_s")
    return row.get("iter_seconds") if v is None else v


def _err(pred, truth):
    if pred is None or not truth:
        return None
    return (pred - truth) / truth


def _within(err, t):
    return err is not None and t["min"] <= err <= t["max"]


def verdicts(result):
    """The grid's rows: one per (model, precision, batch) with the truth,
    each prediction, its relative error and whether it meets its target.
    Pure: reads only the recorded result."""
    rows = []
    for c in result.get("configs", []):
        for t in c.get("rows", []):
            b = t["batch"]
            st = c["static"].get(b) or c["static"].get(str(b)) or {}
            pr = c["profiled"].get(b) or c["profiled"].get(str(b)) or {}
            # nvidia-smi's figure for the pid; on the CPU (pipeline check) the RSS
            truth = t.get("smi_process_bytes") or t.get("wrapper_process_bytes") or t.get("wrapper_rss_bytes")
            row = {"model": c["model"], "precision": c["precision"], "batch": b, "truth_bytes": truth,
                   "reserved_bytes": t.get("max_memory_reserved"), "step_s": t.get("step_median_s"),
                   "static_bytes": st.get("memory_bytes"), "static_fits": st.get("fits"),
                   "profiled_bytes": pr.get("memory_bytes"), "profiled_source": pr.get("source"),
                   "profiled_s": _iter_s(pr), "static_s": _iter_s(st),
                   "error": t.get("error")}
            row["static_err"] = _err(row["static_bytes"], truth)
            row["profiled_err"] = _err(row["profiled_bytes"], truth)
            row["time_err"] = _err(row["profiled_s"], row["step_s"])
            row["static_time_err"] = _err(row["static_s"], row["step_s"])
            if truth is None:
                # did not run (out of memory): right only if the static model said it would not fit
                row["ok"] = {"static_mem": st.get("fits") is False}
            else:
                row["ok"] = {"static_mem": _within(row["static_err"], TARGETS["static_mem"])}
                if pr:  # profiled (isched profile ran for this configuration)
                    row["ok"]["profiled_mem"] = _within(row["profiled_err"], TARGETS["profiled_mem"])
                    row["ok"]["profiled_time"] = _within(row["time_err"], TARGETS["profiled_time"])
            rows.append(row)
    return rows


def _pct(e):
    return "-" if e is None else "%+.1f%%" % (100 * e)


def _mib(b):
    return "-" if b is None else "%.0f" % (b / MIB)


def print_table(rows, out=sys.stdout):
    head = ("model", "prec", "batch", "truth MiB", "reserved", "static MiB", "err", "ok", "profiled MiB", "src",
            "err", "ok", "step ms", "profiled ms", "err", "ok", "static ms")
    lines = [head]
    for r in rows:
        ok = r["ok"]

        def v(k):
            return "-" if k not in ok else "PASS" if ok[k] else "FAIL"

        ms = (lambda s: "-" if s is None else "%.1f" % (1000 * s))
        lines.append((r["model"], r["precision"], str(r["batch"]),
                      _mib(r["truth_bytes"]) if r["truth_bytes"] else (r["error"] or "-")[:24],
                      _mib(r["reserved_bytes"]), _mib(r["static_bytes"]), _pct(r["static_err"]), v("static_mem"),
                      _mib(r["profiled_bytes"]), (r["profiled_source"] or "-")[:8], _pct(r["profiled_err"]),
                      v("profiled_mem"), ms(r["step_s"]), ms(r["profiled_s"]), _pct(r["time_err"]),
                      v("profiled_time"), ms(r["static_s"])))
    w = [max(len(x[i]) for x in lines) for i in range(len(head))]
    for x in lines:
        out.write("  ".join(c.ljust(w[i]) for i, c in enumerate(x)).rstrip() + "\n")
    counts = {}
    for r in rows:
        for k, v in r["ok"].items():
            counts.setdefault(k, [0, 0])[0 if v else 1] += 1
    for k, (p, f) in sorted(counts.items()):
        t = TARGETS[k]
        out.write("%s: %d met, %d missed (target %+.0f%%..%+.0f%%)\n" % (k, p, f, 100 * t["min"], 100 * t["max"]))
    return counts


def cmd_grid(a, gc):
    """Run the grid (a.device cuda: on this machine's first GPU), print the
    table; exit 0 when it ran (the targets are reported, not enforced: the
    table says which were missed and by how much)."""
    if a.device == "cuda":
        gpus = gc.parse_query_gpu(gc.smi(gc.QUERY_GPU, "--format=csv"))
        gpu = dict(gpus[0])
    else:
        gpu = {"index": None, "name": "cpu (pipeline check)", "total_bytes": 16 << 30}
    tmp = tempfile.mkdtemp(prefix="isched-gpu-grid-")
    print("grid: %s, %s; models %s; budget %ds; in %s" % (gpu["name"], a.device, a.models, a.budget, tmp), flush=True)
    try:
        result = Grid(gc, a, tmp, gpu).run()
    finally:
        if not getattr(a, "keep", False):
            shutil.rmtree(tmp, ignore_errors=True)
    for n in result["notes"]:
        print("note: " + n)
    print_table(verdicts(result))
    return 0 if result["configs"] else 1
