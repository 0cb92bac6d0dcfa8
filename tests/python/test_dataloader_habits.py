"""What DataLoader and torchvision users write, given to a Loader: torchvision
transforms run as nostall's namesakes (the real torchvision code, from its
wheel), DataLoader's arguments name nostall's way, the attributes scripts
read are there, torch and NumPy dtypes are taken, and a lost batch says so."""
import sys
import types
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

import nostall
from conftest import write_jpeg_folder

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_jpeg_folder(tmp_path_factory.mktemp("habits2"), classes=3, per_class=6, seed=9,
                             min_side=60, max_side=120)


@pytest.fixture(scope="module")
def tv(tmp_path_factory):
    """torchvision.transforms and .v2, imported from torchvision's own wheel
    (its Python code; the compiled operators, which do not load beside this
    torch, are not needed by the transforms' constructors). `make test`
    downloads the wheel (.venv/torchvision/)."""
    wheels = sorted((ROOT / ".venv" / "torchvision").glob("torchvision-*.whl"))
    assert wheels, "torchvision's wheel is missing: `make test` downloads it into .venv/torchvision"
    where = tmp_path_factory.mktemp("torchvision")
    with zipfile.ZipFile(wheels[-1]) as z:
        z.extractall(where, [n for n in z.namelist()
                             if n.startswith("torchvision/") and n.endswith(".py")])
    before = set(sys.modules)
    sys.path.insert(0, str(where))
    sys.modules["torchvision._meta_registrations"] = types.ModuleType("torchvision._meta_registrations")
    try:
        import torchvision.transforms as T
        import torchvision.transforms.v2 as v2
        yield T, v2
    finally:
        sys.path.remove(str(where))
        # torchvision's modules only: torch's own that it imported (e.g.
        # torch.distributed's functional collectives) register operators
        # once per process, and a second import of them fails.
        for name in set(sys.modules) - before:
            if name == "torchvision" or name.startswith("torchvision."):
                del sys.modules[name]


def ours_of(tv_transform):
    from nostall import _torchvision

    return [t.to_dict() for t in _torchvision.convert(tv_transform)]


# ------------------------------------------------------------ torchvision transforms
def test_every_torchvision_transform_nostall_implements_runs_as_nostalls(tv):
    T, v2 = tv
    nt = nostall.transforms
    cases = [  # (torchvision's, nostall's with the same arguments)
        (lambda m: m.RandomResizedCrop(224, scale=(0.2, 1.0)), nt.RandomResizedCrop(224, scale=(0.2, 1.0))),
        (lambda m: m.Resize(256), nt.Resize(256)),
        (lambda m: m.Resize((32, 48), max_size=None), nt.Resize((32, 48))),
        (lambda m: m.CenterCrop(224), nt.CenterCrop(224)),
        (lambda m: m.RandomHorizontalFlip(0.3), nt.RandomHorizontalFlip(0.3)),
        (lambda m: m.RandomVerticalFlip(), nt.RandomVerticalFlip()),
        (lambda m: m.Normalize([0.5, 0.4, 0.3], [0.2, 0.2, 0.2]), nt.Normalize([0.5, 0.4, 0.3], [0.2, 0.2, 0.2])),
        (lambda m: m.ColorJitter(0.4, 0.3, 0.2, 0.1), nt.ColorJitter(0.4, 0.3, 0.2, 0.1)),
        (lambda m: m.ColorJitter(brightness=0.5), nt.ColorJitter(brightness=0.5)),
        (lambda m: m.RandomGrayscale(0.2), nt.RandomGrayscale(0.2)),
        (lambda m: m.GaussianBlur(5, sigma=(0.1, 2.0)), nt.GaussianBlur(5, sigma=(0.1, 2.0))),
        (lambda m: m.RandomRotation(15), nt.RandomRotation(15)),
        (lambda m: m.RandomAffine(10, translate=(0.1, 0.1), scale=(0.9, 1.1)),
         nt.RandomAffine(10, translate=(0.1, 0.1), scale=(0.9, 1.1))),
        (lambda m: m.RandomErasing(p=0.25), nt.RandomErasing(p=0.25)),
        (lambda m: m.TrivialAugmentWide(), nt.TrivialAugmentWide()),
        (lambda m: m.RandAugment(num_ops=2, magnitude=9), nt.RandAugment(num_ops=2, magnitude=9)),
        (lambda m: m.AutoAugment(), nt.AutoAugment()),
        (lambda m: m.RandomInvert(), nt.RandomInvert()),
        (lambda m: m.RandomPosterize(4), nt.RandomPosterize(4)),
        (lambda m: m.RandomSolarize(128), nt.RandomSolarize(128)),
        (lambda m: m.RandomAutocontrast(), nt.RandomAutocontrast()),
        (lambda m: m.RandomEqualize(), nt.RandomEqualize()),
        (lambda m: m.RandomAdjustSharpness(2), nt.RandomAdjustSharpness(2)),
    ]
    for make, want in cases:
        for module in (T, v2):
            got = ours_of(make(module))
            assert got == [want.to_dict()], (module.__name__, make(module))
    assert ours_of(v2.RandomPhotometricDistort()) == [nt.RandomPhotometricDistort().to_dict()]


def test_a_full_torchvision_recipe_gives_the_batches_of_nostalls_own(tv, folder):
    T, v2 = tv
    for recipe in (
            T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ToTensor(),
                       T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]),
            v2.Compose([v2.ToImage(), v2.RandomResizedCrop(32, antialias=True),
                        v2.RandomHorizontalFlip(), v2.ToDtype(torch.float32, scale=True),
                        v2.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # nothing falls back to a Python hook
            theirs = nostall.Loader(folder, batch_size=6, seed=2, shuffle=True, transforms=recipe)
        ours = nostall.Loader(folder, batch_size=6, seed=2, shuffle=True, transforms=[
            nostall.RandomResizedCrop(32), nostall.RandomHorizontalFlip(),
            nostall.Normalize(nostall.IMAGENET_MEAN, nostall.IMAGENET_STD)])
        assert theirs.spec["transforms"] == ours.spec["transforms"]
        for (a, la), (b, lb) in zip(theirs, ours):
            assert a.dtype == torch.float32 and torch.equal(a, b) and torch.equal(la, lb)
    # After a nostall op too (it used to become a per-sample Python hook).
    mixed = nostall.Loader(folder, batch_size=6, transforms=[nostall.Resize((40, 40)),
                                                             T.CenterCrop(32), T.ToTensor()])
    assert mixed.spec["transforms"][-1]["type"] == "CenterCrop"
    images, _ = next(iter(mixed))
    assert images.shape == (6, 3, 32, 32) and images.dtype == torch.float32


def test_a_torchvision_argument_nostall_does_not_take_is_named(tv, folder):
    T, v2 = tv
    with pytest.raises(ValueError, match="RandomResizedCrop.*interpolation.*bilinear"):
        nostall.Loader(folder, transforms=[T.RandomResizedCrop(32, interpolation=T.InterpolationMode.BICUBIC)])
    with pytest.raises(ValueError, match="ToDtype.*scale=False"):
        nostall.Loader(folder, transforms=[v2.ToDtype(torch.float32, scale=False)])


def test_a_torchvision_transform_nostall_lacks_runs_as_a_hook_said_once(tv, folder):
    T, _ = tv
    from nostall import _torchvision

    _torchvision._warned.discard("Lambda")
    halve = T.Lambda(lambda x: x // 2)
    with pytest.warns(UserWarning, match="Lambda has no nostall equivalent: it runs as a Python hook"):
        loader = nostall.Loader(folder, batch_size=6, transforms=[nostall.Resize((16, 16)), halve])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once
        nostall.Loader(folder, batch_size=6, transforms=[nostall.Resize((16, 16)), halve])
    plain = nostall.Loader(folder, batch_size=6, transforms=[nostall.Resize((16, 16))])
    (a, _), (b, _) = next(iter(loader)), next(iter(plain))
    assert torch.equal(a, b // 2)
    with pytest.raises(TypeError, match="Lambda has no nostall equivalent.*only after"):
        nostall.Loader(folder, transforms=[halve, nostall.Resize((16, 16))])


# ------------------------------------------------------------ DataLoader's arguments
@pytest.mark.parametrize("name, value, says", [
    ("num_workers", 8, "num_threads="),
    ("persistent_workers", True, "live as long as it does"),
    ("prefetch_factor", 4, "prefetch="),
    ("collate_fn", lambda b: b, "batch_transform="),
    ("sampler", object(), "shards itself"),
    ("generator", torch.Generator(), "seed="),
    ("pin_memory_device", "cuda", "pin_memory=True"),
])
def test_a_dataloader_argument_names_nostalls_equivalent(folder, name, value, says):
    with pytest.raises(TypeError, match=f"Loader\\({name}=...\\) is torch DataLoader's: .*{says}.*"
                                        "docs/from_torch.md"):
        nostall.Loader(folder, batch_size=4, **{name: value})
    with pytest.raises(TypeError, match="unexpected keyword argument 'no_such'"):
        nostall.Loader(folder, no_such=1)


def test_the_attributes_training_scripts_read(folder):
    loader = nostall.Loader(folder, batch_size=4, drop_last=True, transforms=[nostall.Resize((8, 8))])
    assert len(loader.dataset) == 18 and loader.dataset.classes == loader.classes
    assert loader.batch_size == 4 and loader.drop_last is True
    assert loader.batch_sampler is None
    correct = sum(int((labels >= 0).sum()) for _, labels in loader)
    assert correct / len(loader.dataset) == 16 / 18  # drop_last dropped 2
    assert len(nostall.Loader(folder, subset=5).dataset) == 5


# ------------------------------------------------------------ dtypes, units, lost batches
def test_torch_and_numpy_dtypes_are_taken(folder):
    for dtype in (torch.float32, np.float32, np.dtype("float32"), "float32"):
        images, _ = next(iter(nostall.Loader(folder, batch_size=2, dtype=dtype,
                                             transforms=[nostall.Resize((8, 8))])))
        assert images.dtype == torch.float32 and float(images.max()) <= 1.0
    images, _ = next(iter(nostall.Loader(folder, batch_size=2, dtype=torch.uint8,
                                         transforms=[nostall.Resize((8, 8))])))
    assert images.dtype == torch.uint8
    with pytest.raises(TypeError, match="dtype must be"):
        nostall.Loader(folder, dtype=3.5)


def test_normalize_with_0_255_means_warns_once(folder):
    from nostall import _spec

    _spec._NORMALIZE_WARNED[0] = False
    with pytest.warns(UserWarning, match=r"mean above 1 looks like 0-255 units"):
        nostall.Loader(folder, transforms=[nostall.Resize((8, 8)),
                                           nostall.Normalize([123.7, 116.3, 103.5], [58.4, 57.1, 57.4])])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nostall.Loader(folder, transforms=[nostall.Resize((8, 8)),
                                           nostall.Normalize([123.7, 116.3, 103.5], [58.4, 57.1, 57.4])])
        nostall.Loader(folder, transforms=[nostall.Resize((8, 8)),
                                           nostall.Normalize(nostall.IMAGENET_MEAN, nostall.IMAGENET_STD)])


def test_a_data_error_says_the_whole_batch_is_lost(tmp_path):
    folder = write_jpeg_folder(tmp_path / "d", classes=1, per_class=6, seed=3, min_side=40, max_side=60)
    bad = sorted((folder / "class_0").iterdir())[2]
    bad.write_bytes(b"\xff\xd8\xff\xe0 truncated")
    loader = nostall.Loader(folder, batch_size=3, transforms=[nostall.Resize((8, 8))])
    it = iter(loader)
    with pytest.raises(nostall.DataError, match='whole batch holding it is not handed out.*on_error="skip"') as e:
        next(it)
    assert e.value.item == str(bad)
    assert next(it)[0].shape[0] == 3  # iteration goes on with the next batch
