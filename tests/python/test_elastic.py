"""Elastic resume: a state saved at one number of ranks loads at another, and
every sample the saved ranks had not read comes once across the new ranks."""

import collections

import pytest

import nostall
from conftest import write_jpeg_folder

N = 150
BATCH = 4


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return str(write_jpeg_folder(tmp_path_factory.mktemp("elastic"), classes=3, per_class=50, seed=0,
                                 min_side=12, max_side=20))


def make(folder, rank, world, **kw):
    return nostall.Loader(folder, batch_size=BATCH, shuffle=True, seed=11, rank=rank, world_size=world,
                          return_indices=True, transforms=[nostall.Resize((8, 8))], **kw)


def read(loader, batches=None):
    """Indices of the next `batches` batches (all to the epoch's end: None)."""
    out = []
    it = iter(loader)
    for n, (_, _, idx) in enumerate(it):
        out.append([int(i) for i in idx])
        if batches is not None and n + 1 == batches:
            break
    return out


def run_ranks(folder, world, state=None, batches=None, epoch=1, **kw):
    """Every rank of `world` (from `state`, or `epoch`'s start): their batches and states."""
    shares, states = [], []
    for r in range(world):
        loader = make(folder, r, world, **kw)
        if state is None:
            loader.set_epoch(epoch)
        else:
            loader.load_state_dict(state)
        shares.append(read(loader, batches))
        states.append(loader.state_dict())
    return shares, states


def flat(shares):
    return [i for share in shares for batch in share for i in batch]


@pytest.mark.parametrize("new_world", [2, 3, 6])
def test_saved_at_four_ranks_resumes_at_another_number(folder, new_world):
    done, states = run_ranks(folder, 4, batches=5)
    assert {json_free(s) for s in states} == {json_free(states[0])}  # ranks step together: one state
    assert states[0]["batch"] == 5
    rest, _ = run_ranks(folder, new_world, state=states[0])
    read_before, read_after = flat(done), flat(rest)
    assert len(set(read_before)) == 4 * 5 * BATCH
    assert not set(read_before) & set(read_after), "a sample read before the save came again"
    assert set(read_before) | set(read_after) == set(range(N)), "a sample was never read"
    # Every remaining sample once; repeats only to pad the ranks to equal counts.
    left = N - len(read_before)
    assert len(read_after) == -(-left // new_world) * new_world
    assert len({len(share) for share in rest}) == 1, "ranks have different batch counts (DDP would hang)"


def json_free(state):
    return tuple(sorted((k, str(v)) for k, v in state.items() if k != "rank"))


def test_resumed_twice_at_three_then_two(folder):
    done, states = run_ranks(folder, 4, batches=3)
    middle, states3 = run_ranks(folder, 3, state=states[0], batches=4)
    assert states3[0]["elastic"] == [[4, 3]] and states3[0]["batch"] == 4
    rest, _ = run_ranks(folder, 2, state=states3[1])
    seen = collections.Counter(flat(done) + flat(middle) + flat(rest))
    assert set(seen) == set(range(N))
    assert sum(c - 1 for c in seen.values()) <= 1, "only the last world's padding repeats"


def test_same_ranks_resume_as_before_from_any_ranks_state(folder):
    """At the same world size the epoch continues as the rank's own order:
    a state saved by rank 0 (as trainers do) serves rank 2."""
    whole = read(make_at(folder, 2, 4, epoch=1))
    state = make_at(folder, 0, 4, epoch=1)
    read(state, 6)
    saved = state.state_dict()
    resumed = make(folder, 2, 4)
    resumed.load_state_dict(saved)
    assert "elastic" not in saved
    assert read(resumed) == whole[6:]


def make_at(folder, rank, world, epoch):
    loader = make(folder, rank, world)
    loader.set_epoch(epoch)
    return loader


def test_elastic_epoch_is_deterministic_and_the_next_is_whole(folder):
    _, states = run_ranks(folder, 4, batches=2)
    a = make(folder, 1, 3)
    a.load_state_dict(states[0])
    b = make(folder, 1, 3)
    b.load_state_dict(states[3])
    assert len(a) == len(read(b))  # len() is the elastic epoch's own count
    assert read(a) == read(make_loaded(folder, states[0]))
    # The epoch after is the whole epoch at three ranks, as a fresh loader's.
    assert read(a) == read(make_at(folder, 1, 3, epoch=2))
    assert len(a) == -(-(-(-N // 3)) // BATCH)


def make_loaded(folder, state):
    loader = make(folder, 1, 3)
    loader.load_state_dict(state)
    return loader


def test_state_of_a_finished_elastic_epoch_moves_to_the_next(folder):
    _, states = run_ranks(folder, 4, batches=9)  # 144 of 150 read: 6 left
    loader = make(folder, 0, 2)
    loader.load_state_dict(states[0])
    assert len(read(loader)) == 1  # 3 samples: one batch
    state = loader.state_dict()
    assert state["epoch"] == 2 and state["batch"] == 0 and "elastic" not in state


def test_bad_elastic_states_are_refused(folder):
    _, states = run_ranks(folder, 4, batches=2)
    loader = make(folder, 0, 2)
    for bad in ([[0, 2]], [[4]], "x", [[4, -1]]):
        with pytest.raises(ValueError, match="elastic"):
            loader.load_state_dict(dict(states[0], elastic=bad))



def test_a_rank_with_nothing_left_reads_an_empty_rest_then_the_same_next_epoch(folder):
    """pad_ranks=False: at 9 ranks the shares are 17 and 16 samples (5 and 4
    batches). Saved when every rank had read 4 batches, 6 samples are left;
    resumed at 8 ranks, 6 ranks get one and 2 get none: those read an empty
    rest of the epoch (not the next epoch, which would put them an epoch
    ahead of the others for good), then epoch 2 with the others."""
    kw = dict(pad_ranks=False)
    assert sorted({len(make(folder, r, 9, **kw)) for r in range(9)}) == [4, 5]
    _, states = run_ranks(folder, 9, batches=4, **kw)
    state = states[0]
    assert state["epoch"] == 1 and state["batch"] == 4
    rests, nexts = [], []
    for r in range(8):
        loader = make(folder, r, 8, **kw)
        loader.load_state_dict(state)
        rests.append(read(loader))
        nexts.append(read(loader))
    assert sorted(len(flat([rest])) for rest in rests) == [0, 0, 1, 1, 1, 1, 1, 1]
    # The next epoch is epoch 2 at 8 ranks on every rank: each sample once.
    assert sorted(flat(nexts)) == list(range(N))
