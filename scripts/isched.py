"""isched training-loop helper: a loader of the isched package's source.

The helper lives in python/isched (``pip install ./python``). This file keeps
the old way working: with this directory on sys.path (or this file next to a
training script), ``import isched`` runs the package's own __init__.py here,
so ``isched.step(...)`` and friends are the same code, and
``import isched.lightning`` / ``isched.hf`` find the package's submodules.

It looks for the package in ../python/isched (a checkout) and in ./isched
(``make install`` puts both under share/isched). See python/isched/__init__.py
for the API and the progress-file format.
"""

import os as _os

_here = _os.path.dirname(_os.path.abspath(__file__))
for _pkg in (_os.path.join(_here, "..", "python", "isched"), _os.path.join(_here, "isched")):
    _src = _os.path.join(_pkg, "__init__.py")
    if _os.path.isfile(_src):
        break
else:
    raise ImportError("isched: package source not found beside %s (looked in ../python/isched and ./isched): "
                      "this file alone is no longer the helper; copy the directory python/isched next to the "
                      "training script, or pip install ./python" % _here)

# A package's submodules are searched in __path__: isched.lightning, isched.hf.
__path__ = [_os.path.normpath(_pkg)]
with open(_src, encoding="utf-8") as _f:
    exec(compile(_f.read(), _src, "exec"))  # noqa: S102 - our own package source, one copy of the code
