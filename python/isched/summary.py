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
- saved_half_bytes_per_sample: saved_bytes_per_sample under CUDA's
  autocast to bfloat16/float16, emulated on the CPU (_AutocastEmulation):
  the inputs of convolutions and matrix products are cast to half
  precision and those of softmax, layer norm, losses and the other ops
  CUDA's autocast keeps in float32 to float32, above autograd as autocast
  does, so autograd saves what it would save on the GPU (the cast copies
  included, the cached half copies of the weights left out). How much
  autocast saves depends on the model: a CNN keeps about half
  (ResNet-18 0.55, ResNet-50 0.51 of the float32 bytes), a transformer much
  more (GPT-2 0.72: layer norms, softmax and the residual stream stay
  float32); the GPU's allocated bytes per sample agreed within 6 %
  (docs/gpu-check.md). Absent where torch has no TorchFunctionMode
  (torch < 1.13) or the emulated pass fails.
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


def _saved_bytes(model, x, mode=None):
    """The bytes autograd keeps for the backward pass of one forward pass on
    x: every tensor packed by saved_tensors_hooks, each storage once,
    parameters, buffers and the input left out. None where torch has no
    saved_tensors_hooks (torch < 1.10). mode: an _AutocastEmulation the
    pass runs under (its cached weight copies are left out too)."""
    import contextlib  # noqa: PLC0415

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

    with torch.enable_grad(), saved_tensors_hooks(pack, lambda t: t), (mode or contextlib.nullcontext()):
        out = model(x)
    del out
    weights = {_storage_key(c) for c in mode.cache.values()} if mode is not None else set()
    return sum(v for k, v in seen.items() if k not in weights)


def _autocast_functions():
    """The torch functions CUDA's autocast runs in half precision, and those
    it runs in float32 (torch/csrc/autograd's autocast lists, as seen at
    the torch-function level: module forwards call these)."""
    import torch  # noqa: PLC0415
    import torch.nn.functional as F  # noqa: PLC0415, N812

    T = torch.Tensor  # noqa: N806
    names_low = [(F, "conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d linear prelu "
                     "scaled_dot_product_attention"),
                 (torch, "matmul mm bmm addmm baddbmm addbmm einsum mv addmv addr chain_matmul"),
                 (T, "__matmul__ __rmatmul__ matmul mm bmm addmm baddbmm mv")]
    names_f32 = [(F, "softmax log_softmax layer_norm group_norm cross_entropy nll_loss mse_loss l1_loss smooth_l1_loss "
                     "huber_loss binary_cross_entropy_with_logits kl_div softplus cosine_similarity"),
                 (torch, "softmax log_softmax exp log log2 log10 log1p expm1 pow rsqrt reciprocal cumsum cumprod "
                         "logsumexp prod acos asin cosh sinh tan erfinv dist cdist"),
                 (T, "softmax log_softmax exp log log2 log10 log1p expm1 pow __pow__ rsqrt reciprocal cumsum "
                     "cumprod logsumexp prod")]

    def collect(groups):
        out = set()
        for owner, names in groups:
            out.update(getattr(owner, n) for n in names.split() if hasattr(owner, n))
        return out

    return collect(names_low), collect(names_f32)


def _autocast_emulation(model):
    """An _AutocastEmulation for model, None where torch has no
    TorchFunctionMode."""
    try:
        from torch.overrides import TorchFunctionMode  # noqa: PLC0415
    except ImportError:
        return None
    import torch  # noqa: PLC0415

    low, f32 = _autocast_functions()
    params = {id(p) for p in model.parameters()}

    class _AutocastEmulation(TorchFunctionMode):
        """CUDA's autocast to bfloat16 on the CPU, above autograd: the
        floating inputs of `low` functions cast to bfloat16 (a parameter's
        copy cached for the pass, as autocast caches it), those of `f32`
        functions to float32; every other function runs on what it gets."""

        def __init__(self):
            super().__init__()
            self.cache = {}

        def cast(self, a, to):
            if isinstance(a, torch.Tensor) and a.is_floating_point() and a.dtype != to:
                if id(a) in params and to != torch.float32:
                    if id(a) not in self.cache:
                        self.cache[id(a)] = a.to(to)
                    return self.cache[id(a)]
                return a.to(to)
            if isinstance(a, (list, tuple)):
                return type(a)(self.cast(v, to) for v in a)
            return a

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            to = torch.bfloat16 if func in low else torch.float32 if func in f32 else None
            if to is not None:
                args = self.cast(args, to)
                kwargs = {k: self.cast(v, to) for k, v in kwargs.items()}
            return func(*args, **kwargs)

    return _AutocastEmulation()


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
    saved_half = None
    mode = _autocast_emulation(model) if saved is not None else None
    if mode is not None:
        try:
            saved_half = _saved_bytes(model, x, mode)
        except Exception:  # noqa: BLE001 - an op the emulation cannot run on the CPU: the field is left out
            saved_half = None
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
    if saved_half is not None:
        out["saved_half_bytes_per_sample"] = int(round(saved_half / batch))
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
