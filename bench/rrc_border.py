"""RandomResizedCrop on Fashion-MNIST-sized (28x28) images upscaled to 224:
nostall against torchvision's rule (crop, then resize the crop), and how far
the rule of resampling the box inside the whole image (reading the pixels
beside the crop) is from it.

    .venv/bin/python bench/rrc_border.py
"""
import pathlib
import tempfile

import numpy as np
from PIL import Image
import nostall, nostall.transforms as T
from nostall.datasets import natural_image
root = pathlib.Path(tempfile.mkdtemp()); (root / "c").mkdir()
rng = np.random.default_rng(8)
for i in range(64):
    Image.fromarray(natural_image(rng, 28, 28)).save(root / "c" / f"{i:03d}.png")
ts = [nostall.RandomResizedCrop(224)]
loader = nostall.Loader(root, batch_size=64, output="numpy", layout="NHWC", seed=11, transforms=ts,
                        return_indices=True, dct_scaling=False)
images, _, idx = next(iter(loader))
now, old = [], []
mx_now = mx_old = 0
for img, i in zip(images, idx):
    src = Image.open(loader.key(int(i))).convert("RGB")
    x, y, w, h = T.sample_params(ts, 28, 28, seed=11, index=int(i))["box"]
    ref = np.array(src.crop((int(x), int(y), int(x + w), int(y + h))).resize((224, 224), Image.BILINEAR)).astype(int)
    boxed = np.array(src.resize((224, 224), Image.BILINEAR, box=(x, y, x + w, y + h))).astype(int)
    now.append(np.abs(img.astype(int) - ref).mean()); mx_now = max(mx_now, np.abs(img.astype(int) - ref).max())
    old.append(np.abs(boxed - ref).mean()); mx_old = max(mx_old, np.abs(boxed - ref).max())
print(f"nostall vs torchvision: mean {np.mean(now):.3f} max {mx_now}; reading beside the crop (the old rule) vs torchvision: mean {np.mean(old):.3f} (per image up to {max(old):.2f}) max {mx_old}")
