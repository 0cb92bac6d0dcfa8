"""MixUp and CutMix: batch ops on the consumer side, as torchvision.transforms.v2's.

They run in torch on whichever device the batch is on (after ``.cuda()`` they
run on the GPU). Their random draws are counter-based like the loader's: the
same (seed, epoch, step) gives the same mix, whatever ran before.

```python
import nostall
import torch
from nostall.transforms import CutMix, MixUp, RandomChoice

device = "cuda" if torch.cuda.is_available() else "cpu"
loader = nostall.Loader("data/train", batch_size=16, transforms=[
    nostall.RandomResizedCrop(64), nostall.Normalize(nostall.IMAGENET_MEAN, nostall.IMAGENET_STD)])
mix = RandomChoice([MixUp(alpha=0.2, num_classes=loader.num_classes),
                    CutMix(alpha=1.0, num_classes=loader.num_classes)], seed=0)
epoch = 0
for step, (images, labels) in enumerate(loader):
    images, labels = mix(images.to(device), labels.to(device), epoch=epoch, step=step)
    assert labels.shape == (len(images), loader.num_classes)  # soft labels, mixed as the images
```
"""

from __future__ import annotations

import math
import random


class _Torch:
    """torch, imported when a batch op first runs: `import nostall` needs no
    torch (it is the `nostall[torch]` extra); the loader's batches do."""

    def __getattr__(self, name):
        import torch

        return getattr(torch, name)


torch = _Torch()


def _rng(seed: int, epoch: int, step: int, salt: int) -> random.Random:
    # A stream keyed by (seed, epoch, step): independent of call order.
    # random.Random seeds a str through SHA-512: stable across processes.
    return random.Random(f"{int(seed)}/{int(epoch)}/{int(step)}/{salt}")


class _BatchOp:
    _salt = 0

    def __init__(self, alpha: float = 1.0, num_classes: int | None = None, seed: int = 0,
                 inplace: bool = False, layout: str = "NCHW"):
        if not alpha > 0:
            raise ValueError(f"{type(self).__name__}: alpha must be positive, got {alpha}")
        if num_classes is None or int(num_classes) < 1:
            raise ValueError(f"{type(self).__name__}: num_classes is needed (the labels become "
                             f"(batch, num_classes) probabilities)")
        self.alpha = float(alpha)
        self.num_classes = int(num_classes)
        self.seed = int(seed)
        self.inplace = bool(inplace)
        if layout not in ("NCHW", "NHWC"):
            raise ValueError(f'{type(self).__name__}: layout must be "NCHW" or "NHWC", not {layout!r}')
        self.layout = layout
        self._step = 0

    def _hw(self, images):
        """(H, W) of the batch in this op's layout."""
        return images.shape[2:4] if self.layout == "NCHW" else images.shape[1:3]

    def _box(self, batch, y1, y2, x1, x2):
        """The index of a box of rows y1:y2, columns x1:x2 of samples `batch`."""
        if self.layout == "NCHW":
            return (batch, slice(None), slice(y1, y2), slice(x1, x2))
        return (batch, slice(y1, y2), slice(x1, x2), slice(None))

    def _check(self, images, labels):
        if not isinstance(images, torch.Tensor) or images.dim() != 4:
            raise ValueError(f"{type(self).__name__}: images must be a (batch, C, H, W) tensor "
                             f"(or (batch, H, W, C) with layout=\"NHWC\")")
        c = images.shape[1] if self.layout == "NCHW" else images.shape[3]
        if c not in (1, 3, 4):
            other = "NHWC" if self.layout == "NCHW" else "NCHW"
            raise ValueError(
                f"{type(self).__name__}: a batch of shape {tuple(images.shape)} has {c} channels "
                f"in layout {self.layout}; pass layout=\"{other}\" if the batch is {other} "
                f"(the loader's layout= argument)")
        if not images.is_floating_point():
            raise ValueError(f"{type(self).__name__}: images must be float (add Normalize)")
        if labels.dim() != 1 or labels.shape[0] != images.shape[0]:
            raise ValueError(f"{type(self).__name__}: labels must be (batch,) class indices")
        if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= self.num_classes):
            raise ValueError(f"{type(self).__name__}: a label is outside [0, {self.num_classes})")

    def _one_hot(self, labels, dtype):
        return torch.nn.functional.one_hot(labels.long(), self.num_classes).to(dtype)

    def __call__(self, images, labels, *, epoch: int = 0, step: int | None = None):
        """Mixes the batch with itself rolled by one; returns (images, soft labels)."""
        self._check(images, labels)
        if step is None:
            step, self._step = self._step, self._step + 1
        return self._mix(images, labels, _rng(self.seed, epoch, step, self._salt))

    def __repr__(self):
        return (f"{type(self).__name__}(alpha={self.alpha}, num_classes={self.num_classes}, "
                f"layout={self.layout!r})")


class MixUp(_BatchOp):
    """images = lam * x + (1 - lam) * x.roll(1), lam ~ Beta(alpha, alpha); labels likewise.

    inplace=True mixes into ``images`` (no batch-sized allocation, much faster on
    CPU); only for batches you own: not a shared loader's (nostall.serve), whose
    memory other consumers read.
    """

    _salt = 1

    def _mix(self, images, labels, rng):
        lam = rng.betavariate(self.alpha, self.alpha)
        y = self._one_hot(labels, images.dtype)
        # out[i] = lam * x[i] + (1 - lam) * x[i - 1], written once (no rolled copy)
        if not len(images):
            out = images.clone()
        elif self.inplace:  # last to first, each from its unchanged predecessor
            last = images[-1].clone()
            for i in range(len(images) - 1, 0, -1):
                images[i].lerp_(images[i - 1], 1.0 - lam)
            images[0].lerp_(last, 1.0 - lam)
            out = images
        else:
            out = torch.empty_like(images)
            torch.lerp(images[:-1], images[1:], lam, out=out[1:])
            torch.lerp(images[-1:], images[:1], lam, out=out[:1])
        return out, y.roll(1, 0).mul_(1.0 - lam).add_(y.mul(lam))


class CutMix(_BatchOp):
    """Pastes a box of x.roll(1) (area about 1 - lam, lam ~ Beta(alpha, alpha)); labels by area.

    inplace=True pastes into ``images`` (see MixUp).
    """

    _salt = 2

    def _mix(self, images, labels, rng):
        lam = rng.betavariate(self.alpha, self.alpha)
        H, W = self._hw(images)
        r_x, r_y = rng.randrange(W), rng.randrange(H)
        r = 0.5 * math.sqrt(1.0 - lam)
        r_w_half, r_h_half = int(r * W), int(r * H)
        x1, y1 = max(r_x - r_w_half, 0), max(r_y - r_h_half, 0)
        x2, y2 = min(r_x + r_w_half, W), min(r_y + r_h_half, H)
        box = lambda batch: self._box(batch, y1, y2, x1, x2)  # noqa: E731
        if self.inplace:  # only the box moves: last to first, each from its predecessor
            out = images
            if len(images) and y2 > y1 and x2 > x1:
                last = images[box(-1)].clone()
                for i in range(len(images) - 1, 0, -1):
                    images[box(i)] = images[box(i - 1)]
                images[box(0)] = last
        else:
            out = images.clone()
            if len(images):  # the box from the previous sample (x.roll(1)), without rolling all
                out[box(slice(1, None))] = images[box(slice(None, -1))]
                out[box(slice(None, 1))] = images[box(slice(-1, None))]
        lam_adjusted = 1.0 - (x2 - x1) * (y2 - y1) / (W * H)
        y = self._one_hot(labels, images.dtype)
        return out, y.roll(1, 0).mul_(1.0 - lam_adjusted).add_(y.mul(lam_adjusted))


class RandomChoice:
    """One of ``ops`` per batch, uniformly (or with ``p``), as torchvision's RandomChoice."""

    def __init__(self, ops, p=None, seed: int = 0):
        self.ops = list(ops)
        if not self.ops:
            raise ValueError("RandomChoice: needs at least one op")
        if p is not None and (len(p) != len(self.ops) or any(x < 0 for x in p) or sum(p) <= 0):
            raise ValueError("RandomChoice: p needs one non-negative weight per op")
        self.p = [float(x) for x in p] if p is not None else [1.0] * len(self.ops)
        self.seed = int(seed)
        self._step = 0

    def __call__(self, images, labels, *, epoch: int = 0, step: int | None = None):
        """Applies one of the ops, drawn from (seed, epoch, step); returns what it returns.

        ``step`` defaults to a count of this object's calls."""
        if step is None:
            step, self._step = self._step, self._step + 1
        op = _rng(self.seed, epoch, step, 0).choices(self.ops, weights=self.p)[0]
        if isinstance(op, _BatchOp):  # drawn from this RandomChoice's seed
            op._check(images, labels)
            return op._mix(images, labels, _rng(self.seed, epoch, step, op._salt))
        return op(images, labels)
