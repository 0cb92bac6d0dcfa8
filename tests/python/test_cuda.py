"""Batches for a CUDA device: page-locked slots without a copy, slots held
until the copies from them are done, and device batches finished on the GPU.

The tests that need a GPU are skipped, with the reason, where torch sees
none (CI); they run on a machine with one (docs/gpu.md says how)."""

import pytest
import torch

import nostall
from nostall import _cuda

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason=f"torch {torch.__version__} sees no CUDA device")


def loader(folder, **kw):
    kw.setdefault("transforms", [nostall.RandomResizedCrop(48), nostall.RandomHorizontalFlip(),
                                 nostall.Normalize(MEAN, STD)])
    return nostall.Loader(folder, batch_size=6, seed=7, num_threads=2, **kw)


def test_a_device_that_is_not_there_is_a_clear_error(jpeg_folder):
    with pytest.raises(ValueError, match="device must be"):
        loader(jpeg_folder, device="tpu")
    with pytest.raises(ValueError, match="device must be"):
        loader(jpeg_folder, device="npu:0")
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="sees no CUDA device"):
            loader(jpeg_folder, device="cuda")


def test_device_cpu_is_the_host_batches(jpeg_folder):
    with loader(jpeg_folder) as a, loader(jpeg_folder, device="cpu") as b:
        for (xa, ya), (xb, yb) in zip(a, b):
            assert torch.equal(xa, xb) and torch.equal(ya, yb)


def test_normalize_moves_to_the_device_only_for_float_image_batches():
    spec = {"transforms": [{"type": "RandomResizedCrop", "size": [8, 8]},
                           {"type": "Normalize", "mean": [0.5], "std": [0.25]}]}
    cpu, finish = _cuda.normalize_on_device(spec)
    assert finish == ((0.5,), (0.25,))
    assert cpu["dtype"] == "uint8" and [t["type"] for t in cpu["transforms"]] == ["RandomResizedCrop"]
    assert spec["transforms"][-1]["type"] == "Normalize"  # the caller's spec is not changed
    for kept in (dict(spec, dtype="uint8"), dict(spec, fields=[{"name": "image"}]),
                 {"transforms": spec["transforms"][:1]}, dict(spec, audio={"sample_rate": 16000})):
        assert _cuda.normalize_on_device(kept) == (kept, None)


@needs_cuda
def test_pinned_batches_are_the_slots_themselves(jpeg_folder):
    with loader(jpeg_folder) as plain, loader(jpeg_folder, pin_memory=True) as pinned:
        n = 0
        for (xa, ya), (xb, yb) in zip(plain, pinned):
            assert xb.is_pinned() and yb.is_pinned()
            assert torch.equal(xa, xb) and torch.equal(ya, yb)
            n += 1
        cuda = pinned.stats()["cuda"]
    assert cuda["zero_copy_batches"] == n and cuda["host_copies"] == 0
    assert cuda["registered_bytes"] > 0


@needs_cuda
def test_a_slot_is_not_refilled_while_a_copy_from_it_runs(jpeg_folder):
    # The GPU is kept busy before each copy (torch.cuda._sleep), so the copy
    # runs long after the loop has dropped the host batch and asked for more:
    # were the slot refilled then, the copy would read the next batches.
    with loader(jpeg_folder) as reference:
        expected = [x.clone() for epoch in range(3) for x, _ in reference]
    got = []
    with loader(jpeg_folder, pin_memory=True, prefetch=2) as pinned:
        for epoch in range(3):
            for x, _ in pinned:
                torch.cuda._sleep(20_000_000)  # ~10 ms of GPU time
                got.append(x.cuda(non_blocking=True))
                del x
        torch.cuda.synchronize()
        assert pinned.stats()["cuda"]["host_copies"] == 0
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert torch.equal(g.cpu(), e)


@needs_cuda
def test_device_batches_are_the_host_batches_normalized_on_the_gpu(jpeg_folder):
    with loader(jpeg_folder) as host, loader(jpeg_folder, device="cuda") as dev:
        assert dev.spec["dtype"] == "uint8"  # the CPU's part: a quarter of the bytes to copy
        n = 0
        for (xh, yh), (xd, yd) in zip(host, dev):
            assert xd.device.type == "cuda" and xd.dtype == torch.float32
            torch.testing.assert_close(xd.cpu(), xh, atol=1e-5, rtol=1e-5)
            assert torch.equal(yd.cpu(), yh)
            n += 1
        cuda = dev.stats()["cuda"]
    assert cuda["device_batches"] == n and cuda["host_copies"] == 0


@needs_cuda
def test_device_batches_outlive_the_loader_and_its_slots(jpeg_folder):
    with loader(jpeg_folder, device="cuda", transforms=[nostall.RandomResizedCrop(32)]) as dev:
        kept = [x for x, _ in dev]
        assert all(x.dtype == torch.uint8 for x in kept)
    first = kept[0].clone()
    with loader(jpeg_folder, pin_memory=True) as again:  # new slots, registered anew
        for _ in again:
            pass
    assert torch.equal(kept[0], first)


def served(folder, name):
    spec = {"source": str(folder), "batch_size": 6, "seed": 3, "shuffle": True,
            "transforms": [{"type": "RandomResizedCrop", "size": [32, 32]}]}
    return nostall.serve(spec, name, block=False, verbose=False)


def test_a_consumer_asking_for_a_device_that_is_not_there_lets_go_of_its_row(jpeg_folder):
    name = f"cuda-test-{id(jpeg_folder)}"
    with served(jpeg_folder, name) as server:
        with pytest.raises(ValueError, match="device must be"):
            nostall.Loader.attach(name, 6, device="tpu")
        assert server.status()["consumers"] == [] or all(
            c["state"] != "active" for c in server.status()["consumers"])


@needs_cuda
def test_a_consumer_on_the_gpu_gets_every_sample_once(jpeg_folder):
    name = f"cuda-test-gpu-{id(jpeg_folder)}"
    with served(jpeg_folder, name):
        with nostall.Loader.attach(name, 6, device="cuda", return_indices=True) as consumer:
            seen, batches = [], 0
            for images, labels, indices in consumer:
                assert images.is_cuda and images.dtype == torch.uint8 and labels.is_cuda
                seen += indices.tolist()
                batches += 1
            cuda = consumer.stats()["cuda"]
    assert sorted(seen) == list(range(36))
    # The served slots, read-only here, are registered read-only: no copy.
    assert cuda["device_batches"] == batches == cuda["zero_copy_batches"]
    assert cuda["host_copies"] == 0
