"""Prep on another node's CPU (nostall.ray.Prep) for a "GPU node short of CPU".

    .venv/bin/python bench/bench_remote.py [--rounds 3]

A Ray cluster on this machine: the head node pinned to core 0 (no CPUs for
work: the trainer's node), a prep node pinned to core 1 (`ray start
--num-cpus 1 --resources '{"prep": 1}'`: its raylet, object store and
workers). The trainer is a fresh process pinned to core 0 whose step keeps
that core busy: a busy loop of S per batch, S the time one core takes to prep
a batch (measured first: with the trainer alone, the step is half its core's
time). The recipe is RandomResizedCrop(224) + flip to uint8 NCHW, batches of
64, over an ImageNet-like folder. Contenders, alternating in rounds:
  - alone:   nostall.Loader on the trainer's core only;
  - remote:  the same loader with remote=Prep(num_workers=1, resources={"prep": 1})
             (the trainer's own threads make batches too);
  - raydata: Ray Data doing the same recipe into the same trainer:
             read_images -> map_batches (PIL RandomResizedCrop + flip, on the
             prep node) -> iter_torch_batches.
Reports images/s (the second epoch: once started), time to the first batch
(from building the loader), the batches' equality (remote vs alone, by
hash), and for remote the transport: MB/s of batches into the trainer and
the trainer's CPU per batch. Writes the table to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from report import write_block

ROOT = Path(__file__).resolve().parent.parent
BATCH = 64


def spin(seconds):
    """The training step: `seconds` of the trainer's CPU (its thread's CPU
    time, not the clock's: threads that share the core do not shorten it)."""
    end = time.thread_time() + seconds
    x = 0
    while time.thread_time() < end:
        x += 1
    return x


def make_loader(data, remote, seed=0):
    import nostall
    kw = dict(batch_size=BATCH, shuffle=True, seed=seed, num_threads=1, copy=False,
              transforms=[nostall.RandomResizedCrop(224), nostall.RandomHorizontalFlip()])
    if remote:
        kw["remote"] = nostall.ray.Prep(num_workers=1, cpus_per_worker=1, resources={"prep": 1})
    return nostall.Loader(data, **kw)


def pil_rrc_batch(batch):
    """Ray Data's map_batches: torchvision's RandomResizedCrop(224) + flip on PIL."""
    import numpy as np
    from PIL import Image

    sys.path.insert(0, str(ROOT / "bench"))
    from pil_transforms import random_resized_crop_params

    out = []
    for img in batch["image"]:
        im = Image.fromarray(img)
        left, top, w, h = random_resized_crop_params(im.width, im.height)
        im = im.resize((224, 224), Image.BILINEAR, box=(left, top, left + w, top + h))
        if np.random.rand() < 0.5:
            im = im.transpose(Image.FLIP_LEFT_RIGHT)
        out.append(np.asarray(im).transpose(2, 0, 1))
    return {"image": np.stack(out)}


def child(args):
    """One contender in the trainer's process: (images/s, first batch s, ...)."""
    import resource

    import ray
    import torch
    torch.set_num_threads(1)
    os.environ["RAY_AUTH_MODE"] = "disabled"
    ray.init(address=args.address, log_to_driver=False)
    t0 = time.perf_counter()
    digest = hashlib.sha256()
    counts = None
    if args.child == "raydata":
        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False
        ds = ray.data.read_images(args.data, mode="RGB").map_batches(pil_rrc_batch, batch_size=BATCH)
        batches = (b["image"] for epoch in range(2) for b in ds.iter_torch_batches(batch_size=BATCH))
    else:
        loader = make_loader(args.data, args.child == "remote")
        batches = ((x, y) for epoch in range(2) for x, y in loader)
    n = first = 0
    per_epoch = -(-args.images // BATCH)
    t1, cpu0 = time.perf_counter(), time.process_time()
    for k, batch in enumerate(batches):
        images = batch[0] if isinstance(batch, tuple) else batch
        if k == 0:
            first = time.perf_counter() - t0
        if k == per_epoch:  # the second epoch: the rate once started
            t1, cpu0 = time.perf_counter(), time.process_time()
        if k >= per_epoch:
            n += len(images)
        if args.child != "raydata":  # a sample of every batch's pixels, and its labels
            digest.update(images.numpy()[:, :, ::16, ::16].tobytes() + batch[1].numpy().tobytes())
        spin(args.step)
    secs = time.perf_counter() - t1
    cpu = time.process_time() - cpu0
    if args.child == "remote":
        counts = dict(loader._remote.counts)
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"rate": n / secs, "first": first, "cpu_per_batch": cpu / max(1, n / BATCH),
                      "hash": digest.hexdigest()[:16], "counts": counts, "maxrss": ru.ru_maxrss}))


def prep_cost(data):
    """Seconds one core takes to prep a batch (the loader alone, no step)."""
    loader = make_loader(data, False)
    for epoch in range(2):  # the second epoch: as the contenders are timed
        t, n = time.perf_counter(), 0
        for x, _ in loader:
            n += 1
    return (time.perf_counter() - t) / n


def start_cluster(temp):
    env = dict(os.environ, RAY_AUTH_MODE="disabled")
    ray_bin = str(Path(sys.executable).parent / "ray")
    common = ["--node-ip-address=127.0.0.1", "--disable-usage-stats"]
    port = 6400 + os.getpid() % 500
    subprocess.run(["taskset", "-c", "0", ray_bin, "start", "--head", f"--port={port}", "--num-cpus=0",
                    "--include-dashboard=false", f"--temp-dir={temp}", *common], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run(["taskset", "-c", "1", ray_bin, "start", f"--address=127.0.0.1:{port}", "--num-cpus=1",
                    '--resources={"prep": 1}', *common], env=env, check=True, stdout=subprocess.DEVNULL)
    return f"127.0.0.1:{port}", lambda: subprocess.run([ray_bin, "stop", "--force"], env=env,
                                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(ROOT / "bench_data" / "imagenet-like"))
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-raydata", action="store_true")
    ap.add_argument("--write", default=str(ROOT / "docs" / "benchmarks.md"))
    ap.add_argument("--child", choices=["alone", "remote", "raydata"], help=argparse.SUPPRESS)
    ap.add_argument("--address", help=argparse.SUPPRESS)
    ap.add_argument("--step", type=float, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        os.sched_setaffinity(0, {0})
        return child(args)

    from nostall.datasets import make_imagenet_like
    data = make_imagenet_like(args.data, num_images=args.images)
    for f in Path(data).rglob("*.jpg"):
        f.read_bytes()  # the page cache warm for everyone
    os.sched_setaffinity(0, {0})
    step = prep_cost(data)
    print(f"{args.images} JPEGs; batch {BATCH}; prep {step * 1e3:.0f} ms a batch on one core = the step",
          flush=True)
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    address, stop = start_cluster(temp)
    names = ["alone", "remote"] + ([] if args.no_raydata else ["raydata"])
    results = {n: [] for n in names}
    try:
        for r in range(args.rounds):
            for name in names:
                cmd = [sys.executable, __file__, "--data", data, "--child", name, "--address", address,
                       "--step", str(step), "--images", str(args.images)]
                out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True,
                                     env=dict(os.environ, RAY_AUTH_MODE="disabled"))
                res = json.loads(out.stdout.strip().splitlines()[-1])
                results[name].append(res)
                print(f"round {r + 1} {name:8s} {res['rate']:7.1f} img/s  first batch {res['first']:.2f} s  "
                      f"trainer CPU {res['cpu_per_batch'] * 1e3:.0f} ms/batch", flush=True)
    finally:
        stop()
    report(args, results, step)


def report(args, results, step):
    med = {n: statistics.median(r["rate"] for r in rs) for n, rs in results.items()}
    first = {n: statistics.median(r["first"] for r in rs) for n, rs in results.items()}
    cpu = {n: statistics.median(r["cpu_per_batch"] for r in rs) for n, rs in results.items()}
    same = len({r["hash"] for n in ("alone", "remote") for r in results[n]}) == 1
    rows = ["| contender | images/s | vs alone | first batch | trainer CPU per batch |",
            "|---|---:|---:|---:|---:|"]
    for n in results:
        rows.append(f"| {n} | {med[n]:.1f} | {med[n] / med['alone']:.2f}x | {first[n]:.2f} s | "
                    f"{cpu[n] * 1e3:.0f} ms |")
    remote = results["remote"]
    c = remote[len(remote) // 2]["counts"]
    secs = statistics.median(BATCH / r["rate"] for r in remote)
    mb_s = c["remote_bytes"] / max(1, c["remote_batches"]) / secs / 1e6 if c["remote_batches"] else 0
    lines = rows + [
        "",
        f"Step {step * 1e3:.0f} ms a batch (one core's prep of a batch); batches remote vs alone "
        f"{'byte-identical' if same else 'DIFFERENT'}; remote made {c['remote_batches']} batches on the prep node "
        f"and {c['local_batches']} on the trainer's core; batches into the trainer at {mb_s:.1f} MB/s "
        f"(the trainer waited {c['remote_wait_s']:.2f} s in all for them)."]
    if "raydata" in med:
        lines.append(f"remote vs Ray Data: **{med['remote'] / med['raydata']:.2f}x** images/s; first batch "
                     f"{first['remote']:.2f} s vs {first['raydata']:.2f} s.")
    text = "\n".join(lines)
    print(text)
    write_block(args.write, "remote", text + "\n")


if __name__ == "__main__":
    main()
