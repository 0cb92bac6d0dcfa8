"""Batches are views of ring slots; a slot is reused only when its views are gone."""

import numpy as np
import pytest
import torch

import nostall


def make(folder, **kw):
    kw.setdefault("prefetch", 0)  # two slots
    return nostall.Loader(folder, batch_size=4, shuffle=True,
                          transforms=[nostall.RandomResizedCrop(32)], **kw)


def test_a_kept_batch_is_never_overwritten(jpeg_folder):
    loader = make(jpeg_folder, prefetch=1)  # 3 slots: the kept batch, the loop's, the next
    it = iter(loader)
    kept, _ = next(it)
    snapshot = kept.clone()
    rest = sum(len(labels) for _, labels in it)  # 8 more batches through the other two slots
    assert rest == 32
    assert torch.equal(kept, snapshot)


def test_keeping_every_batch_gives_private_copies_once_the_slots_are_held(jpeg_folder):
    # list(loader) over more batches than the ring has slots (two here).
    want = [(images.clone(), labels.clone()) for images, labels in make(jpeg_folder)]
    loader = make(jpeg_folder)
    with pytest.warns(ResourceWarning, match="private copies"):
        kept = list(loader)
    assert len(kept) == len(want) == 9
    for (a, la), (b, lb) in zip(kept, want):
        assert torch.equal(a, b) and torch.equal(la, lb)  # every batch whole and its own
    assert len({images.data_ptr() for images, _ in kept}) == 9
    assert loader.stats()["private_copies"] == 7  # all but the two in the ring's slots
    assert "copied because every other slot was held" in loader.stats_table()
    del kept
    # Zero-copy again once the batches are let go.
    for images, _ in loader:
        del images
    assert loader.stats()["private_copies"] == 7


def test_slots_are_reused_once_released(jpeg_folder):
    loader = make(jpeg_folder)
    pointers = set()
    for images, _ in loader:
        pointers.add(images.data_ptr())
        del images
    # Two slots serve the whole epoch: the batches really are views of them.
    assert len(pointers) <= 3


def test_copy_gives_private_memory(jpeg_folder):
    loader = make(jpeg_folder, copy=True)
    it = iter(loader)
    a, _ = next(it)
    b, _ = next(it)
    assert a.data_ptr() != b.data_ptr()
    assert a.is_contiguous() and a.dtype == torch.uint8 and a.shape == (4, 3, 32, 32)


def test_numpy_output_and_nhwc_layout(jpeg_folder):
    loader = make(jpeg_folder, output="numpy", layout="NHWC")
    images, labels = next(iter(loader))
    assert isinstance(images, np.ndarray) and images.shape == (4, 32, 32, 3)
    assert labels.dtype == np.int64


def test_numpy_batches_speak_dlpack_without_copying(jpeg_folder):
    images, _ = next(iter(make(jpeg_folder, output="numpy")))
    via_dlpack = torch.from_dlpack(images)
    assert via_dlpack.data_ptr() == images.ctypes.data  # same memory: the ring slot
    assert torch.equal(via_dlpack, torch.from_numpy(images))
