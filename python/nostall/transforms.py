"""Transforms, with torchvision's names, parameters and defaults.

They are declarations, not functions: the loader's C++ threads run them. The
geometry of the whole list is composed first, so a crop is decoded only at the
resolution and region it needs. A transform takes the arguments its
torchvision namesake takes; a value nostall does not implement is an error
naming the values it does. Calling one on a tensor is a TypeError: pass them
to the loader, and see what they draw for an item with :func:`sample_params`.

```python
import nostall
from nostall.transforms import ColorJitter, RandomErasing

transforms = [nostall.RandomResizedCrop(224, antialias=True), nostall.RandomHorizontalFlip(),
              ColorJitter(0.4, 0.4, 0.4),
              nostall.Normalize(nostall.IMAGENET_MEAN, nostall.IMAGENET_STD),
              RandomErasing(p=0.25)]
print(nostall.transforms.sample_params(transforms, width=500, height=375, seed=0, index=7))
```
"""

from __future__ import annotations

from ._ops import *  # noqa: F401,F403  (the generated classes, one per transform)
from ._ops import Normalize, __all__ as _generated
from ._transform import Transform, _Op  # noqa: F401


class ToTensor(Transform):
    """torchvision's ToTensor, for code ported as it is: float32 in [0, 1].

    nostall's batches are tensors already; this only asks for float32
    (``x / 255``), which is also what ``Normalize`` gives. It holds no
    pixel work and leaves the spec (the loader sets ``dtype``).
    """

    dtype = "float32"

    def to_dict(self):
        return {}


class PILToTensor(Transform):
    """torchvision's PILToTensor, for code ported as it is: uint8 batches (the default)."""

    dtype = "uint8"

    def to_dict(self):
        return {}


class Compose(Transform):
    """torchvision's Compose, for code ported as it is: the transforms, in order.

    ``Loader(..., transforms=Compose([...]))`` is ``transforms=[...]``.
    """

    def __init__(self, transforms):
        self.transforms = list(transforms)
        for t in self.transforms:
            if not isinstance(t, Transform):
                raise TypeError(f"Compose: {t!r} is not a nostall transform")

    def to_dict(self):
        return {}

    def __repr__(self):
        return f"Compose({self.transforms!r})"


def _flatten(transforms):
    """The transforms a list names, Compose unrolled, and the dtype a
    ToTensor/PILToTensor in it asks for (None: none does)."""
    out, dtype = [], None
    for t in transforms:
        if isinstance(t, Compose):
            inner, inner_dtype = _flatten(t.transforms)
            out += inner
            dtype = inner_dtype or dtype
        elif isinstance(t, (ToTensor, PILToTensor)):
            dtype = t.dtype
        else:
            out.append(t)
    return out, dtype


IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


# --- Ops on pixels, after the geometry (crops, resizes, flips) ---------------
#
# Each runs in the loader's C++ threads with torchvision's semantics on PIL
# images; see docs/transforms.md for the tolerance each is tested to against
# PIL. Arguments are checked when the transform is made, with the error
# naming the transform and the argument.


class InterpolationMode:
    """The interpolations nostall's ops take, by torchvision's names.

    torchvision's own ``InterpolationMode`` values are accepted too. The
    resizes (RandomResizedCrop, Resize) are BILINEAR; the rotations and
    AutoAugment-family ops take NEAREST (their default) or BILINEAR.
    """

    NEAREST = "nearest"
    BILINEAR = "bilinear"


class AutoAugmentPolicy:
    """The AutoAugment policies (torchvision's names; its enum's values are accepted too)."""

    IMAGENET = "imagenet"
    CIFAR10 = "cifar10"
    SVHN = "svhn"


def sample_params(transforms, width: int, height: int, *, seed: int = 0, epoch: int = 0,
                  index: int = 0, mode: str = "RGB") -> dict:
    """What the loader would do to item ``index`` (a ``width`` x ``height`` image) in ``epoch``.

    Returns ``{"box": [x, y, w, h], "size": [h, w], "flip": bool, "ops": [...], "matrix":
    [[a, b, c], [d, e, f]]}``: the source box the geometry resamples (in source pixels), the
    output size, the flip, each op's drawn parameters in order, and where the sample's whole
    geometry (the crop, resize and flips, and every op that moves pixels: RandomAffine,
    RandomRotation, RandomVerticalFlip, the geometric ops of the AutoAugment family) takes a
    point of the source: ``x' = a x + b y + c, y' = d x + e y + f``, in continuous pixel
    coordinates (pixel ``(i, j)`` covers ``[i, i+1) x [j, j+1)``, as torchvision's v2 boxes);
    :func:`apply_to_points` applies it. No pixel is touched; the same (seed, epoch, index)
    gives the same parameters as the loader, whatever its thread count.
    """
    import json

    from . import _nostall

    flat, asked_dtype = _flatten(transforms if isinstance(transforms, (list, tuple))
                                 else [transforms])
    ts = [t.to_dict() for t in flat]
    normalizes = any(t["type"] == "Normalize" for t in ts)
    spec = {"source": ".", "transforms": ts, "seed": int(seed), "mode": mode,
            "dtype": "float32" if normalizes else (asked_dtype or "uint8")}
    return json.loads(_nostall.sample_params(json.dumps(spec), int(width), int(height),
                                             int(epoch), int(index)))


def apply_to_points(params, points):
    """Where the points of a source image land in the sample's output.

    ``params``: what :func:`sample_params` returns (or its ``"matrix"``);
    ``points``: ``(N, 2)`` ``x, y`` in the source's continuous pixel
    coordinates (a keypoint; a box's corners). Returns an ``(N, 2)`` float64
    NumPy array. Points that land outside ``params["size"]`` are not clipped.
    """
    import numpy as np

    m = np.asarray(params["matrix"] if isinstance(params, dict) else params, dtype=np.float64)
    if m.shape != (2, 3):
        raise ValueError(f"the matrix must be 2 x 3 (sample_params' \"matrix\"), not {m.shape}")
    pts = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    return pts @ m[:, :2].T + m[:, 2]


from .mix import CutMix, MixUp, RandomChoice  # noqa: E402  (batch ops, on the consumer side)
