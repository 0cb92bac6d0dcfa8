"""What iterating a Loader hands out besides batches: ``loader.dataset``,
``loader.sampler`` (the epoch hook trainers call) and the epoch iterator,
which marks its waits under torch.profiler."""

from __future__ import annotations

import json
import sys
import weakref


class LoaderDataset:
    """``loader.dataset``: what a training script reads of a DataLoader's
    dataset (its length, its classes). Its items are read by the loader, not
    by indexing: ``loader.key(i)`` names item ``i``."""

    __slots__ = ("_loader",)

    def __init__(self, loader):
        self._loader = weakref.ref(loader)

    def _get(self):
        loader = self._loader()
        if loader is None:
            raise RuntimeError("the loader is gone")
        return loader

    def __len__(self):
        """Items the loader reads, over all ranks (after ``subset``)."""
        loader = self._get()
        core = loader._require_core()
        subset = json.loads(core.spec_json()).get("subset") or 0
        return min(subset, core.num_items) if subset > 0 else core.num_items

    @property
    def classes(self):
        """The loader's ``classes``, as ``ImageFolder.classes``."""
        return self._get().classes

    def __getitem__(self, index):
        raise TypeError("loader.dataset is not indexed: the loader reads and decodes its items "
                        "in C++ threads; loader.key(i) names item i, "
                        "nostall.transforms.sample_params(...) shows what it draws for it")

    def __repr__(self):
        return f"<nostall dataset of {len(self):,} items>"


class _EpochHook:
    """``loader.sampler``: where trainers look for ``set_epoch`` (Lightning
    calls ``loader.sampler.set_epoch(epoch)`` before each epoch, as it does
    for a DataLoader's DistributedSampler)."""

    __slots__ = ("_loader",)

    def __init__(self, loader):
        self._loader = weakref.ref(loader)  # no cycle: `del loader` still joins its threads

    def set_epoch(self, epoch: int) -> None:
        loader = self._loader()
        if loader is None:
            raise RuntimeError("the loader is gone")
        loader.set_epoch(epoch)

    def __repr__(self):
        return "<nostall loader epoch hook>"


class _EpochIterator:
    """One pass over one epoch; what ``iter(loader)`` returns."""

    __slots__ = ("_loader", "_generation")

    def __init__(self, loader, generation):
        self._loader = loader
        self._generation = generation

    def __iter__(self):
        return self

    def __next__(self):
        # Under torch.profiler the wait is marked, as the DataLoader's is, so
        # that `nostall analyze --trace` finds it (docs/trace.md).
        if _profiler_on():
            with _record_function(_NEXT_BATCH):
                return self._loader._next(self._generation)
        return self._loader._next(self._generation)

    def __len__(self):
        return len(self._loader)


# The mark a trace's reader looks for (src/trace/graph.cc).
_NEXT_BATCH = "nostall: next batch"


def _profiler_on():
    torch = sys.modules.get("torch")
    return torch is not None and torch._C._autograd._profiler_enabled()


def _record_function(name):
    import torch
    return torch.profiler.record_function(name)
