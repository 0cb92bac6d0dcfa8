"""torchvision's ImageNet training recipe as a nostall pipeline.

The training transforms of torchvision's references/classification scripts
(ClassificationPresetTrain) with ``--auto-augment ta_wide --random-erase 0.1
--mixup-alpha 0.2 --cutmix-alpha 1.0 --label-smoothing 0.1``, the recipe of
its ResNet-50 / ViT weights since 2021:

    torchvision                                  nostall
    RandomResizedCrop(224, BILINEAR)             nostall.RandomResizedCrop(224)
    RandomHorizontalFlip(0.5)                    nostall.RandomHorizontalFlip(0.5)
    TrivialAugmentWide(interpolation=BILINEAR)   T.TrivialAugmentWide(interpolation="bilinear")
    PILToTensor + ConvertImageDtype + Normalize  nostall.Normalize(mean, std)
    RandomErasing(0.1)                           T.RandomErasing(p=0.1)
    RandomChoice([MixUp(0.2), CutMix(1.0)])      T.RandomChoice([T.MixUp(...), T.CutMix(...)])
      (in the DataLoader's collate_fn)             (on the batch, on its device)

Everything up to RandomErasing runs in nostall's C++ threads; MixUp/CutMix run
in torch on the batch (on the GPU once it is there). Trains a small CNN for a
few steps on a generated ImageNet-like folder (or --data DIR, an image folder)
and prints the throughput.

    .venv/bin/python examples/imagenet_recipe.py [--data DIR] [--steps N]
"""

import argparse
import time

import torch
from torch import nn

import nostall
import nostall.transforms as T
from nostall.datasets import make_imagenet_like


def recipe_transforms(crop=224):
    return [
        nostall.RandomResizedCrop(crop),
        nostall.RandomHorizontalFlip(0.5),
        T.TrivialAugmentWide(interpolation=T.InterpolationMode.BILINEAR),
        nostall.Normalize(nostall.IMAGENET_MEAN, nostall.IMAGENET_STD),
        T.RandomErasing(p=0.1),
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=None, help="an image folder (default: generate one)")
    ap.add_argument("--images", type=int, default=1000, help="images to generate without --data")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--crop", type=int, default=224)
    args = ap.parse_args()

    data = args.data or make_imagenet_like("data/imagenet-like-recipe", num_images=args.images)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    loader = nostall.Loader(data, batch_size=args.batch_size, shuffle=True, seed=0,
                            transforms=recipe_transforms(args.crop), drop_last=True)
    classes = loader.num_classes  # class folders, or the labels of .cls members
    # The loader's batches are private to this process: mixing in place is safe.
    mix = T.RandomChoice([T.MixUp(alpha=0.2, num_classes=classes, inplace=True),
                          T.CutMix(alpha=1.0, num_classes=classes, inplace=True)], seed=0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 7, stride=4), nn.ReLU(), nn.Conv2d(16, 32, 3, stride=2), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, classes)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss(label_smoothing=0.1)  # takes the soft labels MixUp/CutMix give

    print(f"{len(loader)} batches of {args.batch_size} per epoch, {classes} classes, on {device}")
    print("transforms:", ", ".join(t["type"] for t in loader.spec["transforms"]))
    step, epoch, images_seen, t0 = 0, 0, 0, time.perf_counter()
    while step < args.steps:
        loader.set_epoch(epoch)
        for batch_index, (images, labels) in enumerate(loader):
            images, labels = images.to(device), labels.to(device)
            images, targets = mix(images, labels, epoch=epoch, step=batch_index)
            loss = loss_fn(model(images), targets)
            opt.zero_grad()
            loss.backward()
            opt.step()
            images_seen += len(labels)
            step += 1
            if step % 5 == 0:
                print(f"step {step:3d}  loss {loss.item():.3f}")
            if step >= args.steps:
                break
        epoch += 1
    elapsed = time.perf_counter() - t0
    print(f"{images_seen} images in {elapsed:.1f} s = {images_seen / elapsed:.0f} images/s "
          f"(data and training together)")
    print(loader.stats_table())


if __name__ == "__main__":
    main()
