#!/usr/bin/env python3
"""Measure one node type for isched's static model (isched site probe).

    site_probe.py --node-type lab-cpu --threads 1 -o probes/lab-cpu.json

Run on the node type itself (isched site probe runs it, once per node type).
It writes a probe record (JSON, format version 1, docs/model-summary.md):

- import_rss_bytes: the RSS of a fresh Python that imported torch (and
  torchvision when it is installed), --repeats children, median/min/max;
- runtime_rss_bytes: the peak RSS (VmHWM) of a fresh Python that imported the
  same and ran three training steps (SGD with momentum) of a reference
  network, minus its weights, gradients and momentum: the framework's own
  footprint once its kernels, thread pools and allocator are set up, which
  is what a training process holds besides the model's tensors; pooled over
  two reference networks ("wide": large convolutions on a tiny input;
  "residual": ResNet-18's layout on 64x64 images), each also given alone in
  runtime_references so that isched can add the spread between repeats;
- reference_step: the time of whole training steps (forward, backward,
  SGD with momentum) of the "residual" reference network at batch 16, over
  fresh children (median/min/max), with the network's model summary
  (model_summary.py beside this script): isched scales its per-kind static
  time by how much slower the whole step ran than those rates predict
  (what they leave out: the autograd graph, allocation, Python, the loss);
- throughput: achieved training rates of short micro-benchmarks, forward +
  backward, median over repeats and sizes: "linear" (nn.Linear), "conv"
  (a 3x3 nn.Conv2d), "depthwise" (a 3x3 depthwise nn.Conv2d) in FLOP/s,
  counting the forward's multiply-adds as 2 and the backward as twice the
  forward (the summary's convention); "elementwise" (BatchNorm2d + in-place
  ReLU) in bytes of forward activations (the normalisation's input and
  output) per second; "optimizer" (an SGD-with-momentum step) in bytes of
  parameters, gradients and momentum per second.

With --footprint it measures only the two footprints and writes an
environment footprint record instead ("environment": --environment, the
interpreter as the user runs it; "imports": the --import modules, which
every child imports after torch, as the user's scripts do): isched keeps it
per environment, and a venv whose scripts import more gets a larger fixed
part in its static memory.

Every child runs without a shell and with a timeout. It needs only torch.
"""

import argparse
import json
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
import time

FORMAT_VERSION = 1

_CHILD = r"""
import importlib
import os
import resource
import sys
# a cap on the data segment (--data-limit): an import that would hold more
# fails here rather than taking the host's memory
_cap = int(os.environ.get("ISCHED_PROBE_DATA_LIMIT", "0") or 0)
if _cap > 0:
    resource.setrlimit(resource.RLIMIT_DATA, (_cap, _cap))
import torch
try:
    import torchvision  # noqa: F401
except ImportError:
    pass
# the user's own imports (--import), as their scripts import them
for _m in filter(None, os.environ.get("ISCHED_PROBE_IMPORTS", "").split(",")):
    importlib.import_module(_m)
torch.set_num_threads(int(sys.argv[1]))
tensors = 0
if sys.argv[2] != "import":
    # two reference networks; from each peak RSS their weights, gradients
    # and momentum (3 x weights) are subtracted, and what remains is the
    # framework's own footprint once convolution kernels, thread pools, the
    # autograd graph and the allocator are set up for a network of that kind.
    # "wide": large convolutions (3.9 M parameters) on a tiny 4x4 input, its
    # activations negligible. "residual": ResNet-18's layout (7x7 stem,
    # max-pool, eight residual blocks, 11.2 M parameters) on 2 x 3 x 64 x 64:
    # many layers and real image sizes, as the networks users train; its
    # activations (a few MiB) are left in, on the safe side.
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, a, b, stride):
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(a, b, 3, stride, 1, bias=False), nn.BatchNorm2d(b)
            self.c2, self.b2 = nn.Conv2d(b, b, 3, 1, 1, bias=False), nn.BatchNorm2d(b)
            self.sc = nn.Sequential()
            if a != b or stride != 1:
                self.sc = nn.Sequential(nn.Conv2d(a, b, 1, stride, bias=False), nn.BatchNorm2d(b))

        def forward(self, x):
            y = torch.relu(self.b1(self.c1(x)))
            return torch.relu(self.b2(self.c2(y)) + self.sc(x))

    layers = []
    if sys.argv[2] == "residual":
        layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)]
        a = 64
        for b, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers += [Block(a, b, stride), Block(b, b, 1)]
            a = b
        hw = 64
    else:
        ch = [3, 64, 128, 256, 512, 512]
        for a, b in zip(ch, ch[1:]):
            layers += [nn.Conv2d(a, b, 3, padding=1, bias=False), nn.BatchNorm2d(b), nn.ReLU(inplace=True)]
        hw = 4
    net = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 10))
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    batch = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    x, y = torch.randn(batch, 3, hw, hw), torch.randint(0, 10, (batch,))

    def train_step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
    for _ in range(3):
        train_step()
    if len(sys.argv) > 4:
        # "step": the whole training step's time at this batch (after the
        # three warm-up steps) and the network's summary as
        # model_summary.py writes it, from the directory in argv[4]
        import json
        import time
        sys.path.insert(0, sys.argv[4])
        import model_summary
        times = []
        for _ in range(int(sys.argv[5])):
            t0 = time.perf_counter()
            train_step()
            times.append(time.perf_counter() - t0)
        summary = model_summary.summarize(net, [3, hw, hw], batch, "float32", 0, sys.argv[2], layers=False)
        print(json.dumps({"seconds": times, "summary": summary}))
        sys.exit(0)
    tensors = 3 * sum(p.numel() * p.element_size() for p in net.parameters())
fields = {}
with open("/proc/self/status") as f:
    for line in f:
        k, _, v = line.partition(":")
        if k in ("VmRSS", "VmHWM"):
            fields[k] = int(v.split()[0]) * 1024
print(fields["VmRSS"] if sys.argv[2] == "import" else fields["VmHWM"] - tensors)
"""


def _fail(msg):
    sys.stderr.write("site_probe: %s\n" % msg)
    sys.exit(2)


def _stat(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "repeats": len(values)}


# a dotted Python module name (--import)
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")

# the reference networks of the runtime footprint (see _CHILD)
REFERENCES = ("wide", "residual")


def _byte_stat(values):
    return {k: (int(v) if k != "median" else int(round(v))) for k, v in _stat(values).items()}


def framework_rss(mode, threads, repeats, timeout, imports=(), data_limit=0):
    """the footprints (bytes) of repeats fresh children in mode (import or
    a reference network), each importing imports after torch, with its data
    segment capped at data_limit bytes (0: no cap)"""
    out = []
    env = dict(os.environ, ISCHED_PROBE_IMPORTS=",".join(imports), ISCHED_PROBE_DATA_LIMIT=str(data_limit))
    for _ in range(repeats):
        try:
            p = subprocess.run([sys.executable, "-c", _CHILD, str(threads), mode], capture_output=True, text=True,
                               timeout=timeout, check=False, env=env)
        except subprocess.TimeoutExpired:
            _fail("measuring the %s footprint: the child did not finish in %d s" % (mode, timeout))
        if p.returncode != 0:
            _fail("measuring the %s footprint: the child failed (%d): %s" % (mode, p.returncode, p.stderr.strip()[-400:]))
        out.append(int(p.stdout.strip()))
    return out


# the reference step: the "residual" reference network trained at
# STEP_BATCH, STEP_ITERS timed steps per child after three warm-up ones
STEP_REFERENCE, STEP_BATCH, STEP_ITERS = "residual", 16, 8


def reference_step(threads, repeats, timeout):
    """the time of a whole training step of the residual reference network
    (forward, backward, optimizer: what the per-kind rates model piecewise)
    over repeats fresh children, and its model summary (model_summary.py
    beside this script); None with a note on stderr when model_summary.py
    is not there."""
    here = os.path.dirname(os.path.abspath(__file__))
    if not os.path.exists(os.path.join(here, "model_summary.py")):
        sys.stderr.write("site_probe: model_summary.py is not beside this script: no reference step measured\n")
        return None
    seconds, summary = [], None
    for _ in range(repeats):
        args = [sys.executable, "-c", _CHILD, str(threads), STEP_REFERENCE, str(STEP_BATCH), here, str(STEP_ITERS)]
        try:
            p = subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            _fail("measuring the reference step: the child did not finish in %d s" % timeout)
        if p.returncode != 0:
            _fail("measuring the reference step: the child failed (%d): %s" % (p.returncode, p.stderr.strip()[-400:]))
        out = json.loads(p.stdout)
        seconds += out["seconds"]
        summary = out["summary"]
    return {"network": STEP_REFERENCE, "batch": STEP_BATCH, "seconds": _stat(seconds), "summary": summary}


def _time(fn, iters):
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) / iters


def _rate(make, work, repeats, min_seconds):
    """work units per second of step(): warm-up, then repeats of a few
    iterations each (as many as take about min_seconds)."""
    step = make()
    step()
    step()
    one = max(_time(step, 1), 1e-6)
    iters = max(1, int(min_seconds / one))
    return [work / _time(step, iters) for _ in range(repeats)]


def throughput(repeats, min_seconds):
    import torch  # noqa: PLC0415

    def train_step(module, shape):
        x = torch.randn(*shape, requires_grad=True)

        def make():
            def step():
                module.zero_grad(set_to_none=True)
                x.grad = None
                module(x).sum().backward()
            return step
        return make

    res = {}
    # linear: (batch, in, out); forward 2*B*I*O, backward twice that
    lin = []
    for b, i, o in ((64, 512, 512), (256, 1024, 1024)):
        lin += _rate(train_step(torch.nn.Linear(i, o), (b, i)), 3 * 2 * b * i * o, repeats, min_seconds)
    res["linear"] = lin
    conv = []
    for b, c, hw in ((8, 64, 32), (8, 128, 16)):
        conv += _rate(train_step(torch.nn.Conv2d(c, c, 3, padding=1), (b, c, hw, hw)),
                      3 * 2 * b * c * hw * hw * c * 9, repeats, min_seconds)
    res["conv"] = conv
    dw = []
    for b, c, hw in ((8, 128, 32), (8, 256, 16)):
        dw += _rate(train_step(torch.nn.Conv2d(c, c, 3, padding=1, groups=c), (b, c, hw, hw)),
                    3 * 2 * b * c * hw * hw * 9, repeats, min_seconds)
    res["depthwise"] = dw
    ew = []
    for b, c, hw in ((8, 64, 32), (8, 128, 16)):
        mod = torch.nn.Sequential(torch.nn.BatchNorm2d(c), torch.nn.ReLU(inplace=True))
        ew += _rate(train_step(mod, (b, c, hw, hw)), 2 * 4 * b * c * hw * hw, repeats, min_seconds)
    res["elementwise"] = ew
    # the optimizer step (SGD with momentum) over 4 M and 16 M parameters:
    # bytes of parameters x 3 (weights, gradients, momentum) per second
    opt = []
    for n in (1 << 22, 1 << 24):
        params = [torch.nn.Parameter(torch.randn(n // 4)) for _ in range(4)]
        for q in params:
            q.grad = torch.randn_like(q)
        sgd = torch.optim.SGD(params, lr=0.01, momentum=0.9)
        opt += _rate(lambda sgd=sgd: sgd.step, 3 * 4 * n, repeats, min_seconds)
        del params, sgd
    res["optimizer"] = opt
    return {k: _stat(v) for k, v in res.items()}


def list_imports(path):
    """the modules a training script imports that its environment holds
    besides the standard library, read from its source (ast: nothing of it
    runs) as {"imports": [...], "local": [...], "missing": [...]}: every
    absolute `import a.b` and `from a.b import c`, at any depth of the file
    (an import inside main() counts); "local" are those found beside the
    script (its own modules, which may run anything when imported: never
    imported by the probe), "missing" those this Python cannot find. Only
    top-level names are looked up (importlib's find_spec of a top-level
    name runs no code)."""
    import ast  # noqa: PLC0415
    import importlib.util  # noqa: PLC0415
    with open(path, "rb") as f:
        tree = ast.parse(f.read(), filename=path)
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    here = os.path.dirname(os.path.abspath(path))
    sys.path.insert(0, here)  # as the script runs: its directory first
    out = {"imports": [], "local": [], "missing": []}
    for name in sorted(set(names)):
        top = name.split(".")[0]
        if top in sys.stdlib_module_names or top in ("torch", "torchvision") and name == top:
            continue
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            spec = None
        origin = getattr(spec, "origin", None) or next(iter(getattr(spec, "submodule_search_locations", None) or []), "")
        if spec is None:
            out["missing"].append(name)
        elif origin and os.path.abspath(origin).startswith(here + os.sep):
            out["local"].append(name)
        elif _MODULE.match(name) and len(name) <= 128:
            out["imports"].append(name)
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--list-imports"]:
        if len(argv) != 2:
            _fail("--list-imports SCRIPT")
        return list_imports(argv[1])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--node-type", required=True, help="the site catalogue's node type this machine is")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's default here)")
    ap.add_argument("--repeats", type=int, default=5, help="repeats of each measurement")
    ap.add_argument("--min-seconds", type=float, default=0.2, help="length of one timed repeat")
    ap.add_argument("--child-timeout", type=int, default=300, help="seconds a footprint child may take")
    ap.add_argument("-o", "--output", default="-", help="output file (default stdout)")
    ap.add_argument("--footprint", action="store_true",
                    help="measure the framework footprint only, as an environment footprint record")
    ap.add_argument("--environment", default=sys.executable,
                    help="with --footprint: the interpreter's path as the user runs it (default: this one's)")
    ap.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                    help="with --footprint: a module the user's scripts import besides torch (repeatable)")
    ap.add_argument("--data-limit", type=int, default=0, metavar="BYTES",
                    help="cap each footprint child's data segment (RLIMIT_DATA) at this many bytes (0: none)")
    args = ap.parse_args(argv)
    for m in args.imports:
        if not _MODULE.match(m) or len(m) > 128:
            _fail("--import %r: want a dotted module name" % m)
    if args.imports and not args.footprint:
        _fail("--import needs --footprint")
    if args.footprint and not os.path.isabs(args.environment):
        _fail("--environment %r: want an absolute path" % args.environment)
    if args.data_limit < 0:
        _fail("--data-limit: want bytes, 0 for no cap")
    if args.repeats < 1 or args.repeats > 100:
        _fail("--repeats: want 1 to 100")
    if args.threads < 0 or args.threads > 4096:
        _fail("--threads: want 0 (default) to 4096")
    if not (0 < args.min_seconds <= 60):
        _fail("--min-seconds: want a number of seconds above 0, at most 60")
    try:
        import torch  # noqa: PLC0415
    except ImportError as e:
        _fail("torch is not installed (%s); apt install python3-torch" % e)
    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    try:
        import torchvision  # noqa: F401, PLC0415
        framework = "pytorch %s torchvision %s" % (torch.__version__, torchvision.__version__)
    except ImportError:
        framework = "pytorch " + torch.__version__
    rec = {
        "v": FORMAT_VERSION,
        "node_type": args.node_type,
        "host": socket.gethostname(),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "framework": framework,
        "python": platform.python_version(),
        "threads": threads,
        "load_average": round(os.getloadavg()[0], 2),
        "import_rss_bytes": _byte_stat(framework_rss("import", threads, args.repeats, args.child_timeout, args.imports, args.data_limit)),
    }
    refs = {r: framework_rss(r, threads, args.repeats, args.child_timeout, args.imports, args.data_limit) for r in REFERENCES}
    rec["runtime_rss_bytes"] = _byte_stat([v for vs in refs.values() for v in vs])
    rec["runtime_references"] = {r: _byte_stat(vs) for r, vs in refs.items()}
    if args.footprint:
        rec["environment"] = args.environment
        if args.imports:
            rec["imports"] = args.imports
        return _write(rec, args.output)
    # the reference step before the micro-benchmarks: this process is
    # smaller then, and a probe job's memory holds it and one child
    step = reference_step(threads, min(args.repeats, 3), args.child_timeout)
    rec["throughput"] = throughput(args.repeats, args.min_seconds)
    if step is not None:
        rec["reference_step"] = step
    return _write(rec, args.output)


def _write(rec, output):
    """writes the record to output ("-": stdout), through a temporary file"""
    text = json.dumps(rec, indent=1) + "\n"
    if output == "-":
        sys.stdout.write(text)
    else:
        tmp = output + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
