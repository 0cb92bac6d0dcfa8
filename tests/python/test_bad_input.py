"""Every kind of bad item: a DataError naming it and its stage, or skipped and counted."""

import os

import numpy as np
import pytest
from PIL import Image

import nostall


def corrupt(path):
    data = bytearray(path.read_bytes())
    for i in range(len(data) // 3, len(data) - 16, 5):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))


def truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def empty(path):
    path.write_bytes(b"")


def not_an_image(path):
    path.write_text("<html>this is not a picture</html>")


def huge(path):
    Image.fromarray(np.zeros((700, 900, 3), np.uint8)).save(path, quality=90)


CASES = {
    "corrupt": (corrupt, "decode"),
    "truncated": (truncate, "decode"),
    "empty": (empty, "decode"),
    "not-an-image": (not_an_image, "decode"),
    "missing": (os.remove, "fetch"),
    "over-pixel-limit": (huge, "decode"),
}


def make(folder, on_error):
    return nostall.Loader(folder, batch_size=4, on_error=on_error, max_pixels=500_000,
                          transforms=[nostall.Resize((32, 32))], return_indices=True)


@pytest.mark.parametrize("case", sorted(CASES))
def test_raise_names_the_item_and_stage(fresh_folder, case):
    damage, stage = CASES[case]
    victim = fresh_folder / "class_1" / "002.jpg"
    loader = make(fresh_folder, "raise")  # indexed before the damage, like a file lost mid-run
    damage(victim)
    good, errors = 0, []
    it = iter(loader)
    while True:
        try:
            _, labels, _ = next(it)
        except nostall.DataError as e:
            errors.append(e)
            continue
        except StopIteration:
            break
        good += len(labels)
    assert len(errors) == 1
    assert errors[0].item == str(victim)
    assert errors[0].stage == stage
    assert str(victim) in str(errors[0])
    assert good == 10 - 4  # the bad item's whole batch is lost under "raise"


@pytest.mark.parametrize("case", sorted(CASES))
def test_skip_drops_only_the_bad_item_and_counts_it(fresh_folder, case):
    damage, _ = CASES[case]
    victim = fresh_folder / "class_1" / "002.jpg"
    loader = make(fresh_folder, "skip")
    damage(victim)
    seen = [int(i) for _, _, idx in loader for i in idx]
    bad_index = next(i for i in range(loader.num_items) if loader.key(i) == str(victim))
    assert sorted(seen) == [i for i in range(10) if i != bad_index]
    stats = loader.stats()
    assert stats["skipped"] == 1 and stats["errors"] == 1


def test_missing_dataset_and_bad_arguments_are_clear(tmp_path, fresh_folder):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        nostall.Loader(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="on_error"):
        nostall.Loader(fresh_folder, on_error="ignore")
    with pytest.raises(ValueError, match="Resize must come before Normalize"):
        nostall.Loader(fresh_folder, transforms=[nostall.Normalize([0.5] * 3, [0.5] * 3),
                                                 nostall.Resize((8, 8))])
    with pytest.raises(ValueError, match="rank"):
        nostall.Loader(fresh_folder, rank=3, world_size=2)


def test_ring_larger_than_dev_shm_fails_at_start(fresh_folder):
    free = os.statvfs("/dev/shm")
    total = free.f_blocks * free.f_frsize
    side = 2048  # float32 RGB 2048x2048 = 48 MiB a sample
    batch = total // (side * side * 12) + 1
    with pytest.raises(nostall.ResourceError, match="free"):
        nostall.Loader(fresh_folder, batch_size=int(batch), prefetch=0, dtype="float32",
                       transforms=[nostall.Resize((side, side))])
