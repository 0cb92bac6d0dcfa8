"""Training with PyTorch Lightning on a nostall Loader, resumable mid-epoch.

A nostall.Loader goes where a DataLoader would: to ``Trainer.fit`` or from a
LightningDataModule's ``train_dataloader``. What Lightning needs of it, it has:

- ``len(loader)``: Lightning takes that many batches per epoch. An epoch is
  over once its last batch has been handed out, so each epoch gets its own
  order and augmentations.
- ``loader.sampler.set_epoch(epoch)``: Lightning calls it before every epoch
  (as for a DistributedSampler); the loader's epoch follows the trainer's.
- ``state_dict()`` / ``load_state_dict()``: Lightning saves them in every
  checkpoint and restores them on ``fit(..., ckpt_path=...)``: a run stopped
  mid-epoch resumes with the very next batch, each remaining sample once.

- a validation loader: unshuffled, with ``pad_ranks=False`` so that under
  DDP each sample is validated once over the ranks; Lightning validates it
  every epoch.

Under ``torchrun``, SLURM, or Lightning's own DDP launch (``--devices 2``,
started as ``python examples/lightning_train.py``) every process reads its
shard: from torch.distributed once Lightning has initialised it, else from
the launcher's variables; a line on stderr says which. Lightning does not
wrap the loader in a DistributedSampler (it is not a DataLoader).

    .venv/bin/python examples/lightning_train.py [--data DIR] [--epochs N] [--ckpt-dir DIR]
        [--devices N]
"""

import argparse
import warnings

import lightning as L
import torch
from torch import nn

import nostall
from nostall.datasets import make_imagenet_like


class SmallNet(L.LightningModule):
    def __init__(self, classes, lr=0.05):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, classes))
        self.lr = lr

    def training_step(self, batch, batch_idx):
        images, labels = batch
        loss = nn.functional.cross_entropy(self.net(images), labels)
        self.log("loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        images, labels = batch
        correct = (self.net(images).argmax(1) == labels).sum()
        # Summed over the pass (and the ranks): each sample counted once.
        self.log("val_correct", correct.float(), reduce_fx="sum", on_epoch=True, sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=None, help="an image folder (default: generate one)")
    ap.add_argument("--val", default=None,
                    help="a held-out image folder to validate on (default: the training data)")
    ap.add_argument("--images", type=int, default=600, help="images to generate without --data")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--crop", type=int, default=64)
    ap.add_argument("--ckpt-dir", default="checkpoints/lightning-example")
    ap.add_argument("--resume", default=None, help="a checkpoint to resume from (mid-epoch too)")
    ap.add_argument("--devices", type=int, default=1,
                    help="processes; more than 1 trains with DDP (Lightning's launcher, gloo on CPU)")
    args = ap.parse_args()

    data = args.data or make_imagenet_like("data/imagenet-like-lightning", num_images=args.images)
    loader = nostall.Loader(
        data, batch_size=args.batch_size, shuffle=True, seed=0, drop_last=True,
        transforms=[nostall.RandomResizedCrop(args.crop), nostall.RandomHorizontalFlip(),
                    nostall.Normalize(nostall.IMAGENET_MEAN, nostall.IMAGENET_STD)])
    val = nostall.Loader(
        args.val or data, batch_size=args.batch_size, shuffle=False, pad_ranks=False,
        transforms=[nostall.Resize(args.crop * 8 // 7), nostall.CenterCrop(args.crop),
                    nostall.Normalize(nostall.IMAGENET_MEAN, nostall.IMAGENET_STD)])
    model = SmallNet(loader.num_classes)
    checkpoints = L.pytorch.callbacks.ModelCheckpoint(dirpath=args.ckpt_dir, every_n_train_steps=5,
                                                      save_last=True)
    trainer = L.Trainer(max_epochs=args.epochs, accelerator="auto", devices=args.devices,
                        strategy="ddp" if args.devices > 1 else "auto", logger=False,
                        callbacks=[checkpoints], enable_model_summary=False)
    with warnings.catch_warnings():
        # Lightning's advice to raise a DataLoader's num_workers does not apply.
        warnings.filterwarnings("ignore", ".*num_workers.*")
        trainer.fit(model, loader, val, ckpt_path=args.resume)
    if trainer.global_rank != 0:
        return
    print(loader.stats_table())
    epochs = loader.stats()["consumer"]["epochs"]
    print(f"{len(epochs)} epoch(s) through nostall:"
          + " " + ", ".join(f"epoch {e['epoch']} {e['samples']} samples {e['images_per_s']:,.0f} images/s"
                                for e in epochs))
    print(f"validation: {int(trainer.callback_metrics['val_correct'])} of {len(val.dataset)} "
          "images right after the last epoch")
    print(f"last checkpoint: {checkpoints.last_model_path}")


if __name__ == "__main__":
    main()
