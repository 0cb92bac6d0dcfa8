"""Epochs as trainers run them: the real Lightning and Accelerate, each epoch
its own order, the stats counting epochs, and exact resume from a Lightning
checkpoint taken mid-epoch."""
import warnings

import pytest
import torch

import nostall
from conftest import write_jpeg_folder

lightning = pytest.importorskip("lightning")  # installed by the test command (make test)
accelerate = pytest.importorskip("accelerate")

L = lightning.pytorch


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_jpeg_folder(tmp_path_factory.mktemp("trainers"), classes=3, per_class=10, seed=4,
                             min_side=40, max_side=80)


def make_loader(folder, **kw):
    args = dict(batch_size=4, shuffle=True, seed=11, return_indices=True,
                transforms=[nostall.RandomResizedCrop(16), nostall.RandomHorizontalFlip(),
                            nostall.Normalize(nostall.IMAGENET_MEAN, nostall.IMAGENET_STD)])
    args.update(kw)
    return nostall.Loader(folder, **args)


def plain_loop(folder, epochs):
    """What a plain `for epoch ...: loader.set_epoch(epoch); for batch in loader` sees."""
    loader = make_loader(folder)
    out = []
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        out.append([(idx.tolist(), images.clone()) for images, _, idx in loader])
    loader.close()
    return out


class Killed(Exception):
    """The job dies here (Lightning saves nothing more)."""


class Recorder(L.LightningModule):
    """Records every batch it trains on: (epoch, dataset indices, pixels)."""

    def __init__(self, stop_after=None):
        super().__init__()
        self.net = torch.nn.Linear(3 * 16 * 16, 3)
        self.seen = []
        self.stop_after = stop_after

    def training_step(self, batch, batch_idx):
        images, labels, idx = batch
        self.seen.append((self.current_epoch, idx.tolist(), images.clone()))
        if self.stop_after is not None and len(self.seen) >= self.stop_after:
            raise Killed
        return torch.nn.functional.cross_entropy(self.net(images.flatten(1)), labels)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def trainer(tmp_path, **kw):
    return L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                     enable_model_summary=False, default_root_dir=tmp_path, **kw)


def by_epoch(seen, epochs):
    return [[(idx, img) for e, idx, img in seen if e == epoch] for epoch in range(epochs)]


def assert_same_batches(got, want):
    assert [idx for idx, _ in got] == [idx for idx, _ in want]
    for (_, a), (_, b) in zip(got, want):
        assert torch.equal(a, b)  # the same augmentations too


def test_lightning_runs_three_different_epochs_equal_to_a_plain_loop(folder, tmp_path):
    want = plain_loop(folder, 3)
    loader = make_loader(folder)
    model = Recorder()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lightning's advice on workers and logging
        trainer(tmp_path, max_epochs=3).fit(model, loader)
    got = by_epoch(model.seen, 3)
    orders = [[i for idx, _ in epoch for i in idx] for epoch in got]
    assert len({tuple(o) for o in orders}) == 3  # three different orders
    for epoch in range(3):
        assert_same_batches(got[epoch], want[epoch])
        assert sorted(orders[epoch]) == list(range(30))
    per_epoch = loader.stats()["consumer"]["epochs"]
    assert [e["epoch"] for e in per_epoch] == [0, 1, 2]
    assert [e["samples"] for e in per_epoch] == [30, 30, 30]


def test_a_lightning_checkpoint_taken_mid_epoch_resumes_with_the_rest_of_the_epoch(folder, tmp_path):
    want = plain_loop(folder, 2)
    flat = [(e, idx) for e, epoch in enumerate(want) for idx, _ in epoch]
    ckpt = L.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=1,
                                       save_top_k=-1, filename="{epoch}-{step}")
    # Killed after 11 steps: 8 batches of epoch 0 and 3 of epoch 1.
    first = Recorder(stop_after=11)
    with warnings.catch_warnings(), pytest.raises(Killed):
        warnings.simplefilter("ignore")
        trainer(tmp_path, max_epochs=2, callbacks=[ckpt]).fit(first, make_loader(folder))
    assert [(e, idx) for e, idx, _ in first.seen] == flat[:11]
    last = tmp_path / "ckpt" / "epoch=1-step=10.ckpt"  # written after the 10th step
    assert last.exists(), sorted(p.name for p in (tmp_path / "ckpt").iterdir())
    second = Recorder()
    fresh = make_loader(folder)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer(tmp_path, max_epochs=2).fit(second, fresh, ckpt_path=str(last))
    # The 11th batch was never finished: it and the rest of epoch 1, each once.
    assert [(e, idx) for e, idx, _ in second.seen] == flat[10:]
    rest = [img for _, _, img in second.seen]
    for a, (_, b) in zip(rest, want[1][2:]):
        assert torch.equal(a, b)


def test_accelerate_prepared_loader_runs_three_different_epochs(folder):
    want = plain_loop(folder, 3)
    acc = accelerate.Accelerator(cpu=True)
    loader = acc.prepare(make_loader(folder))
    got = []
    for epoch in range(3):
        if hasattr(loader, "set_epoch"):
            loader.set_epoch(epoch)
        got.append([(idx.tolist(), images.clone()) for images, _, idx in loader])
    for epoch in range(3):
        assert_same_batches(got[epoch], want[epoch])
    assert len({tuple(i for idx, _ in e for i in idx) for e in got}) == 3


def test_a_loop_that_stops_at_len_moves_on_to_the_next_epoch(folder):
    # What Lightning and many hand-written loops do: take len(loader)
    # batches and never ask for the end.
    want = plain_loop(folder, 2)
    loader = make_loader(folder)
    got = []
    for _ in range(2):
        it = iter(loader)
        got.append([(idx.tolist(), images.clone()) for _, (images, _, idx) in
                    zip(range(len(loader)), it)])
    for epoch in range(2):
        assert_same_batches(got[epoch], want[epoch])
    assert loader.state_dict()["epoch"] == 2
    assert [e["epoch"] for e in loader.stats()["consumer"]["epochs"]] == [0, 1]


def test_peeking_and_breaking_early_give_fresh_batches_as_a_dataloader_does(folder):
    want = plain_loop(folder, 4)
    loader = make_loader(folder)
    peeks = [next(iter(loader)) for _ in range(3)]  # three peeks: three epochs' first batches
    for k, (images, _, idx) in enumerate(peeks):
        assert idx.tolist() == want[k][0][0]
        assert torch.equal(images, want[k][0][1])
    assert len({tuple(idx.tolist()) for _, _, idx in peeks}) == 3
    # A "steps per epoch" loop that breaks early, without set_epoch: each
    # epoch's own order and crops, not the same few batches again.
    other = make_loader(folder)
    got = []
    for epoch in range(3):
        for step, (images, _, idx) in enumerate(other):
            got.append((epoch, idx.tolist(), images.clone()))
            if step == 1:
                break
    for epoch in range(3):
        mine = [(i, img) for e, i, img in got if e == epoch]
        assert_same_batches(mine, want[epoch][:2])


def test_an_iter_that_was_never_advanced_does_not_use_up_an_epoch(folder):
    want = plain_loop(folder, 1)
    loader = make_loader(folder)
    iter(loader)  # (Lightning calls iter() on a loader to check it is iterable)
    assert [(idx.tolist(), images) for images, _, idx in loader][0][0] == want[0][0][0]


def test_set_epoch_names_the_epoch_an_abandoned_pass_starts_again(folder):
    loader = make_loader(folder)
    first = [idx.tolist() for _, (_, _, idx) in zip(range(2), loader)]  # abandoned part-way
    loader.set_epoch(0)  # named: epoch 0 again, from its start
    again = [idx.tolist() for _, _, idx in loader]
    assert again[:2] == first
    loader.sampler.set_epoch(5)  # where Lightning calls it
    five = [idx.tolist() for _, _, idx in loader]
    other = make_loader(folder)
    other.set_epoch(5)
    assert five == [idx.tolist() for _, _, idx in other]


def test_a_state_taken_after_a_break_resumes_where_the_open_iterator_stood(folder):
    loader = make_loader(folder)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    rest = [idx.tolist() for _, _, idx in it]
    resumed = make_loader(folder)
    resumed.load_state_dict(state)
    iter(resumed)  # never advanced: the next iter() still resumes there
    assert [idx.tolist() for _, _, idx in resumed] == rest


@pytest.mark.slow
def test_the_lightning_example_trains_and_resumes(folder, tmp_path):
    from pathlib import Path

    import warm

    example = Path(__file__).resolve().parents[2] / "examples" / "lightning_train.py"
    common = ["--data", folder, "--batch-size", "4", "--crop", "16", "--ckpt-dir", tmp_path / "ckpt"]
    out = warm.run(example, common + ["--epochs", "2"], timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "2 epoch(s) through nostall: epoch 0" in out.stdout and "epoch 1" in out.stdout
    last = tmp_path / "ckpt" / "last.ckpt"
    assert last.exists()
    again = warm.run(example, common + ["--epochs", "3", "--resume", last], timeout=300, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    # The last checkpoint is step 10 of 7-batch epochs: epoch 1 after its 3rd
    # batch. The resumed run trains epoch 1's other 4 batches, then epoch 2.
    ran = again.stdout.split("through nostall:")[1].split("\n")[0]
    assert "epoch 1 16 samples" in ran and "epoch 2 28 samples" in ran and "epoch 0" not in ran, ran


def test_set_epoch_during_a_pass_chooses_the_next_pass(folder):
    loader = make_loader(folder)
    other = make_loader(folder)
    other.set_epoch(5)
    want = [idx.tolist() for _, _, idx in other]
    for k, _ in enumerate(loader):  # epoch 0, run to its end
        if k == 1:
            loader.set_epoch(5)
    assert [idx.tolist() for _, _, idx in loader] == want  # epoch 5, not 6


# ------------------------------------------------------------ validation and test loaders
class Evaluated(Recorder):
    """Records what each validation and test pass saw: (stage, dataset indices)."""

    def __init__(self):
        super().__init__()
        self.evaluated = []

    def validation_step(self, batch, batch_idx):
        images, labels, idx = batch
        self.evaluated.append(("val", self.trainer.sanity_checking, idx.tolist()))
        self.log("val_loss", torch.nn.functional.cross_entropy(self.net(images.flatten(1)), labels))

    def test_step(self, batch, batch_idx):
        images, labels, idx = batch
        self.evaluated.append(("test", False, idx.tolist()))


def passes(evaluated, stage, per_pass):
    """The full passes of `stage` (sanity checks left out), each a list of indices."""
    flat = [i for s, sanity, idx in evaluated if s == stage and not sanity for i in idx]
    return [flat[k:k + per_pass] for k in range(0, len(flat), per_pass)]


def test_lightning_fit_validates_every_epoch_and_validate_and_test_run(folder, tmp_path):
    val = make_loader(folder, shuffle=False, pad_ranks=False,
                      transforms=[nostall.Resize((16, 16)),
                                  nostall.Normalize(nostall.IMAGENET_MEAN, nostall.IMAGENET_STD)])
    model = Evaluated()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = trainer(tmp_path, max_epochs=2)
        t.fit(model, make_loader(folder), val)  # with the sanity check's 2 batches first
        t.validate(model, val)
        t.test(model, val)
    assert [s for s, sanity, _ in model.evaluated if sanity] == ["val", "val"]
    vals = passes(model.evaluated, "val", 30)
    assert len(vals) == 3  # two epochs of fit, then validate()
    for p in vals:
        assert p == list(range(30))  # unshuffled, every sample once per pass
    assert passes(model.evaluated, "test", 30) == [list(range(30))]
    # The training loader ran its two epochs as a plain loop would.
    assert [e for e, _, _ in model.seen] == [0] * 8 + [1] * 8
