"""Batch plans (the native side of remote prep, docs/remote.md): a loader
makes only the planned batches of an epoch, in the plan's order, as the plan
grows, each byte-identical to the same batch of the whole epoch."""

import numpy as np
import pytest

import nostall
from conftest import write_jpeg_folder
from nostall import _nostall
from nostall.errors import NostallError

KW = dict(batch_size=8, shuffle=True, seed=4, return_indices=True, copy=True,
          transforms=[nostall.RandomResizedCrop(16), nostall.RandomHorizontalFlip()])


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return str(write_jpeg_folder(tmp_path_factory.mktemp("plan"), classes=3, per_class=50, seed=2,
                                 min_side=32, max_side=48))


def whole(folder, epoch):
    loader = nostall.Loader(folder, **KW)
    loader.set_epoch(epoch)
    return [(x.numpy(), i.tolist()) for x, _, i in loader]


def planned(folder, plan, batches, finish=True):
    loader = nostall.Loader(folder, **KW)
    core = loader._core
    core.start_plan(plan)
    out = []
    for at, b in enumerate(batches):
        plan.extend([b])
        got = core.next_planned()
        out.append((got[0].copy(), got[2].tolist()))
    if finish:
        plan.finish()
        assert core.next_planned() is None  # the plan's end is the pass's
    return out, loader


def test_planned_batches_in_any_order_are_the_whole_epochs(folder):
    want = whole(folder, 3)
    order = [18, 5, 0, 11, 5]  # the short last batch, out of order, one twice
    got, loader = planned(folder, _nostall.BatchPlan(3), order)
    for (images, idx), b in zip(got, order):
        assert idx == want[b][1]
        np.testing.assert_array_equal(images, want[b][0])
    assert len(got[0][1]) == 6
    # The loader's own epochs are whole again once the plan is taken away.
    loader._core.set_plan(None)
    loader.set_epoch(3)
    assert [i.tolist() for _, _, i in loader] == [w[1] for w in want]


def test_an_elastic_plan_is_the_elastic_epochs(folder):
    saved = nostall.Loader(folder, rank=0, world_size=4, **KW)
    saved.set_epoch(1)
    it = iter(saved)
    for _ in range(2):
        next(it)
    state = saved.state_dict()
    elastic = nostall.Loader(folder, rank=1, world_size=2, **KW)
    elastic.load_state_dict(state)
    want = [i.tolist() for _, _, i in elastic]
    loader = nostall.Loader(folder, rank=1, world_size=2, **KW)
    got, _ = planned_indices(loader, _nostall.BatchPlan(1, [(4, 2)]), range(len(want)))
    assert got == want


def planned_indices(loader, plan, batches):
    loader._core.start_plan(plan)
    plan.extend(list(batches))
    plan.finish()
    out = []
    while (got := loader._core.next_planned()) is not None:
        out.append(got[2].tolist())
    return out, loader


def test_a_batch_outside_the_epoch_is_an_error_naming_it(folder):
    loader = nostall.Loader(folder, **KW)
    plan = _nostall.BatchPlan(0)
    loader._core.start_plan(plan)
    plan.extend([19])
    with pytest.raises(ValueError, match="planned batch 19 is outside the epoch.s 19"):
        while loader._core.next_planned() is not None:
            pass


def test_a_finished_plan_takes_no_more(folder):
    plan = _nostall.BatchPlan(0)
    plan.extend([1, 2])
    plan.finish()
    assert len(plan) == 2 and plan.epoch == 0
    with pytest.raises(NostallError, match="finished"):
        plan.extend([3])
    with pytest.raises(ValueError, match="epoch"):
        _nostall.BatchPlan(-1)
    with pytest.raises(ValueError, match="elastic"):
        _nostall.BatchPlan(0, [(0, 3)])


def test_a_loader_whose_plan_never_grows_closes_promptly(folder):
    import time
    loader = nostall.Loader(folder, **KW)
    plan = _nostall.BatchPlan(0)
    loader._core.start_plan(plan)  # its fetchers wait for the plan
    plan.extend([0])
    assert loader._core.next_planned()[2].tolist() == whole(folder, 0)[0][1]
    t0 = time.monotonic()
    loader.close()
    assert time.monotonic() - t0 < 5
