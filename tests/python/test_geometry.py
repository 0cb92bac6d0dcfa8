"""The geometry a sample's image gets, as one matrix that points can follow.

Each image is black with one white 5x5 square at a known place. The loader
crops, resizes, flips, rotates and shears it; ``sample_params(...)["matrix"]``
must say where the square's center went: the centroid of the white pixels in
the batch is checked against ``apply_to_points`` of the square's center."""

import numpy as np
import pytest
from PIL import Image

import nostall
from nostall.transforms import RandomAffine, RandomRotation, RandomVerticalFlip, apply_to_points

SIZES = [(200, 160), (160, 200), (240, 180), (180, 180)]


@pytest.fixture(scope="module")
def dots(tmp_path_factory):
    """24 PNGs (lossless: the square stays square), one square each."""
    root = tmp_path_factory.mktemp("dots")
    rng = np.random.default_rng(11)
    where = {}
    (root / "a").mkdir()
    for i in range(24):
        w, h = SIZES[i % len(SIZES)]
        x, y = int(rng.integers(30, w - 35)), int(rng.integers(30, h - 35))
        img = np.zeros((h, w), np.uint8)
        img[y:y + 5, x:x + 5] = 255
        Image.fromarray(img).save(root / "a" / f"{i:03d}.png")
        where[f"{i:03d}.png"] = (w, h, x + 2.5, y + 2.5)  # the square's center
    return root, where


def centroid(img):
    w = img.astype(np.float64)
    w[w < 40] = 0  # the background, and the faint edges of resampling
    total = w.sum()
    if total == 0:
        return None
    ys, xs = np.mgrid[0:img.shape[0], 0:img.shape[1]]
    return ((xs + 0.5) * w).sum() / total, ((ys + 0.5) * w).sum() / total


@pytest.mark.parametrize("transforms", [
    [nostall.RandomResizedCrop(96, scale=(0.5, 1.0)), nostall.RandomHorizontalFlip()],
    [nostall.Resize((120, 100)), RandomAffine(degrees=30, translate=(0.1, 0.1), scale=(0.8, 1.2),
                                              shear=10), RandomVerticalFlip()],
    [nostall.RandomResizedCrop(96, scale=(0.6, 1.0)), RandomRotation(40),
     nostall.RandomHorizontalFlip()],
], ids=["crop-flip", "affine-vflip", "crop-rotate-flip"])
def test_points_land_where_the_matrix_says(dots, transforms):
    root, where = dots
    checked = 0
    with nostall.Loader(str(root), batch_size=8, shuffle=True, seed=9, mode="L",
                        transforms=transforms, output="numpy", return_indices=True) as loader:
        for epoch in range(3):
            loader.set_epoch(epoch)
            for images, _, indices in loader:
                for img, index in zip(images, indices):
                    w, h, cx, cy = where[loader.key(int(index)).rsplit("/", 1)[1]]
                    params = nostall.transforms.sample_params(
                        transforms, w, h, seed=9, epoch=epoch, index=int(index), mode="L")
                    (px, py), = apply_to_points(params, [[cx, cy]])
                    out_h, out_w = params["size"]
                    if not (5 < px < out_w - 5 and 5 < py < out_h - 5):
                        continue  # cropped away, or at an edge where it is cut
                    got = centroid(img[0])
                    assert got is not None, f"the square should be near ({px:.1f}, {py:.1f})"
                    assert abs(got[0] - px) < 1.5 and abs(got[1] - py) < 1.5, (got, (px, py), params)
                    checked += 1
    assert checked >= 30  # most samples keep their square in view


def test_the_matrix_composes_crop_flip_and_ops():
    t = [nostall.Resize((50, 100)), nostall.RandomHorizontalFlip(p=1.0), RandomVerticalFlip(p=1.0)]
    p = nostall.transforms.sample_params(t, 200, 100)
    # (0, 0) -> top-left corner -> flipped both ways: the bottom-right corner
    np.testing.assert_allclose(apply_to_points(p, [[0, 0], [200, 100], [50, 25]]),
                               [[100, 50], [0, 0], [75, 37.5]])
    with pytest.raises(ValueError, match="2 x 3"):
        apply_to_points([[1, 0], [0, 1]], [[0, 0]])
