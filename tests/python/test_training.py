"""A real PyTorch training run through nostall matches one through torch's DataLoader."""

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

import nostall
from nostall.datasets import fashion_mnist_to_folder, load_fashion_mnist

TRAIN, TEST, EPOCHS, BATCH = 8000, 2000, 3, 64
MEAN, STD = 0.2860, 0.3530


@pytest.fixture(scope="module")
def fmnist(tmp_path_factory):
    return fashion_mnist_to_folder(tmp_path_factory.mktemp("fmnist"), "train", limit=TRAIN)


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 7 * 7, 10))


def train(model, batches_per_epoch):
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(EPOCHS):
        for images, labels in batches_per_epoch(epoch):
            opt.zero_grad()
            loss_fn(model(images), labels).backward()
            opt.step()
    return model


def accuracy(model):
    images, labels = load_fashion_mnist("test")
    x = (torch.from_numpy(images[:TEST].astype(np.float32)) / 255 - MEAN) / STD
    with torch.no_grad():
        pred = model(x[:, None]).argmax(1)
    return (pred == torch.from_numpy(labels[:TEST])).float().mean().item()


class FolderDataset(torch.utils.data.Dataset):
    """What a PyTorch user writes: PIL decode, ToTensor, Normalize."""

    def __init__(self, root):
        self.classes = sorted(p.name for p in root.iterdir() if p.is_dir())
        self.items = [(p, i) for i, c in enumerate(self.classes) for p in sorted((root / c).iterdir())]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        path, label = self.items[i]
        x = torch.from_numpy(np.asarray(Image.open(path).convert("L"), np.float32) / 255)
        return ((x - MEAN) / STD)[None], label


@pytest.fixture
def one_torch_thread():
    """The two trainings on one intra-op thread: the suite runs a test per
    core, and a second thread would only contend with the other test."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


@pytest.mark.slow
def test_accuracy_matches_torch_dataloader(fmnist, one_torch_thread):
    loader = nostall.Loader(fmnist, batch_size=BATCH, shuffle=True, seed=0, mode="L",
                            transforms=[nostall.Normalize([MEAN], [STD])])
    assert loader.classes[0] == "0-t-shirt" and len(loader.classes) == 10

    def nostall_epoch(epoch):
        loader.set_epoch(epoch)
        return loader

    ours = accuracy(train(make_model(), nostall_epoch))

    torch.manual_seed(0)
    baseline_loader = torch.utils.data.DataLoader(FolderDataset(fmnist), batch_size=BATCH,
                                                  shuffle=True)
    theirs = accuracy(train(make_model(), lambda epoch: baseline_loader))
    print(f"test accuracy: nostall {ours:.4f}, torch DataLoader {theirs:.4f}")
    assert ours > 0.75, "the model did not learn through nostall"
    assert abs(ours - theirs) <= 0.02
    stats = loader.stats()
    assert stats["samples"] == EPOCHS * TRAIN
    assert 0.0 <= stats["consumer"]["stall_fraction"] <= 1.0
