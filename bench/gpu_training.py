"""Real training stalls on a GPU: ResNet-50 fed by nostall vs torch's DataLoader.

    python bench/gpu_training.py --cores 16 --images 8192      # on a machine with a CUDA GPU

For each CPU budget (the process and its workers pinned to that many cores),
trains ResNet-50 (bf16 autocast, channels_last) for one warm-up and
`--epochs` timed epochs on an ImageNet-like folder with RandomResizedCrop(224)
+ flip + normalize, fed by each loader of `--variants` in a fresh process:
nostall handing out float32 batches in its page-locked slots, uint8 ones
normalized in the step, or batches on the GPU (device="cuda", normalized
there), and torch's DataLoader with that many workers running torchvision's
transforms on PIL images (pin_memory=True). Also measures the GPU alone, on a
synthetic batch already on the device. Prints a markdown table: images/s,
their share of the GPU-alone rate, the time the loop waited for batches
(stall) and the CPU time per image, with, for nostall, its CUDA counters
(zero-copy batches, host copies) and, for device="cuda", the share of the
host-to-device copy time that ran beside a kernel (torch.profiler).
"""

import argparse
import json
import os
import subprocess
import sys
import time

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def model_and_step():
    import torch
    import torchvision

    model = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(images, labels):
        images = images.cuda(non_blocking=True).to(memory_format=torch.channels_last)
        labels = labels.cuda(non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(model(images), labels % 1000)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    return step


def timed_epoch(batches, step):
    import torch

    n, waited = 0, 0.0
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    it = iter(batches)
    while True:
        w0 = time.perf_counter()
        try:
            images, labels = next(it)
        except StopIteration:
            break
        waited += time.perf_counter() - w0
        step(images, labels)
        n += len(labels)
    torch.cuda.synchronize()
    return n, time.perf_counter() - t0, waited


def child(args):
    import torch

    torch.backends.cudnn.benchmark = True
    step = model_and_step()
    if args.child == "synthetic":
        images = torch.randn(args.batch, 3, 224, 224, device="cuda")
        labels = torch.randint(0, 1000, (args.batch,), device="cuda")
        for _ in range(15):
            step(images, labels)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(40):
            step(images, labels)
        torch.cuda.synchronize()
        print(json.dumps({"rate": 40 * args.batch / (time.perf_counter() - t0), "stall": 0.0}))
        return
    import nostall

    crop = [nostall.RandomResizedCrop(224), nostall.RandomHorizontalFlip()]
    common = dict(batch_size=args.batch, shuffle=True, num_threads=args.cores[0], drop_last=True)
    loader = None
    if args.child == "nostall-uint8":
        # uint8 batches (4x fewer bytes to copy) in pinned slots, normalized on the GPU in the step.
        mean = torch.tensor(MEAN, device="cuda").view(1, 3, 1, 1) * 255
        std = torch.tensor(STD, device="cuda").view(1, 3, 1, 1) * 255
        float_step = step

        def step(images, labels):  # noqa: F811
            images = images.cuda(non_blocking=True).float().sub_(mean).div_(std)
            return float_step(images, labels)

        loader = nostall.Loader(args.data, transforms=crop, pin_memory=True, **common)
    elif args.child == "nostall":  # float32 normalized on the CPU, pinned slots
        loader = nostall.Loader(args.data, transforms=crop + [nostall.Normalize(MEAN, STD)],
                                pin_memory=True, **common)
    elif args.child == "nostall-device":  # on the GPU from the loader, normalized there
        loader = nostall.Loader(args.data, transforms=crop + [nostall.Normalize(MEAN, STD)],
                                device="cuda", **common)
    else:
        import torchvision
        from torchvision import transforms as T

        ds = torchvision.datasets.ImageFolder(args.data, T.Compose([
            T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)]))
        torch.set_num_threads(1)
        loader = torch.utils.data.DataLoader(ds, batch_size=args.batch, shuffle=True,
                                             num_workers=args.cores[0], pin_memory=True,
                                             persistent_workers=True, drop_last=True)
    timed_epoch(loader, step)  # warm-up: cudnn autotuning, workers, page cache
    cpu0 = _cpu_seconds()
    n, secs, waited = 0, 0.0, 0.0
    for _ in range(args.epochs):
        en, es, ew = timed_epoch(loader, step)
        n, secs, waited = n + en, secs + es, waited + ew
    out = {"rate": n / secs, "stall": waited / secs, "cpu_ms_per_image": 1e3 * (_cpu_seconds() - cpu0) / n}
    if hasattr(loader, "stats"):
        out["cuda"] = loader.stats().get("cuda")
        if args.child == "nostall-device":
            out["overlap"] = copy_overlap(loader, step)
    print(json.dumps(out))


def _cpu_seconds():
    """CPU time of this process and its (DataLoader worker) children so far."""
    import resource

    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    # (live workers are not yet in RUSAGE_CHILDREN: read them from /proc)
    live = 0.0
    try:
        import psutil

        for ch in psutil.Process().children(recursive=True):
            t = ch.cpu_times()
            live += t.user + t.system
    except Exception:
        pass
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime + live


def copy_overlap(loader, step, steps=12):
    """Under torch.profiler: the share of host-to-device copy time during
    which a kernel of another stream ran (the copy hidden behind compute)."""
    import tempfile

    import torch
    from torch.profiler import ProfilerActivity, profile

    it = iter(loader)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            images, labels = next(it)
            step(images, labels)
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        events = json.load(open(f.name))["traceEvents"]
    copies = [(e["ts"], e["ts"] + e["dur"], e.get("args", {}).get("stream")) for e in events
              if e.get("cat") == "gpu_memcpy" and "HtoD" in e.get("name", "")]
    kernels = sorted((e["ts"], e["ts"] + e["dur"], e.get("args", {}).get("stream")) for e in events
                     if e.get("cat") == "kernel")
    total = covered = 0.0
    for a, b, s in copies:
        total += b - a
        spans = [(max(a, ka), min(b, kb)) for ka, kb, ks in kernels if ks != s and ka < b and kb > a]
        spans.sort()
        end = a
        for x, y in spans:
            x = max(x, end)
            if y > x:
                covered += y - x
                end = y
    return {"copies": len(copies), "copy_ms": total / 1e3,
            "overlapped": covered / total if total else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="bench_data/imagenet-like-gpu")
    ap.add_argument("--images", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--cores", type=int, nargs="+", default=[2, 4, 8, 16])
    ap.add_argument("--epochs", type=int, default=2, help="timed epochs after a warm-up one")
    ap.add_argument("--child", choices=["synthetic"] + list(LABELS))
    ap.add_argument("--variants", nargs="+", choices=list(LABELS),
                    default=["nostall-device", "nostall-uint8", "nostall", "torch"],
                    help="the loaders to run, each in a fresh process")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    if args.child:
        os.sched_setaffinity(0, set(range(args.cores[0])))
        return child(args)

    from nostall.datasets import make_imagenet_like

    make_imagenet_like(args.data, num_images=args.images)
    me = [sys.executable, __file__, "--data", args.data, "--batch", str(args.batch),
          "--epochs", str(args.epochs)]

    def run(kind, cores):
        out = subprocess.run(me + ["--cores", str(cores), "--child", kind], capture_output=True,
                             text=True,
                             preexec_fn=lambda: os.sched_setaffinity(0, set(range(cores))))
        if out.returncode != 0:  # said, and the other runs go on
            print(f"{kind} on {cores} cores failed ({out.returncode}):\n{out.stderr[-3000:]}",
                  file=sys.stderr, flush=True)
            return {"rate": float("nan"), "stall": float("nan"), "cpu_ms_per_image": float("nan")}
        return json.loads(out.stdout.strip().splitlines()[-1])

    gpu = run("synthetic", max(args.cores))
    print(f"GPU ingestion rate (synthetic batches on device): {gpu['rate']:.0f} images/s", flush=True)
    kinds = args.variants
    rows = ["| CPU cores | loader | images/s | of GPU alone | stall | CPU ms/image |",
            "|---:|---|---:|---:|---:|---:|"]
    results = {"gpu_alone": gpu, "runs": []}
    for cores in args.cores:
        for kind in kinds:
            r = run(kind, cores)
            results["runs"].append(dict(r, cores=cores, kind=kind))
            rows.append(f"| {cores} | {LABELS[kind]} | {r['rate']:.0f} | {100 * r['rate'] / gpu['rate']:.1f}% "
                        f"| {100 * r['stall']:.1f}% | {r['cpu_ms_per_image']:.2f} |")
            print(rows[-1], r.get("cuda") or "", r.get("overlap") or "", flush=True)
    print()
    print(f"ResNet-50 training, batch {args.batch}, bf16, channels_last; GPU alone: "
          f"{gpu['rate']:.0f} images/s")
    print("\n".join(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


LABELS = {"nostall": "nostall, float32, pinned slots",
          "nostall-uint8": "nostall, uint8 pinned, normalize in the step",
          "nostall-device": 'nostall, device="cuda" (normalize on the GPU)',
          "torch": "DataLoader + torchvision (PIL), pin_memory"}


if __name__ == "__main__":
    main()
