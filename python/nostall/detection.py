"""Detection and segmentation: images with boxes, labels and masks that follow
every augmentation (docs/detection.md).

```python
import nostall
from nostall.datasets import Coco, make_detection_scenes
from nostall.transforms import (RandomIoUCrop, RandomPhotometricDistort, RandomZoomOut,
                                SanitizeBoundingBoxes)

annotations = make_detection_scenes("scenes", num_images=32)   # or COCO's own files
loader = nostall.Loader(Coco("scenes/images", annotations),
                        transforms=[RandomPhotometricDistort(), RandomZoomOut(fill=(123, 117, 104)),
                                    RandomIoUCrop(), nostall.RandomHorizontalFlip(),
                                    nostall.Resize((300, 300)), SanitizeBoundingBoxes()],
                        batch_size=32, shuffle=True)
for images, targets in loader:      # (32, 3, 300, 300) uint8; 32 dicts of boxes, labels, iscrowd
    assert images.shape == (32, 3, 300, 300) and len(targets) == 32
```

The transforms follow torchvision.transforms.v2's rules for boxes (clamped and
sanitised as v2 does) and masks (nearest); their random draws come from
(seed, epoch, index), and :func:`sample_params` shows them.
"""

from __future__ import annotations

import json
import os

from . import _nostall
from .records import decode_targets
from .transforms import Transform, _flatten

__all__ = ["Coco", "recipe", "sample_params", "apply", "targets_record", "padding_mask"]


class Coco:
    """A COCO-style dataset: a folder of images and its instances JSON.

    Args:
        root: the image folder (``file_name`` in the JSON is relative to it).
        annotations: the instances JSON (``instances_train2017.json``): parsed
            once, streamed, into nostall's index cache; later runs and every
            process map the saved table.
        masks: give each sample's instance masks, ``(N, H, W)`` uint8, made
            from the polygons and RLE (as pycocotools does) and transformed
            with the image (nearest).
        box_format: ``"XYXY"`` (default, what torchvision's detection models
            take), ``"XYWH"`` or ``"CXCYWH"``.
        empty: ``"keep"`` (default) or ``"drop"``: images without annotations.
        crowd: ``"keep"`` (default) or ``"drop"``: ``iscrowd`` annotations.
        batch: ``"list"`` (default): targets as a list of per-sample dicts;
            ``"padded"``: one dict of tensors padded to the batch's largest
            count, with ``counts``.

    Give it to :class:`nostall.Loader` as the source: batches are then
    ``(images, targets)``, targets a list of per-sample dicts (``boxes``,
    ``labels`` (COCO's category ids), ``iscrowd``, and ``masks`` when asked).
    """

    def __init__(self, root, annotations, *, masks: bool = False, box_format: str = "XYXY",
                 empty: str = "keep", crowd: str = "keep", batch: str = "list"):
        self.root = os.fspath(root)
        self.annotations = os.fspath(annotations)
        if not isinstance(masks, bool):
            raise TypeError(f"masks must be True or False, not {masks!r}")
        if batch not in ("list", "padded"):
            raise ValueError(f'batch must be "list" (dicts per sample) or "padded" (tensors), not {batch!r}')
        self.masks, self.box_format, self.empty, self.crowd, self.batch = masks, box_format, empty, crowd, batch

    def __repr__(self):
        return f"Coco({self.root!r}, {self.annotations!r}, masks={self.masks})"

    def source(self) -> dict:
        """The loader spec's source."""
        return {"uri": self.root, "driver": "coco",
                "options": {"annotations": self.annotations, "empty": self.empty,
                            "crowd": self.crowd, "segmentation": self.masks}}

    def fields(self) -> dict:
        """The loader's fields: the image and its targets."""
        return {"image": "jpg;jpeg;png",
                "targets": {"ext": "targets", "kind": "targets", "masks": self.masks,
                            "box_format": self.box_format, "batch": self.batch}}


# The mean colour torchvision's detection references fill with (ImageNet's, 0-255).
_REFERENCE_FILL = (123, 117, 104)


def recipe(name: str, size: int | None = None) -> list:
    """The training transforms of torchvision's detection references
    (``DetectionPresetTrain(data_augmentation=name)``), as nostall
    transforms:

    - ``"multiscale"``: ``RandomShortestSize`` (the shorter side one of 480,
      512, ..., 800, the longer at most ``size``, 1333 by default; the
      choices scaled with it) and a flip (Faster/Mask R-CNN): each image
      keeps its own size, and a batch comes padded to its largest (rounded
      up to 32), with each image's size beside it (docs/detection.md);
    - ``"detr"``: DETR's multi-scale training, its first branch: a flip,
      then the shorter side one of 480, 512, ..., 800 and the longer at most
      ``size`` (1333; DETR's ``RandomResize(scales, max_size)`` is
      RandomShortestSize), batches padded as for ``"multiscale"`` (DETR's
      other branch, a random crop between two resizes, is not here);
    - ``"hflip"``: a horizontal flip, then ``Resize((size, size))``;
    - ``"lsj"``: large scale jitter, ``ScaleJitter((size, size))`` +
      ``FixedSizeCrop(size, fill=mean)`` + flip (Copy-Paste; Mask R-CNN);
    - ``"ssd"``: photometric distort, zoom out (fill=mean), IoU crop, flip,
      ``Resize((size, size))``, sanitize (SSD300: size=300);
    - ``"ssdlite"``: IoU crop, flip, ``Resize((size, size))``, sanitize
      (SSDlite320: size=320).

    ``size`` is 1024 but for ``"multiscale"`` and ``"detr"`` (1333).

    ```python
    import nostall
    from nostall import detection

    lsj = detection.recipe("lsj", size=512)
    assert [type(t).__name__ for t in lsj] == ["ScaleJitter", "FixedSizeCrop", "RandomHorizontalFlip"]
    multiscale = detection.recipe("multiscale")
    assert multiscale[0].min_size[-1] == 800 and multiscale[0].max_size == 1333
    ```
    """
    from . import transforms as T

    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 1):
        raise ValueError(f"size must be a positive int, not {size!r}")
    if name in ("multiscale", "detr"):
        longest = 1333 if size is None else size
        shorter = [max(1, round(s * longest / 1333)) for s in range(480, 801, 32)]
        resize = T.RandomShortestSize(min_size=shorter, max_size=longest)
        return [resize, T.RandomHorizontalFlip()] if name == "multiscale" else [T.RandomHorizontalFlip(), resize]
    size = 1024 if size is None else size
    if name == "hflip":
        return [T.RandomHorizontalFlip(), T.Resize((size, size))]
    if name == "lsj":
        return [T.ScaleJitter(target_size=(size, size)), T.FixedSizeCrop(size, fill=_REFERENCE_FILL),
                T.RandomHorizontalFlip()]
    if name == "ssd":
        return [T.RandomPhotometricDistort(), T.RandomZoomOut(fill=_REFERENCE_FILL), T.RandomIoUCrop(),
                T.RandomHorizontalFlip(), T.Resize((size, size)), T.SanitizeBoundingBoxes()]
    if name == "ssdlite":
        return [T.RandomIoUCrop(), T.RandomHorizontalFlip(), T.Resize((size, size)), T.SanitizeBoundingBoxes()]
    raise ValueError(f'recipe must be "multiscale", "detr", "hflip", "lsj", "ssd" or "ssdlite", not {name!r}')


def padding_mask(image_sizes, images):
    """DETR's padding mask of a padded batch (``NestedTensor.mask``): a
    ``(B, H, W)`` bool tensor, ``True`` where ``images`` (``(B, C, H, W)``, or
    its ``(H, W)``) is padding, from the ``(B, 2)`` (height, width)
    ``image_sizes`` the loader gives beside a batch of many sizes."""
    import torch

    height, width = (images.shape[-2:] if hasattr(images, "shape") else images)
    sizes = torch.as_tensor(image_sizes)
    rows = torch.arange(height, device=sizes.device)[None, :, None] >= sizes[:, 0, None, None]
    cols = torch.arange(width, device=sizes.device)[None, None, :] >= sizes[:, 1, None, None]
    return rows | cols


def _spec(transforms, masks=False, box_format="XYXY") -> str:
    flat, _ = _flatten(list(transforms))
    for t in flat:
        if not isinstance(t, Transform):
            raise TypeError(f"transforms must be nostall.transforms objects, not {t!r}")
    return json.dumps({"transforms": [t.to_dict() for t in flat], "masks": masks,
                       "box_format": box_format})


def targets_record(annotations) -> bytes:
    """Annotations as the bytes a sample carries: ``{"boxes": [[x0, y0, x1,
    y1], ...], "labels": [...], "format": "XYXY"}`` or COCO's per-image
    ``{"width", "height", "annotations": [{"bbox", "category_id", ...}]}``
    (a dict, or its JSON text)."""
    text = annotations if isinstance(annotations, str) else json.dumps(annotations)
    return _nostall.targets_record(text)


def sample_params(transforms, width: int, height: int, annotations=None, *, seed: int = 0,
                  epoch: int = 0, index: int = 0) -> dict:
    """What the loader would draw for item ``index`` (a ``width`` x
    ``height`` image with these annotations, in the forms
    :func:`targets_record` takes) in ``epoch`` with ``seed``, without pixels:
    ``{"ops": [each step's draws], "size": [h, w], "boxes": [...] (XYXY),
    "labels", "iscrowd", "kept": [input index of each box], "source_box":
    [x, y, w, h], "flip": [x, y]}``."""
    record = b"" if annotations is None else targets_record(annotations)
    return json.loads(_nostall.detection_trace(_spec(transforms), int(width), int(height), record,
                                               seed, epoch, index))


def apply(transforms, image, annotations=None, *, seed: int = 0, epoch: int = 0, index: int = 0,
          masks: bool = False, box_format: str = "XYXY", mode: str = "RGB", dct_scaling: bool = True):
    """Runs the transforms on one image (its encoded bytes, or a path) and
    its annotations, as the loader would for item ``index``: ``(image (H, W,
    C) array, targets dict of arrays)``.

    ``annotations`` take the forms :func:`targets_record` does; ``seed``,
    ``epoch`` and ``index`` pick the draws; ``masks`` makes the masks (the
    annotations need segmentations); ``box_format`` is the output's
    (XYXY, XYWH, CXCYWH); ``mode`` ``"RGB"`` or ``"L"``; ``dct_scaling``
    as the loader's (False: every JPEG decoded at full resolution)."""
    if isinstance(image, (str, os.PathLike)):
        with open(image, "rb") as f:
            image = f.read()
    record = b"" if annotations is None else targets_record(annotations)
    pixels, out = _nostall.detection_apply(_spec(transforms, masks, box_format), bytes(image), record,
                                           seed, epoch, index, mode, dct_scaling)
    return pixels, decode_targets(out, torch=False)
