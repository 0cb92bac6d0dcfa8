"""Iterating a Loader: the epoch iterator (which marks its waits under
torch.profiler), each batch as it is handed out (torch tensors, pinned or on
the device, copies or views; a tuple or a dict of fields), and what a
training script reads besides batches: ``loader.dataset`` and
``loader.sampler`` (the epoch hook trainers call)."""

from __future__ import annotations

import json
import sys
import warnings
import weakref

from .errors import DataError


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
                return next_batch(self._loader, self._generation)
        return next_batch(self._loader, self._generation)

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


def next_batch(self, generation):
    """The loader's next batch, as handed out (its iterator's __next__)."""
    if generation != self._generation:
        raise RuntimeError(
            "this iterator over the loader was abandoned: a later iter(loader) started "
            "the next epoch (a next(iter(loader)) inside a loop over it, or zip(loader, "
            "loader)). A loader runs one pass at a time; to peek, keep the batch the loop "
            "gave, or make a second Loader")
    core = self._require_core()
    if self._remote is not None:
        return _next_remote(self, core)
    if not core.active:
        raise StopIteration
    try:
        out = core.next()
    except DataError as e:  # that batch is consumed; iteration may go on
        show_epoch_end(self, core)
        raise DataError(f"{e} (the whole batch holding it is not handed out: "
                        'on_error="skip" skips only the bad item and hands out the rest)',
                        e.item, e.stage) from None
    if out is None:
        show_epoch_end(self, core)
        if self._pinned is not None:  # the epoch's last batch is given up too
            self._pinned.given_up()
        raise StopIteration
    images, labels, indices, copied, _over, raw_fields, dims = out  # _over: core.epoch_over
    if copied and not self._copies_warned:
        self._copies_warned = True
        warnings.warn(
            "every other batch slot is held by batches still referenced (list(loader), "
            "kept batches): batches are handed out as private copies until some are "
            "released; stats()['private_copies'] counts them. copy=True, or a larger "
            "prefetch, keeps this quiet", ResourceWarning, stacklevel=3)
    if self._progress is not None:  # (a buffered epoch's count is known at its end)
        self._progress.update(self, core.epoch, core.position,
                              core.batches_per_epoch if core.counts_known else None)
        show_epoch_end(self, core)
    if self._shared is not None and not copied:
        # The producer's read-only memory: say so to NumPy.
        for a in (images, labels, indices):
            a.flags.writeable = False
    sizes = None
    if dims is not None:  # samples of many sizes: each one's own, a copy
        axes = [a for a in range(3) if core.ragged_axes >> a & 1]
        sizes = dims[:, axes] if len(axes) > 1 else dims[:, axes[0]].copy()
    return _handed_out(self, core, images, labels, indices, copied, raw_fields, sizes)


def _next_remote(self, core):
    """The next batch of a loader with remote prep (nostall/ray.py), in the local order."""
    rpass = self._remote_pass
    got = rpass.take() if rpass is not None else None
    if got is None:
        if rpass is not None:
            rpass.close()
            self._remote_pass = None
            core.ended_elsewhere()
        show_epoch_end(self, core)
        raise StopIteration
    batch, (images, labels, indices, raw_fields, dims) = got
    if core.delivered_elsewhere(batch):
        rpass.close()
    if self._progress is not None:
        self._progress.update(self, core.epoch, core.position, core.batches_per_epoch)
        show_epoch_end(self, core)
    sizes = None
    if dims is not None:
        axes = [a for a in range(3) if core.ragged_axes >> a & 1]
        sizes = dims[:, axes] if len(axes) > 1 else dims[:, axes[0]].copy()
    with warnings.catch_warnings():  # a worker's batch: the object store's read-only memory
        warnings.simplefilter("ignore", UserWarning)
        return _handed_out(self, core, images, labels, indices, False, raw_fields, sizes)


def _handed_out(self, core, images, labels, indices, copied, raw_fields, sizes):
    """The slot's arrays as the loader hands them out: torch tensors (pinned,
    or on the device), private copies, or views; then as a tuple or dict."""
    if self._torch:
        from_numpy = self._from_numpy
        if sizes is not None:
            sizes = from_numpy(sizes)
        if self._shared is not None:
            with warnings.catch_warnings():  # "non-writable": documented in attach()
                warnings.simplefilter("ignore", UserWarning)
                images, labels, indices = from_numpy(images), from_numpy(labels), from_numpy(indices)
        else:
            images, labels, indices = from_numpy(images), from_numpy(labels), from_numpy(indices)
    pinned = self._pinned
    if pinned is not None:
        host = (images, labels, indices)  # they hold the slot's lease
        # The slot itself page-locked. A served slot is read-only here: only
        # the device reads it in place (host batches given to the caller are
        # copies, which an in-place edit may change).
        shared = self._shared is not None
        if (not shared or self._to_device is not None) and pinned.pinned(
                *core.batch_memory, read_only=shared):
            pinned.counts["zero_copy_batches"] += 1
        else:  # a private copy: copied into memory torch's host allocator pins
            images, labels, indices = images.pin_memory(), labels.pin_memory(), indices.pin_memory()
            pinned.counts["host_copies"] += 1
        if self._to_device is not None:
            return self._to_device(assemble(self, images, labels, indices, raw_fields, sizes), host)
        pinned.handed_out(host)  # held until the copies enqueued from it are done
    elif self._copy:
        if self._torch:
            images, labels, indices = images.clone(), labels.clone(), indices.clone()
        else:
            images, labels, indices = images.copy(), labels.copy(), indices.copy()
    return assemble(self, images, labels, indices, raw_fields, sizes)

def assemble(self, images, labels, indices, raw_fields, sizes=None):
    """The batch as handed out: a tuple, or a dict of fields. Samples of many
    sizes come padded, with each one's size: `<field>_sizes` (B, 2) of
    (height, width) for images, `<field>_lengths` (B,) for audio; in a tuple,
    after the labels."""
    if self._records is not None:
        batch = self._records.batch(images, labels, indices, raw_fields, sizes)
        pair = getattr(self, "_pair", None)
        if self._tuple and not pair:
            pair = ("image", "label")
        if pair and isinstance(batch, dict):
            out = tuple(batch[name] for name in pair)
            if sizes is not None:  # padded samples: their sizes beside them
                out += (sizes,)
            return out + (batch["__index__"],) if self._return_indices else out
        return batch
    out = (images, labels) if sizes is None else (images, labels, sizes)
    return out + (indices,) if self._return_indices else out

def show_epoch_end(self, core):
    """The progress bar's end, once per epoch (the cursor says when: after
    its last batch, whether or not the caller then asks for the end)."""
    if self._progress is not None and core.epoch_over:
        self._progress.finish(self, core.epoch)
