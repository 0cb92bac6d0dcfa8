"""The buffered first epoch (docs/sampling.md): tar shards with no index start
at once and are indexed as the first epoch reads them; that epoch runs in
WebDataset's order (shards shuffled, samples through a shuffle buffer), every
later one in the exact order, each holding every sample once across ranks,
and a resumed buffered epoch goes on with the very batches it would have
given."""
import collections
import json
import os
import shutil
from pathlib import Path

import pytest
import torch

import nostall
from conftest import augment, epoch_batches, write_jpeg_folder, write_shards


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    root = tmp_path_factory.mktemp("buffered")
    folder = write_jpeg_folder(root / "images", classes=4, per_class=15, seed=11)
    return write_shards(folder, root / "shards", shards=7)


@pytest.fixture(autouse=True)
def own_index_cache(monkeypatch):
    """Each test's nodes set NOSTALL_CACHE_DIR; put back after it."""
    monkeypatch.setenv("NOSTALL_CACHE_DIR", os.environ["NOSTALL_CACHE_DIR"])


def loader(pattern, cache_dir, **kw):
    """A loader on a node whose index cache is `cache_dir`."""
    args = dict(batch_size=8, shuffle=True, seed=5, transforms=augment(), return_indices=True,
                first_epoch="buffered", shuffle_buffer=24)
    args.update(kw)
    os.environ["NOSTALL_CACHE_DIR"] = str(cache_dir)
    return nostall.Loader(pattern, **args)


def keys_of(l, batches):
    return [l.key(int(i)) for _, _, idx in batches for i in idx]


def test_every_sample_once_per_epoch_across_ranks_buffered_then_exact(shards, tmp_path):
    world = 3
    per_epoch = {0: collections.Counter(), 1: collections.Counter()}
    counts = set()
    for rank in range(world):
        # Each rank a fresh node: its own empty index cache, so each indexes as it reads.
        l = loader(shards, tmp_path / f"rank{rank}", rank=rank, world_size=world)
        assert l.index_origin.startswith("being indexed as the shards are first read")
        first = epoch_batches(l, 0)
        assert l.index_origin.startswith("indexed as the shards were first read")
        second = epoch_batches(l, 1)
        assert len(first) == len(second) == len(l)
        counts.add(sum(len(b[0]) for b in first))
        # The buffered epoch names samples by shard and place, the exact one by number.
        assert all(int(i) >= 2**62 for _, _, x in first for i in x)
        assert all(0 <= int(i) < 60 for _, _, x in second for i in x)
        per_epoch[0].update(keys_of(l, first))
        per_epoch[1].update(keys_of(l, second))
        # Epoch 1 is the exact shuffle: the order of a loader that had the whole index.
        exact = loader(shards, tmp_path / f"rank{rank}", rank=rank, world_size=world, first_epoch="exact")
        assert exact.index_origin.startswith("the index cache")
        ref = epoch_batches(exact, 1)
        for (ia, la, xa), (ib, lb, xb) in zip(second, ref):
            assert torch.equal(xa, xb) and torch.equal(la, lb) and torch.equal(ia, ib)
        # ...and the buffered epoch 0 is not its exact epoch 0.
        assert keys_of(l, first) != keys_of(exact, epoch_batches(exact, 0))
    assert len(counts) == 1, "every rank the same number of samples"
    for epoch, seen in per_epoch.items():
        assert len(seen) == 60, f"epoch {epoch}: every sample"
        # 60 samples over 3 ranks: no padding, so each exactly once.
        assert set(seen.values()) == {1}, f"epoch {epoch}: a sample twice"


def test_the_buffered_order_is_the_same_on_every_run_and_mixes_the_shards(shards, tmp_path):
    def first_epoch_keys(cache, **kw):
        l = loader(shards, tmp_path / cache, **kw)
        return keys_of(l, epoch_batches(l, 0))

    a = first_epoch_keys("a")
    assert first_epoch_keys("b") == a, "deterministic from (seed, epoch): the same order on a fresh node"
    assert first_epoch_keys("c", seed=6) != a
    # The first batch holds samples of more than one shard (a buffer of 24 over shards of ~9).
    assert len({k.split(":")[0] for k in a[:8]}) > 1
    # Unshuffled, the buffered epoch is the exact order.
    u = loader(shards, tmp_path / "d", shuffle=False)
    v = loader(shards, tmp_path / "d", shuffle=False, first_epoch="exact")
    assert keys_of(u, epoch_batches(u, 0)) == keys_of(v, epoch_batches(v, 0))


def test_resuming_mid_buffered_epoch_gives_the_batches_it_would_have(shards, tmp_path):
    l = loader(shards, tmp_path / "node")
    it = iter(l)
    for _ in range(3):
        next(it)
    state = l.state_dict()
    assert state["buffered_epoch"] == 0
    rest = [(i.clone(), y.clone(), x.clone()) for i, y, x in it]
    assert rest
    assert len(l) == 8  # waits for the whole index, saved to the node's cache
    # A new process: the index is whole now (in the cache), the order is still the buffered one.
    again = loader(shards, tmp_path / "node")
    assert again.index_origin.startswith("the index cache")
    again.load_state_dict(json.loads(json.dumps(state)))
    resumed = [(i.clone(), y.clone(), x.clone()) for i, y, x in again]
    assert len(resumed) == len(rest)
    for (ia, la, xa), (ib, lb, xb) in zip(rest, resumed):
        assert torch.equal(xa, xb) and torch.equal(la, lb)
        assert torch.equal(ia, ib), "the same pixels: random draws keyed by shard and member"
    # And the next epoch is exact, as it was for the first loader.
    assert keys_of(again, epoch_batches(again, 1)) == keys_of(l, epoch_batches(l, 1))
    # A state of a buffered epoch does not resume another shuffle buffer.
    other = loader(shards, tmp_path / "node", shuffle_buffer=100)
    with pytest.raises(ValueError, match="shuffle_buffer"):
        other.load_state_dict(state)


def test_a_shard_that_cannot_be_read_is_named_where_the_epoch_reaches_it(shards, tmp_path):
    src = Path(shards.split("train-{")[0])
    bad = tmp_path / "bad"
    bad.mkdir()
    for s in range(7):
        shutil.copy(src / f"train-{s}.tar", bad / f"train-{s}.tar")
    (bad / "train-4.tar").write_bytes(b"z" * 4096)
    l = loader(str(bad / "train-{0..6}.tar"), tmp_path / "badnode")
    with pytest.raises(nostall.DataError, match="train-4.tar"):
        for _ in l:
            pass


def test_what_needs_the_whole_index_is_exact_from_the_start(shards, tmp_path):
    # A subset is drawn from every item: the index is built first.
    l = loader(shards, tmp_path / "subset", subset=20)
    assert not l.index_origin.startswith("being indexed")
    assert l.state_dict().get("buffered_epoch") is None
    with pytest.raises(ValueError, match="first_epoch"):
        loader(shards, tmp_path / "x", first_epoch="lazy")
