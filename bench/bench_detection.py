"""nostall's detection pipeline vs the DataLoader pipeline users write today
(PIL + the box code torchvision.transforms.v2 runs), on the same cores,
alternating rounds, medians.

    python bench/bench_detection.py [--rounds 5] [--data DIR] [--images 400] [--recipe ssd|lsj|multiscale]

The SSD recipe: RandomPhotometricDistort, RandomZoomOut(fill=(123, 117, 104)),
RandomIoUCrop, RandomHorizontalFlip, Resize((300, 300)),
SanitizeBoundingBoxes, batch 32, on COCO-style scenes (480-640 px JPEGs,
quality 90, 1-8 objects each, polygons; make_detection_scenes). With
``--masks``, the instance masks too. ``--recipe lsj``: torchvision's
detection references' large scale jitter instead, ScaleJitter((1024, 1024)),
FixedSizeCrop(1024, fill=(123, 117, 104)), RandomHorizontalFlip, batch 8.
``--recipe multiscale``: the references' Faster/Mask R-CNN recipe,
RandomShortestSize(480, 512, ..., 800, max_size=1333) and a flip, batch 8:
each image its own size, batches grouped by aspect ratio (the references'
default --aspect-ratio-group-factor 3: their GroupedBatchSampler, written
out here; nostall's bucketing="aspect_ratio"); nostall's batch padded to
32 with each image's size beside it, the references' collated as lists
(their collate_fn).

The DataLoader side is v2's algorithm on PIL images, written out here as v2
runs it (torchvision does not import beside this torch): PIL's ImageEnhance
for the photometric factors and HSV for hue, ImageOps.expand for the zoom
out, the SSD sampler over torch box tensors, PIL crop, transpose and
bilinear resize, v2's box rules; masks from pycocotools, padded, cropped,
flipped and resized (nearest) in torch. One worker per core.

Each round runs nostall's epoch and then the DataLoader's (the order swapped
every round), each in a fresh process; the table gives median images/s and
the ratio.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

FILL = (123, 117, 104)


# ------------------------------------------------ the DataLoader pipeline
class V2Ssd:
    """torchvision.transforms.v2's SSD recipe on a PIL image and its targets."""

    def __init__(self, masks):
        self.masks = masks

    @staticmethod
    def photometric(img):
        import numpy as np
        import torch
        from PIL import Image, ImageEnhance

        def hue(im, f):
            h, s, v = im.convert("HSV").split()
            a = np.array(h, dtype=np.uint8)
            with np.errstate(over="ignore"):
                a += np.array(f * 255).astype(np.uint8)
            return Image.merge("HSV", (Image.fromarray(a, "L"), s, v)).convert("RGB")

        r = torch.rand(7)
        if r[0] < 0.5:
            img = ImageEnhance.Brightness(img).enhance(float(torch.empty(1).uniform_(0.875, 1.125)))
        contrast_before = r[1] < 0.5
        if r[2] < 0.5 and contrast_before:
            img = ImageEnhance.Contrast(img).enhance(float(torch.empty(1).uniform_(0.5, 1.5)))
        if r[3] < 0.5:
            img = ImageEnhance.Color(img).enhance(float(torch.empty(1).uniform_(0.5, 1.5)))
        if r[4] < 0.5:
            img = hue(img, float(torch.empty(1).uniform_(-0.05, 0.05)))
        if r[2] < 0.5 and not contrast_before:
            img = ImageEnhance.Contrast(img).enhance(float(torch.empty(1).uniform_(0.5, 1.5)))
        if r[5] < 0.5:  # v2 permutes a PIL image's channels through a tensor
            t = torch.from_numpy(np.asarray(img)).permute(2, 0, 1)[torch.randperm(3)]
            img = Image.fromarray(t.permute(1, 2, 0).contiguous().numpy())
        return img

    def __call__(self, img, boxes, labels, masks):
        import torch
        from PIL import Image, ImageOps

        img = self.photometric(img)
        w, h = img.size
        # RandomZoomOut
        if torch.rand(1) < 0.5:
            r = 1.0 + float(torch.rand(1)) * 3.0
            cw, ch = int(w * r), int(h * r)
            rr = torch.rand(2)
            left, top = int((cw - w) * rr[0]), int((ch - h) * rr[1])
            img = ImageOps.expand(img, border=(left, top, cw - w - left, ch - h - top), fill=FILL)
            if masks is not None:
                masks = torch.nn.functional.pad(masks, [left, cw - w - left, top, ch - h - top])
            boxes = boxes + torch.tensor([left, top, left, top], dtype=torch.float32)
            w, h = cw, ch
            boxes[:, 0::2].clamp_(0, w)
            boxes[:, 1::2].clamp_(0, h)
        # RandomIoUCrop
        options = [0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0]
        crop = None
        while crop is None:
            idx = int(torch.randint(len(options), (1,)))
            min_iou = options[idx]
            if min_iou >= 1.0:
                break
            for _ in range(40):
                r = 0.3 + 0.7 * torch.rand(2)
                nw, nh = int(w * r[0]), int(h * r[1])
                if nh == 0 or not (0.5 <= nw / nh <= 2.0):
                    continue
                r = torch.rand(2)
                left, top = int((w - nw) * r[0]), int((h - nh) * r[1])
                right, bottom = left + nw, top + nh
                if left == right or top == bottom:
                    continue
                cx, cy = 0.5 * (boxes[:, 0] + boxes[:, 2]), 0.5 * (boxes[:, 1] + boxes[:, 3])
                within = (left < cx) & (cx < right) & (top < cy) & (cy < bottom)
                if not within.any():
                    continue
                b = boxes[within]
                lt = torch.maximum(b[:, :2], torch.tensor([left, top], dtype=b.dtype))
                rb = torch.minimum(b[:, 2:], torch.tensor([right, bottom], dtype=b.dtype))
                wh = (rb - lt).clamp(min=0)
                inter = wh[:, 0] * wh[:, 1]
                area = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
                if (inter / (area + nw * nh - inter)).max() < min_iou:
                    continue
                crop = (left, top, nw, nh, within)
                break
        if crop is not None:
            left, top, nw, nh, within = crop
            img = img.crop((left, top, left + nw, top + nh))
            boxes = boxes - torch.tensor([left, top, left, top], dtype=torch.float32)
            boxes[:, 0::2].clamp_(0, nw)
            boxes[:, 1::2].clamp_(0, nh)
            boxes[~within] = 0
            if masks is not None:
                masks = masks[:, top:top + nh, left:left + nw]
            w, h = nw, nh
        # RandomHorizontalFlip
        if torch.rand(1) < 0.5:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
            boxes[:, [0, 2]] = w - boxes[:, [2, 0]]
            if masks is not None:
                masks = masks.flip(-1)
        # Resize((300, 300))
        img = img.resize((300, 300), Image.BILINEAR)
        boxes = boxes.mul(torch.tensor([300 / w, 300 / h, 300 / w, 300 / h]))
        if masks is not None:
            masks = torch.nn.functional.interpolate(masks[None].float(), size=(300, 300),
                                                    mode="nearest")[0].to(torch.uint8) \
                if len(masks) else torch.zeros((0, 300, 300), dtype=torch.uint8)
        # SanitizeBoundingBoxes
        ws, hs = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
        keep = (ws >= 1) & (hs >= 1) & (boxes >= 0).all(-1) & (ws * hs >= 1) & (boxes[:, 2] <= 300) & \
            (boxes[:, 3] <= 300)
        target = {"boxes": boxes[keep], "labels": labels[keep]}
        if masks is not None:
            target["masks"] = masks[keep]
        return img, target


def _resized(img, boxes, masks, nw, nh):
    """v2's resize of a PIL image (bilinear), its boxes and masks (nearest)."""
    import torch
    from PIL import Image

    w, h = img.size
    img = img.resize((nw, nh), Image.BILINEAR)
    boxes = boxes.mul(torch.tensor([nw / w, nh / h, nw / w, nh / h]))
    if masks is not None:
        masks = torch.nn.functional.interpolate(masks[None].float(), size=(nh, nw), mode="nearest")[0] \
            .to(torch.uint8) if len(masks) else torch.zeros((0, nh, nw), dtype=torch.uint8)
    return img, boxes, masks


def _flipped(img, boxes, labels, masks, width):
    """v2's RandomHorizontalFlip (p=0.5) of an image `width` wide, and the
    target dict."""
    import torch
    from PIL import Image

    if torch.rand(1) < 0.5:
        img = img.transpose(Image.FLIP_LEFT_RIGHT)
        boxes[:, [0, 2]] = width - boxes[:, [2, 0]]
        if masks is not None:
            masks = masks.flip(-1)
    target = {"boxes": boxes, "labels": labels}
    if masks is not None:
        target["masks"] = masks
    return img, target


class V2Lsj:
    """The references' lsj recipe on a PIL image and its targets: v2's
    ScaleJitter((S, S)) (scale in [0.1, 2.0]), FixedSizeCrop(S, fill),
    RandomHorizontalFlip."""

    def __init__(self, masks, size=1024):
        self.masks, self.size = masks, size

    def __call__(self, img, boxes, labels, masks):
        import torch
        from PIL import ImageOps

        s = self.size
        w, h = img.size
        r = min(s / h, s / w) * (0.1 + torch.rand(1) * 1.9)
        nw, nh = int(w * r), int(h * r)
        img, boxes, masks = _resized(img, boxes, masks, nw, nh)
        ch, cw = min(nh, s), min(nw, s)
        if (ch, cw) != (nh, nw):
            rr = float(torch.rand(1))
            top, left = int(max(nh - s, 0) * rr), int(max(nw - s, 0) * rr)
            img = img.crop((left, top, left + cw, top + ch))
            boxes = boxes - torch.tensor([left, top, left, top], dtype=torch.float32)
            boxes[:, 0::2].clamp_(0, cw)
            boxes[:, 1::2].clamp_(0, ch)
            valid = (boxes[:, 0] < boxes[:, 2]) & (boxes[:, 1] < boxes[:, 3])
            boxes, labels = boxes[valid], labels[valid]
            if masks is not None:
                masks = masks[valid][:, top:top + ch, left:left + cw]
        if (ch, cw) != (s, s):
            img = ImageOps.expand(img, border=(0, 0, s - cw, s - ch), fill=FILL)
            if masks is not None:
                masks = torch.nn.functional.pad(masks, [0, s - cw, 0, s - ch])
        return _flipped(img, boxes, labels, masks, s)


class V2Multiscale:
    """The references' multiscale recipe on a PIL image and its targets: v2's
    RandomShortestSize(min_size=(480, 512, ..., 800), max_size=1333) and
    RandomHorizontalFlip; each image keeps its own size (their collate makes
    lists; the model pads them)."""

    def __init__(self, masks, max_size=1333):
        self.masks, self.max_size = masks, max_size
        self.choices = list(range(480, 801, 32))

    def __call__(self, img, boxes, labels, masks):
        import torch

        w, h = img.size
        side = self.choices[int(torch.randint(len(self.choices), (1,)))]
        r = min(side / min(h, w), self.max_size / max(h, w))
        nw, nh = int(w * r), int(h * r)
        img, boxes, masks = _resized(img, boxes, masks, nw, nh)
        return _flipped(img, boxes, labels, masks, nw)


# recipe: (the v2 pipeline, batch size, the references' collate keeps a list)
RECIPES = {"ssd": (V2Ssd, 32), "lsj": (V2Lsj, 8), "multiscale": (V2Multiscale, 8)}


class CocoDataset:
    def __init__(self, root, ann, masks, recipe="ssd"):
        data = json.loads(Path(ann).read_text())
        self.root = Path(root)
        self.images = sorted(data["images"], key=lambda i: i["id"])
        self.anns = {}
        for a in data["annotations"]:
            self.anns.setdefault(a["image_id"], []).append(a)
        self.transform = RECIPES[recipe][0](masks)
        self.masks = masks

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        import numpy as np
        import torch
        from PIL import Image

        info = self.images[i]
        img = Image.open(self.root / info["file_name"]).convert("RGB")
        anns = self.anns.get(info["id"], [])
        boxes = torch.tensor([[a["bbox"][0], a["bbox"][1], a["bbox"][0] + a["bbox"][2],
                               a["bbox"][1] + a["bbox"][3]] for a in anns], dtype=torch.float32).reshape(-1, 4)
        labels = torch.tensor([a["category_id"] for a in anns], dtype=torch.int64)
        masks = None
        if self.masks:
            import pycocotools.mask as cm

            h, w = info["height"], info["width"]
            ms = []
            for a in anns:
                seg = a["segmentation"]
                rle = cm.merge(cm.frPyObjects(seg, h, w)) if isinstance(seg, list) else cm.frPyObjects(seg, h, w)
                ms.append(cm.decode(rle))
            masks = torch.from_numpy(np.stack(ms)) if ms else torch.zeros((0, h, w), dtype=torch.uint8)
        img, target = self.transform(img, boxes, labels, masks)
        return torch.from_numpy(np.asarray(img)).permute(2, 0, 1), target


class GroupedBatchSampler:
    """The references' sampler (--aspect-ratio-group-factor 3, their default):
    a random order dealt into one buffer per aspect-ratio bin
    (create_aspect_ratio_groups: edges 2^linspace(-1, 1, 2k + 1)), a batch
    whenever a buffer fills; the epoch's last batches filled from the
    leftovers, repeating images of the same bin as theirs does."""

    def __init__(self, dataset, batch_size, k=3):
        import bisect

        import numpy as np

        edges = sorted((2 ** np.linspace(-1, 1, 2 * k + 1)).tolist())
        self.groups = [bisect.bisect_right(edges, i["width"] / i["height"]) for i in dataset.images]
        self.batch_size = batch_size

    def __len__(self):
        return (len(self.groups) + self.batch_size - 1) // self.batch_size

    def __iter__(self):
        import torch

        buffers, n = {}, 0
        for i in torch.randperm(len(self.groups)).tolist():
            buf = buffers.setdefault(self.groups[i], [])
            buf.append(i)
            if len(buf) == self.batch_size:
                yield buf[:]
                buf.clear()
                n += 1
        for g, buf in sorted(buffers.items(), key=lambda kv: -len(kv[1])):
            if n == len(self) or not buf:
                continue
            same = [i for i, gi in enumerate(self.groups) if gi == g]
            yield (buf + same * self.batch_size)[:self.batch_size]
            n += 1


def collate(batch):
    import torch

    return torch.stack([b[0] for b in batch]), [b[1] for b in batch]


def collate_lists(batch):
    """The detection references' collate_fn: tuple(zip(*batch))."""
    return tuple(zip(*batch))


def _init_worker(_):
    import torch

    torch.set_num_threads(1)


def run_dataloader(root, ann, masks, epochs, threads, recipe):
    import torch

    dataset = CocoDataset(root, ann, masks, recipe)
    if recipe == "multiscale":  # each image its own size: the references group them by aspect ratio
        batching = {"batch_sampler": GroupedBatchSampler(dataset, RECIPES[recipe][1]), "collate_fn": collate_lists}
    else:
        batching = {"batch_size": RECIPES[recipe][1], "shuffle": True, "collate_fn": collate}
    loader = torch.utils.data.DataLoader(dataset, num_workers=threads, persistent_workers=True,
                                         worker_init_fn=_init_worker, **batching)
    for _ in loader:  # warm-up epoch: the workers start
        pass
    start, n = time.perf_counter(), 0
    for _ in range(epochs):
        for images, targets in loader:
            n += len(targets)
    return n / (time.perf_counter() - start)


def run_nostall(root, ann, masks, epochs, threads, recipe):
    import nostall
    from nostall import detection
    from nostall.datasets import Coco
    from nostall.transforms import RandomIoUCrop, RandomPhotometricDistort, RandomZoomOut, SanitizeBoundingBoxes

    transforms = detection.recipe(recipe, size=1024) if recipe == "lsj" else detection.recipe(recipe) \
        if recipe == "multiscale" else \
        [RandomPhotometricDistort(), RandomZoomOut(fill=FILL), RandomIoUCrop(), nostall.RandomHorizontalFlip(),
         nostall.Resize((300, 300)), SanitizeBoundingBoxes()]
    loader = nostall.Loader(Coco(root, ann, masks=masks), transforms=transforms, batch_size=RECIPES[recipe][1],
                            shuffle=True, num_threads=threads, autotune=False,
                            bucketing="aspect_ratio" if recipe == "multiscale" else None)
    for _ in loader:  # warm-up epoch: the table, the threads
        pass
    start, n = time.perf_counter(), 0
    for e in range(epochs):
        loader.set_epoch(e + 1)
        for batch in loader:  # (images, targets), and each image's size when padded
            n += len(batch[1])
    return n / (time.perf_counter() - start)


def child(which, root, ann, masks, epochs, recipe):
    threads = len(os.sched_getaffinity(0))
    fn = run_nostall if which == "nostall" else run_dataloader
    print(json.dumps({"rate": fn(root, ann, masks, epochs, threads, recipe)}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--data", default="bench_data/detection", help="where the scenes are made")
    parser.add_argument("--images", type=int, default=400)
    parser.add_argument("--epochs", type=int, default=2, help="epochs timed per run")
    parser.add_argument("--masks", action="store_true", help="instance masks too")
    parser.add_argument("--recipe", choices=sorted(RECIPES), default="ssd",
                        help="ssd: SSD300's, batch 32; lsj: large scale jitter at 1024, batch 8; "
                             "multiscale: RandomShortestSize(480..800, 1333) + flip, batch 8 (nostall's "
                             "padded to 32, the references' collated as lists)")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    root = Path(args.data)
    if args.child:
        child(args.child[0], args.child[1], args.child[2], args.masks, args.epochs, args.recipe)
        return 0
    ann = root / "instances.json"
    if not ann.exists() or len(json.loads(ann.read_text())["images"]) != args.images:
        from nostall.datasets import make_detection_scenes

        make_detection_scenes(root, num_images=args.images, seed=0, min_side=480, max_side=640)
    cores = len(os.sched_getaffinity(0))
    name = {"ssd": "SSD recipe", "lsj": "lsj recipe (1024)", "multiscale": "multiscale recipe"}[args.recipe]
    print(f"{args.images} scenes (480-640 px JPEG), {name}{' + masks' if args.masks else ''}, "
          f"batch {RECIPES[args.recipe][1]}, {cores} cores", flush=True)
    rates = {"nostall": [], "DataLoader": []}
    for r in range(args.rounds):
        order = ["nostall", "DataLoader"] if r % 2 == 0 else ["DataLoader", "nostall"]
        for which in order:
            cmd = [sys.executable, __file__, "--epochs", str(args.epochs), "--recipe", args.recipe, "--child",
                   which, str(root / "images"), str(ann)] + (["--masks"] if args.masks else [])
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            rates[which].append(json.loads(out.strip().splitlines()[-1])["rate"])
        print(f"  round {r}: nostall {rates['nostall'][-1]:.0f}/s, DataLoader {rates['DataLoader'][-1]:.0f}/s",
              flush=True)
    med = {k: statistics.median(v) for k, v in rates.items()}
    print()
    print("| pipeline | nostall images/s | DataLoader images/s | ratio |")
    print("|---|---:|---:|---:|")
    print(f"| {name}{' + masks' if args.masks else ''} | {med['nostall']:.0f} | {med['DataLoader']:.0f} | "
          f"{med['nostall'] / med['DataLoader']:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
