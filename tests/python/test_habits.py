"""PyTorch habits tried as a new user would: none may cut an epoch short,
hand out an empty batch or a wrong one without a word."""
import os

import pytest
import torch

import nostall
from conftest import write_jpeg_folder, write_shards


def make(folder, **kw):
    kw.setdefault("batch_size", 4)
    return nostall.Loader(folder, shuffle=True, transforms=[nostall.Resize((16, 16))], **kw)


def test_a_peek_inside_the_loop_is_an_error_not_a_short_epoch(jpeg_folder):
    loader = make(jpeg_folder)
    seen = 0
    with pytest.raises(RuntimeError, match="abandoned"):
        for images, labels in loader:
            seen += 1
            if seen == 3:
                next(iter(loader))  # "what does a batch look like?"
    assert seen == 3
    assert sum(1 for _ in loader) == len(loader)  # the next pass is whole


def test_zip_of_a_loader_with_itself_is_an_error_not_nothing(jpeg_folder):
    loader = make(jpeg_folder)
    with pytest.raises(RuntimeError, match="abandoned"):
        list(zip(loader, loader))


def test_a_batch_whose_every_sample_is_skipped_is_never_handed_out(tmp_path):
    folder = write_jpeg_folder(tmp_path / "d", classes=1, per_class=5, seed=2)
    files = sorted((folder / "class_0").iterdir())
    files[4].write_bytes(b"not a jpeg")  # the last batch (batch_size 4): this file alone
    for drop_last in (False, True):
        loader = nostall.Loader(folder, batch_size=4, on_error="skip", drop_last=drop_last,
                                transforms=[nostall.Resize((8, 8))])
        sizes = [len(labels) for _, labels in loader]
        assert sizes == [4]
        assert loader.stats()["empty_batches_dropped"] == (0 if drop_last else 1)
        assert loader.stats()["skipped"] == (0 if drop_last else 1)


def test_a_batch_of_one_bad_item_is_dropped_mid_epoch_and_the_epoch_goes_on(tmp_path):
    folder = write_jpeg_folder(tmp_path / "d", classes=1, per_class=6, seed=3)
    files = sorted((folder / "class_0").iterdir())
    files[2].write_bytes(b"")
    loader = nostall.Loader(folder, batch_size=2, on_error="skip", return_indices=True,
                            transforms=[nostall.Resize((8, 8))])
    loader_bad = nostall.Loader(folder, batch_size=1, on_error="skip", return_indices=True,
                                transforms=[nostall.Resize((8, 8))])
    assert [idx.tolist() for _, _, idx in loader] == [[0, 1], [3], [4, 5]]
    got = [idx.tolist() for _, _, idx in loader_bad]
    assert got == [[0], [1], [3], [4], [5]]
    assert all(len(i) for i in got)
    assert loader_bad.stats()["empty_batches_dropped"] == 1
    # Resume after the dropped batch continues where the loop was.
    loader_bad.set_epoch(0)
    it = iter(loader_bad)
    for _ in range(3):
        next(it)
    state = loader_bad.state_dict()
    fresh = nostall.Loader(folder, batch_size=1, on_error="skip", return_indices=True,
                           transforms=[nostall.Resize((8, 8))])
    fresh.load_state_dict(state)
    assert [idx.tolist() for _, _, idx in fresh] == [[4], [5]]


def test_the_stats_count_no_epoch_the_user_did_not_run(jpeg_folder):
    name = f"test-habits-readahead-{os.getpid()}"
    cache = nostall.Cache(name, "64MB")
    try:
        loader = make(jpeg_folder, cache=cache)
        for epoch in (0, 1):
            loader.set_epoch(epoch)
            for _ in loader:
                pass
        table = loader.stats_table()
        assert "epoch 1 hit rate 100.0%" in table
        assert "epoch 2" not in table  # read ahead into, never run
        assert [e["epoch"] for e in loader.stats()["cache"]["epochs"]] == [0, 1]
        loader.close()
    finally:
        cache.remove()


def test_tar_shards_know_their_number_of_classes(jpeg_folder, tmp_path):
    shards = write_shards(jpeg_folder, tmp_path / "shards")
    loader = nostall.Loader(shards, batch_size=4, transforms=[nostall.Resize((8, 8))])
    assert loader.classes == []  # .cls labels are numbers, not names
    assert loader.num_classes == 3
    assert make(jpeg_folder).num_classes == 3


@pytest.mark.parametrize("env, message", [
    ({"WORLD_SIZE": "4"}, "not RANK"),
    ({"RANK": "2"}, "not WORLD_SIZE"),
    ({"RANK": "0", "WORLD_SIZE": "0"}, "WORLD_SIZE=0"),
    ({"RANK": "4", "WORLD_SIZE": "4"}, "RANK=4"),
    ({"RANK": "x", "WORLD_SIZE": "4"}, "not an integer"),
])
def test_a_partial_or_contradictory_torchrun_environment_is_refused(jpeg_folder, monkeypatch,
                                                                      env, message):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ValueError, match=message):
        make(jpeg_folder)
    with pytest.raises(ValueError, match=message):
        nostall.Loader.from_spec({"source": str(jpeg_folder), "batch_size": 4})
    # Given in full by the caller, the environment is not needed.
    assert make(jpeg_folder, rank=0, world_size=1).samples_per_epoch == 36


def test_from_spec_reads_torchrun_environment_like_the_constructor(jpeg_folder, monkeypatch):
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    spec = {"source": str(jpeg_folder), "batch_size": 4}
    loader = nostall.Loader.from_spec(spec)
    assert (loader.spec["rank"], loader.spec["world_size"]) == (2, 3)
    assert loader.samples_per_epoch == 12
    direct = make(jpeg_folder)
    assert (direct.spec["rank"], direct.spec["world_size"]) == (2, 3)
    # A spec that names its shard keeps it.
    assert nostall.Loader.from_spec(dict(spec, rank=0, world_size=1)).samples_per_epoch == 36
