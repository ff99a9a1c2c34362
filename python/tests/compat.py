"""Shims for the test environment's old stack (Debian 12's torch 1.13 under
Python 3.11, with the pinned Lightning and transformers), shared by the
Python tests and the lab's framework scripts (internal/e2e/testdata, which
get this directory on PYTHONPATH). Nothing here is isched's."""

import importlib


def lightning_module_base(pl):
    """pl.LightningModule, or a subclass without the ShardedTensor state-dict
    hooks where this torch cannot import torch.distributed._shard: Debian
    12's torch 1.13 under Python 3.11 fails there (a dataclass with a mutable
    default, "ValueError: mutable default ... for field tensor_properties";
    torch 2.0 fixed it), and Lightning 2.2 imports it in
    LightningModule.__init__ on torch < 2.1. Nothing here shards a tensor."""
    try:
        importlib.import_module("torch.distributed._shard.sharded_tensor")
        return pl.LightningModule
    except ValueError:
        class LightningModule(pl.LightningModule):
            def _register_sharded_tensor_state_dict_hooks_if_available(self):
                pass
        return LightningModule


def cpu_map_location():
    """transformers 4.40 resumes a Trainer of several ranks with
    torch.load(optimizer.pt, map_location=args.device), "cpu:0" on the CPU,
    which torch 1.13 refuses ("don't know how to restore data location of
    torch.storage.UntypedStorage (tagged with cpu:0)"); map it to "cpu"."""
    import torch

    load = torch.load

    def patched(f, map_location=None, **kw):
        if isinstance(map_location, torch.device) and map_location.type == "cpu":
            map_location = "cpu"
        return load(f, map_location=map_location, **kw)
    torch.load = patched
