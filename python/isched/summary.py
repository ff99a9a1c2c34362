"""Model summaries (model.json) of PyTorch modules, for isched's estimates.

    import isched
    summary = isched.summarize(net, (3, 224, 224), path="model.json")

scripts/model_summary.py is the command-line front end of this module (it
builds the model from a spec such as torchvision:resnet50); both write the
same JSON. torch is imported by the functions that need it, never on import:
``import isched`` in a training loop stays cheap.

The model is run forward once, on the CPU, on a batch of random inputs
(batch, default 2; every figure is divided by it). A model given live is put
back on its device and in its training mode afterwards, and the global random
state is left as it was.

What is measured (docs/model-summary.md describes every field):

- parameters, trainable_parameters and param_bytes (bytes per parameter as
  stored, from the parameters' dtype);
- activation_bytes_per_sample: the bytes of every tensor the forward pass
  creates, seen at the dispatcher (so functional calls such as F.relu or
  attention scores count), each storage once: views, in-place results
  (ReLU(inplace=True)), parameters and the input add nothing. This is what
  autograd may keep for the backward pass; isched's static memory model
  multiplies it by the batch and a backward factor (internal/plan).
  activations_counted says "aten-outputs". Without the dispatcher hook it is
  the sum of the outputs of leaf modules (modules without children),
  "leaf-outputs", which misses functional calls.
- saved_bytes_per_sample: the bytes autograd keeps for the backward pass
  (torch.autograd.graph.saved_tensors_hooks on a second forward pass with
  autograd on), each storage once, parameters and the input left out. It is
  less than activation_bytes_per_sample where forward intermediates are not
  needed by the backward (attention scores after softmax, logits feeding a
  fused loss), and it is what isched's static model scales when present.
- flops_per_sample: forward FLOPs, counting a multiply-add as 2 FLOPs, of
  convolutions and matrix products (aten convolution, mm, addmm, bmm,
  baddbmm), seen at the dispatcher so functional calls inside forward()
  (attention scores, F.linear) are counted too. Element-wise work
  (normalisation, activations, pooling) is ignored: it is memory-bound and a
  few percent of the FLOPs of a CNN or a transformer. If the dispatcher hook
  is unavailable, Conv and Linear modules are counted from forward hooks.
- layers: every leaf module in forward order with its type, the shape of
  its first output (batch dimension first, as run), its own parameter count
  and the bytes it added per sample (layers=False leaves them out).

The output is deterministic for a given model, input and torch version.
"""

import importlib
import importlib.util
import json
import math
import os
import sys

__all__ = ["SummaryError", "build_model", "summarize", "dumps", "write", "INPUT_DTYPES"]

FORMAT_VERSION = 1

# Input dtypes of the measuring pass; integer inputs (token ids) are drawn
# from [0, vocab).
INPUT_DTYPES = ("float32", "int64", "int32")


class SummaryError(ValueError):
    """The model or the summary's arguments are unusable; the message says which."""


def build_model(spec, kwargs):
    """Build the module named by spec: torchvision:NAME, module.path:Class,
    or path/to/file.py:Class (a factory function works too)."""
    if ":" not in spec:
        raise SummaryError("model %r: want torchvision:NAME, module.path:ClassName or file.py:ClassName" % spec)
    where, name = spec.rsplit(":", 1)
    if where == "torchvision":
        try:
            import torchvision.models as tvm  # noqa: PLC0415
        except ImportError as e:
            raise SummaryError("torchvision is not installed (%s); apt install python3-torchvision" % e) from e
        ctor = getattr(tvm, name, None)
        if ctor is None or not callable(ctor):
            raise SummaryError("torchvision.models has no model %r" % name)
        kwargs = dict(kwargs)
        kwargs.setdefault("weights", None)  # random weights: nothing is downloaded
        try:
            return ctor(**kwargs)
        except TypeError:
            # torchvision < 0.13 spells it pretrained=False
            kwargs.pop("weights")
            kwargs.setdefault("pretrained", False)
            return ctor(**kwargs)
    if where.endswith(".py"):
        path = os.path.abspath(where)
        modname = "_isched_model_" + os.path.splitext(os.path.basename(path))[0]
        spec_ = importlib.util.spec_from_file_location(modname, path)
        if spec_ is None or spec_.loader is None:
            raise SummaryError("cannot load %s" % path)
        mod = importlib.util.module_from_spec(spec_)
        sys.path.insert(0, os.path.dirname(path))
        spec_.loader.exec_module(mod)
    else:
        mod = importlib.import_module(where)
    ctor = getattr(mod, name, None)
    if ctor is None:
        raise SummaryError("%s has no attribute %r" % (where, name))
    return ctor(**kwargs)


# Layer kinds of the FLOPs (flops_by_kind, layers[].kind): isched site probe
# measures a training throughput for each, and the static time model adds
# up each kind's FLOPs over its own rate (docs/model-summary.md).
KINDS = ("conv", "depthwise", "linear")


def layer_kind(mod):
    """conv, depthwise (a convolution with one input channel per group),
    linear, or other (normalisation, activations, pooling: no FLOPs counted)."""
    import torch  # noqa: PLC0415

    if isinstance(mod, torch.nn.modules.conv._ConvNd):
        if mod.groups > 1 and mod.in_channels == mod.groups and not mod.transposed:
            return "depthwise"
        return "conv"
    if isinstance(mod, torch.nn.Linear):
        return "linear"
    return "other"


def _tensors(x):
    import torch  # noqa: PLC0415

    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from _tensors(v)
    elif isinstance(x, dict):
        for v in x.values():
            yield from _tensors(v)
    elif hasattr(x, "__dict__") and not callable(x):
        # dataclass-like outputs (e.g. HuggingFace ModelOutput)
        for v in vars(x).values():
            yield from _tensors(v)


def _storage_key(t):
    try:
        return (t.untyped_storage().data_ptr(), t.device.type)
    except AttributeError:  # torch < 2.0
        return (t.storage().data_ptr(), t.device.type)


def _storage_bytes(t):
    try:
        return t.untyped_storage().nbytes()
    except AttributeError:  # torch < 2.0
        return t.storage().nbytes()


def _saved_bytes(model, x):
    """The bytes autograd keeps for the backward pass of one forward pass on
    x: every tensor packed by saved_tensors_hooks, each storage once,
    parameters, buffers and the input left out. None where torch has no
    saved_tensors_hooks (torch < 1.10)."""
    import torch  # noqa: PLC0415

    try:
        from torch.autograd.graph import saved_tensors_hooks  # noqa: PLC0415
    except ImportError:
        return None
    own = {_storage_key(t) for t in list(model.parameters()) + list(model.buffers()) + [x]}
    seen = {}

    def pack(t):
        k = _storage_key(t)
        if k not in own and k not in seen:
            seen[k] = _storage_bytes(t)  # alive until the graph goes: its address is not reused
        return t

    with torch.enable_grad(), saved_tensors_hooks(pack, lambda t: t):
        out = model(x)
    del out
    return sum(seen.values())


class _FlopCounter:
    """Counts FLOPs of matrix products and convolutions at the dispatcher."""

    def __init__(self):
        self.flops = 0
        self.by_kind = {}
        self.ok = False
        self._mode = None
        try:
            import torch  # noqa: PLC0415
            from torch.utils._python_dispatch import TorchDispatchMode  # noqa: PLC0415
        except Exception:  # noqa: BLE001
            return
        counter = self
        aten = torch.ops.aten

        def numel(shape):
            return math.prod(int(d) for d in shape)

        def conv(args, out):
            x, w = args[0], args[1]
            transposed = bool(args[6]) if len(args) > 6 else False
            k = numel(w.shape[2:])
            if transposed:
                # every input element is spread over Cout/groups x kernel outputs
                return 2 * numel(x.shape) * (w.shape[1]) * k
            return 2 * numel(out.shape) * w.shape[1] * k

        def mm(args, out):
            a, b = args[0], args[1]
            return 2 * a.shape[0] * a.shape[1] * b.shape[1]

        def addmm(args, out):
            a, b = args[1], args[2]
            return 2 * a.shape[0] * a.shape[1] * b.shape[1]

        def bmm(args, out):
            a, b = args[0], args[1]
            return 2 * a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2]

        def baddbmm(args, out):
            a, b = args[1], args[2]
            return 2 * a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2]

        def conv_kind(args):
            groups = int(args[8]) if len(args) > 8 else 1
            return "depthwise" if groups > 1 and args[1].shape[1] == 1 else "conv"

        rules = {}
        for name, fn in (("convolution", conv), ("mm", mm), ("addmm", addmm), ("bmm", bmm), ("baddbmm", baddbmm)):
            op = getattr(aten, name, None)
            if op is not None:
                rules[op] = (fn, conv_kind if name == "convolution" else (lambda args: "linear"))

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                rule = rules.get(func.overloadpacket)
                if rule is not None:
                    f = int(rule[0](args, out))
                    counter.flops += f
                    kind = rule[1](args)
                    counter.by_kind[kind] = counter.by_kind.get(kind, 0) + f
                counter._count(out)
                return out

        self._mode = Mode
        self.ok = True

    def mode(self, exclude):
        """A dispatch mode counting FLOPs and the bytes of new storages;
        tensors in exclude (parameters, the input) are not activations."""
        self.act_bytes = 0
        self._seen = {_storage_key(t) for t in exclude}
        self._keep = []
        return self._mode()

    def _count(self, out):
        for t in _tensors(out):
            try:
                key = _storage_key(t)
            except Exception:  # noqa: BLE001 - tensors without storage
                continue
            if key in self._seen:
                continue  # a view, an in-place result, or a parameter
            self._seen.add(key)
            self._keep.append(t)  # alive until the end: a freed storage's address is reused
            self.act_bytes += t.numel() * t.element_size()

    def release(self):
        self._keep = []
        self._seen = set()


def _check(input_shape, batch, input_dtype):
    """input_shape as a list of positive ints; SummaryError naming what is wrong."""
    try:
        shape = [int(d) for d in input_shape]
    except (TypeError, ValueError):
        raise SummaryError("input shape %r: want a sequence of positive integers, e.g. (3, 224, 224)"
                           % (input_shape,)) from None
    if not shape or any(d <= 0 for d in shape):
        raise SummaryError("input shape %r: want a sequence of positive integers, e.g. (3, 224, 224)"
                           % (input_shape,))
    if int(batch) < 1:
        raise SummaryError("batch must be at least 1, got %r" % (batch,))
    if input_dtype not in INPUT_DTYPES:
        raise SummaryError("input dtype %r: want one of %s" % (input_dtype, ", ".join(INPUT_DTYPES)))
    return shape


class _Borrowed:
    """Runs the measurement on the CPU in training mode and puts a live model
    back as it was: its device, each module's mode, the global RNG state."""

    def __init__(self, model):
        import torch  # noqa: PLC0415

        self.model = model
        tensors = list(model.parameters()) + list(model.buffers())
        devices = {t.device for t in tensors}
        if len(devices) > 1:
            raise SummaryError("the model's tensors are on several devices (%s): summarize a copy on one device"
                               % ", ".join(sorted(str(d) for d in devices)))
        self.device = devices.pop() if devices else torch.device("cpu")
        self.modes = [(m, m.training) for m in model.modules()]
        self.rng = torch.random.fork_rng(devices=[])

    def __enter__(self):
        self.rng.__enter__()
        self.model.cpu()
        self.model.train()  # training-mode shapes (dropout, batch norm) are what training allocates
        return self.model

    def __exit__(self, *exc):
        if self.device.type != "cpu":
            self.model.to(self.device)
        for m, training in self.modes:
            m.training = training
        return self.rng.__exit__(*exc)


def summarize(model, input_shape, batch=2, input_dtype="float32", vocab=1000, name=None, layers=True, path=None):
    """The summary (a dict, the fields of model.json) of the torch.nn.Module
    `model` on inputs of one sample's shape `input_shape`, e.g. (3, 224, 224).

    name defaults to the model's class name; layers=False leaves out the
    per-layer list; path also writes the JSON there (as scripts/model_summary.py
    -o does). SummaryError when the arguments or the forward pass fail.
    """
    shape = _check(input_shape, batch, input_dtype)
    batch = int(batch)
    if name is None:
        name = type(model).__name__
    with _Borrowed(model):
        out = _measure(model, shape, batch, input_dtype, vocab, name, layers)
    if path is not None:
        write(out, path)
    return out


def _measure(model, input_shape, batch, input_dtype, vocab, name, layers):
    import torch  # noqa: PLC0415

    torch.manual_seed(0)
    params = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    sizes = sorted({p.element_size() for p in model.parameters()}) or [4]
    param_bytes = sizes[-1]
    if input_dtype == "float32":
        x = torch.randn([batch] + input_shape)
    else:
        x = torch.randint(0, vocab, [batch] + input_shape, dtype=getattr(torch, input_dtype))

    leaves = [(n, m) for n, m in model.named_modules() if len(list(m.children())) == 0]
    records = []
    seen = set()
    keep = []
    hook_flops = [0]
    hook_kinds = {}

    def hook_for(lname, module):
        def hook(mod, inputs, output):
            out_bytes = 0
            shapes = []
            for t in _tensors(output):
                shapes.append(list(t.shape))
                key = _storage_key(t)
                if key in seen:
                    continue  # in-place or a view of a tensor already counted
                seen.add(key)
                keep.append(t)  # alive until the end: a freed storage's address is reused
                out_bytes += t.numel() * t.element_size()
            own = sum(p.numel() for p in mod.parameters(recurse=False))
            kind, flops = layer_kind(mod), 0
            if isinstance(mod, torch.nn.modules.conv._ConvNd):
                o = next(_tensors(output))
                k = math.prod(mod.kernel_size)
                flops = 2 * o.numel() * (mod.in_channels // mod.groups) * k
            elif isinstance(mod, torch.nn.Linear):
                o = next(_tensors(output))
                flops = 2 * o.numel() * mod.in_features
            hook_flops[0] += flops
            hook_kinds[kind] = hook_kinds.get(kind, 0) + flops
            records.append({"name": lname, "type": type(mod).__name__,
                            "output_shape": shapes[0] if shapes else [],
                            "params": own, "output_bytes": out_bytes,
                            "kind": kind, "flops": flops})
        return hook

    handles = [m.register_forward_hook(hook_for(n or type(m).__name__, m)) for n, m in leaves]
    counter = _FlopCounter()
    try:
        with torch.no_grad():
            if counter.ok:
                with counter.mode(list(model.parameters()) + list(model.buffers()) + [x]):
                    model(x)
            else:
                model(x)
    except Exception as e:  # noqa: BLE001 - the user's model: say what failed
        raise SummaryError("forward pass of %s on an input of shape %s failed: %s: %s"
                           % (name, list(x.shape), type(e).__name__, e)) from e
    finally:
        for h in handles:
            h.remove()

    del keep
    try:
        saved = _saved_bytes(model, x)
    except Exception as e:  # noqa: BLE001 - the user's model: say what failed
        raise SummaryError("forward pass of %s with autograd on an input of shape %s failed: %s: %s"
                           % (name, list(x.shape), type(e).__name__, e)) from e
    flops = counter.flops if counter.ok else hook_flops[0]
    by_kind = counter.by_kind if counter.ok else hook_kinds
    if counter.ok:
        act, counted = counter.act_bytes, "aten-outputs"
        counter.release()
    else:
        act, counted = sum(r["output_bytes"] for r in records), "leaf-outputs"
    for r in records:
        r["output_bytes"] = int(round(r["output_bytes"] / batch))
        r["flops"] = int(round(r["flops"] / batch))
    out = {
        "v": FORMAT_VERSION,
        "name": name,
        "framework": "pytorch " + torch.__version__,
        "parameters": int(params),
        "trainable_parameters": int(trainable),
        "param_bytes": int(param_bytes),
        "activation_bytes_per_sample": int(round(act / batch)),
        "flops_per_sample": int(round(flops / batch)),
        "flops_by_kind": {k: int(round(v / batch)) for k, v in sorted(by_kind.items()) if k in KINDS and v > 0},
        "input_shape": list(input_shape),
        "activations_counted": counted,
    }
    if saved is not None:
        out["saved_bytes_per_sample"] = int(round(saved / batch))
    if layers:
        out["layers"] = records
    return out


def dumps(summary):
    """JSON with one top-level field and one layer per line (diffable)."""
    items = list(summary.items())
    lines = ["{"]
    for i, (k, v) in enumerate(items):
        if k == "layers":
            body = ",\n".join("  " + json.dumps(layer) for layer in v)
            line = ' "layers": [\n' + body + "\n ]"
        else:
            line = " %s: %s" % (json.dumps(k), json.dumps(v))
        lines.append(line + ("," if i < len(items) - 1 else ""))
    lines.append("}")
    return "\n".join(lines) + "\n"




def write(summary, path):
    """Write summary as dumps() does to path, atomically (temporary file, rename)."""
    path = os.fspath(path)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(dumps(summary))
    os.replace(tmp, path)
