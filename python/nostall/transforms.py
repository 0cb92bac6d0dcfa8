"""Transforms, with torchvision's names, parameters and defaults.

They are declarations, not functions: the loader's C++ threads run them. The
geometry of the whole list is composed first, so a crop is decoded only at the
resolution and region it needs.
"""

from __future__ import annotations

import math
from typing import Sequence


def _size(size, name):
    if isinstance(size, int):
        if size <= 0:
            raise ValueError(f"{name}: size must be positive, got {size}")
        return [size, size]
    size = list(size)
    if len(size) == 1:
        return _size(int(size[0]), name)
    if len(size) != 2 or any(int(s) <= 0 for s in size):
        raise ValueError(f"{name}: size must be an int or (height, width), got {size}")
    return [int(size[0]), int(size[1])]


class Transform:
    def to_dict(self) -> dict:  # pragma: no cover - every subclass overrides it
        raise NotImplementedError

    def __repr__(self):
        fields = ", ".join(f"{k}={v!r}" for k, v in self.to_dict().items() if k != "type")
        return f"{type(self).__name__}({fields})"


class RandomResizedCrop(Transform):
    """Crop a random area and aspect ratio, then resize to ``size`` (torchvision's algorithm)."""

    def __init__(self, size, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0)):
        self.size = _size(size, "RandomResizedCrop")
        if not (0 < scale[0] <= scale[1] <= 1):
            raise ValueError(f"RandomResizedCrop: scale must satisfy 0 < min <= max <= 1, got {scale}")
        if not (0 < ratio[0] <= ratio[1]):
            raise ValueError(f"RandomResizedCrop: ratio must satisfy 0 < min <= max, got {ratio}")
        self.scale = (float(scale[0]), float(scale[1]))
        self.ratio = (float(ratio[0]), float(ratio[1]))

    def to_dict(self):
        return {"type": "RandomResizedCrop", "size": self.size, "scale": list(self.scale),
                "ratio": list(self.ratio)}


class Resize(Transform):
    """Resize: an int sets the smaller edge (aspect kept); (h, w) sets both."""

    def __init__(self, size, max_size=None):
        if isinstance(size, int):
            if size <= 0:
                raise ValueError(f"Resize: size must be positive, got {size}")
            self.size = size
        else:
            self.size = _size(size, "Resize")
        self.max_size = max_size

    def to_dict(self):
        d = {"type": "Resize", "size": self.size}
        if self.max_size:
            d["max_size"] = int(self.max_size)
        return d


class CenterCrop(Transform):
    def __init__(self, size):
        self.size = _size(size, "CenterCrop")

    def to_dict(self):
        return {"type": "CenterCrop", "size": self.size}


class RandomHorizontalFlip(Transform):
    def __init__(self, p=0.5):
        if not 0 <= p <= 1:
            raise ValueError(f"RandomHorizontalFlip: p must be in [0, 1], got {p}")
        self.p = float(p)

    def to_dict(self):
        return {"type": "RandomHorizontalFlip", "p": self.p}


class Normalize(Transform):
    """``(x / 255 - mean) / std`` per channel, as ToTensor + Normalize; gives float32."""

    def __init__(self, mean: Sequence[float], std: Sequence[float]):
        self.mean = [float(m) for m in mean]
        self.std = [float(s) for s in std]
        if len(self.mean) != len(self.std):
            raise ValueError("Normalize: mean and std need the same length")
        if any(not s > 0 or math.isnan(s) for s in self.std):
            raise ValueError("Normalize: std must be positive")

    def to_dict(self):
        return {"type": "Normalize", "mean": self.mean, "std": self.std}


IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
