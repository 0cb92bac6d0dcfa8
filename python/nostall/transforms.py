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


def _interpolation(name, value):
    """torchvision's interpolation argument, for the resizes: bilinear only
    (nostall resamples as PIL's bilinear filter, antialiased)."""
    v = _plain(value)
    if v in ("bilinear", 2):  # InterpolationMode.BILINEAR, or PIL's Image.BILINEAR
        return
    raise ValueError(f"{name}: interpolation {value!r} is not supported: nostall resamples "
                     "bilinear, antialiased, as torchvision on PIL images "
                     "(InterpolationMode.BILINEAR, the default)")


def _antialias(name, value):
    if value is None or value is True:
        return
    raise ValueError(f"{name}: antialias={value!r} is not supported: nostall always antialiases, "
                     "as torchvision does on PIL images (where it ignores antialias=False); "
                     "pass antialias=True or leave it out")


class Transform:
    """Base of nostall's transforms: a declaration the loader's C++ threads run.

    ``to_dict()`` is the transform as it appears in a loader spec (docs/spec.md).
    """

    def to_dict(self) -> dict:  # pragma: no cover - every subclass overrides it
        """The transform as a loader spec writes it: ``{"type": NAME, argument: value, ...}``."""
        raise NotImplementedError

    def __call__(self, *args, **kwargs):
        """Raises TypeError: a transform is not applied to one tensor or image at a time."""
        raise TypeError(
            f"nostall.{type(self).__name__} is not applied to tensors or images one by one: the "
            "loader's C++ threads run it on every sample. Pass it in "
            "nostall.Loader(..., transforms=[...]); nostall.transforms.sample_params(transforms, "
            "width, height, index=...) shows what it draws for an item")

    def __repr__(self):
        fields = ", ".join(f"{k}={v!r}" for k, v in self.to_dict().items() if k != "type")
        return f"{type(self).__name__}({fields})"


class RandomResizedCrop(Transform):
    """Crop a random area and aspect ratio, then resize to ``size`` (torchvision's algorithm).

    The crop's area is drawn in ``scale`` (fractions of the image) and its
    aspect ratio log-uniformly in ``ratio``, ten tries then a center crop, as
    torchvision's ``get_params``; the resize is bilinear and antialiased, as
    on PIL images. ``size``: an int (square) or ``(height, width)``.
    ``interpolation`` and ``antialias`` are accepted with their only
    supported values (bilinear, True).
    """

    def __init__(self, size, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0),
                 interpolation="bilinear", antialias=True):
        _interpolation("RandomResizedCrop", interpolation)
        _antialias("RandomResizedCrop", antialias)
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
    """Resize: an int sets the smaller edge (aspect kept); ``(h, w)`` sets both.

    ``max_size`` caps the longer edge, as torchvision's (with an int size
    only). Bilinear and antialiased, as on PIL images; ``interpolation`` and
    ``antialias`` are accepted with those values.
    """

    def __init__(self, size, interpolation="bilinear", max_size=None, antialias=True):
        _interpolation("Resize", interpolation)
        _antialias("Resize", antialias)
        if isinstance(size, int):
            if size <= 0:
                raise ValueError(f"Resize: size must be positive, got {size}")
            self.size = size
        else:
            self.size = _size(size, "Resize")
        if max_size is not None:
            if not isinstance(self.size, int):
                raise ValueError("Resize: max_size needs size to be one number (the smaller edge), "
                                 "as torchvision's Resize")
            if max_size <= self.size:
                raise ValueError(f"Resize: max_size = {max_size} must be strictly greater than the "
                                 f"requested size for the smaller edge size = {self.size}")
        self.max_size = max_size

    def to_dict(self):
        d = {"type": "Resize", "size": self.size}
        if self.max_size:
            d["max_size"] = int(self.max_size)
        return d


class CenterCrop(Transform):
    """Crop the center ``size`` (an int, or ``(height, width)``) out of the image.

    An image smaller than ``size`` (after the transforms before it) is a
    :class:`nostall.DataError` naming the file, where torchvision would pad
    it with zeros: put a ``Resize`` first to make every image big enough.
    """

    def __init__(self, size):
        self.size = _size(size, "CenterCrop")

    def to_dict(self):
        return {"type": "CenterCrop", "size": self.size}


class RandomHorizontalFlip(Transform):
    """Flip the sample left to right with probability ``p`` (default 0.5), drawn per sample."""

    def __init__(self, p=0.5):
        if not 0 <= p <= 1:
            raise ValueError(f"RandomHorizontalFlip: p must be in [0, 1], got {p}")
        self.p = float(p)

    def to_dict(self):
        return {"type": "RandomHorizontalFlip", "p": self.p}


class Normalize(Transform):
    """``(x / 255 - mean) / std`` per channel, as ToTensor + Normalize; gives float32.

    Ops on the normalised tensor (RandomErasing) come after it, as in
    torchvision's recipes; pixel ops before it. ``inplace`` is accepted and changes nothing:
    nostall writes each batch once. Without Normalize, ``dtype="float32"``
    gives ``x / 255`` (ToTensor's [0, 1]); the default output is then uint8.
    """

    def __init__(self, mean: Sequence[float], std: Sequence[float], inplace: bool = False):
        self.mean = [float(m) for m in mean]
        self.std = [float(s) for s in std]
        if len(self.mean) != len(self.std):
            raise ValueError("Normalize: mean and std need the same length")
        if any(not s > 0 or math.isnan(s) for s in self.std):
            raise ValueError("Normalize: std must be positive")

    def to_dict(self):
        return {"type": "Normalize", "mean": self.mean, "std": self.std}


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


def _plain(v):
    """JSON-ready values: enums by value, tuples as lists."""
    if hasattr(v, "value") and isinstance(v.value, str):  # torchvision's enums
        return v.value.lower()
    if isinstance(v, (tuple, list)):
        return [_plain(x) for x in v]
    return v


def _finite(v):
    """False for a NaN or an infinity anywhere in an argument (JSON has neither)."""
    if isinstance(v, float):
        return math.isfinite(v)
    if isinstance(v, (list, tuple)):
        return all(_finite(x) for x in v)
    return True


class _Op(Transform):
    """An op on pixels, after the geometry; its docstring comes from the op's
    entry in the C++ registry (src/ops/op.h), which every binding shares."""

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        from . import _nostall

        doc = _nostall.image_op_doc(cls.__name__)
        if doc:
            cls.__doc__ = doc + ("\n\n" + cls.__doc__ if cls.__doc__ else "")

    def __init__(self, **args):
        self._args = {k: _plain(v) for k, v in args.items() if v is not None}
        import json

        from . import _nostall

        name = type(self).__name__
        for key, value in self._args.items():
            if not _finite(value):
                raise ValueError(f"{name}: {key} must be finite, not {value!r}")
        # Its arguments alone (float32: what the op needs of the rest of the
        # pipeline is checked when the loader is made).
        spec = {"source": ".", "dtype": "float32", "mode": self._mode_for_check(),
                "transforms": [{"type": name, **self._args}]}
        try:
            _nostall.resolve_transforms(json.dumps(spec))
        except ValueError as e:  # "InvalidArgument: transforms[0] (Name): why" -> "Name: why"
            raise ValueError(f"{name}: {str(e).split('): ', 1)[-1]}") from None

    def _mode_for_check(self):
        """A mode the op fits, for checking its own arguments alone."""
        return "RGB"

    def to_dict(self):
        return {"type": type(self).__name__, **self._args}


class ColorJitter(_Op):
    def __init__(self, brightness=0, contrast=0, saturation=0, hue=0):
        super().__init__(brightness=brightness, contrast=contrast, saturation=saturation, hue=hue)


class Grayscale(_Op):
    def __init__(self, num_output_channels=None):  # None: the one default, C++'s (1)
        super().__init__(num_output_channels=num_output_channels)

    def _mode_for_check(self):
        return "RGB" if self._args.get("num_output_channels") == 3 else "L"


class RandomGrayscale(_Op):
    def __init__(self, p=0.1):
        super().__init__(p=p)


class GaussianBlur(_Op):
    def __init__(self, kernel_size, sigma=(0.1, 2.0)):
        super().__init__(kernel_size=kernel_size, sigma=sigma)


class RandomErasing(_Op):
    def __init__(self, p=0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0, inplace=False):
        super().__init__(p=p, scale=scale, ratio=ratio, value=value)


class TrivialAugmentWide(_Op):
    def __init__(self, num_magnitude_bins=31, interpolation=InterpolationMode.NEAREST, fill=None):
        super().__init__(num_magnitude_bins=num_magnitude_bins, interpolation=interpolation,
                         fill=fill)


class RandAugment(_Op):
    def __init__(self, num_ops=2, magnitude=9, num_magnitude_bins=31,
                 interpolation=InterpolationMode.NEAREST, fill=None):
        super().__init__(num_ops=num_ops, magnitude=magnitude,
                         num_magnitude_bins=num_magnitude_bins, interpolation=interpolation,
                         fill=fill)


class AutoAugment(_Op):
    def __init__(self, policy=AutoAugmentPolicy.IMAGENET, interpolation=InterpolationMode.NEAREST,
                 fill=None):
        super().__init__(policy=policy, interpolation=interpolation, fill=fill)


class RandomRotation(_Op):
    def __init__(self, degrees, interpolation=InterpolationMode.NEAREST, expand=False, center=None,
                 fill=0):
        super().__init__(degrees=degrees, interpolation=interpolation, expand=expand,
                         center=center, fill=fill)


class RandomAffine(_Op):
    def __init__(self, degrees, translate=None, scale=None, shear=None,
                 interpolation=InterpolationMode.NEAREST, fill=0, center=None):
        super().__init__(degrees=degrees, translate=translate, scale=scale, shear=shear,
                         interpolation=interpolation, fill=fill, center=center)


class RandomVerticalFlip(_Op):
    def __init__(self, p=0.5):
        super().__init__(p=p)


class RandomInvert(_Op):
    def __init__(self, p=0.5):
        super().__init__(p=p)


class RandomPosterize(_Op):
    def __init__(self, bits, p=0.5):
        super().__init__(bits=bits, p=p)


class RandomSolarize(_Op):
    def __init__(self, threshold, p=0.5):
        super().__init__(threshold=threshold, p=p)


class RandomAutocontrast(_Op):
    def __init__(self, p=0.5):
        super().__init__(p=p)


class RandomEqualize(_Op):
    def __init__(self, p=0.5):
        super().__init__(p=p)


class RandomAdjustSharpness(_Op):
    def __init__(self, sharpness_factor, p=0.5):
        super().__init__(sharpness_factor=sharpness_factor, p=p)


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
