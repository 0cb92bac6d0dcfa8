"""nostall video example: train a small 3D CNN to tell videos apart.

Makes a video set with FFmpeg (four classes, each one of its test sources
with noise: H.264 in MP4 and VP9 in WebM, 320x240 and 640x360, keyframes
every 12 or 25 frames) and trains a small 3D CNN (an R(2+1)D-style stack of
spatial and temporal convolutions) on 8-frame clips, the clip's decoding,
resize, crop, flip and normalization in nostall's C++ threads. Prints the
loss and accuracy per epoch, the throughput, how long the loop waited on
data and the stall report.

    .venv/bin/python examples/video.py [--per-class 6] [--epochs 6]
"""

import argparse
import sys
import time
from pathlib import Path

import torch
from torch import nn

import nostall
from nostall import datasets, video

MEAN, STD = [0.43216, 0.394666, 0.37645], [0.22803, 0.22145, 0.216989]


def r2plus1d(classes):
    """A small (2+1)D CNN on (3, 8, 56, 56) clips."""
    def block(i, o):
        return [nn.Conv3d(i, o, (1, 3, 3), padding=(0, 1, 1)), nn.BatchNorm3d(o), nn.ReLU(),
                nn.Conv3d(o, o, (3, 1, 1), padding=(1, 0, 0)), nn.BatchNorm3d(o), nn.ReLU(),
                nn.MaxPool3d((1, 2, 2))]
    return nn.Sequential(*block(3, 16), *block(16, 32), *block(32, 64), nn.AdaptiveAvgPool3d(1), nn.Flatten(),
                         nn.Linear(64, classes))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="example_data/videos")
    parser.add_argument("--per-class", type=int, default=6)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()
    root = datasets.make_videos(Path(args.data), per_class=args.per_class, classes=4, seconds=(4.0, 8.0),
                                sizes=((320, 240), (640, 360)), gops=(12, 25))
    transforms = [video.Clip(8, step=2), nostall.Resize(64), video.RandomCrop(56), nostall.RandomHorizontalFlip(),
                  nostall.Normalize(MEAN, STD)]
    loader = nostall.Loader(str(root), transforms=transforms, batch_size=args.batch_size, shuffle=True, seed=0)
    classes = 4
    print(f"nostall loader: {loader.num_items} videos, {classes} classes, clips of {loader.sample_shape}, "
          f"decoded with {video.backend()}")
    torch.set_num_threads(max(1, nostall.available_cores()))
    torch.manual_seed(0)
    model = r2plus1d(classes)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    loss_fn = nn.CrossEntropyLoss()
    start, seen = time.perf_counter(), 0
    for epoch in range(args.epochs):
        loader.set_epoch(epoch)
        total, right, n = 0.0, 0, 0
        for clips, labels in loader:
            out = model(clips)
            loss = loss_fn(out, labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(labels)
            right += int((out.argmax(1) == labels).sum())
            n += len(labels)
        seen += n
        print(f"epoch {epoch}: loss {total / n:.3f}, accuracy {100 * right / n:.0f}%, waited on data "
              f"{100 * loader.stats()['consumer']['stall_fraction']:4.1f}%", flush=True)
    elapsed = time.perf_counter() - start
    print(f"{seen / elapsed:.1f} clips/s over {args.epochs} epochs")
    print("where the time went (nostall stall report):")
    print(loader.stats_table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
