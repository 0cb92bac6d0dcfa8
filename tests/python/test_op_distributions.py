"""The random parameters each transform draws have torchvision's distributions.

nostall draws from Philox keyed by (seed, epoch, index), torchvision from
torch's generator, so single draws differ; their distributions must not. Each
test draws thousands of parameter sets with nostall.transforms.sample_params
(what the loader uses, no pixels touched) and compares them with torchvision's
get_params run here on torch's generator: two-sample Kolmogorov-Smirnov for
continuous values, chi-square-like bounds for categories. Seeds are fixed, so
the tests are deterministic; the bounds are at the 0.1% level.
"""

import math
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import nostall
import nostall.transforms as T

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from pil_transforms import random_erasing_params, random_resized_crop_params  # noqa: E402

N = 4000


def draws(transforms, n=N, width=500, height=375, seed=0):
    return [T.sample_params(transforms, width, height, seed=seed, index=i) for i in range(n)]


def ks_same(a, b):
    """Two-sample KS at the 0.1% level: True when a and b look alike."""
    a, b = np.sort(np.asarray(a, float)), np.sort(np.asarray(b, float))
    grid = np.concatenate([a, b])
    d = np.abs(np.searchsorted(a, grid, side="right") / len(a)
               - np.searchsorted(b, grid, side="right") / len(b)).max()
    return d < 1.95 * math.sqrt((len(a) + len(b)) / (len(a) * len(b))), d


def share_close(count, n, p):
    """count/n within 4 standard errors of p."""
    return abs(count / n - p) <= 4 * math.sqrt(p * (1 - p) / n) + 1e-12


# --- RandomResizedCrop -------------------------------------------------------

@pytest.mark.parametrize("size", [(500, 375), (300, 800)])
def test_random_resized_crop_boxes_have_torchvision_distribution(size):
    W, H = size
    ours = [p["box"] for p in draws([nostall.RandomResizedCrop(224)], width=W, height=H)]
    g = torch.Generator().manual_seed(0)
    theirs = [random_resized_crop_params(W, H, generator=g) for _ in range(N)]

    def features(boxes):
        b = np.asarray(boxes, float)
        x, y, w, h = b.T
        return {"scale": w * h / (W * H), "log_ratio": np.log(w / h),
                "x_offset": np.where(W > w, x / np.maximum(W - w, 1), 0.5),
                "y_offset": np.where(H > h, y / np.maximum(H - h, 1), 0.5),
                "centre_x": (x + w / 2) / W, "centre_y": (y + h / 2) / H}

    fo, ft = features(ours), features(theirs)
    for name in fo:
        same, d = ks_same(fo[name], ft[name])
        assert same, (name, d)


def test_brightness_gap_to_a_pil_pipeline_is_the_crops_not_the_pixels(jpeg_folder):
    # On the same crop boxes, nostall's RandomResizedCrop output has PIL's
    # mean brightness (crop + resize(BILINEAR)) to a few hundredths of a level;
    # two seeds of either pipeline differ by tenths of a level (sampling).
    ts = [nostall.RandomResizedCrop(64)]
    for dct in (False, True):
        loader = nostall.Loader(jpeg_folder, batch_size=36, output="numpy", layout="NHWC",
                                seed=3, transforms=ts, return_indices=True, dct_scaling=dct)
        gaps = []
        for images, _, indices in loader:
            for img, i in zip(images, indices):
                src = Image.open(loader.key(int(i))).convert("RGB")
                x, y, w, h = T.sample_params(ts, src.width, src.height, seed=3,
                                             index=int(i))["box"]
                ref = np.asarray(src.crop((x, y, x + w, y + h)).resize((64, 64), Image.BILINEAR))
                gaps.append(img.astype(float).mean() - ref.mean())
        assert abs(np.mean(gaps)) < 0.05, (dct, np.mean(gaps))


def test_horizontal_flip_probability():
    n = sum(p["flip"] for p in draws([nostall.RandomHorizontalFlip(0.3)]))
    assert share_close(n, N, 0.3)


# --- pixel ops ---------------------------------------------------------------

def test_color_jitter_factors_are_uniform_and_order_is_a_random_permutation():
    ps = [p["ops"][0] for p in draws([T.ColorJitter(0.4, 0.3, 0.2, 0.1)])]
    rng = np.random.default_rng(0)
    for name, lo, hi in [("brightness", 0.6, 1.4), ("contrast", 0.7, 1.3),
                         ("saturation", 0.8, 1.2), ("hue", -0.1, 0.1)]:
        values = [p[name] for p in ps]
        assert min(values) >= lo and max(values) <= hi
        assert ks_same(values, rng.uniform(lo, hi, N))[0], name
    orders = Counter(tuple(p["order"]) for p in ps)
    assert len(orders) == 24  # torch.randperm(4): every order
    for count in orders.values():
        assert share_close(count, N, 1 / 24)
    # A factor of 0 (torchvision: None) is never drawn nor applied.
    assert "hue" not in draws([T.ColorJitter(brightness=0.5)], n=10)[0]["ops"][0]


TRIVIAL_OPS = ["Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness",
               "Color", "Contrast", "Sharpness", "Posterize", "Solarize", "AutoContrast",
               "Equalize"]


def linspace(a, b, n):
    return torch.linspace(a, b, n).tolist()


def trivial_space(bins=31):
    return {
        "ShearX": (linspace(0.0, 0.99, bins), True), "ShearY": (linspace(0.0, 0.99, bins), True),
        "TranslateX": (linspace(0.0, 32.0, bins), True),
        "TranslateY": (linspace(0.0, 32.0, bins), True),
        "Rotate": (linspace(0.0, 135.0, bins), True),
        "Brightness": (linspace(0.0, 0.99, bins), True), "Color": (linspace(0.0, 0.99, bins), True),
        "Contrast": (linspace(0.0, 0.99, bins), True),
        "Sharpness": (linspace(0.0, 0.99, bins), True),
        "Posterize": ((8 - (torch.arange(bins) / ((bins - 1) / 6)).round().int()).tolist(), False),
        "Solarize": (linspace(255.0, 0.0, bins), False),
    }


def test_trivial_augment_wide_ops_magnitudes_and_signs():
    ps = [p["ops"][0] for p in draws([T.TrivialAugmentWide()], n=2 * N)]
    ops = Counter(p["aug"] for p in ps)
    assert set(ops) == set(TRIVIAL_OPS)
    for count in ops.values():
        assert share_close(count, 2 * N, 1 / 14)
    space = trivial_space()
    for name, (mags, signed) in space.items():
        ms = [p["magnitude"] for p in ps if p["aug"] == name]
        # every value is one of torchvision's bins (float32 linspace), drawn as
        # often as the bins hold it (Posterize's 31 bins hold 7 values)
        for m in ms:
            assert min(abs(abs(m) - v) for v in mags) < 1e-5, (name, m)
        values = Counter(round(abs(m), 4) for m in ms)
        expected = Counter(round(v, 4) for v in mags)
        assert set(values) == set(expected), name
        for v, count in values.items():
            assert share_close(count, len(ms), expected[v] / len(mags)), (name, v)
        if signed:
            assert share_close(sum(m < 0 for m in ms), len(ms), 0.5 * (1 - 1 / 31)), name
        else:
            assert all(m >= 0 for m in ms), name


def test_rand_augment_uses_the_magnitude_bin_it_is_given():
    ps = [op for p in draws([T.RandAugment(num_ops=2, magnitude=9)], n=1500) for op in p["ops"]]
    assert len(ps) == 3000
    # No crop before it: the image is the 500x375 source (TranslateX is 150/331 of its width).
    expected = {"ShearX": 0.3 * 9 / 30, "Rotate": 9.0, "Brightness": 0.9 * 9 / 30,
                "Posterize": 7, "Solarize": 255 - 9 * 8.5,
                "TranslateX": 150 / 331 * 500 * 9 / 30, "TranslateY": 150 / 331 * 375 * 9 / 30}
    for p in ps:
        if p["aug"] in expected:
            assert abs(abs(p["magnitude"]) - expected[p["aug"]]) < 1e-3, p


AUTOAUGMENT_IMAGENET = [
    (("Posterize", 0.4), ("Rotate", 0.6)), (("Solarize", 0.6), ("AutoContrast", 0.6)),
    (("Equalize", 0.8), ("Equalize", 0.6)), (("Posterize", 0.6), ("Posterize", 0.6)),
    (("Equalize", 0.4), ("Solarize", 0.2)), (("Equalize", 0.4), ("Rotate", 0.8)),
    (("Solarize", 0.6), ("Equalize", 0.6)), (("Posterize", 0.8), ("Equalize", 1.0)),
    (("Rotate", 0.2), ("Solarize", 0.6)), (("Equalize", 0.6), ("Posterize", 0.4)),
    (("Rotate", 0.8), ("Color", 0.4)), (("Rotate", 0.4), ("Equalize", 0.6)),
    (("Equalize", 0.0), ("Equalize", 0.8)), (("Invert", 0.6), ("Equalize", 1.0)),
    (("Color", 0.6), ("Contrast", 1.0)), (("Rotate", 0.8), ("Color", 1.0)),
    (("Color", 0.8), ("Solarize", 0.8)), (("Sharpness", 0.4), ("Invert", 0.6)),
    (("ShearX", 0.6), ("Equalize", 1.0)), (("Color", 0.4), ("Equalize", 0.6)),
    (("Equalize", 0.4), ("Solarize", 0.2)), (("Solarize", 0.6), ("AutoContrast", 0.6)),
    (("Invert", 0.6), ("Equalize", 1.0)), (("Color", 0.6), ("Contrast", 1.0)),
    (("Equalize", 0.8), ("Equalize", 0.6)),
]


def test_auto_augment_applies_each_sub_policy_op_with_its_probability():
    ps = [p["ops"] for p in draws([T.AutoAugment()], n=2 * N)]
    n = len(ps)
    # How many ops a sample gets: 0, 1 or 2, from the 25 sub-policies' probabilities.
    expect = [0.0, 0.0, 0.0]
    for (_, p1), (_, p2) in AUTOAUGMENT_IMAGENET:
        expect[0] += (1 - p1) * (1 - p2) / 25
        expect[1] += (p1 * (1 - p2) + (1 - p1) * p2) / 25
        expect[2] += p1 * p2 / 25
    counts = Counter(len(ops) for ops in ps)
    for k in range(3):
        assert share_close(counts[k], n, expect[k]), (k, counts, expect)
    # Which ops: each op's share of applied ops.
    weight = Counter()
    for (a, p1), (b, p2) in AUTOAUGMENT_IMAGENET:
        weight[a] += p1
        weight[b] += p2
    total = sum(weight.values())
    seen = Counter(op["aug"] for ops in ps for op in ops)
    applied = sum(seen.values())
    for name, w in weight.items():
        assert share_close(seen[name], applied, w / total), (name, seen[name], applied)


def test_random_erasing_boxes_have_torchvision_distribution():
    H = W = 224
    ts = [nostall.CenterCrop(224), nostall.Normalize((0.5,) * 3, (0.5,) * 3),
          T.RandomErasing(p=0.5)]
    ps = [p["ops"][0] for p in draws(ts)]
    applied = [p for p in ps if p["applied"]]
    assert share_close(len(applied), N, 0.5)
    g = torch.Generator().manual_seed(0)
    theirs = []
    while len(theirs) < len(applied):
        box = random_erasing_params(H, W, generator=g)
        if box is not None:
            theirs.append(box)
    ours = np.asarray([p["box"] for p in applied], float)
    ref = np.asarray(theirs, float)
    for k, name in enumerate(["top", "left", "height", "width"]):
        same, d = ks_same(ours[:, k], ref[:, k])
        assert same, (name, d)
    same, d = ks_same(ours[:, 2] * ours[:, 3], ref[:, 2] * ref[:, 3])
    assert same, ("area", d)


@pytest.mark.parametrize("transform,key,lo,hi", [
    (T.GaussianBlur(5, sigma=(0.1, 2.0)), "sigma", 0.1, 2.0),
    (T.RandomRotation(30), "angle", -30, 30),
    (T.RandomRotation((10, 50)), "angle", 10, 50),
    (T.RandomAffine(degrees=15), "angle", -15, 15),
    (T.RandomAffine(degrees=0, scale=(0.8, 1.2)), "scale", 0.8, 1.2),
])
def test_continuous_parameters_are_uniform(transform, key, lo, hi):
    values = [p["ops"][0][key] for p in draws([transform])]
    assert min(values) >= lo and max(values) <= hi
    assert ks_same(values, np.random.default_rng(1).uniform(lo, hi, N))[0]


def test_random_affine_translate_and_shear():
    ps = [p["ops"][0] for p in draws([T.RandomAffine(0, translate=(0.1, 0.2), shear=(-5, 5, 0, 8))])]
    tx = np.array([p["translate"][0] for p in ps])
    ty = np.array([p["translate"][1] for p in ps])
    # int(round(uniform(-0.1 * 500, 0.1 * 500))): integers, within bounds, uniform
    assert (tx == np.round(tx)).all() and abs(tx).max() <= 50 and abs(ty).max() <= 75
    rng = np.random.default_rng(2)
    assert ks_same(tx, np.round(rng.uniform(-50, 50, N)))[0]
    assert ks_same(ty, np.round(rng.uniform(-75, 75, N)))[0]
    assert ks_same([p["shear"][0] for p in ps], rng.uniform(-5, 5, N))[0]
    assert ks_same([p["shear"][1] for p in ps], rng.uniform(0, 8, N))[0]


@pytest.mark.parametrize("transform,p", [
    (T.RandomGrayscale(), 0.1), (T.RandomVerticalFlip(0.3), 0.3), (T.RandomInvert(), 0.5),
    (T.RandomPosterize(4, p=0.2), 0.2), (T.RandomSolarize(128, p=0.7), 0.7),
    (T.RandomAutocontrast(), 0.5), (T.RandomEqualize(0.9), 0.9),
    (T.RandomAdjustSharpness(2, p=0.4), 0.4),
])
def test_probability_of_the_random_apply_ops(transform, p):
    n = sum(d["ops"][0]["applied"] for d in draws([transform]))
    assert share_close(n, N, p), (n, N, p)


def test_draws_depend_on_seed_epoch_and_index_only():
    ts = [nostall.RandomResizedCrop(64), T.TrivialAugmentWide(), T.ColorJitter(0.4, 0.4)]
    a = T.sample_params(ts, 300, 200, seed=5, epoch=2, index=17)
    assert a == T.sample_params(ts, 300, 200, seed=5, epoch=2, index=17)
    assert a != T.sample_params(ts, 300, 200, seed=5, epoch=3, index=17)
    assert a != T.sample_params(ts, 300, 200, seed=6, epoch=2, index=17)
    # Adding ops does not change the crops: the geometry has its own stream.
    assert a["box"] == T.sample_params(ts[:1], 300, 200, seed=5, epoch=2, index=17)["box"]
