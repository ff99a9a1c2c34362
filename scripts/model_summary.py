#!/usr/bin/env python3
"""Write an isched model summary (model.json) for a PyTorch nn.Module.

    model_summary.py --model torchvision:resnet50 --input 3,224,224 -o resnet50.json
    model_summary.py --model mypkg.nets:Net --kwargs '{"width": 64}' --input 1,28,28
    model_summary.py --model ./nets.py:Net --input 1,28,28 --name mnist-net

The model is built with random weights (torchvision models get weights=None,
so nothing is downloaded) and run forward once, on the CPU, on a batch of
random inputs (--batch, default 2; every figure is divided by it). It needs
only torch (Debian's python3-torch works; torchvision only for
"torchvision:" models).

What is measured, and every field: python/isched/summary.py (installed as
isched/summary.py beside this script) and docs/model-summary.md. From
Python, isched.summarize(model, input_shape) gives the same summary of a
live module.
"""

import argparse
import json
import os
import sys

# The summarizing code is the isched package's (isched.summary). Beside this
# file is either the package directory isched/ (make install, the Debian
# package) or, in a checkout, the loader scripts/isched.py, which finds
# ../python/isched; both make isched.summary importable.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    from isched import summary as _summary  # noqa: E402
except ImportError as _e:
    sys.stderr.write("model_summary: the isched package is not beside %s (%s): keep this script next to "
                     "the directory isched/ (or scripts/isched.py in a checkout)\n" % (__file__, _e))
    sys.exit(2)

# Kept for callers that import this file (site_probe.py): one implementation.
FORMAT_VERSION = _summary.FORMAT_VERSION
SummaryError = _summary.SummaryError
build_model = _summary.build_model
summarize = _summary.summarize
dumps = _summary.dumps


def _fail(msg):
    sys.stderr.write("model_summary: %s\n" % msg)
    sys.exit(2)


def _parse_shape(s):
    try:
        shape = [int(x) for x in s.replace("x", ",").split(",") if x.strip()]
    except ValueError:
        _fail("--input %r: want comma-separated positive integers, e.g. 3,224,224" % s)
    if not shape or any(d <= 0 for d in shape):
        _fail("--input %r: want comma-separated positive integers, e.g. 3,224,224" % s)
    return shape


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="torchvision:NAME, module.path:ClassName or file.py:ClassName")
    ap.add_argument("--input", required=True, help="input shape of one sample, e.g. 3,224,224")
    ap.add_argument("--kwargs", default="{}", help="JSON object of constructor arguments, e.g. '{\"num_classes\": 10}'")
    ap.add_argument("--name", help="model name in the summary (default: the class or torchvision name)")
    ap.add_argument("--batch", type=int, default=2, help="batch size of the measuring pass (figures are per sample)")
    ap.add_argument("--input-dtype", default="float32", choices=list(_summary.INPUT_DTYPES),
                    help="input dtype; integer inputs (token ids) are drawn from [0, --vocab)")
    ap.add_argument("--vocab", type=int, default=1000, help="upper bound of integer inputs")
    ap.add_argument("--no-layers", action="store_true", help="leave out the per-layer list")
    ap.add_argument("-o", "--output", default="-", help="output file (default stdout)")
    args = ap.parse_args(argv)

    try:
        kwargs = json.loads(args.kwargs)
    except ValueError as e:
        _fail("--kwargs: not JSON: %s" % e)
    if not isinstance(kwargs, dict):
        _fail("--kwargs: want a JSON object")
    if args.batch < 1:
        _fail("--batch must be at least 1")
    shape = _parse_shape(args.input)
    try:
        import torch  # noqa: F401, PLC0415
    except ImportError as e:
        _fail("torch is not installed (%s); apt install python3-torch" % e)
    try:
        model = build_model(args.model, kwargs)
        name = args.name or args.model.rsplit(":", 1)[1]
        summary = summarize(model, shape, args.batch, args.input_dtype, args.vocab, name, layers=not args.no_layers)
    except SummaryError as e:
        _fail(str(e))
    if args.output == "-":
        sys.stdout.write(dumps(summary))
    else:
        _summary.write(summary, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
