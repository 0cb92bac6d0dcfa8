"""Detection and segmentation: boxes, labels and masks through nostall's
transforms, checked against torchvision.transforms.v2's rules written out
here in torch (torchvision does not import beside this torch), masks against
pycocotools, images against PIL (docs/detection.md)."""

import io
import itertools
import json
import tarfile

import numpy as np
import pytest
import torch
from PIL import Image

import nostall
from nostall import detection
from nostall.datasets import Coco, make_detection_scenes, natural_image
import warm
from nostall.transforms import (
    CenterCrop,
    ClampBoundingBoxes,
    FixedSizeCrop,
    RandomIoUCrop,
    RandomPhotometricDistort,
    RandomResize,
    RandomResizedCrop,
    RandomShortestSize,
    RandomVerticalFlip,
    RandomZoomOut,
    SanitizeBoundingBoxes,
    ScaleJitter,
)

pycocotools_mask = pytest.importorskip("pycocotools.mask")

SSD = [RandomPhotometricDistort(), RandomZoomOut(fill=(123, 117, 104)), RandomIoUCrop(),
       nostall.RandomHorizontalFlip(), nostall.Resize((300, 300)), SanitizeBoundingBoxes()]


@pytest.fixture(scope="module")
def scenes(tmp_path_factory):
    root = tmp_path_factory.mktemp("scenes")
    ann = make_detection_scenes(root, num_images=40, seed=3, min_side=160, max_side=320)
    return root / "images", ann


# ---------------------------------------------------------------- the v2 rules
# Written from torchvision.transforms.v2.functional's box kernels: every op
# on float32 XYXY tensors, clamped where v2 clamps.

def _clamp(b, h, w):
    b[:, 0::2] = b[:, 0::2].clamp(0, w)
    b[:, 1::2] = b[:, 1::2].clamp(0, h)
    return b


def _crop(b, top, left, h, w):
    return _clamp(b - torch.tensor([left, top, left, top], dtype=torch.float32), h, w)


def _resize(b, h, w, nh, nw):
    if (nh, nw) == (h, w):
        return b
    return b.mul(torch.tensor([nw / w, nh / h, nw / w, nh / h]))


def _sanitize_mask(b, h, w, min_size=1.0, min_area=1.0):
    ws, hs = b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]
    valid = (ws >= min_size) & (hs >= min_size) & (b >= 0).all(dim=-1) & (ws * hs >= min_area)
    valid &= (b[:, 0] <= w) & (b[:, 2] <= w) & (b[:, 1] <= h) & (b[:, 3] <= h)
    return valid


def _mask_pad(m, left, top, right, bottom):
    return torch.nn.functional.pad(m, [left, right, top, bottom])


def _mask_crop(m, top, left, h, w):
    # v2's crop of a tensor: out of range reads as zeros (implicit pad).
    out = torch.zeros(m.shape[0], h, w, dtype=m.dtype)
    H, W = m.shape[1:]
    y0, x0 = max(0, top), max(0, left)
    y1, x1 = min(H, top + h), min(W, left + w)
    if y1 > y0 and x1 > x0:
        out[:, y0 - top:y1 - top, x0 - left:x1 - left] = m[:, y0:y1, x0:x1]
    return out


def _mask_resize(m, nh, nw):
    if m.shape[0] == 0 or tuple(m.shape[1:]) == (nh, nw):
        return m if m.shape[0] else torch.zeros(0, nh, nw, dtype=m.dtype)
    return torch.nn.functional.interpolate(m[None].float(), size=(nh, nw), mode="nearest")[0].to(m.dtype)


def v2_reference(transforms, trace, boxes, labels, w, h, masks=None):
    """Boxes (and masks) after `transforms`, with the parameters nostall drew
    (trace["ops"]), by v2's rules step by step."""
    b = torch.tensor(boxes, dtype=torch.float32).reshape(-1, 4)
    lab = torch.tensor(labels, dtype=torch.int64)
    m = masks
    ops = iter(trace["ops"])
    for t in transforms:
        name = type(t).__name__
        if name in ("RandomPhotometricDistort", "ColorJitter", "Normalize"):
            continue
        if name == "ClampBoundingBoxes":
            b = _clamp(b, h, w)
            continue
        op = next(ops)
        assert op["op"] == name, (op, name)
        if name == "RandomZoomOut":
            if op["padding"] is None:
                continue
            left, top, right, bottom = op["padding"]
            b = b + torch.tensor([left, top, left, top], dtype=torch.float32)
            h, w = h + top + bottom, w + left + right
            b = _clamp(b, h, w)
            if m is not None:
                m = _mask_pad(m, left, top, right, bottom)
        elif name == "RandomIoUCrop":
            if op["crop"] is None:
                continue
            top, left, ch, cw = op["crop"]
            cx, cy = 0.5 * (b[:, 0] + b[:, 2]), 0.5 * (b[:, 1] + b[:, 3])
            within = (left < cx) & (cx < left + cw) & (top < cy) & (cy < top + ch)
            # the crop nostall chose meets the sampler's rule
            assert within.any()
            b = _crop(b, top, left, ch, cw)
            b[~within] = 0
            h, w = ch, cw
            if m is not None:
                m = _mask_crop(m, top, left, ch, cw)
        elif name == "RandomResizedCrop":
            top, left, ch, cw = op["crop"]
            b = _crop(b, top, left, ch, cw)
            nh, nw = t.to_dict()["size"]
            b = _resize(b, ch, cw, nh, nw)
            if m is not None:
                m = _mask_resize(_mask_crop(m, top, left, ch, cw), nh, nw)
            h, w = nh, nw
        elif name == "CenterCrop":
            top, left, ch, cw = op["crop"]
            b = _crop(b, top, left, ch, cw)
            if m is not None:
                m = _mask_crop(m, top, left, ch, cw)
            h, w = ch, cw
        elif name == "Resize":
            nh, nw = op["size"]
            b = _resize(b, h, w, nh, nw)
            if m is not None:
                m = _mask_resize(m, nh, nw)
            h, w = nh, nw
        elif name == "RandomHorizontalFlip":
            if op["applied"]:
                b[:, [0, 2]] = w - b[:, [2, 0]]
                if m is not None:
                    m = m.flip(-1)
        elif name == "RandomVerticalFlip":
            if op["applied"]:
                b[:, [1, 3]] = h - b[:, [3, 1]]
                if m is not None:
                    m = m.flip(-2)
        elif name in ("ScaleJitter", "RandomShortestSize", "RandomResize"):
            nh, nw = _drawn_size(t.to_dict(), op["drawn"], h, w)
            assert op["size"] == [nh, nw], (op, nh, nw)
            b = _resize(b, h, w, nh, nw)
            if m is not None:
                m = _mask_resize(m, nh, nw)
            h, w = nh, nw
        elif name == "FixedSizeCrop":
            size = t.to_dict()["size"]
            ch, cw = (size, size) if isinstance(size, int) else size
            nh, nw = min(h, ch), min(w, cw)
            if (nh, nw) != (h, w):
                top, left, got_h, got_w = op["crop"]
                assert (got_h, got_w) == (nh, nw)
                # one draw r for both: top = int((h - ch) * r), left = int((w - cw) * r)
                assert 0 <= top <= max(h - ch, 0) and 0 <= left <= max(w - cw, 0)
                b = _crop(b, top, left, nh, nw)
                valid = (b[:, 0] < b[:, 2]) & (b[:, 1] < b[:, 3])
                b, lab = b[valid], lab[valid]
                if m is not None:
                    m = _mask_crop(m[valid], top, left, nh, nw)
            else:
                assert op["crop"] is None
            assert op["padding"] == [0, 0, cw - nw, ch - nh]
            if (nh, nw) != (ch, cw):  # v2's pad of boxes clamps them to the new canvas
                b = _clamp(b, ch, cw)
                if m is not None:
                    m = _mask_pad(m, 0, 0, cw - nw, ch - nh)
            h, w = ch, cw
        elif name == "SanitizeBoundingBoxes":
            keep = _sanitize_mask(b, h, w, t.to_dict()["min_size"], t.to_dict()["min_area"])
            b, lab = b[keep], lab[keep]
            if m is not None:
                m = m[keep]
        else:
            raise AssertionError(name)
    return b, lab, m, (h, w)


def _drawn_size(args, drawn, h, w):
    """The size v2's make_params gives for the value nostall drew: ScaleJitter's
    scale (float32 tensors, as v2's), RandomShortestSize's side, RandomResize's
    short side (F.resize's rule for one int)."""
    if "target_size" in args:
        th, tw = args["target_size"]
        lo, hi = args["scale_range"]
        assert lo <= drawn <= hi
        r = min(tw / h, th / w) * torch.tensor([drawn], dtype=torch.float32)
        return int(h * r), int(w * r)
    if "min_size" in args and isinstance(args["min_size"], list):
        assert drawn in args["min_size"]
        r = drawn / min(h, w)
        if args["max_size"] is not None:
            r = min(r, args["max_size"] / max(h, w))
        return int(h * r), int(w * r)
    assert args["min_size"] <= drawn < args["max_size"]
    short, long = (w, h) if w <= h else (h, w)
    new_short, new_long = drawn, int(drawn * long / short)
    return (new_long, new_short) if w <= h else (new_short, new_long)


def _random_boxes(rng, w, h, n):
    x0 = rng.uniform(-20, w, n)
    y0 = rng.uniform(-20, h, n)
    bw = rng.uniform(-5, w / 2, n)  # some negative: degenerate boxes as hostile files give
    bh = rng.uniform(-5, h / 2, n)
    return np.stack([x0, y0, x0 + bw, y0 + bh], 1).round(2).tolist()


RECIPES = {
    "ssd": SSD,
    "zoom+iou+vflip": [RandomZoomOut(side_range=(1.0, 3.0), p=0.7), RandomIoUCrop(trials=10),
                       RandomVerticalFlip(), nostall.Resize((240, 320)), SanitizeBoundingBoxes()],
    "rrc": [RandomResizedCrop(224, scale=(0.2, 1.0)), nostall.RandomHorizontalFlip(),
            ClampBoundingBoxes(), SanitizeBoundingBoxes(min_size=2, min_area=10)],
    "resize-short+center": [nostall.Resize(256), CenterCrop(224), SanitizeBoundingBoxes()],
    "center-larger": [CenterCrop((500, 400)), ClampBoundingBoxes()],
    # torchvision's references: lsj (Copy-Paste) and multi-scale resizes ending in one size
    "lsj": [ScaleJitter(target_size=(320, 320)), FixedSizeCrop(320), nostall.RandomHorizontalFlip(),
            SanitizeBoundingBoxes()],
    "lsj-wide": [ScaleJitter(target_size=(240, 400), scale_range=(0.3, 1.7)), FixedSizeCrop((240, 400)),
                 ClampBoundingBoxes()],
    "shortest+resize+fixed": [RandomShortestSize([160, 200, 240], max_size=400), RandomResize(150, 260),
                              FixedSizeCrop((200, 224)), SanitizeBoundingBoxes()],
}


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_boxes_follow_v2_rules_for_every_draw(recipe):
    """For many samples (seeds, sizes, random and degenerate boxes), the boxes
    and labels nostall gives equal v2's rules applied with the parameters it
    drew, within 1e-3 px."""
    transforms = RECIPES[recipe]
    rng = np.random.default_rng(7)
    checked, seen = 0, set()
    for index in range(60):
        w, h = (int(v) for v in rng.integers(100, 700, 2))
        boxes = _random_boxes(rng, w, h, int(rng.integers(0, 12)))
        labels = rng.integers(1, 91, len(boxes)).tolist()
        ann = {"boxes": boxes, "labels": labels}
        trace = detection.sample_params(transforms, w, h, ann, seed=5, index=index)
        b, lab, _, (oh, ow) = v2_reference(transforms, trace, boxes, labels, w, h)
        assert trace["size"] == [oh, ow]
        got = np.array(trace["boxes"], dtype=np.float32).reshape(-1, 4)
        np.testing.assert_allclose(got, b.numpy(), atol=1e-3)
        assert trace["labels"] == lab.tolist()
        checked += len(got)
        for op in trace["ops"]:
            if op["op"] == "FixedSizeCrop":
                seen |= {"crop"} if op["crop"] is not None else set()
                seen |= {"pad"} if op["padding"] != [0, 0, 0, 0] else set()
                seen |= {"removed"} if op["removed"] else set()
    assert checked > 50  # the recipes keep boxes, not only drop them
    if any(type(t).__name__ == "FixedSizeCrop" for t in transforms):
        assert seen == {"crop", "pad", "removed"}, seen  # every branch of it met


def test_iou_crop_draws_meet_the_sampler_rule():
    """Every crop RandomIoUCrop chose holds a box centre and overlaps such a
    box by at least the drawn minimum IoU; "no crop" comes at least as often
    as its option is drawn first (1/7), more where a high IoU finds no crop
    in 40 trials and the option is drawn again."""
    rng = np.random.default_rng(1)
    none = 0
    for index in range(300):
        w, h = 500, 400
        boxes = _random_boxes(rng, w, h, 5)
        boxes = [[min(a, c), min(b, d), max(a, c) + 1, max(b, d) + 1] for a, b, c, d in boxes]
        tr = detection.sample_params([RandomIoUCrop()], w, h, {"boxes": boxes, "labels": [1] * 5}, index=index)
        op = tr["ops"][0]
        if op["crop"] is None:
            none += 1
            continue
        top, left, ch, cw = op["crop"]
        assert 0.3 * h - 1 <= ch <= h and 0.3 * w - 1 <= cw <= w and 0.5 <= cw / ch <= 2.0
        b = torch.tensor(boxes)
        cx, cy = (b[:, 0] + b[:, 2]) / 2, (b[:, 1] + b[:, 3]) / 2
        within = (left < cx) & (cx < left + cw) & (top < cy) & (cy < top + ch)
        crop = torch.tensor([left, top, left + cw, top + ch], dtype=torch.float32)
        inter_w = (torch.minimum(b[:, 2], crop[2]) - torch.maximum(b[:, 0], crop[0])).clamp(min=0)
        inter_h = (torch.minimum(b[:, 3], crop[3]) - torch.maximum(b[:, 1], crop[1])).clamp(min=0)
        inter = inter_w * inter_h
        area = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
        iou = inter / (area + cw * ch - inter)
        assert iou[within].max() >= op["min_iou"] - 1e-6
    assert 25 < none < 150


def _coco_masks(ann_json, image_id, h, w):
    anns = [a for a in ann_json["annotations"] if a["image_id"] == image_id]
    out = []
    for a in anns:
        seg = a["segmentation"]
        if isinstance(seg, list):
            rle = pycocotools_mask.merge(pycocotools_mask.frPyObjects(seg, h, w))
        elif isinstance(seg["counts"], list):
            rle = pycocotools_mask.frPyObjects(seg, h, w)
        else:
            rle = seg
        out.append(pycocotools_mask.decode(rle))
    return np.stack(out) if out else np.zeros((0, h, w), np.uint8)


def test_masks_from_polygons_and_rle_equal_pycocotools(scenes):
    """Every instance mask (polygons, uncompressed and compressed RLE) equals
    pycocotools' decode of the same annotation, pixel for pixel."""
    _, ann_path = scenes
    ann = json.loads(ann_path.read_text())
    # compressed RLE too: one annotation per image re-encoded as a string
    for a in ann["annotations"][::7]:
        img = next(i for i in ann["images"] if i["id"] == a["image_id"])
        rle = pycocotools_mask.merge(pycocotools_mask.frPyObjects(a["segmentation"], img["height"], img["width"])) \
            if isinstance(a["segmentation"], list) else pycocotools_mask.frPyObjects(a["segmentation"], img["height"], img["width"])
        a["segmentation"] = {"size": rle["size"], "counts": rle["counts"].decode()}
    checked = 0
    for img in ann["images"]:
        mine = [a for a in ann["annotations"] if a["image_id"] == img["id"]]
        record = detection.targets_record({"width": img["width"], "height": img["height"], "annotations": mine})
        got = nostall._nostall.targets_masks(record, img["height"], img["width"])
        want = _coco_masks(ann, img["id"], img["height"], img["width"])
        np.testing.assert_array_equal(got, want)
        checked += len(want)
    assert checked > 100


MASK_RECIPES = {
    "ssd": [RandomZoomOut(p=0.8), RandomIoUCrop(), nostall.RandomHorizontalFlip(), RandomVerticalFlip(),
            nostall.Resize((300, 300)), SanitizeBoundingBoxes()],
    "lsj": [ScaleJitter(target_size=(256, 256)), FixedSizeCrop(256, fill=(123, 117, 104)),
            nostall.RandomHorizontalFlip(), SanitizeBoundingBoxes()],
    "multiscale": [RandomShortestSize([128, 160, 192], max_size=300), FixedSizeCrop((176, 208))],
}


@pytest.mark.parametrize("recipe", sorted(MASK_RECIPES))
def test_transformed_masks_equal_v2_steps(scenes, recipe):
    """Masks through zoom out, IoU crop, flips and resize, and through the
    lsj and multi-scale resizes and fixed-size crop, equal v2's pad / crop /
    flip / resize(nearest) of pycocotools' masks, exactly."""
    images, ann_path = scenes
    ann = json.loads(ann_path.read_text())
    transforms = MASK_RECIPES[recipe]
    total = 0
    for k, img in enumerate(ann["images"][:25]):
        mine = [a for a in ann["annotations"] if a["image_id"] == img["id"]]
        record_ann = {"width": img["width"], "height": img["height"], "annotations": mine}
        w, h = img["width"], img["height"]
        trace = detection.sample_params(transforms, w, h, record_ann, seed=2, index=k)
        boxes = [[a["bbox"][0], a["bbox"][1], a["bbox"][0] + a["bbox"][2], a["bbox"][1] + a["bbox"][3]] for a in mine]
        masks = torch.from_numpy(_coco_masks(ann, img["id"], h, w))
        b, lab, m, _ = v2_reference(transforms, trace, boxes, [a["category_id"] for a in mine], w, h, masks)
        _, out = detection.apply(transforms, images / img["file_name"], record_ann, seed=2, index=k, masks=True)
        np.testing.assert_allclose(out["boxes"], b.numpy(), atol=1e-3)
        np.testing.assert_array_equal(out["labels"], lab.numpy())
        np.testing.assert_array_equal(out["masks"], m.numpy())
        total += int(m.sum())
    assert total > 10000


def _one_png_sample(rng, transforms, index):
    """A natural-looking image of a random size as a lossless PNG, with one
    box: (its pixels, the draws for `index`, the image nostall makes)."""
    w, h = (int(v) for v in rng.integers(150, 400, 2))
    arr = natural_image(rng, w, h)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    ann = {"boxes": [[w * 0.2, h * 0.2, w * 0.6, h * 0.7]], "labels": [1]}
    trace = detection.sample_params(transforms, w, h, ann, index=index)
    got, _ = detection.apply(transforms, buf.getvalue(), ann, index=index)
    return arr, trace, got


def test_lsj_pixels_equal_pil_resize_crop_and_fill():
    """ScaleJitter + FixedSizeCrop (+ flips) on a lossless PNG: the image
    equals PIL's bilinear resize to the drawn size, cropped where drawn,
    pasted on a canvas of the fill (the image's edge not blended with it, as
    v2 resizes before it pads), flipped, within one grey level."""
    rng = np.random.default_rng(11)
    fill = (123, 117, 104)
    transforms = [ScaleJitter(target_size=(192, 192), scale_range=(0.5, 1.6)), FixedSizeCrop(192, fill=fill),
                  nostall.RandomHorizontalFlip(p=0.5), RandomVerticalFlip(p=0.5)]
    worst, shapes, flips = 0, set(), set()
    for index in range(16):
        arr, trace, got = _one_png_sample(rng, transforms, index)
        assert got.shape == (192, 192, 3)
        nh, nw = trace["ops"][0]["size"]
        im = Image.fromarray(arr).resize((nw, nh), Image.BILINEAR)
        crop = trace["ops"][1]["crop"]
        if crop is not None:
            t, l, ch, cw = crop
            im = im.crop((l, t, l + cw, t + ch))
        canvas = Image.new("RGB", (192, 192), fill)
        canvas.paste(im, (0, 0))
        if trace["ops"][2]["applied"]:
            canvas = canvas.transpose(Image.FLIP_LEFT_RIGHT)
        if trace["ops"][3]["applied"]:
            canvas = canvas.transpose(Image.FLIP_TOP_BOTTOM)
        flips.add((trace["ops"][2]["applied"], trace["ops"][3]["applied"]))
        diff = np.abs(got.astype(int) - np.asarray(canvas).astype(int))
        worst = max(worst, int(diff.max()))
        shapes.add((crop is not None, trace["ops"][1]["padding"] != [0, 0, 0, 0]))
    assert worst <= 1
    assert {(True, False), (False, True)} <= shapes  # crops and paddings both met
    assert len(flips) == 4


def test_pixel_ops_before_lsj_leave_the_padding_the_fill():
    """Pixel ops before the geometry (ColorJitter, RandomPhotometricDistort)
    change the image, never the padding FixedSizeCrop adds after the resize:
    it is exactly the fill, and the image's place is exactly where the drawn
    size puts it."""
    from nostall.transforms import ColorJitter

    rng = np.random.default_rng(5)
    fill = (1, 2, 3)
    transforms = [ColorJitter(brightness=0.5, contrast=0.5), RandomPhotometricDistort(),
                  ScaleJitter(target_size=(160, 160), scale_range=(0.3, 0.9)), FixedSizeCrop(160, fill=fill)]
    for index in range(6):
        arr, trace, got = _one_png_sample(rng, transforms, index)
        nh, nw = next(op for op in trace["ops"] if op["op"] == "ScaleJitter")["size"]
        assert got.shape == (160, 160, 3) and nh <= 160 and nw <= 160
        outside = np.ones((160, 160), bool)
        outside[:nh, :nw] = False
        assert (got[outside] == np.array(fill, np.uint8)).all()
        assert not (got[:nh, :nw] == np.array(fill, np.uint8)).all(-1).all()


def test_image_pixels_equal_pil_for_zoom_crop_flip_resize(tmp_path):
    """On a lossless PNG, the image nostall makes equals PIL doing v2's steps
    (pad with the fill, crop, flip, resize bilinear) within one grey level."""
    rng = np.random.default_rng(4)
    transforms = [RandomZoomOut(fill=(123, 117, 104), p=1.0), RandomIoUCrop(), nostall.RandomHorizontalFlip(p=1.0),
                  nostall.Resize((200, 240))]
    worst = 0
    for index in range(8):
        arr, trace, got = _one_png_sample(rng, transforms, index)
        h, w = arr.shape[:2]
        im = Image.fromarray(arr)
        left, top, right, bottom = trace["ops"][0]["padding"]
        canvas = Image.new("RGB", (w + left + right, h + top + bottom), (123, 117, 104))
        canvas.paste(im, (left, top))
        if trace["ops"][1]["crop"] is not None:
            t, l, ch, cw = trace["ops"][1]["crop"]
            canvas = canvas.crop((l, t, l + cw, t + ch))
        canvas = canvas.transpose(Image.FLIP_LEFT_RIGHT).resize((240, 200), Image.BILINEAR)
        diff = np.abs(got.astype(int) - np.asarray(canvas).astype(int))
        worst = max(worst, int(diff.max()))
    assert worst <= 1


def test_loader_gives_images_and_target_dicts(scenes):
    """The issue's loop: (images (B, 3, 300, 300), B dicts of boxes (N, 4),
    labels (N,), iscrowd (N,)); each sample's boxes are sample_params' for
    its index; every image once per epoch."""
    images_dir, ann_path = scenes
    loader = nostall.Loader(Coco(images_dir, ann_path), transforms=SSD, batch_size=8, shuffle=True, seed=11,
                            return_indices=True)
    ann = json.loads(ann_path.read_text())
    by_id = {i["id"]: i for i in ann["images"]}
    ids = sorted(by_id)
    seen = []
    for epoch in range(2):
        loader.set_epoch(epoch)
        for images, targets, indices in loader:
            assert images.shape[1:] == (3, 300, 300) and images.dtype == torch.uint8
            assert len(targets) == len(indices)
            for t, i in zip(targets, indices.tolist()):
                assert t["boxes"].dtype == torch.float32 and t["boxes"].shape[1:] == (4,)
                assert t["labels"].dtype == torch.int64 and len(t["labels"]) == len(t["boxes"])
                img = by_id[ids[i]]
                mine = [a for a in ann["annotations"] if a["image_id"] == img["id"]]
                tr = detection.sample_params(SSD, img["width"], img["height"],
                                             {"width": img["width"], "height": img["height"], "annotations": mine},
                                             seed=11, epoch=epoch, index=i)
                np.testing.assert_allclose(t["boxes"].numpy(), np.array(tr["boxes"], np.float32).reshape(-1, 4),
                                           atol=1e-4)
                assert t["labels"].tolist() == tr["labels"]
                if epoch == 0:
                    seen.append(i)
    assert sorted(seen) == list(range(len(ids)))


def test_lsj_recipe_in_a_loader_gives_one_size_with_masks_as_apply(scenes):
    """torchvision's lsj recipe (detection.recipe): every batch (4, 3, S, S)
    whatever the scale drawn, masks S x S, and each sample's image, boxes and
    masks those detection.apply gives for its index."""
    images_dir, ann_path = scenes
    lsj = detection.recipe("lsj", size=160)
    assert [type(t).__name__ for t in lsj] == ["ScaleJitter", "FixedSizeCrop", "RandomHorizontalFlip"]
    loader = nostall.Loader(Coco(images_dir, ann_path, masks=True), transforms=lsj, batch_size=4, shuffle=True,
                            seed=3, return_indices=True)
    ann = json.loads(ann_path.read_text())
    ids = sorted(i["id"] for i in ann["images"])
    by_id = {i["id"]: i for i in ann["images"]}
    sizes = set()
    for images, targets, indices in loader:
        assert images.shape[1:] == (3, 160, 160)
        for img, t, i in zip(images, targets, indices.tolist()):
            meta = by_id[ids[i]]
            mine = [a for a in ann["annotations"] if a["image_id"] == meta["id"]]
            record = {"width": meta["width"], "height": meta["height"], "annotations": mine}
            want_img, want = detection.apply(lsj, images_dir / meta["file_name"], record, seed=3, index=i,
                                             masks=True)
            np.testing.assert_array_equal(img.permute(1, 2, 0).numpy(), want_img)
            np.testing.assert_allclose(t["boxes"].numpy(), want["boxes"], atol=1e-4)
            np.testing.assert_array_equal(t["masks"].numpy(), want["masks"])
            assert t["masks"].shape[1:] == (160, 160)
            sizes.add(tuple(detection.sample_params(lsj, meta["width"], meta["height"], record, seed=3,
                                                    index=i)["ops"][0]["size"]))
    assert len(sizes) > 10  # the scales drawn differ; the batches' size does not
    assert [type(t).__name__ for t in detection.recipe("ssd", size=300)][-2:] == ["Resize", "SanitizeBoundingBoxes"]


def test_multiscale_recipe_pads_each_batch_to_its_largest_with_each_size(scenes):
    """torchvision's multiscale recipe (RandomShortestSize + flip): each image
    keeps its own size; a batch is its largest, rounded up to 32, with each
    image's (height, width) beside it; within its size each image, its boxes
    and masks are detection.apply's for its index, and the padding is zero,
    float32 (normalized) too."""
    images_dir, ann_path = scenes
    multiscale = detection.recipe("multiscale", size=256)
    ann = json.loads(ann_path.read_text())
    ids = sorted(i["id"] for i in ann["images"])
    by_id = {i["id"]: i for i in ann["images"]}
    for tf, dtype in ((multiscale, np.uint8),
                      (multiscale + [nostall.Normalize(mean=(0.5, 0.4, 0.3), std=(0.2, 0.25, 0.3))], np.float32)):
        loader = nostall.Loader(Coco(images_dir, ann_path, masks=True), transforms=tf, batch_size=4, shuffle=True,
                                seed=5, return_indices=True)
        shapes = set()
        for images, targets, sizes, indices in loader:
            assert sizes.shape == (len(indices), 2) and sizes.dtype == torch.int64
            assert images.dtype == torch.from_numpy(np.zeros(1, dtype)).dtype
            h_max, w_max = sizes.max(dim=0).values.tolist()
            assert images.shape[1:] == (3, -(-h_max // 32) * 32, -(-w_max // 32) * 32)
            assert images.is_contiguous()
            shapes.add(tuple(images.shape[2:]))
            for img, t, (h, w), i in zip(images, targets, sizes.tolist(), indices.tolist()):
                meta = by_id[ids[i]]
                mine = [a for a in ann["annotations"] if a["image_id"] == meta["id"]]
                record = {"width": meta["width"], "height": meta["height"], "annotations": mine}
                want_img, want = detection.apply(tf, images_dir / meta["file_name"], record, seed=5, index=i,
                                                 masks=True)
                assert want_img.shape[:2] == (h, w) and max(h, w) <= 256
                # (float32: the batch's planes are written by the SIMD kernel,
                # apply's interleaved pixels by a scalar loop: 1 ulp apart)
                np.testing.assert_allclose(img[:, :h, :w].permute(1, 2, 0).numpy(), want_img, rtol=0,
                                           atol=0 if dtype == np.uint8 else 1e-6)
                assert not img[:, h:, :].any() and not img[:, :, w:].any()
                np.testing.assert_allclose(t["boxes"].numpy(), want["boxes"], atol=1e-4)
                np.testing.assert_array_equal(t["masks"].numpy(), want["masks"])
                assert t["masks"].shape[1:] == (h, w)
        assert len(shapes) > 3  # the batches' sizes differ


def test_masks_padded_batches_and_box_formats(scenes):
    images_dir, ann_path = scenes
    plain = nostall.Loader(Coco(images_dir, ann_path), transforms=[nostall.Resize((128, 128))], batch_size=4)
    xywh = nostall.Loader(Coco(images_dir, ann_path, box_format="XYWH", masks=True),
                          transforms=[nostall.Resize((128, 128))], batch_size=4)
    padded = nostall.Loader(Coco(images_dir, ann_path, batch="padded"), transforms=[nostall.Resize((128, 128))],
                            batch_size=4)
    (_, a), (_, b), (_, p) = next(iter(plain)), next(iter(xywh)), next(iter(padded))
    for ta, tb in zip(a, b):
        xyxy = ta["boxes"]
        np.testing.assert_allclose(tb["boxes"][:, :2], xyxy[:, :2])
        np.testing.assert_allclose(tb["boxes"][:, 2:], xyxy[:, 2:] - xyxy[:, :2], atol=1e-4)
        assert tb["masks"].shape == (len(xyxy), 128, 128) and tb["masks"].dtype == torch.uint8
        # each mask lies inside its box (nearest sampling: within a pixel)
        for box, mask in zip(xyxy, tb["masks"]):
            ys, xs = np.nonzero(mask.numpy())
            if len(xs):
                assert xs.min() >= box[0] - 1 and xs.max() <= box[2] + 1
    assert p["counts"].tolist() == [len(t["labels"]) for t in a]
    m = int(p["counts"].max())
    assert p["boxes"].shape == (4, m, 4) and p["labels"].shape == (4, m)
    for i, t in enumerate(a):
        n = len(t["labels"])
        assert torch.equal(p["boxes"][i, :n], t["boxes"]) and (p["labels"][i, n:] == -1).all()


def _shards_of(images_dir, ann, out, shards=2):
    """The same scenes as WebDataset shards: KEY.jpg + KEY.json (COCO's
    per-image annotations), in image-id order across the shards."""
    out.mkdir(parents=True, exist_ok=True)
    imgs = sorted(ann["images"], key=lambda i: i["id"])
    per = (len(imgs) + shards - 1) // shards
    for s in range(shards):
        with tarfile.open(out / f"det-{s}.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
            for img in imgs[s * per:(s + 1) * per]:
                mine = [a for a in ann["annotations"] if a["image_id"] == img["id"]]
                key = f"{img['id']:08d}"
                for name, data in ((key + ".jpg", (images_dir / img["file_name"]).read_bytes()),
                                   (key + ".json", json.dumps({"width": img["width"], "height": img["height"],
                                                               "annotations": mine}).encode())):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    return str(out / ("det-{0..%d}.tar" % (shards - 1)))


def test_webdataset_json_targets_equal_coco_folder(scenes, tmp_path):
    """WebDataset shards whose .json carries the annotations give the same
    batches as the COCO folder: images and targets byte for byte."""
    images_dir, ann_path = scenes
    ann = json.loads(ann_path.read_text())
    pattern = _shards_of(images_dir, ann, tmp_path / "shards")
    coco = nostall.Loader(Coco(images_dir, ann_path), transforms=SSD, batch_size=8, shuffle=True, seed=4)
    wds = nostall.Loader(pattern, fields={"image": "jpg", "targets": {"ext": "json", "kind": "targets"}},
                         transforms=SSD, batch_size=8, shuffle=True, seed=4)
    n = 0
    for (ia, ta), batch in zip(coco, wds):
        assert torch.equal(ia, batch["image"])
        for x, y in zip(ta, batch["targets"]):
            assert torch.equal(x["boxes"], y["boxes"]) and torch.equal(x["labels"], y["labels"])
        n += len(ta)
    assert n == len(ann["images"])


def test_cache_and_resume_keep_targets(scenes):
    """Through the shared-memory cache and a resumed state_dict, batches and
    targets are the same bytes as a plain run."""
    images_dir, ann_path = scenes
    def run(**kw):
        loader = nostall.Loader(Coco(images_dir, ann_path, masks=True), transforms=SSD, batch_size=8, shuffle=True,
                                seed=9, **kw)
        out = [(i.clone(), [{k: v.clone() for k, v in t.items()} for t in ts]) for i, ts in loader]
        loader.close()
        return out
    import os

    name = f"det-test-cache-{os.getpid()}"
    plain = run()
    try:
        cached = run(cache=nostall.Cache(size=64 << 20, name=name))
    finally:
        try:
            nostall.Cache(name, 1).remove()
        except FileNotFoundError:
            pass
    assert len(plain) == len(cached)
    for (ia, ta), (ib, tb) in zip(plain, cached):
        assert torch.equal(ia, ib)
        for x, y in zip(ta, tb):
            assert all(torch.equal(x[k], y[k]) for k in x)
    loader = nostall.Loader(Coco(images_dir, ann_path, masks=True), transforms=SSD, batch_size=8, shuffle=True, seed=9)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    loader.close()
    resumed = nostall.Loader(Coco(images_dir, ann_path, masks=True), transforms=SSD, batch_size=8, shuffle=True, seed=9)
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert len(rest) == len(plain) - 1
    for (ia, ta), (ib, tb) in zip(plain[1:], rest):
        assert torch.equal(ia, ib) and all(torch.equal(x["masks"], y["masks"]) for x, y in zip(ta, tb))


# ------------------------------------------------------------ hostile input

def _coco_file(tmp_path, images, anns, cats=({"id": 1, "name": "a"},)):
    p = tmp_path / "ann.json"
    p.write_text(json.dumps({"images": images, "annotations": anns, "categories": list(cats)}))
    return p


def _one_image(tmp_path, w=64, h=48):
    d = tmp_path / "imgs"
    d.mkdir(exist_ok=True)
    Image.fromarray(natural_image(np.random.default_rng(0), w, h)).save(d / "a.jpg", quality=90)
    return d, {"id": 1, "file_name": "a.jpg", "width": w, "height": h}


@pytest.mark.parametrize("bbox", [[-50, -50, 20, 20], [30, 20, -10, -5], [1e9, 1e9, 5, 5], [10, 10, 0, 0]])
def test_boxes_outside_or_negative_are_sanitised_not_crashed(tmp_path, bbox):
    d, img = _one_image(tmp_path)
    p = _coco_file(tmp_path, [img], [{"id": 1, "image_id": 1, "bbox": bbox, "category_id": 1}])
    loader = nostall.Loader(Coco(d, p), transforms=[nostall.Resize((32, 32)), ClampBoundingBoxes(),
                                                    SanitizeBoundingBoxes()], batch_size=1)
    _, targets = next(iter(loader))
    b = targets[0]["boxes"]
    assert len(b) <= 1 and (b >= 0).all() and (b <= 32).all()


@pytest.mark.parametrize("ann,message", [
    ({"id": 1, "image_id": 1, "bbox": [1, 2, 3], "category_id": 1}, "bbox"),
    ({"id": 1, "image_id": 1, "bbox": [1, 2, "x", 4], "category_id": 1}, "bbox"),
    ({"id": 1, "image_id": 1, "bbox": [1, 2, 3, 4]}, "category_id"),
    ({"id": 1, "image_id": 99, "bbox": [1, 2, 3, 4], "category_id": 1}, "image id 99"),
    ({"id": 1, "image_id": 1, "bbox": [1, 2, 3, 4], "category_id": 1,
      "segmentation": {"size": [48, 64], "counts": [10, 5]}}, "add up"),
    ({"id": 1, "image_id": 1, "bbox": [1, 2, 3, 4], "category_id": 1,
      "segmentation": {"size": [48, 64], "counts": [3000, 100, 1000]}}, "add up"),
    ({"id": 1, "image_id": 1, "bbox": [1, 2, 3, 4], "category_id": 1,
      "segmentation": {"size": [48, 64], "counts": "\x7f\x7f"}}, "RLE"),
    ({"id": 1, "image_id": 1, "bbox": [1, 2, 3, 4], "category_id": 1, "segmentation": [[1, 2, 3]]}, "odd"),
])
def test_bad_annotations_get_errors_naming_the_file_and_annotation(tmp_path, ann, message):
    d, img = _one_image(tmp_path)
    p = _coco_file(tmp_path, [img], [ann])
    with pytest.raises(nostall.NostallError) as e:
        nostall.Loader(Coco(d, p, masks=True), transforms=[nostall.Resize((32, 32))], batch_size=1)
    assert message in str(e.value) and "ann.json" in str(e.value)


def test_nan_boxes_are_refused_and_two_point_polygons_cover_nothing(tmp_path):
    d, img = _one_image(tmp_path)
    p = tmp_path / "nan.json"
    p.write_text('{"images": [%s], "annotations": [{"id": 1, "image_id": 1, "bbox": [NaN, 1, 2, 3], '
                 '"category_id": 1}]}' % json.dumps(img))
    with pytest.raises(nostall.NostallError, match="JSON|finite"):
        nostall.Loader(Coco(d, p), transforms=[nostall.Resize((32, 32))], batch_size=1)
    p = _coco_file(tmp_path, [img], [{"id": 1, "image_id": 1, "bbox": [1, 2, 30, 20], "category_id": 1,
                                      "segmentation": [[1, 2, 30, 20]]}])
    loader = nostall.Loader(Coco(d, p, masks=True), transforms=[nostall.Resize((48, 64))], batch_size=1)
    _, t = next(iter(loader))
    assert t[0]["masks"].shape == (1, 48, 64) and int(t[0]["masks"].sum()) == 0


def test_a_million_boxes_is_an_error_not_an_allocation(tmp_path):
    d, img = _one_image(tmp_path)
    boxes = [[1, 1, 5, 5]] * 1_000_000
    with pytest.raises(nostall.NostallError, match="over the limit"):
        detection.targets_record({"boxes": boxes, "labels": [1] * len(boxes)})
    anns = [{"id": k, "image_id": 1, "bbox": [1, 1, 4, 4], "category_id": 1} for k in range(70000)]
    p = _coco_file(tmp_path, [img], anns)
    with pytest.raises(nostall.NostallError, match="over 65536 annotations"):
        nostall.Loader(Coco(d, p), transforms=[nostall.Resize((32, 32))], batch_size=1)


def test_polygon_far_outside_the_image_is_an_error_not_a_hang(tmp_path):
    rec = detection.targets_record({"width": 64, "height": 48, "annotations": [
        {"bbox": [0, 0, 1, 1], "category_id": 1, "segmentation": [[0, 0, 1e9, 0, 0, 1e9]]}]})
    with pytest.raises(nostall.NostallError, match="far outside"):
        nostall._nostall.targets_masks(rec, 48, 64)


def test_not_a_coco_file_and_box_transforms_outside_detection(tmp_path):
    d, img = _one_image(tmp_path)
    for text in ("[1, 2]", '{"info": {}}', '{"images": [', ""):
        p = tmp_path / "bad.json"
        p.write_text(text)
        with pytest.raises(nostall.NostallError, match="bad.json"):
            nostall.Loader(Coco(d, p), transforms=[nostall.Resize((32, 32))], batch_size=1)
    with pytest.raises(ValueError, match="detection spec"):
        nostall.Loader(str(d), transforms=[RandomIoUCrop(), nostall.Resize((32, 32))], batch_size=1)
    p = _coco_file(tmp_path, [img], [])
    with pytest.raises(ValueError, match="bound the size of every sample"):
        nostall.Loader(Coco(d, p), transforms=[RandomIoUCrop()], batch_size=1)


def test_annotation_file_is_parsed_once(scenes, tmp_path, monkeypatch):
    """A second loader (and a second process) maps the saved table: the
    index origin says so, and a changed file is parsed again."""
    images_dir, ann_path = scenes
    copy = tmp_path / "instances.json"
    copy.write_text(ann_path.read_text())
    first = nostall.Loader(Coco(images_dir, copy), transforms=[nostall.Resize((64, 64))], batch_size=4)
    assert "parsed in" in first.index_origin
    second = nostall.Loader(Coco(images_dir, copy), transforms=[nostall.Resize((64, 64))], batch_size=4)
    assert "index cache" in second.index_origin
    ann = json.loads(copy.read_text())
    ann["images"] = ann["images"][:10]
    ann["annotations"] = [a for a in ann["annotations"] if a["image_id"] <= ann["images"][-1]["id"]]
    copy.write_text(json.dumps(ann))
    third = nostall.Loader(Coco(images_dir, copy), transforms=[nostall.Resize((64, 64))], batch_size=1)
    assert "parsed in" in third.index_origin and len(third) == 10


# ------------------------------------------------------- S3 and shared loader

@pytest.fixture(scope="module")
def s3_scenes(scenes, tmp_path_factory):
    """The scenes on a real S3-compatible server (moto's): images, the
    instances JSON, and WebDataset shards of them with .json annotations."""
    import os

    boto3 = pytest.importorskip("boto3")
    from conftest import fresh_bucket, moto_endpoint

    images_dir, ann_path = scenes
    endpoint = moto_endpoint()
    env = {"AWS_ACCESS_KEY_ID": "AKIDTEST", "AWS_SECRET_ACCESS_KEY": "secret", "AWS_REGION": "us-east-1"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id="AKIDTEST", aws_secret_access_key="secret")
    fresh_bucket(client, "det")
    for path in sorted(images_dir.glob("*.jpg")):
        client.upload_file(str(path), "det", "coco/train/" + path.name)
    client.upload_file(str(ann_path), "det", "coco/instances.json")
    shards = tmp_path_factory.mktemp("s3shards")
    _shards_of(images_dir, json.loads(ann_path.read_text()), shards)
    for path in sorted(shards.glob("*.tar")):
        client.upload_file(str(path), "det", "shards/" + path.name)
    yield endpoint
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _all_batches(loader):
    out = []
    for batch in loader:
        images, targets = (batch["image"], batch["targets"]) if isinstance(batch, dict) else batch
        out.append((images.clone(), [{k: v.clone() for k, v in t.items()} for t in targets]))
    return out


def _same(a, b):
    assert len(a) == len(b)
    for (ia, ta), (ib, tb) in zip(a, b):
        assert torch.equal(ia, ib)
        for x, y in zip(ta, tb):
            # (a COCO file gives image_id and orig_size; shards' .json members do not)
            shared = x.keys() & y.keys()
            assert {"boxes", "labels", "iscrowd"} <= shared and x.keys() ^ y.keys() <= {"image_id", "orig_size"}
            assert all(torch.equal(x[k], y[k]) for k in shared)


def test_coco_on_s3_gives_the_local_batches(scenes, s3_scenes):
    """Images and the instances JSON on S3 (each image one GET, the JSON read
    once, then its saved table): every sample once, images and targets byte
    for byte the local ones, masks too; WebDataset shards with .json on S3
    the same."""
    images_dir, ann_path = scenes
    opts = {"endpoint": s3_scenes}
    kw = dict(transforms=SSD, batch_size=8, shuffle=True, seed=21)
    local = _all_batches(nostall.Loader(Coco(images_dir, ann_path, masks=True), **kw))
    remote_loader = nostall.Loader(Coco("s3://det/coco/train", "s3://det/coco/instances.json", masks=True),
                                   source_options=opts, **kw)
    remote = _all_batches(remote_loader)
    _same(local, remote)
    assert remote_loader.stats()["storage"]["requests"] >= len(json.loads(ann_path.read_text())["images"])
    again = nostall.Loader(Coco("s3://det/coco/train", "s3://det/coco/instances.json", masks=True),
                           source_options=opts, **kw)
    assert "index cache" in again.index_origin
    shards = nostall.Loader("s3://det/shards/det-{0..1}.tar", source_options=opts,
                            fields={"image": "jpg", "targets": {"ext": "json", "kind": "targets", "masks": True}},
                            first_epoch="exact", **kw)
    _same(local, _all_batches(shards))


def test_coco_behind_a_web_server_gives_the_local_batches(scenes, tmp_path):
    """Images and the instances JSON behind nginx (the http store: each
    image one GET, the JSON read once and its table kept, keyed by its
    ETag): the local batches, masks too."""
    import shutil

    from conftest import Nginx

    images_dir, ann_path = scenes
    www = tmp_path / "www"
    shutil.copytree(images_dir, www / "coco" / "train")
    shutil.copy(ann_path, www / "coco" / "instances.json")
    server = Nginx(www, tmp_path / "work")
    try:
        kw = dict(transforms=SSD, batch_size=8, shuffle=True, seed=21)
        local = _all_batches(nostall.Loader(Coco(images_dir, ann_path, masks=True), **kw))
        remote = nostall.Loader(Coco(f"{server.url}/coco/train", f"{server.url}/coco/instances.json",
                                     masks=True), **kw)
        _same(local, _all_batches(remote))
        assert remote.stats()["storage"]["requests"] >= len(json.loads(ann_path.read_text())["images"])
        again = nostall.Loader(Coco(f"{server.url}/coco/train", f"{server.url}/coco/instances.json",
                                    masks=True), **kw)
        assert "index cache" in again.index_origin
        with pytest.raises(FileNotFoundError, match="annotation file does not exist"):
            nostall.Loader(Coco(f"{server.url}/coco/train", f"{server.url}/coco/missing.json"), **kw)
    finally:
        server.kill()


def test_shared_loader_serves_detection_batches(scenes):
    """Consumers of `nostall serve` get every sample once, with the targets
    a private loader gives for the same index."""
    images_dir, ann_path = scenes
    loader = nostall.Loader(Coco(images_dir, ann_path), transforms=SSD, batch_size=8, shuffle=True, seed=5,
                            return_indices=True)
    private = {}
    for images, targets, indices in loader:
        for k, i in enumerate(indices.tolist()):
            private[i] = (images[k].clone(), targets[k])
    import os

    name = f"det-shared-test-{os.getpid()}"
    with nostall.serve(loader.spec, name, block=False, verbose=False):
        consumer = nostall.Loader.attach(name, 4, return_indices=True)
        seen = []
        for batch in consumer:  # the served loader's batches: (images, targets, indices)
            assert isinstance(batch, tuple) and len(batch) == 3
            images, targets, indices = batch
            for k, i in enumerate(indices.tolist()):
                img, t = private[i]
                assert torch.equal(images[k], img)
                assert torch.equal(targets[k]["boxes"], t["boxes"])
                assert torch.equal(targets[k]["labels"], t["labels"])
                seen.append(i)
        consumer.close()
        with nostall.Loader.attach(name, 4) as plain:  # unchanged code: for images, targets in ...
            for images, targets in plain:
                assert images.shape[1:] == (3, 300, 300) and isinstance(targets[0], dict)
                break
    assert sorted(seen) == sorted(private)
    # A loader built from the spec gives them as the loader it copies does.
    again = nostall.Loader.from_spec(loader.spec)
    images, targets = next(iter(again))
    assert isinstance(targets, list) and set(targets[0]) >= {"boxes", "labels"}


def _own(images, sizes):
    """Each padded sample cut to its own size (its padding checked zero)."""
    out = []
    for img, (h, w) in zip(images, sizes.tolist()):
        assert not img[:, h:, :].any() and not img[:, :, w:].any()
        assert images.shape[2] % 32 == 0 and images.shape[3] % 32 == 0
        out.append(img[:, :h, :w].clone())
    return out


def test_targets_carry_the_coco_image_id_and_original_size_padded_too(scenes):
    """Each target has the COCO file's image_id and orig_size (height, width
    before the transforms), as torchvision's and DETR's datasets give them;
    padded targets of images of many sizes too, masks at the top left."""
    images_dir, ann_path = scenes
    images = sorted(json.loads(ann_path.read_text())["images"], key=lambda i: i["id"])
    tf = detection.recipe("multiscale", size=200)
    loader = nostall.Loader(Coco(images_dir, ann_path, masks=True), transforms=tf, batch_size=4, shuffle=True,
                            seed=2, return_indices=True)
    padded = nostall.Loader(Coco(images_dir, ann_path, masks=True, batch="padded"), transforms=tf, batch_size=4,
                            shuffle=True, seed=2, return_indices=True)
    for (_, targets, sizes, idx), (_, p, psizes, pidx) in itertools.islice(zip(loader, padded), 4):
        assert torch.equal(idx, pidx) and torch.equal(sizes, psizes)
        for k, (t, i) in enumerate(zip(targets, idx.tolist())):
            assert int(t["image_id"]) == images[i]["id"] == int(p["image_id"][k])
            assert t["orig_size"].tolist() == [images[i]["height"], images[i]["width"]] == p["orig_size"][k].tolist()
            n, (h, w) = len(t["labels"]), sizes[k].tolist()
            assert torch.equal(p["masks"][k, :n, :h, :w], t["masks"]) and not p["masks"][k, :, h:].any()


def test_detr_recipe_channels_last_float_batches_pad_the_rows_and_columns(scenes):
    """DETR's recipe (flip, then RandomShortestSize) normalized, channels
    last (NHWC, float32): each image within its size equals apply's, the
    padding is zero, and padding_mask marks exactly the padding."""
    images_dir, ann_path = scenes
    tf = detection.recipe("detr", size=256) + [nostall.Normalize(mean=nostall.IMAGENET_MEAN, std=nostall.IMAGENET_STD)]
    assert [type(t).__name__ for t in tf] == ["RandomHorizontalFlip", "RandomShortestSize", "Normalize"]
    loader = nostall.Loader(Coco(images_dir, ann_path), transforms=tf, batch_size=5, shuffle=True, seed=8,
                            layout="NHWC", return_indices=True)
    ann = json.loads(ann_path.read_text())
    by_id = {k: i for k, i in enumerate(sorted(ann["images"], key=lambda i: i["id"]))}
    for images, targets, sizes, indices in itertools.islice(loader, 3):
        assert images.dtype == torch.float32 and images.shape[3] == 3
        assert images.shape[1] % 32 == 0 and images.shape[2] % 32 == 0
        mask = detection.padding_mask(sizes, images.shape[1:3])
        for img, m, (h, w), i in zip(images, mask, sizes.tolist(), indices.tolist()):
            meta = by_id[i]
            mine = [a for a in ann["annotations"] if a["image_id"] == meta["id"]]
            record = {"width": meta["width"], "height": meta["height"], "annotations": mine}
            want, _ = detection.apply(tf, images_dir / meta["file_name"], record, seed=8, index=i)
            np.testing.assert_allclose(img[:h, :w].numpy(), want, rtol=0, atol=1e-6)
            assert not img[h:].any() and not img[:, w:].any()
            assert not m[:h, :w].any() and m.sum() == m.numel() - h * w


def test_aspect_ratio_bucketing_pads_less_and_keeps_every_sample_once_over_3_ranks(scenes):
    """bucketing="aspect_ratio" (torchvision's GroupedBatchSampler, factor 3):
    over 3 ranks each rank gets the same number of batches and every image
    once (the padding aside); a batch holds one aspect-ratio bin (but the
    epoch's last, of what the bins had left); the padded batches pad less
    than in the plain order."""
    images_dir, ann_path = scenes
    ann = json.loads(ann_path.read_text())
    ids = sorted(i["id"] for i in ann["images"])
    ratio = {k: by["width"] / by["height"] for k, by in enumerate(sorted(ann["images"], key=lambda i: i["id"]))}
    edges = [2 ** (-1 + i / 3) for i in range(7)]
    bin_of = {k: sum(e <= r for e in edges) for k, r in ratio.items()}
    assert len(set(bin_of.values())) > 2 and len(ids) == 40

    def padding(bucketing, rank):
        loader = nostall.Loader(Coco(images_dir, ann_path), transforms=detection.recipe("multiscale", size=256),
                                batch_size=3, shuffle=True, seed=2, rank=rank, world_size=3, bucketing=bucketing,
                                return_indices=True)
        real = padded = 0
        batches = []
        for images, _, sizes, indices in loader:
            real += int((sizes[:, 0] * sizes[:, 1]).sum())
            padded += images.shape[0] * images.shape[2] * images.shape[3]
            batches.append(indices.tolist())
        return batches, padded / real

    grouped = [padding("aspect_ratio", r) for r in range(3)]
    plain = [padding(None, r) for r in range(3)]
    assert [len(b) for b, _ in grouped] == [len(b) for b, _ in plain] == [5, 5, 5]  # 14 samples each, batches of 3
    seen = [i for batches, _ in grouped for b in batches for i in b]
    assert sorted(set(seen)) == list(range(40)) and len(seen) == 42
    for (batches, _), (plain_batches, _) in zip(grouped, plain):
        # GroupedBatchSampler over the rank's plain order: a batch whenever a
        # bin's buffer holds 3, then the buffers' leftovers, bin by bin.
        buffers, want = {}, []
        for i in (i for b in plain_batches for i in b):
            buffers.setdefault(bin_of[i], []).append(i)
            if len(buffers[bin_of[i]]) == 3:
                want += buffers.pop(bin_of[i])
        for b in sorted(buffers):
            want += buffers[b]
        assert [i for b in batches for i in b] == want
    assert sum(p for _, p in grouped) < sum(p for _, p in plain)
    with pytest.raises(ValueError, match="bucketing"):
        nostall.Loader(Coco(images_dir, ann_path), transforms=detection.recipe("multiscale"), bucketing="size")


def test_padded_batches_through_serve_cache_and_resume(scenes):
    """Batches of many sizes (the multiscale recipe) served to consumers of
    other batch sizes (views of a chunk, and batches copied across chunks and
    padded again), through the shared-memory cache, and resumed mid-epoch
    from a state_dict: each sample the plain loader's, at its own size."""
    images_dir, ann_path = scenes
    tf = detection.recipe("multiscale", size=256)

    def make(**kw):
        return nostall.Loader(Coco(images_dir, ann_path), transforms=tf, batch_size=8, shuffle=True, seed=5,
                              return_indices=True, **kw)

    def samples(loader, limit=None):
        out = []
        for images, targets, sizes, indices in itertools.islice(loader, limit):
            out += zip(indices.tolist(), _own(images, sizes), [t["boxes"].clone() for t in targets])
        return out

    loader = make()
    plain = samples(loader)
    by_index = {i: (img, boxes) for i, img, boxes in plain}
    assert len({tuple(img.shape) for _, img, _ in plain}) > 10

    def same(got):
        for i, img, boxes in got:
            assert torch.equal(img, by_index[i][0]) and torch.equal(boxes, by_index[i][1])
        return sorted(i for i, _, _ in got)

    import os

    name = f"det-ragged-{os.getpid()}"
    with nostall.serve(loader.spec, name, block=False, verbose=False):
        for batch_size in (4, 6):  # within one chunk of 8; across chunks
            with nostall.Loader.attach(name, batch_size, return_indices=True) as consumer:
                assert same(samples(consumer)) == sorted(by_index)
    cache = f"det-ragged-cache-{os.getpid()}"
    try:
        for _ in range(2):  # filling the cache, then from it
            cached = samples(make(cache=nostall.Cache(size=64 << 20, name=cache)))
            assert [i for i, _, _ in cached] == [i for i, _, _ in plain]
            same(cached)
    finally:
        try:
            nostall.Cache(cache, 1).remove()
        except FileNotFoundError:
            pass
    first = make()
    head = samples(first, limit=2)
    state = first.state_dict()
    first.close()
    resumed = make()
    resumed.load_state_dict(state)
    rest = samples(resumed)
    assert [i for i, _, _ in head + rest] == [i for i, _, _ in plain]
    same(head + rest)


def test_analyze_autotune_stats_and_classes_on_a_detection_loader(scenes):
    """The analyzer runs the user's step on (images, targets) dicts, the
    autotuner runs, stats count the targets' bytes, classes name COCO's
    categories by id, and dropped empty images are counted."""
    images_dir, ann_path = scenes
    seen = []

    def step(images, targets):  # what `for images, targets in loader` gives
        seen.append(len(targets))
        assert images.shape[1:] == (3, 300, 300)

    loader = nostall.Loader(Coco(images_dir, ann_path), transforms=SSD, batch_size=8)
    result = nostall.analyze(loader.spec, step, step_seconds=0.2, progress=False)
    assert seen and max(seen) == 8
    assert result.profile["step_rate"] > 0
    tuned = nostall.Loader(Coco(images_dir, ann_path, empty="drop"), transforms=SSD, batch_size=8, autotune=True)
    n = sum(len(t) for _, t in tuned)
    stats = tuned.stats()
    ann = json.loads(ann_path.read_text())
    empty = sum(1 for i in ann["images"] if not any(a["image_id"] == i["id"] for a in ann["annotations"]))
    assert empty > 0 and n == len(ann["images"]) - empty
    assert stats["skipped"] >= empty
    assert stats["fields"]["targets"]["bytes"] > 0
    assert tuned.classes[1] == "rectangle" and tuned.classes[3] == "ellipse"


def test_a_bad_json_member_names_the_sample_or_is_skipped(scenes, tmp_path):
    images_dir, ann_path = scenes
    ann = json.loads(ann_path.read_text())
    pattern = _shards_of(images_dir, ann, tmp_path / "shards", shards=1)
    tar_path = tmp_path / "shards" / "det-0.tar"
    # rewrite one sample's .json as garbage of the same length
    data = bytearray(tar_path.read_bytes())
    at = data.find(b'{"width"', 600)
    data[at:at + 8] = b"not json"
    tar_path.write_bytes(bytes(data))
    fields = {"image": "jpg", "targets": {"ext": "json", "kind": "targets"}}
    with pytest.raises(nostall.DataError, match=r"\.json|annotations"):
        for _ in nostall.Loader(pattern, fields=fields, transforms=SSD, batch_size=4):
            pass
    kept = nostall.Loader(pattern, fields=fields, transforms=SSD, batch_size=4, on_error="skip")
    assert sum(len(b["targets"]) for b in kept) == len(ann["images"]) - 1


@pytest.mark.slow
def test_ranks_starting_together_parse_the_file_once(tmp_path):
    """Processes opening the same new annotation file at once: one parses
    it, the others wait for its table and map it."""
    import os

    d, _ = _one_image(tmp_path)
    rng = np.random.default_rng(0)
    images = [{"id": i + 1, "file_name": "a.jpg", "width": 64, "height": 48} for i in range(8000)]
    anns = [{"id": k + 1, "image_id": int(rng.integers(1, 8001)), "category_id": 1,
             "bbox": [1.5, 2.5, 10.25, 8.75], "segmentation": [[1, 2, 11, 2, 11, 10, 1, 10]]} for k in range(60000)]
    p = _coco_file(tmp_path, images, anns)
    script = ("import nostall, sys\nfrom nostall.datasets import Coco\n"
              f"l = nostall.Loader(Coco({str(d)!r}, {str(p)!r}), transforms=[nostall.Resize((8, 8))])\n"
              "print(l.index_origin)\n")
    env = dict(os.environ, NOSTALL_CACHE_DIR=str(tmp_path / "cache"))
    procs = [warm.popen(code=script, env=env) for _ in range(3)]
    origins = [proc.communicate(timeout=120)[0].strip() for proc in procs]
    assert all(proc.returncode == 0 for proc in procs)
    assert sum(o.startswith("parsed in") for o in origins) == 1, origins
    assert sum("index cache" in o for o in origins) == 2, origins


def test_a_targets_field_says_how_many_annotations_a_sample_may_hold(scenes, tmp_path):
    """max_annotations sizes a .json targets field's room; a sample with
    more (after the transforms) is a DataError saying what to raise, or
    skipped; the spec keeps it."""
    images_dir, ann_path = scenes
    ann = json.loads(ann_path.read_text())
    pattern = _shards_of(images_dir, ann, tmp_path / "shards", shards=1)
    counts = {}
    for a in ann["annotations"]:
        counts[a["image_id"]] = counts.get(a["image_id"], 0) + 1
    over = sum(1 for i in ann["images"] if counts.get(i["id"], 0) > 2)
    assert over > 0
    fields = {"image": "jpg", "targets": {"ext": "json", "kind": "targets", "masks": True, "max_annotations": 2}}
    resize = [nostall.Resize((64, 64))]
    with pytest.raises(nostall.DataError, match="max_annotations"):
        for _ in nostall.Loader(pattern, fields=fields, transforms=resize, batch_size=4):
            pass
    kept = nostall.Loader(pattern, fields=fields, transforms=resize, batch_size=4, on_error="skip")
    assert kept.spec["fields"][1]["max_annotations"] == 2
    assert sum(len(b["targets"]) for b in kept) == len(ann["images"]) - over
    with pytest.raises(ValueError, match="max_annotations are a targets field.s"):
        nostall.Loader(pattern, fields={"image": "jpg", "meta": {"ext": "json", "kind": "json", "max_annotations": 3}})
