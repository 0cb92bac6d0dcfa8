"""Ranks get disjoint, equal shares that together cover the dataset."""

import nostall


def rank_indices(folder, rank, world, **kw):
    loader = nostall.Loader(folder, batch_size=4, shuffle=True, seed=3, rank=rank,
                            world_size=world, return_indices=True, transforms=[nostall.Resize((8, 8))],
                            **kw)
    loader.set_epoch(2)
    return [int(i) for _, _, idx in loader for i in idx]


def test_ranks_are_disjoint_and_cover_the_dataset(jpeg_folder):
    shares = [rank_indices(jpeg_folder, r, 4) for r in range(4)]
    assert [len(s) for s in shares] == [9, 9, 9, 9]
    union = set().union(*map(set, shares))
    assert union == set(range(36))
    assert sum(len(s) for s in shares) == 36  # hence pairwise disjoint


def test_uneven_split_pads_to_equal_counts(jpeg_folder):
    shares = [rank_indices(jpeg_folder, r, 5) for r in range(5)]
    assert {len(s) for s in shares} == {8}  # ceil(36 / 5)
    assert set().union(*map(set, shares)) == set(range(36))


def test_rank_and_world_size_come_from_torchrun_environment(jpeg_folder, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    loader = nostall.Loader(jpeg_folder, batch_size=4, transforms=[nostall.Resize((8, 8))])
    assert loader.spec["rank"] == 1 and loader.spec["world_size"] == 3
    assert loader.samples_per_epoch == 12
