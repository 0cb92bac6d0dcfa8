"""Same seed, same batches: whatever the thread count; resumable mid-epoch."""

import pytest
import torch

import nostall
from conftest import augment, epoch_batches


def make(folder, threads, seed=0, **kw):
    return nostall.Loader(folder, batch_size=5, shuffle=True, seed=seed, transforms=augment(),
                          num_threads=threads, return_indices=True, **kw)


def same(a, b):
    return len(a) == len(b) and all(
        torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]) and torch.equal(x[2], y[2])
        for x, y in zip(a, b))


def test_identical_batches_for_one_and_two_threads(jpeg_folder):
    one, two = make(jpeg_folder, 1), make(jpeg_folder, 2, reads_in_flight=7)
    for epoch in (0, 1):
        assert same(epoch_batches(one, epoch), epoch_batches(two, epoch))


def test_identical_batches_while_the_autotuner_changes_settings(jpeg_folder):
    # From 1 thread and 1 read of 20 ms, the autotuner adds reads and threads
    # mid-epoch; every epoch's batches stay those of a fixed configuration.
    fixed = make(jpeg_folder, 2, reads_in_flight=7, autotune=False)
    tuned = make(jpeg_folder, 1, reads_in_flight=1, autotune=True,
                 source_options={"throttle_latency_ms": 20})
    epoch = 0
    while epoch < 40:
        assert same(epoch_batches(tuned, epoch), epoch_batches(fixed, epoch)), f"epoch {epoch}"
        epoch += 1
        a = tuned.stats()["autotune"]
        if epoch >= 3 and {d["knob"] for d in a["decisions"]} >= {"reads_in_flight"} \
                and a["reads_in_flight"] > 1:
            break
    a = tuned.stats()["autotune"]
    assert a["knobs"] == ["threads", "reads_in_flight", "prefetch"]
    assert a["changes"] >= 1 and a["reads_in_flight"] > 1, a
    # Each decision says what moved and why.
    d = a["decisions"][0]
    assert d["to"] != d["from"] and d["why"] and d["time_s"] > 0
    assert "autotune" not in fixed.stats()  # nothing tuned: no tuner


def test_epochs_and_seeds_change_order_and_augmentation(jpeg_folder):
    a = make(jpeg_folder, 2)
    e0, e1 = epoch_batches(a, 0), epoch_batches(a, 1)
    assert not torch.equal(torch.cat([b[2] for b in e0]), torch.cat([b[2] for b in e1]))
    other = epoch_batches(make(jpeg_folder, 2, seed=1), 0)
    assert not same(e0, other)
    # Every sample once per epoch.
    assert sorted(torch.cat([b[2] for b in e0]).tolist()) == list(range(36))


def test_resume_mid_epoch_gives_the_rest_exactly(jpeg_folder):
    full = make(jpeg_folder, 2)
    full.set_epoch(1)
    it = iter(full)
    head = [next(it) for _ in range(3)]
    state = full.state_dict()
    assert state["epoch"] == 1 and state["batch"] == 3
    del head
    rest = [(x.clone(), y.clone(), i.clone()) for x, y, i in it]
    following = epoch_batches(full, 2)

    resumed = make(jpeg_folder, 1)
    resumed.load_state_dict(state)
    assert same(epoch_batches(resumed), rest)
    assert same(epoch_batches(resumed, 2), following)


def test_state_from_another_configuration_is_refused(jpeg_folder):
    state = make(jpeg_folder, 1).state_dict()
    with pytest.raises(ValueError, match="seed"):
        make(jpeg_folder, 1, seed=5).load_state_dict(state)


def test_new_pass_without_set_epoch_moves_to_the_next_epoch(jpeg_folder):
    a = make(jpeg_folder, 2)
    first = epoch_batches(a)
    second = epoch_batches(a)
    assert a.state_dict()["epoch"] == 2
    b = make(jpeg_folder, 2)
    assert same(second, epoch_batches(b, 1))
    assert not same(first, second)
