"""nostall's transforms against the PIL pipeline torchvision runs."""

import numpy as np
import pytest
import torch
from PIL import Image

import nostall


def pil_resize_center_crop(path, resize, crop):
    img = Image.open(path).convert("RGB")
    w, h = img.size
    if w <= h:
        nw, nh = resize, int(resize * h / w)
    else:
        nw, nh = int(resize * w / h), resize
    img = img.resize((nw, nh), Image.BILINEAR)
    left, top = int(round((nw - crop) / 2.0)), int(round((nh - crop) / 2.0))
    return np.asarray(img.crop((left, top, left + crop, top + crop)))


def differences_from_pil(folder, dct_scaling, layout="NHWC", flip=False):
    loader = nostall.Loader(folder, batch_size=36, output="numpy", layout=layout,
                            transforms=[nostall.Resize(96), nostall.CenterCrop(80),
                                        nostall.RandomHorizontalFlip(1.0 if flip else 0.0)],
                            return_indices=True, dct_scaling=dct_scaling)
    images, _, indices = next(iter(loader))
    if layout == "NCHW":
        images = images.transpose(0, 2, 3, 1)
    step = -1 if flip else 1
    return [np.abs(img.astype(int)
                   - pil_resize_center_crop(loader.key(int(i)), 96, 80)[:, ::step]).mean()
            for img, i in zip(images, indices)]


@pytest.mark.parametrize("layout,flip", [("NHWC", False), ("NCHW", False), ("NCHW", True)])
def test_full_resolution_decode_reproduces_pil(jpeg_folder, layout, flip):
    # Same filter, same box; PIL rounds to uint8 between its two passes, the
    # resampler keeps floats: the stated tolerance is a mean of 0.2 of 255.
    # NCHW goes through the fused planar path (resample + layout + flip).
    diffs = differences_from_pil(jpeg_folder, dct_scaling=False, layout=layout, flip=flip)
    assert max(diffs) < 0.2, diffs


def test_dct_scaled_decode_stays_close_to_pil(jpeg_folder):
    # Shrinking in the JPEG decoder filters differently from PIL's full-size
    # resize (PIL's own draft mode differs by as much); bounded and small.
    diffs = sorted(differences_from_pil(jpeg_folder, dct_scaling=True))
    assert diffs[len(diffs) // 2] < 4.0 and diffs[-1] < 8.0, diffs


def test_normalize_matches_totensor_then_normalize(jpeg_folder):
    mean, std = (0.4, 0.5, 0.6), (0.2, 0.25, 0.3)
    raw = nostall.Loader(jpeg_folder, batch_size=4, transforms=[nostall.CenterCrop(64)])
    norm = nostall.Loader(jpeg_folder, batch_size=4,
                          transforms=[nostall.CenterCrop(64), nostall.Normalize(mean, std)])
    (u8, _), (f32, _) = next(iter(raw)), next(iter(norm))
    expected = (u8.float() / 255 - torch.tensor(mean)[:, None, None]) / torch.tensor(std)[:, None, None]
    assert f32.dtype == torch.float32
    assert torch.allclose(f32, expected, atol=1e-5)


def test_random_resized_crop_varies_and_flip_mirrors(jpeg_folder):
    flipped = nostall.Loader(jpeg_folder, batch_size=4,
                             transforms=[nostall.CenterCrop(64), nostall.RandomHorizontalFlip(1.0)])
    plain = nostall.Loader(jpeg_folder, batch_size=4, transforms=[nostall.CenterCrop(64)])
    (f, _), (p, _) = next(iter(flipped)), next(iter(plain))
    assert torch.equal(f, p.flip(-1))
    rrc = nostall.Loader(jpeg_folder, batch_size=36, seed=1, transforms=[nostall.RandomResizedCrop(32)])
    a, _ = next(iter(rrc))
    assert a.shape == (36, 3, 32, 32)
    rrc.set_epoch(1)
    b, _ = next(iter(rrc))
    assert not torch.equal(a, b)


def test_bad_transform_arguments():
    with pytest.raises(ValueError):
        nostall.RandomResizedCrop(224, scale=(0.5, 0.1))
    with pytest.raises(ValueError):
        nostall.RandomHorizontalFlip(2)
    with pytest.raises(ValueError):
        nostall.CenterCrop((0, 3))
