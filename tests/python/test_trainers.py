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


def test_an_abandoned_epoch_starts_again_and_set_epoch_reaches_it_through_the_sampler(folder):
    loader = make_loader(folder)
    first = [idx.tolist() for _, (_, _, idx) in zip(range(2), loader)]  # abandoned part-way
    again = [idx.tolist() for _, _, idx in loader]
    assert again[:2] == first  # epoch 0 again, from its start
    loader.sampler.set_epoch(5)  # where Lightning calls it
    five = [idx.tolist() for _, _, idx in loader]
    other = make_loader(folder)
    other.set_epoch(5)
    assert five == [idx.tolist() for _, _, idx in other]


def test_the_lightning_example_trains_and_resumes(folder, tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "examples" / "lightning_train.py"
    common = [sys.executable, str(example), "--data", str(folder), "--batch-size", "4",
              "--crop", "16", "--ckpt-dir", str(tmp_path / "ckpt")]
    out = subprocess.run(common + ["--epochs", "2"], capture_output=True, text=True, timeout=300,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "2 epoch(s) through nostall: epoch 0" in out.stdout and "epoch 1" in out.stdout
    last = tmp_path / "ckpt" / "last.ckpt"
    assert last.exists()
    again = subprocess.run(common + ["--epochs", "3", "--resume", str(last)], capture_output=True,
                           text=True, timeout=300, cwd=tmp_path)
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
