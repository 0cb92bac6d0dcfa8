"""The transforms, one class each, generated from their C++ schemas by
``make generate`` (``python -m nostall._schema --write``): do not edit.
"""

from __future__ import annotations

from typing import Sequence

from ._transform import _Op


class RandomResizedCrop(_Op):
    """Crop a random area and aspect ratio, then resize to size (torchvision's algorithm: the area
    drawn in scale, the aspect log-uniformly in ratio, ten tries then a center crop; bilinear
    and antialiased, as on PIL images).

    Args:
        size (int | tuple[int, int]; required): an int (square) or (height, width)
        scale (tuple[float, float]; default (0.08, 1.0), in [1e-09, 1.0]): the crop's area, as a
            fraction of the image's
        ratio (tuple[float, float]; default (0.75, 1.3333333333333333), in [1e-09,
            1000000000.0]): the crop's aspect ratio
        interpolation (str; default 'bilinear', one of 'bilinear'): bilinear only: nostall
            resamples bilinear, antialiased, as torchvision on PIL images
            (InterpolationMode.BILINEAR, the default)
        antialias (bool; default True): True only: nostall always antialiases, as torchvision
            does on PIL images
    """

    def __init__(
            self,
            size: int | tuple[int, int],
            scale: tuple[float, float] = (0.08, 1.0),
            ratio: tuple[float, float] = (0.75, 1.3333333333333333),
            interpolation: str = 'bilinear',
            antialias: bool = True,
    ):
        super().__init__(
            size=size,
            scale=scale,
            ratio=ratio,
            interpolation=interpolation,
            antialias=antialias,
        )


class Resize(_Op):
    """Resize: an int sets the smaller edge (aspect kept), (h, w) sets both; bilinear and
    antialiased, as on PIL images.

    Args:
        size (int | tuple[int, int]; required): the smaller edge, or (height, width)
        interpolation (str; default 'bilinear', one of 'bilinear'): bilinear only: nostall
            resamples bilinear, antialiased, as torchvision on PIL images
            (InterpolationMode.BILINEAR, the default)
        max_size (int | None; default None): a cap on the longer edge (with an int size only),
            as torchvision's
        antialias (bool; default True): True only: nostall always antialiases, as torchvision
            does on PIL images
    """

    def __init__(
            self,
            size: int | tuple[int, int],
            interpolation: str = 'bilinear',
            max_size: int | None = None,
            antialias: bool = True,
    ):
        super().__init__(
            size=size,
            interpolation=interpolation,
            max_size=max_size,
            antialias=antialias,
        )


class CenterCrop(_Op):
    """Crop the center size out of the image; an image smaller than size is a DataError naming it,
    where torchvision would pad it with zeros: put a Resize first.

    Args:
        size (int | tuple[int, int]; required): an int (square) or (height, width)
    """

    def __init__(self, size: int | tuple[int, int]):
        super().__init__(size=size)


class RandomHorizontalFlip(_Op):
    """Flip the sample left to right with probability p, drawn per sample.

    Args:
        p (float; default 0.5, in [0.0, 1.0]): the probability a sample is flipped
    """

    def __init__(self, p: float = 0.5):
        super().__init__(p=p)


class Normalize(_Op):
    """(x / 255 - mean) / std per channel, as ToTensor + Normalize; gives float32. Ops on the
    normalised tensor (RandomErasing) come after it.

    Args:
        mean (Sequence[float]; required): per channel, in [0, 1] units
        std (Sequence[float]; required): per channel, positive
        inplace (bool; default False): accepted as torchvision's; nostall writes each batch once
    """

    def __init__(self, mean: Sequence[float], std: Sequence[float], inplace: bool = False):
        super().__init__(mean=mean, std=std, inplace=inplace)


class RandomZoomOut(_Op):
    """With probability p, place the image on a canvas side_range times its size (drawn per
    sample), at a random place, filled with fill (SSD's zoom out); boxes move with it. Masks are
    padded with 0. Detection specs only.

    Args:
        fill (float | Sequence[float] | None; default 0): the canvas's colour: a number or one
            per channel, 0-255
        side_range (tuple[float, float]; default (1.0, 4.0), in [1.0, 64.0]): the canvas's side
            as a multiple of the image's
        p (float; default 0.5, in [0.0, 1.0]): the probability of zooming out
    """

    def __init__(
            self,
            fill: float | Sequence[float] | None = 0,
            side_range: tuple[float, float] = (1.0, 4.0),
            p: float = 0.5,
    ):
        super().__init__(fill=fill, side_range=side_range, p=p)


class RandomIoUCrop(_Op):
    """SSD's random crop: a minimum IoU drawn from sampler_options (1.0 or more: no crop), then up
    to trials crops of min_scale..max_scale of each side until one holds a box centre and
    overlaps such a box by that IoU; boxes whose centre it leaves out are zeroed, for
    SanitizeBoundingBoxes to remove. Detection specs only.

    Args:
        min_scale (float; default 0.3, in [0.0, 1.0]): the crop's smallest side, as a fraction
            of the image's
        max_scale (float; default 1.0, in [0.0, 1.0]): the crop's largest side, as a fraction of
            the image's
        min_aspect_ratio (float; default 0.5, in [0.0, 1000000.0]): the crop's smallest width /
            height
        max_aspect_ratio (float; default 2.0, in [0.0, 1000000.0]): the crop's largest width /
            height
        sampler_options (Sequence[float] | None; default None): the minimum IoUs drawn from
            (None: [0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0])
        trials (int; default 40, in [1, 100000]): crops tried per drawn IoU
    """

    def __init__(
            self,
            min_scale: float = 0.3,
            max_scale: float = 1.0,
            min_aspect_ratio: float = 0.5,
            max_aspect_ratio: float = 2.0,
            sampler_options: Sequence[float] | None = None,
            trials: int = 40,
    ):
        super().__init__(
            min_scale=min_scale,
            max_scale=max_scale,
            min_aspect_ratio=min_aspect_ratio,
            max_aspect_ratio=max_aspect_ratio,
            sampler_options=sampler_options,
            trials=trials,
        )


class SanitizeBoundingBoxes(_Op):
    """Remove the boxes (with their labels and masks) narrower or lower than min_size, of less area
    than min_area, or outside the image, as v2's. Detection specs only.

    Args:
        min_size (float; default 1.0, in [0.0, 1000000000.0]): the smallest width and height
            kept
        min_area (float; default 1.0, in [0.0, 1e+18]): the smallest area kept
        labels_getter (str; default 'default'): 'default' only: the labels are the annotations'
            own
    """

    def __init__(
            self,
            min_size: float = 1.0,
            min_area: float = 1.0,
            labels_getter: str = 'default',
    ):
        super().__init__(min_size=min_size, min_area=min_area, labels_getter=labels_getter)


class ClampBoundingBoxes(_Op):
    """Clamp the boxes to the image. Detection specs only.
    """

    def __init__(self):
        super().__init__()


class ScaleJitter(_Op):
    """Large scale jitter (v2's, the Copy-Paste recipe): resize by min(target_size[1] / height,
    target_size[0] / width) times a scale drawn from scale_range; boxes and masks follow. Follow
    it with FixedSizeCrop for batches of one size (the lsj recipe). Detection specs only.

    Args:
        target_size (tuple[int, int]; required): the base size (height, width)
        scale_range (tuple[float, float]; default (0.1, 2.0), in [0.001, 64.0]): the scale's
            range, drawn uniformly
        interpolation (str; default 'bilinear', one of 'bilinear'): bilinear only: nostall
            resamples bilinear, antialiased, as torchvision on PIL images
            (InterpolationMode.BILINEAR, the default)
        antialias (bool; default True): True only: nostall always antialiases, as torchvision
            does on PIL images
    """

    def __init__(
            self,
            target_size: tuple[int, int],
            scale_range: tuple[float, float] = (0.1, 2.0),
            interpolation: str = 'bilinear',
            antialias: bool = True,
    ):
        super().__init__(
            target_size=target_size,
            scale_range=scale_range,
            interpolation=interpolation,
            antialias=antialias,
        )


class RandomShortestSize(_Op):
    """Resize so the shorter side is one of min_size (drawn per sample) and the longer at most
    max_size; boxes and masks follow (v2's; Faster and Mask R-CNN's multi-scale training).
    Detection specs only.

    Args:
        min_size (int | Sequence[int]; required): the shorter side's choices
        max_size (int | None; default None): a cap on the longer side
        interpolation (str; default 'bilinear', one of 'bilinear'): bilinear only: nostall
            resamples bilinear, antialiased, as torchvision on PIL images
            (InterpolationMode.BILINEAR, the default)
        antialias (bool; default True): True only: nostall always antialiases, as torchvision
            does on PIL images
    """

    def __init__(
            self,
            min_size: int | Sequence[int],
            max_size: int | None = None,
            interpolation: str = 'bilinear',
            antialias: bool = True,
    ):
        super().__init__(
            min_size=min_size,
            max_size=max_size,
            interpolation=interpolation,
            antialias=antialias,
        )


class RandomResize(_Op):
    """Resize the shorter side to a size drawn from [min_size, max_size) (v2's; DETR's multi-scale
    training); boxes and masks follow. Detection specs and video lists (a short side per clip:
    PyTorchVideo's RandomShortSideScale(lo, hi) is RandomResize(lo, hi + 1)).

    Args:
        min_size (int; required, in [1, 65536]): the smallest shorter side
        max_size (int; required, in [2, 65536]): one past the largest shorter side
        interpolation (str; default 'bilinear', one of 'bilinear'): bilinear only: nostall
            resamples bilinear, antialiased, as torchvision on PIL images
            (InterpolationMode.BILINEAR, the default)
        antialias (bool; default True): True only: nostall always antialiases, as torchvision
            does on PIL images
    """

    def __init__(
            self,
            min_size: int,
            max_size: int,
            interpolation: str = 'bilinear',
            antialias: bool = True,
    ):
        super().__init__(
            min_size=min_size,
            max_size=max_size,
            interpolation=interpolation,
            antialias=antialias,
        )


class FixedSizeCrop(_Op):
    """Crop to size at one random place (a single draw for both axes) where the image is larger,
    then pad the right and bottom with fill where it is smaller; boxes are shifted and clamped,
    those left empty removed with their labels and masks (torchvision's detection references'
    FixedSizeCrop, the lsj recipe's). Masks are padded with 0. Detection specs only.

    Args:
        size (int | tuple[int, int]; required): an int (square) or (height, width)
        fill (float | Sequence[float] | None; default 0): the padding's colour: a number or one
            per channel, 0-255
        padding_mode (str; default 'constant', one of 'constant'): constant only
    """

    def __init__(
            self,
            size: int | tuple[int, int],
            fill: float | Sequence[float] | None = 0,
            padding_mode: str = 'constant',
    ):
        super().__init__(size=size, fill=fill, padding_mode=padding_mode)


class ColorJitter(_Op):
    """Brightness, contrast, saturation and hue factors drawn per sample and applied in a random
    order, as torchvision's ColorJitter on PIL images.

    Args:
        brightness (float | tuple[float, float]; default 0, in [0.0, 1000000000.0]): x: factors
            in [max(0, 1 - x), 1 + x]; (lo, hi): that range
        contrast (float | tuple[float, float]; default 0, in [0.0, 1000000000.0]): x: factors in
            [max(0, 1 - x), 1 + x]; (lo, hi): that range
        saturation (float | tuple[float, float]; default 0, in [0.0, 1000000000.0]): x: factors
            in [max(0, 1 - x), 1 + x]; (lo, hi): that range
        hue (float | tuple[float, float]; default 0, in [-0.5, 0.5]): x <= 0.5: shifts in [-x,
            x]; (lo, hi) within [-0.5, 0.5]
    """

    def __init__(
            self,
            brightness: float | tuple[float, float] = 0,
            contrast: float | tuple[float, float] = 0,
            saturation: float | tuple[float, float] = 0,
            hue: float | tuple[float, float] = 0,
    ):
        super().__init__(brightness=brightness, contrast=contrast, saturation=saturation, hue=hue)


class Grayscale(_Op):
    """Gray as PIL's convert("L") (0.299 R + 0.587 G + 0.114 B).

    Args:
        num_output_channels (int; default 1, in [1, 3]): 1 (load with mode="L") or 3 (RGB
            batches, the gray value in each channel)
    """

    def __init__(self, num_output_channels: int = 1):
        super().__init__(num_output_channels=num_output_channels)


class RandomGrayscale(_Op):
    """With probability p, the sample in gray as Grayscale, in as many channels as the batch has.

    Args:
        p (float; default 0.1, in [0.0, 1.0]): the probability it is applied
    """

    def __init__(self, p: float = 0.1):
        super().__init__(p=p)


class GaussianBlur(_Op):
    """Blur with a Gaussian kernel, sigma drawn uniformly per sample, edges reflected, as
    torchvision's GaussianBlur.

    Args:
        kernel_size (int | tuple[int, int]; required): odd, in [1, 255]: one for both axes, or
            (x, y)
        sigma (float | tuple[float, float]; default (0.1, 2.0)): a number, or (min, max) to draw
            from
    """

    def __init__(
            self,
            kernel_size: int | tuple[int, int],
            sigma: float | tuple[float, float] = (0.1, 2.0),
    ):
        super().__init__(kernel_size=kernel_size, sigma=sigma)


class RandomErasing(_Op):
    """With probability p, erase a random box of the output tensor, after Normalize, as
    torchvision's RandomErasing.

    Args:
        p (float; default 0.5, in [0.0, 1.0]): the probability a sample is erased
        scale (tuple[float, float]; default (0.02, 0.33), in [0.0, 1.0]): the box's area, as a
            fraction of the image's
        ratio (tuple[float, float]; default (0.3, 3.3), in [1e-06, 1000000.0]): the box's aspect
            ratio
        value (float | Sequence[float] | str; default 0): 0, one value per channel, or "random"
            (normal noise; needs float32)
        inplace (bool; default False): accepted as torchvision's; batches are written once
            either way
    """

    def __init__(
            self,
            p: float = 0.5,
            scale: tuple[float, float] = (0.02, 0.33),
            ratio: tuple[float, float] = (0.3, 3.3),
            value: float | Sequence[float] | str = 0,
            inplace: bool = False,
    ):
        super().__init__(p=p, scale=scale, ratio=ratio, value=value, inplace=inplace)


class TrivialAugmentWide(_Op):
    """One of torchvision's TrivialAugmentWide ops per sample, at a magnitude drawn from the grid.

    Args:
        num_magnitude_bins (int; default 31, in [2, 1000]): the magnitudes' grid
        interpolation (str; default 'nearest', one of 'nearest', 'bilinear'): NEAREST (the
            default) or BILINEAR, for the geometric ops
        fill (float | Sequence[float] | None; default None): the area a geometric op uncovers: a
            number or one per channel, 0-255 (None: 0)
    """

    def __init__(
            self,
            num_magnitude_bins: int = 31,
            interpolation: str = 'nearest',
            fill: float | Sequence[float] | None = None,
    ):
        super().__init__(
            num_magnitude_bins=num_magnitude_bins,
            interpolation=interpolation,
            fill=fill,
        )


class RandAugment(_Op):
    """num_ops ops drawn per sample from torchvision's RandAugment list.

    Args:
        num_ops (int; default 2, in [0, 100]): ops per sample
        magnitude (int; default 9, in [0, 999]): the magnitude, below num_magnitude_bins
        num_magnitude_bins (int; default 31, in [2, 1000]): the magnitudes' grid
        interpolation (str; default 'nearest', one of 'nearest', 'bilinear'): NEAREST (the
            default) or BILINEAR, for the geometric ops
        fill (float | Sequence[float] | None; default None): the area a geometric op uncovers: a
            number or one per channel, 0-255 (None: 0)
    """

    def __init__(
            self,
            num_ops: int = 2,
            magnitude: int = 9,
            num_magnitude_bins: int = 31,
            interpolation: str = 'nearest',
            fill: float | Sequence[float] | None = None,
    ):
        super().__init__(
            num_ops=num_ops,
            magnitude=magnitude,
            num_magnitude_bins=num_magnitude_bins,
            interpolation=interpolation,
            fill=fill,
        )


class AutoAugment(_Op):
    """A sub-policy of torchvision's AutoAugmentPolicy drawn per sample, each op applied with its
    probability and magnitude.

    Args:
        policy (str; default 'imagenet', one of 'imagenet', 'cifar10', 'svhn'):
            AutoAugmentPolicy: IMAGENET, CIFAR10 or SVHN
        interpolation (str; default 'nearest', one of 'nearest', 'bilinear'): NEAREST (the
            default) or BILINEAR, for the geometric ops
        fill (float | Sequence[float] | None; default None): the area a geometric op uncovers: a
            number or one per channel, 0-255 (None: 0)
    """

    def __init__(
            self,
            policy: str = 'imagenet',
            interpolation: str = 'nearest',
            fill: float | Sequence[float] | None = None,
    ):
        super().__init__(policy=policy, interpolation=interpolation, fill=fill)


class RandomRotation(_Op):
    """Rotate by an angle drawn uniformly per sample, as torchvision's RandomRotation.

    Args:
        degrees (float | tuple[float, float]; required): d: angles in [-d, d]; (lo, hi): that
            range
        interpolation (str; default 'nearest', one of 'nearest', 'bilinear'): NEAREST (the
            default) or BILINEAR
        expand (bool; default False): expand=True changes the image size, and a batch has one
            size: crop or resize after rotating instead
        center (tuple[float, float] | None; default None): (x, y) in pixels to turn about (None:
            the image's middle)
        fill (float | Sequence[float] | None; default 0): the area the map uncovers: a number or
            one per channel, 0-255
    """

    def __init__(
            self,
            degrees: float | tuple[float, float],
            interpolation: str = 'nearest',
            expand: bool = False,
            center: tuple[float, float] | None = None,
            fill: float | Sequence[float] | None = 0,
    ):
        super().__init__(
            degrees=degrees,
            interpolation=interpolation,
            expand=expand,
            center=center,
            fill=fill,
        )


class RandomAffine(_Op):
    """Rotation, translation, scale and shear drawn per sample, as torchvision's RandomAffine.

    Args:
        degrees (float | tuple[float, float]; required): rotation: d gives [-d, d]; (lo, hi)
            that range
        translate (tuple[float, float] | None; default None): (a, b): largest shift as fractions
            of the width and height, in [0, 1]
        scale (tuple[float, float] | None; default None): (lo, hi): the scale's range
        shear (float | Sequence[float] | None; default None): degrees: s, (lo, hi) along x, or
            (xlo, xhi, ylo, yhi)
        interpolation (str; default 'nearest', one of 'nearest', 'bilinear'): NEAREST (the
            default) or BILINEAR
        fill (float | Sequence[float] | None; default 0): the area the map uncovers: a number or
            one per channel, 0-255
        center (tuple[float, float] | None; default None): (x, y) in pixels to turn about (None:
            the image's middle)
    """

    def __init__(
            self,
            degrees: float | tuple[float, float],
            translate: tuple[float, float] | None = None,
            scale: tuple[float, float] | None = None,
            shear: float | Sequence[float] | None = None,
            interpolation: str = 'nearest',
            fill: float | Sequence[float] | None = 0,
            center: tuple[float, float] | None = None,
    ):
        super().__init__(
            degrees=degrees,
            translate=translate,
            scale=scale,
            shear=shear,
            interpolation=interpolation,
            fill=fill,
            center=center,
        )


class RandomVerticalFlip(_Op):
    """Flip the sample top to bottom with probability p.

    Args:
        p (float; default 0.5, in [0.0, 1.0]): the probability it is applied
    """

    def __init__(self, p: float = 0.5):
        super().__init__(p=p)


class RandomInvert(_Op):
    """With probability p, invert every channel: 255 - x.

    Args:
        p (float; default 0.5, in [0.0, 1.0]): the probability it is applied
    """

    def __init__(self, p: float = 0.5):
        super().__init__(p=p)


class RandomPosterize(_Op):
    """With probability p, keep only the top bits of each channel.

    Args:
        bits (int; required, in [0, 8]): the bits kept, 0-8
        p (float; default 0.5, in [0.0, 1.0]): the probability it is applied
    """

    def __init__(self, bits: int, p: float = 0.5):
        super().__init__(bits=bits, p=p)


class RandomSolarize(_Op):
    """With probability p, invert the channels at or above threshold.

    Args:
        threshold (float; required, in [0.0, 255.0]): 0-255 for uint8 pixels
        p (float; default 0.5, in [0.0, 1.0]): the probability it is applied
    """

    def __init__(self, threshold: float, p: float = 0.5):
        super().__init__(threshold=threshold, p=p)


class RandomAutocontrast(_Op):
    """With probability p, stretch each channel to the full 0-255 range, as PIL's
    ImageOps.autocontrast.

    Args:
        p (float; default 0.5, in [0.0, 1.0]): the probability it is applied
    """

    def __init__(self, p: float = 0.5):
        super().__init__(p=p)


class RandomEqualize(_Op):
    """With probability p, equalize each channel's histogram, as PIL's ImageOps.equalize.

    Args:
        p (float; default 0.5, in [0.0, 1.0]): the probability it is applied
    """

    def __init__(self, p: float = 0.5):
        super().__init__(p=p)


class RandomAdjustSharpness(_Op):
    """With probability p, sharpen or blur as PIL's ImageEnhance.Sharpness.

    Args:
        sharpness_factor (float; required, in [0.0, 1000000000.0]): > 1 sharpens, < 1 blurs, 1
            leaves the image as it is
        p (float; default 0.5, in [0.0, 1.0]): the probability it is applied
    """

    def __init__(self, sharpness_factor: float, p: float = 0.5):
        super().__init__(sharpness_factor=sharpness_factor, p=p)


class RandomPhotometricDistort(_Op):
    """torchvision.transforms.v2's photometric distortion (SSD's): brightness, contrast, saturation
    and hue each with probability p, contrast before or after the colour changes, then, with
    probability p, the channels permuted.

    Args:
        brightness (float | tuple[float, float]; default (0.875, 1.125), in [0.0,
            1000000000.0]): (lo, hi): the factor's range; a number x: [max(0, 1 - x), 1 + x]
            (hue: [-x, x])
        contrast (float | tuple[float, float]; default (0.5, 1.5), in [0.0, 1000000000.0]): (lo,
            hi): the factor's range; a number x: [max(0, 1 - x), 1 + x] (hue: [-x, x])
        saturation (float | tuple[float, float]; default (0.5, 1.5), in [0.0, 1000000000.0]):
            (lo, hi): the factor's range; a number x: [max(0, 1 - x), 1 + x] (hue: [-x, x])
        hue (float | tuple[float, float]; default (-0.05, 0.05), in [-0.5, 0.5]): (lo, hi): the
            factor's range; a number x: [max(0, 1 - x), 1 + x] (hue: [-x, x])
        p (float; default 0.5, in [0.0, 1.0]): the probability of each adjustment, and of the
            permutation
    """

    def __init__(
            self,
            brightness: float | tuple[float, float] = (0.875, 1.125),
            contrast: float | tuple[float, float] = (0.5, 1.5),
            saturation: float | tuple[float, float] = (0.5, 1.5),
            hue: float | tuple[float, float] = (-0.05, 0.05),
            p: float = 0.5,
    ):
        super().__init__(
            brightness=brightness,
            contrast=contrast,
            saturation=saturation,
            hue=hue,
            p=p,
        )


__all__ = ['RandomResizedCrop', 'Resize', 'CenterCrop', 'RandomHorizontalFlip', 'Normalize',
'RandomZoomOut', 'RandomIoUCrop', 'SanitizeBoundingBoxes', 'ClampBoundingBoxes', 'ScaleJitter',
'RandomShortestSize', 'RandomResize', 'FixedSizeCrop', 'ColorJitter', 'Grayscale',
'RandomGrayscale', 'GaussianBlur', 'RandomErasing', 'TrivialAugmentWide', 'RandAugment',
'AutoAugment', 'RandomRotation', 'RandomAffine', 'RandomVerticalFlip', 'RandomInvert',
'RandomPosterize', 'RandomSolarize', 'RandomAutocontrast', 'RandomEqualize',
'RandomAdjustSharpness', 'RandomPhotometricDistort']
