"""nostall demo: train a small CNN for an epoch with batches from nostall.

Makes an image-folder dataset from Debian's Fashion-MNIST (real labelled
clothing images), trains through nostall's C++ pipeline, and prints the
training throughput and how much of the time the training loop waited on
data, with the per-stage breakdown.

    make demo        # or: .venv/bin/python examples/demo.py [--images N]
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

import nostall
from nostall.datasets import fashion_mnist_to_folder, load_fashion_mnist

MEAN, STD = 0.2860, 0.3530


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=20000, help="training images (max 60000)")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--data", default="data/fashion-mnist-train", help="where to write the images")
    parser.add_argument("--no-analyze", action="store_true",
                        help="skip the stall analysis (nostall.analyze) at the end")
    args = parser.parse_args()

    t0 = time.time()
    print(f"preparing {args.images} Fashion-MNIST images in {args.data} ...", flush=True)
    root = fashion_mnist_to_folder(Path(args.data), "train", limit=args.images)
    print(f"  done in {time.time() - t0:.1f}s")

    loader = nostall.Loader(
        root, batch_size=args.batch_size, shuffle=True, seed=0, mode="L",
        transforms=[nostall.RandomResizedCrop(28, scale=(0.7, 1.0)),
                    nostall.RandomHorizontalFlip(),
                    nostall.Normalize([MEAN], [STD])])
    print(f"nostall loader: {loader.num_items} images, {len(loader.classes)} classes, "
          f"{len(loader)} batches of {args.batch_size}, {loader.stats()['autotune']['threads']} prep "
          f"threads to start (autotuned)")

    torch.manual_seed(0)
    torch.set_num_threads(max(1, nostall.available_cores()))
    model = nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()

    loader.set_epoch(0)
    seen, start = 0, time.perf_counter()
    for step, (images, labels) in enumerate(loader):
        opt.zero_grad()
        loss = loss_fn(model(images), labels)
        loss.backward()
        opt.step()
        seen += len(labels)
        if step % 20 == 0 or seen == loader.samples_per_epoch:
            rate = seen / (time.perf_counter() - start)
            stall = loader.stats()["consumer"]["stall_fraction"]
            print(f"\r  epoch 0: {seen:6d}/{loader.samples_per_epoch} images, loss {loss.item():.3f}, "
                  f"{rate:6.0f} images/s, waiting on data {100 * stall:4.1f}% ",
                  end="", flush=True)
    elapsed = time.perf_counter() - start
    print()

    test_x, test_y = load_fashion_mnist("test")
    with torch.no_grad():
        x = (torch.from_numpy(test_x[:5000].astype(np.float32)) / 255 - MEAN) / STD
        acc = (model(x[:, None]).argmax(1) == torch.from_numpy(test_y[:5000])).float().mean()

    stats = loader.stats()
    print()
    print(f"trained 1 epoch: {seen} images in {elapsed:.1f}s = {seen / elapsed:.0f} images/s")
    print(f"training loop waited on data {100 * stats['consumer']['stall_fraction']:.1f}% of the "
          f"time ({stats['consumer']['wait_s']:.2f}s of {elapsed:.1f}s)")
    print(f"test accuracy after one epoch: {100 * acc:.1f}%")
    tuned = stats.get("autotune")
    if tuned:
        print(f"autotune settled on {tuned['threads']} prep threads, {tuned['reads_in_flight']} reads "
              f"in flight, prefetch {tuned['prefetch']} ({tuned['changes']} changes):")
        for d in tuned["decisions"][:10]:
            print(f"  {d['time_s']:5.1f}s {d['knob']} {d['from']} -> {d['to']}: {d['why']}")
    print()
    print("where the time went (nostall stall report):")
    print(loader.stats_table())

    if not args.no_analyze:
        # The same training step, measured three ways on a sample of the data:
        # in-memory batches, cold storage, cached. See docs/analyze.md.
        def train_step(images, labels):
            opt.zero_grad()
            loss_fn(model(images), labels).backward()
            opt.step()

        print("stall analysis (nostall.analyze, writes demo-analysis.html):")
        analysis = nostall.analyze(loader, train_step, items=4096)
        print(analysis.table())
        analysis.save_html("demo-analysis.html")
    return 0


if __name__ == "__main__":
    sys.exit(main())
