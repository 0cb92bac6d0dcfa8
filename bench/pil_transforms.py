"""torchvision's transforms on PIL images, written out with the same PIL calls.

torchvision does not install beside the pinned torch, so its code paths on
PIL images are reproduced here (functional_pil, autoaugment._apply_op, the
get_params of each random transform, on torch's generator). Two users:
  - bench/bench_loader.py: the torch DataLoader + PIL contender, and
  - tests/python/test_ops.py: the references nostall's ops are tested against.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from PIL import Image, ImageEnhance, ImageOps

MODES = {"nearest": Image.NEAREST, "bilinear": Image.BILINEAR}


# ------------------------------------------------------------- functional

def inverse_affine(center, angle, translate, scale, shear):
    """torchvision.transforms.functional._get_inverse_affine_matrix."""
    rot = math.radians(angle)
    sx, sy = math.radians(shear[0]), math.radians(shear[1])
    cx, cy = center
    tx, ty = translate
    a = math.cos(rot - sy) / math.cos(sy)
    b = -math.cos(rot - sy) * math.tan(sx) / math.cos(sy) - math.sin(rot)
    c = math.sin(rot - sy) / math.cos(sy)
    d = -math.sin(rot - sy) * math.tan(sx) / math.cos(sy) + math.cos(rot)
    m = [x / scale for x in [d, -b, 0.0, -c, a, 0.0]]
    m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty)
    m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty)
    m[2] += cx
    m[5] += cy
    return m


def pil_fill(img, fill):
    fill = 0 if fill is None else fill
    if isinstance(fill, (int, float)):
        return tuple([int(fill)] * len(img.getbands())) if len(img.getbands()) > 1 else int(fill)
    return tuple(int(f) for f in fill)


def affine(img, angle, translate, scale, shear, resample=Image.NEAREST, fill=0, center=None):
    """F.affine on a PIL image."""
    if center is None:
        center = [img.width * 0.5, img.height * 0.5]
    m = inverse_affine(center, angle, translate, scale, shear)
    return img.transform(img.size, Image.AFFINE, m, resample, fillcolor=pil_fill(img, fill))


def rotate(img, angle, resample=Image.NEAREST, fill=0, center=None):
    """F.rotate on a PIL image (expand=False)."""
    return img.rotate(angle, resample, expand=False, center=center, fillcolor=pil_fill(img, fill))


def adjust_hue(img, hue_factor):
    """F.adjust_hue on a PIL image."""
    if img.mode == "L":
        return img
    h, s, v = img.convert("HSV").split()
    np_h = np.array(h, dtype=np.uint8)
    np_h += np.uint8(int(hue_factor * 255) & 0xFF)  # numpy's uint8 cast of a float wraps
    return Image.merge("HSV", (Image.fromarray(np_h, "L"), s, v)).convert(img.mode)


def apply_op(img, name, m, resample=Image.NEAREST, fill=None):
    """torchvision.transforms.autoaugment._apply_op on a PIL image."""
    if name == "ShearX":
        return affine(img, 0.0, [0, 0], 1.0, [math.degrees(math.atan(m)), 0.0], resample, fill,
                      center=[0, 0])
    if name == "ShearY":
        return affine(img, 0.0, [0, 0], 1.0, [0.0, math.degrees(math.atan(m))], resample, fill,
                      center=[0, 0])
    if name == "TranslateX":
        return affine(img, 0.0, [int(m), 0], 1.0, [0.0, 0.0], resample, fill)
    if name == "TranslateY":
        return affine(img, 0.0, [0, int(m)], 1.0, [0.0, 0.0], resample, fill)
    if name == "Rotate":
        return rotate(img, m, resample, fill)
    if name == "Brightness":
        return ImageEnhance.Brightness(img).enhance(1.0 + m)
    if name == "Color":
        return ImageEnhance.Color(img).enhance(1.0 + m)
    if name == "Contrast":
        return ImageEnhance.Contrast(img).enhance(1.0 + m)
    if name == "Sharpness":
        return ImageEnhance.Sharpness(img).enhance(1.0 + m)
    if name == "Posterize":
        return ImageOps.posterize(img, int(m))
    if name == "Solarize":
        return ImageOps.solarize(img, m)
    if name == "AutoContrast":
        return ImageOps.autocontrast(img)
    if name == "Equalize":
        return ImageOps.equalize(img)
    if name == "Invert":
        return ImageOps.invert(img)
    assert name == "Identity", name
    return img


def gaussian_blur(img, kernel_size, sigma):
    """F.gaussian_blur on a PIL image: torch's conv2d on its tensor, reflect padding."""
    t = torch.from_numpy(np.array(img)).permute(2, 0, 1)[None].float()
    kx, ky = kernel_size

    def k1(size):
        x = torch.linspace(-(size - 1) * 0.5, (size - 1) * 0.5, steps=size)
        pdf = torch.exp(-0.5 * (x / sigma).pow(2))
        return pdf / pdf.sum()

    kernel = torch.mm(k1(ky)[:, None], k1(kx)[None, :]).expand(3, 1, ky, kx)
    t = torch.nn.functional.pad(t, [kx // 2, kx // 2, ky // 2, ky // 2], mode="reflect")
    t = torch.nn.functional.conv2d(t, kernel, groups=3)
    return Image.fromarray(torch.round(t)[0].permute(1, 2, 0).clamp(0, 255).to(torch.uint8).numpy())


# ------------------------------------------------------------- random transforms

def random_resized_crop_params(width, height, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3),
                               generator=None):
    """RandomResizedCrop.get_params: (left, top, w, h), from torch's generator."""
    g = generator
    area = width * height
    log_ratio = torch.log(torch.tensor(ratio))
    for _ in range(10):
        target_area = area * torch.empty(1).uniform_(scale[0], scale[1], generator=g).item()
        aspect = math.exp(torch.empty(1).uniform_(log_ratio[0], log_ratio[1], generator=g).item())
        w = int(round(math.sqrt(target_area * aspect)))
        h = int(round(math.sqrt(target_area / aspect)))
        if 0 < w <= width and 0 < h <= height:
            top = torch.randint(0, height - h + 1, size=(1,), generator=g).item()
            left = torch.randint(0, width - w + 1, size=(1,), generator=g).item()
            return left, top, w, h
    in_ratio = width / height
    if in_ratio < min(ratio):
        w, h = width, int(round(width / min(ratio)))
    elif in_ratio > max(ratio):
        h, w = height, int(round(height * max(ratio)))
    else:
        w, h = width, height
    return (width - w) // 2, (height - h) // 2, w, h


class TrivialAugmentWide:
    def __init__(self, num_magnitude_bins=31, interpolation="nearest", fill=None):
        self.bins, self.resample, self.fill = num_magnitude_bins, MODES[interpolation], fill

    def __call__(self, img):
        b = self.bins
        space = {
            "Identity": (torch.tensor(0.0), False),
            "ShearX": (torch.linspace(0.0, 0.99, b), True),
            "ShearY": (torch.linspace(0.0, 0.99, b), True),
            "TranslateX": (torch.linspace(0.0, 32.0, b), True),
            "TranslateY": (torch.linspace(0.0, 32.0, b), True),
            "Rotate": (torch.linspace(0.0, 135.0, b), True),
            "Brightness": (torch.linspace(0.0, 0.99, b), True),
            "Color": (torch.linspace(0.0, 0.99, b), True),
            "Contrast": (torch.linspace(0.0, 0.99, b), True),
            "Sharpness": (torch.linspace(0.0, 0.99, b), True),
            "Posterize": (8 - (torch.arange(b) / ((b - 1) / 6)).round().int(), False),
            "Solarize": (torch.linspace(255.0, 0.0, b), False),
            "AutoContrast": (torch.tensor(0.0), False),
            "Equalize": (torch.tensor(0.0), False),
        }
        name = list(space)[int(torch.randint(len(space), (1,)).item())]
        mags, signed = space[name]
        m = float(mags[torch.randint(len(mags), (1,))].item()) if mags.ndim > 0 else 0.0
        if signed and torch.randint(2, (1,)):
            m *= -1.0
        return apply_op(img, name, m, self.resample, self.fill)


def random_erasing_params(height, width, scale=(0.02, 0.33), ratio=(0.3, 3.3), generator=None):
    """RandomErasing.get_params: (top, left, h, w) of the box, or None after ten misses."""
    g = generator
    area = height * width
    log_ratio = torch.log(torch.tensor(ratio))
    for _ in range(10):
        erase_area = area * torch.empty(1).uniform_(scale[0], scale[1], generator=g).item()
        aspect = math.exp(torch.empty(1).uniform_(log_ratio[0], log_ratio[1], generator=g).item())
        h = int(round(math.sqrt(erase_area * aspect)))
        w = int(round(math.sqrt(erase_area / aspect)))
        if not (h < height and w < width):
            continue
        i = torch.randint(0, height - h + 1, size=(1,), generator=g).item()
        j = torch.randint(0, width - w + 1, size=(1,), generator=g).item()
        return i, j, h, w
    return None


def random_erasing(t, p=0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0.0):
    """RandomErasing on a normalised CHW tensor."""
    if torch.rand(1) >= p:
        return t
    box = random_erasing_params(t.shape[-2], t.shape[-1], scale, ratio)
    if box is not None:
        i, j, h, w = box
        t[:, i:i + h, j:j + w] = value
    return t


def to_normalized_tensor(img, mean, std):
    """PILToTensor + ConvertImageDtype(float) + Normalize."""
    t = torch.from_numpy(np.asarray(img, dtype=np.uint8).copy()).permute(2, 0, 1).float().div_(255)
    return t.sub_(torch.tensor(mean)[:, None, None]).div_(torch.tensor(std)[:, None, None])
