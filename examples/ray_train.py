"""nostall with Ray Train: each training rank's batches made by Ray actors.

Ray Train's TorchTrainer runs the training loop on `--ranks` workers (DDP over
gloo on CPUs here; on GPU nodes, `use_gpu=True`). Each rank builds a nostall
Loader with `remote=nostall.ray.Prep(...)`: Ray actors elsewhere in the
cluster (on the nodes started with the "prep" resource, when there are any)
decode and augment that rank's batches, the very batches the rank would make
itself, in the same order; the rank's own threads make some in the
background. The loader's state goes into each Ray Train checkpoint, and a
run restarted from it at another number of ranks reads every remaining sample
once (docs/sampling.md, "Elastic resume").

    .venv/bin/python examples/ray_train.py [--address auto] [--ranks 2] [--epochs 2]

Without --address a local Ray instance is started (a "cluster" of this
machine). Makes a small image folder first (example_data/images).
"""

import argparse
import os
import tempfile

import torch
from torch import nn

import nostall
from nostall import datasets


def train_loop(config):
    import ray.train
    import ray.train.torch

    ctx = ray.train.get_context()
    prep = nostall.ray.Prep(num_workers=config["prep_workers"], cpus_per_worker=1,
                            resources=config["prep_resources"])
    loader = nostall.Loader(config["data"], batch_size=32, shuffle=True, seed=0,
                            rank=ctx.get_world_rank(), world_size=ctx.get_world_size(),
                            transforms=[nostall.RandomResizedCrop(64), nostall.RandomHorizontalFlip(),
                                        nostall.Normalize()],
                            remote=prep)
    model = ray.train.torch.prepare_model(nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, loader.num_classes)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    start = 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint:  # a restarted run: the model and the loader where they were
        with checkpoint.as_directory() as d:
            saved = torch.load(os.path.join(d, "state.pt"))
        model.load_state_dict(saved["model"])
        loader.load_state_dict(saved["loader"])
        start = saved["loader"]["epoch"]
    for epoch in range(start, config["epochs"]):
        loader.set_epoch(epoch)
        total = correct = 0
        for images, labels in loader:
            loss = nn.functional.cross_entropy(out := model(images), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += len(labels)
            correct += (out.argmax(1) == labels).sum().item()
        with tempfile.TemporaryDirectory() as d:
            torch.save({"model": model.state_dict(), "loader": loader.state_dict()}, os.path.join(d, "state.pt"))
            ray.train.report({"epoch": epoch, "accuracy": correct / max(1, total),
                              "remote_batches": loader._remote.counts["remote_batches"]},
                             checkpoint=ray.train.Checkpoint.from_directory(d))
    loader.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", default=None, help="the Ray cluster (default: start one on this machine)")
    parser.add_argument("--ranks", type=int, default=2, help="training workers (TorchTrainer's num_workers)")
    parser.add_argument("--prep-workers", type=int, default=1, help="prep actors per rank")
    parser.add_argument("--prep-resource", default=None,
                        help='a custom resource the prep actors need (e.g. "prep": the nodes started with it)')
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--data", default="example_data/images")
    args = parser.parse_args()

    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    data = datasets.make_imagenet_like(args.data, num_images=256, num_classes=4, min_side=96, max_side=160)
    ray.init(address=args.address, num_cpus=None if args.address else args.ranks * (1 + args.prep_workers))
    trainer = TorchTrainer(
        train_loop,
        train_loop_config={"data": os.path.abspath(data), "epochs": args.epochs, "prep_workers": args.prep_workers,
                           "prep_resources": {args.prep_resource: 1} if args.prep_resource else None},
        scaling_config=ScalingConfig(num_workers=args.ranks, use_gpu=False),
        run_config=RunConfig(storage_path=os.path.abspath("example_data/ray_results")))
    result = trainer.fit()
    print("final metrics:", result.metrics)


if __name__ == "__main__":
    main()
