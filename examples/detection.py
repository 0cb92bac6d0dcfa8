"""nostall detection example: train a small SSD-style detector in plain torch.

Makes a COCO-style dataset of generated scenes (rectangles, triangles and
ellipses on natural-looking backgrounds, with their boxes and polygons in an
instances JSON), loads it through nostall with the SSD recipe
(RandomPhotometricDistort, RandomZoomOut, RandomIoUCrop, flip, Resize(300),
SanitizeBoundingBoxes: images and boxes transformed together in nostall's C++
threads), and trains a single-scale SSD head (one anchor per cell of a 10x10
grid, classes + box offsets) on a small CNN. Prints the loss, the throughput,
how long the loop waited on data and the stall report; then, on held-out
scenes, the share of objects found (a box of the right class within IoU 0.5).

    .venv/bin/python examples/detection.py [--images 400] [--epochs 20]
"""

import argparse
import sys
import time
from pathlib import Path

import torch
from torch import nn

import nostall
from nostall.datasets import Coco, make_detection_scenes
from nostall.transforms import (RandomIoUCrop, RandomPhotometricDistort, RandomZoomOut,
                                SanitizeBoundingBoxes)

GRID, SIZE, CLASSES = 10, 300, 4  # background + rectangle, triangle, ellipse


class TinySSD(nn.Module):
    """A CNN to a 10x10 grid; per cell: class logits and the box (centre
    offset in the cell, log size relative to the image)."""

    def __init__(self):
        super().__init__()

        def block(i, o, k=3, s=2):
            return [nn.Conv2d(i, o, k, stride=s, padding=k // 2), nn.BatchNorm2d(o), nn.ReLU()]
        # 300 -> 75 -> 38 -> 19 -> 10: strided convolutions, cheap enough for a CPU
        self.body = nn.Sequential(*block(3, 24, 7, 4), *block(24, 48), *block(48, 96), *block(96, 128),
                                  *block(128, 128, 3, 1), nn.AdaptiveAvgPool2d(GRID))
        self.head = nn.Conv2d(128, CLASSES + 4, 3, padding=1)

    def forward(self, x):
        return self.head(self.body(x)).permute(0, 2, 3, 1)  # (B, G, G, C + 4)


def encode(targets):
    """Per cell: the class of the box whose centre falls in it (0: none) and
    that box, encoded; the largest box wins a cell."""
    b = len(targets)
    cls = torch.zeros(b, GRID, GRID, dtype=torch.int64)
    reg = torch.zeros(b, GRID, GRID, 4)
    cell = SIZE / GRID
    for i, t in enumerate(targets):
        boxes, labels = t["boxes"], t["labels"]
        order = ((boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])).argsort()
        for k in order.tolist():  # smallest first: larger ones overwrite
            x0, y0, x1, y1 = boxes[k].tolist()
            cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
            gx, gy = min(int(cx / cell), GRID - 1), min(int(cy / cell), GRID - 1)
            cls[i, gy, gx] = int(labels[k])
            reg[i, gy, gx] = torch.tensor([cx / cell - gx, cy / cell - gy,
                                           torch.log(torch.tensor(max(x1 - x0, 1.0) / SIZE)),
                                           torch.log(torch.tensor(max(y1 - y0, 1.0) / SIZE))])
    return cls, reg


def decode(out, threshold=0.3):
    """Boxes (XYXY), labels and scores per image from the grid."""
    prob = out[..., :CLASSES].softmax(-1)
    score, label = prob[..., 1:].max(-1)
    label = label + 1
    cell = SIZE / GRID
    gy, gx = torch.meshgrid(torch.arange(GRID), torch.arange(GRID), indexing="ij")
    cx = (gx + out[..., CLASSES]) * cell
    cy = (gy + out[..., CLASSES + 1]) * cell
    w, h = out[..., CLASSES + 2].exp() * SIZE, out[..., CLASSES + 3].exp() * SIZE
    boxes = torch.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], -1)
    result = []
    for i in range(out.shape[0]):
        keep = score[i] > threshold
        result.append((boxes[i][keep], label[i][keep], score[i][keep]))
    return result


def iou(a, b):
    lt = torch.maximum(a[:, None, :2], b[None, :, :2])
    rb = torch.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = (rb - lt).clamp(min=0).prod(-1)
    area_a = (a[:, 2:] - a[:, :2]).prod(-1)
    area_b = (b[:, 2:] - b[:, :2]).prod(-1)
    return inter / (area_a[:, None] + area_b[None] - inter)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="data/scenes", help="where to write the scenes")
    parser.add_argument("--images", type=int, default=400)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    root = Path(args.data)
    t0 = time.time()
    print(f"making {args.images} + 64 scenes in {root} ...", flush=True)
    train_ann = make_detection_scenes(root / "train", num_images=args.images, seed=0, max_objects=4,
                                      min_side=300, max_side=500)
    val_ann = make_detection_scenes(root / "val", num_images=64, seed=1, max_objects=4,
                                    min_side=300, max_side=500, crowd_every=0)
    print(f"  done in {time.time() - t0:.1f}s")

    ssd = [RandomPhotometricDistort(), RandomZoomOut(fill=(123, 117, 104), side_range=(1.0, 2.0)),
           RandomIoUCrop(), nostall.RandomHorizontalFlip(), nostall.Resize((SIZE, SIZE)),
           SanitizeBoundingBoxes(), nostall.Normalize(nostall.IMAGENET_MEAN, nostall.IMAGENET_STD)]
    loader = nostall.Loader(Coco(root / "train" / "images", train_ann, crowd="drop"), transforms=ssd,
                            batch_size=args.batch_size, shuffle=True, seed=0)
    val = nostall.Loader(Coco(root / "val" / "images", val_ann),
                         transforms=[nostall.Resize((SIZE, SIZE)),
                                     nostall.Normalize(nostall.IMAGENET_MEAN, nostall.IMAGENET_STD)],
                         batch_size=args.batch_size)
    print(f"nostall loader: {loader.num_items} scenes, batches of {tuple(loader.sample_shape)} images")

    torch.manual_seed(0)
    torch.set_num_threads(max(1, nostall.available_cores()))
    model = TinySSD()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=args.epochs * len(loader))
    weights = torch.tensor([0.1] + [1.0] * (CLASSES - 1))

    seen, start = 0, time.perf_counter()
    for epoch in range(args.epochs):
        loader.set_epoch(epoch)
        model.train()
        total = 0.0
        for images, targets in loader:
            cls, reg = encode(targets)
            out = model(images)
            loss = nn.functional.cross_entropy(out[..., :CLASSES].reshape(-1, CLASSES), cls.reshape(-1),
                                               weight=weights)
            pos = cls > 0
            if pos.any():
                loss = loss + 2 * nn.functional.smooth_l1_loss(out[..., CLASSES:][pos], reg[pos])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            total += loss.item() * len(targets)
            seen += len(targets)
        rate = seen / (time.perf_counter() - start)
        print(f"  epoch {epoch}: loss {total / loader.num_items:.3f}, {rate:5.0f} images/s, waiting on "
              f"data {100 * loader.stats()['consumer']['stall_fraction']:4.1f}%", flush=True)
    elapsed = time.perf_counter() - start

    model.eval()
    found = objects = 0
    with torch.no_grad():
        for images, targets in val:
            for (boxes, labels, _), t in zip(decode(model(images)), targets):
                keep = t["iscrowd"] == 0
                gt, gl = t["boxes"][keep], t["labels"][keep]
                objects += len(gt)
                if len(boxes) and len(gt):
                    m = iou(gt, boxes) * (gl[:, None] == labels[None])
                    found += int((m.max(1).values >= 0.5).sum())
    stats = loader.stats()
    print()
    print(f"trained {args.epochs} epochs: {seen} images in {elapsed:.1f}s = {seen / elapsed:.0f} images/s")
    print(f"training loop waited on data {100 * stats['consumer']['stall_fraction']:.1f}% of the time")
    print(f"held-out scenes: {found} of {objects} objects found ({100 * found / max(1, objects):.0f}%: "
          "a box of the right class at IoU >= 0.5)")
    print()
    print("where the time went (nostall stall report):")
    print(loader.stats_table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
