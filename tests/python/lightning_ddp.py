"""Lightning's own DDP launch, as a user starts it: `python lightning_ddp.py
TRAIN VAL OUT`, Trainer(strategy="ddp", devices=2) on the CPU (gloo). The
loaders are built before trainer.fit, so in the first process before
Lightning has started the second or initialised torch.distributed. Each rank
writes what it trained and validated on to OUT/rank<R>.json."""
import json
import sys
import warnings

import lightning as L
import torch

import nostall

train_dir, val_dir, out = sys.argv[1:4]
train = nostall.Loader(train_dir, batch_size=4, shuffle=True, seed=3, return_indices=True,
                       transforms=[nostall.Resize((16, 16))])
val = nostall.Loader(val_dir, batch_size=4, pad_ranks=False, return_indices=True,
                     transforms=[nostall.Resize((16, 16))])


class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(3 * 16 * 16, 3)
        self.trained, self.validated = [], []

    def training_step(self, batch, batch_idx):
        images, labels, idx = batch
        self.trained.append([self.current_epoch, idx.tolist()])
        return torch.nn.functional.cross_entropy(self.net(images.float().flatten(1)), labels)

    def validation_step(self, batch, batch_idx):
        images, labels, idx = batch
        if not self.trainer.sanity_checking:
            self.validated.append([self.current_epoch, idx.tolist()])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


model = Model()
trainer = L.Trainer(strategy="ddp", devices=2, accelerator="cpu", max_epochs=2, logger=False,
                    enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    trainer.fit(model, train, val)
with open(f"{out}/rank{trainer.global_rank}.json", "w") as f:
    json.dump({"trained": model.trained, "validated": model.validated,
               "train_shard": [train.spec["rank"], train.spec["world_size"]],
               "val_shard": [val.spec["rank"], val.spec["world_size"]]}, f)
