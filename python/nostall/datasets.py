"""Datasets for demos, tests and benchmarks, made on the spot (nothing is downloaded).

- :func:`make_imagenet_like` writes an image folder of natural-looking JPEGs
  (1/f-spectrum texture, shapes, lighting) at ImageNet-like sizes (300-800 px,
  quality 90, about 80-150 KB each).
- :func:`fashion_mnist_to_folder` converts Debian's ``dataset-fashion-mnist``
  (a real labelled image set) to the image-folder layout.
"""

from __future__ import annotations

import gzip
import os
import struct
import sys
from pathlib import Path

import numpy as np

FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
FASHION_MNIST_CLASSES = ["t-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt",
                         "sneaker", "bag", "ankle-boot"]


def _pink_field(rng, h, w, alpha):
    fy = np.fft.fftfreq(h)[:, None]
    fx = np.fft.rfftfreq(w)[None, :]
    f = np.sqrt(fx * fx + fy * fy)
    f[0, 0] = 1.0
    spec = (rng.standard_normal((h, w // 2 + 1)) + 1j * rng.standard_normal((h, w // 2 + 1)))
    spec /= f ** alpha
    spec[0, 0] = 0
    field = np.fft.irfft2(spec, s=(h, w))
    return field / (field.std() + 1e-9)


def natural_image(rng: np.random.Generator, width: int, height: int) -> np.ndarray:
    """An RGB uint8 image with the statistics of a photograph: a 1/f amplitude
    spectrum, a few smooth objects with edges, colour and soft lighting."""
    h, w = height, width
    lum = _pink_field(rng, h, w, alpha=1.0 + 0.25 * rng.random())
    chroma = [_pink_field(rng, h, w, alpha=1.6) for _ in range(2)]
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    light = 0.6 * ((xx / w - rng.random()) * rng.normal() + (yy / h - rng.random()) * rng.normal())
    img = np.empty((h, w, 3), np.float32)
    base = rng.uniform(60, 190, 3)
    for c in range(3):
        img[..., c] = base[c] + 28 * lum + 14 * chroma[c % 2] * (1 if c else -1) + 30 * light
    tex = _pink_field(rng, h, w, alpha=1.2)
    for _ in range(rng.integers(2, 7)):  # objects: ellipses with a texture of their own
        cx, cy = rng.uniform(0, w), rng.uniform(0, h)
        rx, ry = rng.uniform(0.05, 0.35) * w, rng.uniform(0.05, 0.35) * h
        mask = ((xx - cx) / rx) ** 2 + ((yy - cy) / ry) ** 2 < 1
        color = rng.uniform(20, 235, 3)
        shifted = np.roll(tex, (int(cy), int(cx)), axis=(0, 1))
        for c in range(3):
            img[..., c] = np.where(mask, color[c] + 18 * shifted + 20 * light, img[..., c])
    return np.clip(img, 0, 255).astype(np.uint8)


def _write_natural_jpeg(args):
    from PIL import Image

    path, seed, index, min_side, max_side, quality = args
    rng = np.random.default_rng([seed, index])
    w, h = (int(v) for v in rng.integers(min_side, max_side + 1, 2))
    Image.fromarray(natural_image(rng, w, h)).save(path, format="JPEG", quality=quality)


def make_imagenet_like(root, num_images=2000, num_classes=10, seed=0, min_side=300,
                       max_side=800, quality=90, progress=True, processes=None) -> Path:
    """Writes ``root/class_XX/img_XXXXX.jpg`` (image i from seed (seed, i)), in
    parallel; reuses a complete earlier run with the same arguments."""
    import multiprocessing

    root = Path(root)
    done = root / ".complete"
    want = f"{num_images} {num_classes} {seed} {min_side} {max_side} {quality}"
    if done.exists() and done.read_text() == want:
        return root
    jobs = []
    for i in range(num_images):
        d = root / f"class_{i % num_classes:02d}"
        d.mkdir(parents=True, exist_ok=True)
        jobs.append((d / f"img_{i:05d}.jpg", seed, i, min_side, max_side, quality))
    with multiprocessing.get_context("spawn").Pool(processes or os.cpu_count()) as pool:
        for n, _ in enumerate(pool.imap_unordered(_write_natural_jpeg, jobs, chunksize=8), 1):
            if progress and (n % 50 == 0 or n == num_images):
                print(f"\rgenerating images: {n}/{num_images}", end="", file=sys.stderr,
                      flush=True)
    if progress:
        print(file=sys.stderr)
    done.write_text(want)
    return root


def _read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_fashion_mnist(split="train"):
    """(images uint8 [N, 28, 28], labels int64 [N]) from Debian's package."""
    prefix = "train" if split == "train" else "t10k"
    images = FASHION_MNIST_DIR / f"{prefix}-images-idx3-ubyte.gz"
    if not images.exists():
        raise FileNotFoundError(
            f"{images} not found: install Debian's dataset-fashion-mnist package")
    labels = _read_idx(FASHION_MNIST_DIR / f"{prefix}-labels-idx1-ubyte.gz").astype(np.int64)
    return _read_idx(images), labels


def fashion_mnist_to_folder(root, split="train", limit=None, fmt="png") -> Path:
    """Writes ``root/<class name>/<index>.<fmt>``; reuses a complete earlier run."""
    from PIL import Image

    root = Path(root)
    done = root / ".complete"
    images, labels = load_fashion_mnist(split)
    n = len(labels) if limit is None else min(limit, len(labels))
    want = f"{split} {n} {fmt}"
    if done.exists() and done.read_text() == want:
        return root
    # Class folders are numbered so that sorted order is label order.
    names = [f"{i}-{c}" for i, c in enumerate(FASHION_MNIST_CLASSES)]
    for name in names:
        (root / name).mkdir(parents=True, exist_ok=True)
    for i in range(n):
        path = root / names[labels[i]] / f"{i:05d}.{fmt}"
        Image.fromarray(images[i], mode="L").save(path, **({"quality": 95} if fmt == "jpg" else {}))
    done.write_text(want)
    return root
