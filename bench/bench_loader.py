"""nostall vs torch's DataLoader (+ the PIL pipeline torchvision runs), side by side.

    make bench        # or: .venv/bin/python bench/bench_loader.py [--rounds 3]

Generates an ImageNet-like image folder (natural-looking JPEGs, 300-800 px,
quality 90, about 80-150 KB), then, alternating in rounds, runs one epoch of
RandomResizedCrop(224) + RandomHorizontalFlip + Normalize into float32 NCHW
batches of 256 through
  - nostall (C++ threads = the cores given),
  - torch.utils.data.DataLoader with that many worker processes running the
    equivalent PIL pipeline (torchvision's code path on PIL images),
  - libjpeg-turbo decoding every file at full resolution on as many threads
    (the physical reference: the cost of just decoding the images),
each in a fresh process pinned to the same cores, after one warm-up epoch
(page cache warm, workers started). Reports median images/s, ratios, CPU time
and peak memory (summed RSS of the process tree), and nostall's Python overhead
per batch. Writes the table to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from report import write_block

ROOT = Path(__file__).resolve().parent.parent
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


# ----------------------------------------------------------------- children

def num_classes(data):
    return sum(1 for p in Path(data).iterdir() if p.is_dir())


def mixup_cutmix(classes):
    """The reference recipe's batch op: MixUp(0.2) or CutMix(1.0), one per batch."""
    import nostall.transforms as T

    return T.RandomChoice([T.MixUp(alpha=0.2, num_classes=classes, inplace=True),
                           T.CutMix(alpha=1.0, num_classes=classes, inplace=True)])


def run_nostall(data, cores, batch, recipe=False, uint8=False):
    import torch

    import nostall
    import nostall.transforms as T

    torch.set_num_threads(1)  # as in run_torch: the cores are the loader's

    transforms = [nostall.RandomResizedCrop(224), nostall.RandomHorizontalFlip()]
    if recipe:  # torchvision's references/classification presets, --auto-augment ta_wide
        transforms += [T.TrivialAugmentWide(interpolation=T.InterpolationMode.BILINEAR)]
    if not uint8:
        transforms += [nostall.Normalize(MEAN, STD)]
    if recipe:
        transforms += [T.RandomErasing(p=0.1)]
    loader = nostall.Loader(data, batch_size=batch, shuffle=True, seed=0, num_threads=cores,
                            transforms=transforms)
    mix = mixup_cutmix(num_classes(data)) if recipe else None
    for _ in loader:  # warm-up epoch
        pass
    loader.set_epoch(1)
    t0 = time.perf_counter()
    n = 0
    for step, (images, labels) in enumerate(loader):
        if mix is not None:
            images, labels = mix(images, labels, epoch=1, step=step)
        n += len(labels)
    return n, time.perf_counter() - t0, loader.stats()


class PilImageFolder:
    """torchvision.datasets.ImageFolder + transforms.Compose([RandomResizedCrop(224),
    RandomHorizontalFlip(), ToTensor(), Normalize(mean, std)]), written out
    with the same PIL calls (torchvision does not install beside this torch)."""

    recipe = False  # (others take its transform alone: PilImageFolder.__new__)
    uint8 = False

    def __init__(self, root, recipe=False, uint8=False):
        self.recipe = recipe
        self.uint8 = uint8
        root = Path(root)
        classes = sorted(p.name for p in root.iterdir() if p.is_dir())
        self.items = [(str(p), i) for i, c in enumerate(classes)
                      for p in sorted((root / c).iterdir()) if p.suffix in (".jpg", ".png", ".webp")]
        import torch
        self.mean = torch.tensor(MEAN).view(3, 1, 1)
        self.std = torch.tensor(STD).view(3, 1, 1)

    def __len__(self):
        return len(self.items)

    @staticmethod
    def rrc_params(width, height, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
        area = width * height
        log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
        for _ in range(10):
            target = area * random.uniform(*scale)
            aspect = math.exp(random.uniform(*log_ratio))
            w = int(round(math.sqrt(target * aspect)))
            h = int(round(math.sqrt(target / aspect)))
            if 0 < w <= width and 0 < h <= height:
                return random.randint(0, height - h), random.randint(0, width - w), h, w
        in_ratio = width / height
        if in_ratio < ratio[0]:
            w, h = width, int(round(width / ratio[0]))
        elif in_ratio > ratio[1]:
            h, w = height, int(round(height * ratio[1]))
        else:
            w, h = width, height
        return (height - h) // 2, (width - w) // 2, h, w

    def __getitem__(self, index):
        import numpy as np
        import torch
        from PIL import Image

        path, label = self.items[index]
        with open(path, "rb") as f:
            img = Image.open(f).convert("RGB")
        return self.transform(img), label

    def transform(self, img):
        import numpy as np
        import torch
        from PIL import Image

        i, j, h, w = self.rrc_params(*img.size)
        img = img.crop((j, i, j + w, i + h)).resize((224, 224), Image.BILINEAR)
        if random.random() < 0.5:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        if self.recipe:
            import pil_transforms as P

            img = P.TrivialAugmentWide(interpolation="bilinear")(img)
            return P.random_erasing(P.to_normalized_tensor(img, MEAN, STD), p=0.1)
        t = torch.from_numpy(np.array(img, np.uint8, copy=True)).view(224, 224, 3)
        if self.uint8:  # as torchvision's PILToTensor: uint8 CHW
            return t.permute(2, 0, 1).contiguous()
        t = t.permute(2, 0, 1).contiguous().float().div(255)
        return (t - self.mean) / self.std


def run_torch(data, cores, batch, recipe=False, uint8=False):
    import torch

    torch.set_num_threads(1)
    ds = PilImageFolder(data, recipe, uint8)
    collate = None
    if recipe:  # as the reference scripts: MixUp/CutMix in the workers' collate_fn
        mix = mixup_cutmix(num_classes(data))

        def collate(items):
            return mix(*torch.utils.data.default_collate(items))

    loader = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, num_workers=cores,
                                         persistent_workers=True, collate_fn=collate)
    for _ in loader:  # warm-up epoch (and worker start-up)
        pass
    t0 = time.perf_counter()
    n = 0
    for images, labels in loader:
        n += len(labels)
    return n, time.perf_counter() - t0, None


def child(args):
    os.sched_setaffinity(0, set(range(args.cores)))
    fn = {"nostall": run_nostall, "torch": run_torch}[args.child.split("-")[0]]
    n, secs, stats = fn(args.data, args.cores, args.batch, recipe=args.child.endswith("-recipe"),
                        uint8=args.child.endswith("-uint8"))
    import resource
    ru_self = resource.getrusage(resource.RUSAGE_SELF)
    ru_kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = ru_self.ru_utime + ru_self.ru_stime + ru_kids.ru_utime + ru_kids.ru_stime
    print(json.dumps({"images": n, "seconds": secs, "cpu_s": cpu, "stats": stats}))


# ----------------------------------------------------------------- parent

def tree_rss(pid):
    """Summed VmRSS (bytes) of pid and its descendants."""
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    stack += [int(c) for c in f.read().split()]
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            pass
    return total


def measure(cmd, cores):
    """Runs cmd pinned to `cores`, returns (its JSON, peak tree RSS)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True,
                            preexec_fn=lambda: os.sched_setaffinity(0, set(range(cores))))
    peak = 0
    done = threading.Event()

    def sample():
        nonlocal peak
        while not done.is_set():
            peak = max(peak, tree_rss(proc.pid))
            time.sleep(0.05)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    out, _ = proc.communicate()
    done.set()
    t.join()
    if proc.returncode != 0:
        raise SystemExit(f"benchmark command failed ({proc.returncode}): {' '.join(cmd)}")
    return json.loads(out.strip().splitlines()[-1]), peak


def python_overhead(data, rounds=30):
    """Median wall time of next() on the loader for batches already made: the
    Python side plus the C++ hand-off. The ring is filled while the caller
    sleeps; then consecutive next() calls are timed, keeping those that did
    not wait for data at all (checked against the loader's own wait clock)."""
    import nostall

    loader = nostall.Loader(data, batch_size=32, shuffle=True, prefetch=6,
                            transforms=[nostall.RandomResizedCrop(32)])
    core = loader._core
    times = []
    for epoch in range(rounds):
        held = None
        loader.set_epoch(epoch)
        it = iter(loader)
        time.sleep(0.6)  # 8 slots of 32 small crops fill in ~0.2 s on 2 cores
        held = []
        for _ in range(6):
            waited0 = json.loads(core.stats_json())["consumer"]["wait_s"]
            t0 = time.perf_counter_ns()
            batch = next(it)
            t1 = time.perf_counter_ns()
            held.append(batch)  # keep it: no slot is freed, no refill competes
            if json.loads(core.stats_json())["consumer"]["wait_s"] - waited0 < 1e-6:
                times.append((t1 - t0) / 1000)
    return statistics.median(times), statistics.quantiles(times, n=10)[-1]


def fmt_bytes(n):
    return f"{n / 2**20:.0f} MiB"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(ROOT / "bench_data" / "imagenet-like"))
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--cores", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--decode-reference", default=str(ROOT / "build" / "bench" / "decode_reference"))
    ap.add_argument("--write", default=str(ROOT / "docs" / "benchmarks.md"))
    ap.add_argument("--recipe-rounds", type=int, default=None,
                    help="rounds of the full recipe (default: --rounds; 0 skips it)")
    ap.add_argument("--child", choices=["nostall", "torch", "nostall-recipe", "torch-recipe", "nostall-uint8",
                                        "torch-uint8"],
                    help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)

    from nostall.datasets import make_imagenet_like

    data = make_imagenet_like(args.data, num_images=args.images)
    files = sorted(str(p) for p in Path(data).rglob("*.jpg"))
    sizes = [os.path.getsize(f) for f in files]
    list_file = Path(args.data) / "files.txt"
    list_file.write_text("\n".join(files) + "\n")
    for f in files:  # warm the page cache: every contender reads from memory
        Path(f).read_bytes()
    print(f"{len(files)} JPEGs, median {statistics.median(sizes) / 1024:.0f} KB; "
          f"{args.cores} cores; batch {args.batch}; {args.rounds} rounds", flush=True)

    me = [sys.executable, __file__, "--data", args.data, "--cores", str(args.cores),
          "--batch", str(args.batch), "--child"]
    results = {"nostall": [], "torch": [], "decode": [], "nostall-uint8": [], "torch-uint8": []}
    for r in range(args.rounds):
        for name in ("nostall", "torch", "decode", "nostall-uint8", "torch-uint8"):
            if name == "decode":
                cmd = [args.decode_reference, str(args.cores), str(list_file)]
            else:
                cmd = me + [name]
            out, peak = measure(cmd, args.cores)
            rate = out["images"] / out["seconds"]
            results[name].append({"rate": rate, "peak": peak, "cpu": out.get("cpu_s"),
                                  "stats": out.get("stats")})
            print(f"round {r + 1}: {name:8s} {rate:8.1f} images/s  peak RSS {fmt_bytes(peak)}",
                  flush=True)

    med = {k: statistics.median(x["rate"] for x in v) for k, v in results.items()}
    peak = {k: statistics.median(x["peak"] for x in v) for k, v in results.items()}
    overhead, overhead_p90 = python_overhead(args.data)
    ring = results["nostall"][0]["stats"]["ring"]["bytes"]
    stall = statistics.median(x["stats"]["consumer"]["stall_fraction"] for x in results["nostall"])

    rows = [
        ("nostall", med["nostall"], peak["nostall"]),
        (f"torch DataLoader + PIL ({args.cores} workers)", med["torch"], peak["torch"]),
        ("libjpeg-turbo full decode only", med["decode"], peak["decode"]),
    ]
    table = ["| pipeline | images/s (median) | nostall ÷ this | peak RSS (process tree) |",
             "|---|---:|---:|---:|"]
    for name, rate, pk in rows:
        table.append(f"| {name} | {rate:.1f} | {med['nostall'] / rate:.2f}× | {fmt_bytes(pk)} |")
    per_round = ["| round | nostall | torch + PIL | full decode |", "|---|---:|---:|---:|"]
    for r in range(args.rounds):
        per_round.append(f"| {r + 1} | {results['nostall'][r]['rate']:.1f} | "
                         f"{results['torch'][r]['rate']:.1f} | {results['decode'][r]['rate']:.1f} |")
    uint8_rounds = ", ".join(f"{a['rate'] / b['rate']:.2f}"
                             for a, b in zip(results["nostall-uint8"], results["torch-uint8"]))
    report = "\n".join([
        "## Engine: nostall vs torch DataLoader + PIL (`make bench`)",
        "",
        f"Command: `make bench` (= `.venv/bin/python bench/bench_loader.py --rounds {args.rounds}`). "
        f"{len(files)} generated natural-looking JPEGs, 300–800 px, quality 90, "
        f"median {statistics.median(sizes) / 1024:.0f} KB (min {min(sizes) / 1024:.0f}, "
        f"max {max(sizes) / 1024:.0f}); RandomResizedCrop(224) + RandomHorizontalFlip + Normalize "
        f"→ float32 NCHW, batch {args.batch}; every contender pinned to the same {args.cores} cores, "
        f"page cache warm, one warm-up epoch, then one timed epoch; {args.rounds} rounds alternating, "
        f"medians.",
        "",
        *table,
        "",
        *per_round,
        "",
        f"- nostall ÷ torch DataLoader + PIL: **{med['nostall'] / med['torch']:.2f}×** (bar: ≥ 3.8×).",
        f"- nostall ÷ plain full-image decode: **{med['nostall'] / med['decode']:.2f}×** (bar: ≥ 1.5×).",
        f"- uint8 out (RandomResizedCrop + flip, no Normalize; the DataLoader's as PILToTensor): nostall "
        f"{med['nostall-uint8']:.1f}, torch DataLoader + PIL {med['torch-uint8']:.1f} images/s: "
        f"**{med['nostall-uint8'] / med['torch-uint8']:.2f}×** (bar: ≥ 3.3×; rounds: {uint8_rounds}).",
        f"- Python overhead of `__next__` with the batch ready (Python side + C++ hand-off, "
        f"no wait for data): median {overhead:.1f} µs, 90th percentile {overhead_p90:.1f} µs "
        f"per batch (bar: < 100 µs).",
        f"- nostall's memory: ring {fmt_bytes(ring)} ({results['nostall'][0]['stats']['ring']['slots']} "
        f"slots of {args.batch} × 3×224×224 float32) + decode scratch + index, on top of the "
        f"Python interpreter and torch; the DataLoader's figure sums its {args.cores} worker processes.",
        f"- Consumer stall while draining as fast as possible: {100 * stall:.0f}% (nothing to hide "
        f"the pipeline behind: this measures the pipeline alone).",
        "",
    ])
    print()
    print(report)
    if args.write:
        write_block(args.write, "bench_loader", report)
    recipe_rounds = args.rounds if args.recipe_rounds is None else args.recipe_rounds
    if recipe_rounds > 0:
        bench_recipe(args, me, recipe_rounds, len(files))


def bench_recipe(args, me, rounds, num_files):
    """The torchvision ImageNet reference recipe, nostall vs DataLoader + PIL."""
    rates = {"nostall-recipe": [], "torch-recipe": []}
    for r in range(rounds):
        for name in rates:
            out, _ = measure(me + [name], args.cores)
            rates[name].append(out["images"] / out["seconds"])
            print(f"round {r + 1}: {name:15s} {rates[name][-1]:8.1f} images/s", flush=True)
    med = {k: statistics.median(v) for k, v in rates.items()}
    per_round = ["| round | nostall | torch DataLoader + PIL |", "|---|---:|---:|"]
    for r in range(rounds):
        per_round.append(f"| {r + 1} | {rates['nostall-recipe'][r]:.1f} | "
                         f"{rates['torch-recipe'][r]:.1f} |")
    report = "\n".join([
        "## The ImageNet reference recipe: nostall vs torch DataLoader + PIL (`make bench`)",
        "",
        f"Command: `make bench` (= `.venv/bin/python bench/bench_loader.py --rounds {args.rounds}`). "
        f"The same {num_files} JPEGs; torchvision's references/classification training "
        f"transforms with `--auto-augment ta_wide --random-erase 0.1 --mixup-alpha 0.2 "
        f"--cutmix-alpha 1.0`: RandomResizedCrop(224) + RandomHorizontalFlip + "
        f"TrivialAugmentWide(bilinear) + Normalize + RandomErasing(0.1) → float32 NCHW, batch "
        f"{args.batch}, then MixUp(0.2) or CutMix(1.0) per batch (nostall: on the consumer side; "
        f"DataLoader: in the workers' collate_fn, as the reference scripts do; the same torch "
        f"code for both, `nostall.transforms.RandomChoice`, in place on the batch). The DataLoader runs "
        f"`bench/pil_transforms.py` (torchvision's PIL code paths). {args.cores} cores, "
        f"{rounds} rounds alternating, one warm-up epoch then one timed epoch, medians.",
        "",
        "| pipeline | images/s (median) | nostall ÷ this |",
        "|---|---:|---:|",
        f"| nostall | {med['nostall-recipe']:.1f} | 1.00× |",
        f"| torch DataLoader + PIL ({args.cores} workers) | {med['torch-recipe']:.1f} | "
        f"{med['nostall-recipe'] / med['torch-recipe']:.2f}× |",
        "",
        *per_round,
        "",
        f"- nostall ÷ torch DataLoader + PIL, full recipe: "
        f"**{med['nostall-recipe'] / med['torch-recipe']:.2f}×** (bar: ≥ 3.0×).",
        "",
    ])
    print()
    print(report)
    if args.write:
        write_block(args.write, "bench_recipe", report)


if __name__ == "__main__":
    main()
