"""MixUp and CutMix on the consumer side, against torchvision.transforms.v2's formulas."""

import pytest
import torch

import nostall
import nostall.transforms as T


def batch(n=6, classes=4):
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, 3, 16, 20, generator=g), torch.arange(n) % classes


def test_mixup_mixes_each_sample_with_the_previous_one():
    x, y = batch()
    out, soft = T.MixUp(alpha=0.4, num_classes=4)(x, y, epoch=0, step=7)
    # out = lam * x + (1 - lam) * x.roll(1): recover lam from one element
    lam = ((out[0] - x[-1]) / (x[0] - x[-1])).flatten()[0].item()
    assert 0 <= lam <= 1
    assert torch.allclose(out, lam * x + (1 - lam) * x.roll(1, 0), atol=1e-5)
    one_hot = torch.nn.functional.one_hot(y, 4).float()
    assert torch.allclose(soft, lam * one_hot + (1 - lam) * one_hot.roll(1, 0), atol=1e-6)


def test_cutmix_pastes_one_box_and_weights_labels_by_its_area():
    x, y = batch()
    out, soft = T.CutMix(alpha=1.0, num_classes=4)(x, y, epoch=1, step=3)
    changed = (out != x).any(dim=(0, 1))  # the pasted box, the same for every sample
    ys, xs = torch.nonzero(changed, as_tuple=True)
    assert len(ys) > 0
    box = (slice(int(ys.min()), int(ys.max()) + 1), slice(int(xs.min()), int(xs.max()) + 1))
    assert changed[box].all() and changed.sum() == changed[box].numel()
    assert torch.equal(out[:, :, box[0], box[1]], x.roll(1, 0)[:, :, box[0], box[1]])
    area = changed.sum().item() / changed.numel()
    one_hot = torch.nn.functional.one_hot(y, 4).float()
    assert torch.allclose(soft, (1 - area) * one_hot + area * one_hot.roll(1, 0), atol=1e-6)


def test_same_seed_epoch_and_step_give_the_same_mix_whatever_ran_before():
    x, y = batch()
    a = T.RandomChoice([T.MixUp(0.2, num_classes=4), T.CutMix(1.0, num_classes=4)], seed=9)
    b = T.RandomChoice([T.MixUp(0.2, num_classes=4), T.CutMix(1.0, num_classes=4)], seed=9)
    for step in range(5):
        a(x, y, epoch=0, step=step)  # a has run before; b has not
    for step in (2, 11):
        assert torch.equal(a(x, y, epoch=3, step=step)[0], b(x, y, epoch=3, step=step)[0])
    assert not torch.equal(a(x, y, epoch=3, step=2)[0], a(x, y, epoch=4, step=2)[0])
    # both ops are chosen, about equally
    kinds = [(a(x, y, epoch=0, step=s)[0] != x).all().item() for s in range(200)]  # MixUp: all
    assert 60 < sum(kinds) < 140


def test_mixes_the_loaders_batches(jpeg_folder):
    loader = nostall.Loader(jpeg_folder, batch_size=8, transforms=[
        nostall.RandomResizedCrop(32), nostall.Normalize(nostall.IMAGENET_MEAN, nostall.IMAGENET_STD)])
    mix = T.RandomChoice([T.MixUp(0.2, num_classes=3), T.CutMix(1.0, num_classes=3)])
    for step, (images, labels) in enumerate(loader):
        out, soft = mix(images, labels, step=step)
        assert out.shape == images.shape and soft.shape == (len(labels), 3)
        assert torch.allclose(soft.sum(1), torch.ones(len(labels)))


def test_bad_inputs_are_clear():
    x, y = batch()
    with pytest.raises(ValueError, match="num_classes is needed"):
        T.MixUp(alpha=1.0)
    with pytest.raises(ValueError, match="alpha must be positive"):
        T.CutMix(alpha=0, num_classes=4)
    with pytest.raises(ValueError, match="images must be float"):
        T.MixUp(num_classes=4)(x.to(torch.uint8), y)
    with pytest.raises(ValueError, match="outside"):
        T.CutMix(num_classes=3)(x, y + 3)


@pytest.mark.parametrize("op", [T.MixUp, T.CutMix])
def test_inplace_gives_the_same_batch_in_the_same_memory(op):
    x, y = batch()
    expected, soft = op(0.5, num_classes=4)(x.clone(), y, step=4)
    inplace = x.clone()
    out, soft2 = op(0.5, num_classes=4, inplace=True)(inplace, y, step=4)
    assert out.data_ptr() == inplace.data_ptr()
    assert torch.allclose(out, expected, atol=1e-6) and torch.equal(soft, soft2)


@pytest.mark.slow
def test_the_recipe_example_trains(jpeg_folder):
    from pathlib import Path

    import warm

    example = Path(__file__).resolve().parents[2] / "examples" / "imagenet_recipe.py"
    out = warm.run(example, ["--data", jpeg_folder, "--steps", "3", "--batch-size", "8", "--crop", "64"],
                   timeout=300)
    assert out.returncode == 0, out.stderr
    assert "TrivialAugmentWide" in out.stdout and "images/s" in out.stdout


@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_cutmix_pastes_its_box_over_rows_and_columns_in_either_layout(layout, inplace):
    x, y = batch(8)
    x = x if layout == "NCHW" else x.permute(0, 2, 3, 1).contiguous()  # (8, 16, 20, 3)
    h_axis, w_axis, c_axis = (2, 3, 1) if layout == "NCHW" else (1, 2, 3)
    src = x.clone()
    out, soft = T.CutMix(alpha=1.0, num_classes=4, layout=layout, inplace=inplace)(
        x, y, epoch=1, step=3)
    changed = (out != src).any(dim=(0, c_axis))  # (H, W): the box, every channel with it
    assert changed.shape == (16, 20)
    ys, xs = torch.nonzero(changed, as_tuple=True)
    assert len(ys) > 0
    rows = slice(int(ys.min()), int(ys.max()) + 1)
    cols = slice(int(xs.min()), int(xs.max()) + 1)
    assert changed[rows, cols].all() and changed.sum() == changed[rows, cols].numel()
    # every channel of the box comes from the previous sample (torchvision's x.roll(1))
    index = [slice(None)] * 4
    index[h_axis], index[w_axis] = rows, cols
    assert torch.equal(out[tuple(index)], src.roll(1, 0)[tuple(index)])
    outside = torch.ones(16, 20, dtype=torch.bool)
    outside[rows, cols] = False
    keep = outside[None, :, :, None] if layout == "NHWC" else outside[None, None]
    assert torch.equal(out.masked_select(keep), src.masked_select(keep))
    area = changed.sum().item() / changed.numel()
    one_hot = torch.nn.functional.one_hot(y, 4).float()
    assert torch.allclose(soft, (1 - area) * one_hot + area * one_hot.roll(1, 0), atol=1e-6)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_both_layouts_give_the_same_mix(layout):
    x, y = batch(8)
    nhwc = x.permute(0, 2, 3, 1).contiguous()
    for op in (T.MixUp, T.CutMix):
        a, sa = op(1.0, num_classes=4)(x, y, epoch=2, step=5)
        b, sb = op(1.0, num_classes=4, layout="NHWC")(nhwc, y, epoch=2, step=5)
        assert torch.equal(a.permute(0, 2, 3, 1), b) and torch.equal(sa, sb)


def test_a_batch_in_the_other_layout_is_an_error_not_a_wrong_mix(jpeg_folder):
    loader = nostall.Loader(jpeg_folder, batch_size=8, layout="NHWC", transforms=[
        nostall.RandomResizedCrop(32), nostall.Normalize(nostall.IMAGENET_MEAN, nostall.IMAGENET_STD)])
    images, labels = next(iter(loader))
    with pytest.raises(ValueError, match='layout="NHWC"'):
        T.CutMix(1.0, num_classes=3)(images, labels)
    out, _ = T.CutMix(1.0, num_classes=3, layout=loader.spec["layout"])(images, labels)
    assert out.shape == (8, 32, 32, 3)
