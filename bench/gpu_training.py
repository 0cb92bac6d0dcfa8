"""Real training stalls on a GPU: ResNet-50 fed by nostall vs torch's DataLoader.

    python bench/gpu_training.py --cores 2 4 8 16      # on a machine with a CUDA GPU

For each CPU budget (the process and its workers pinned to that many cores),
trains ResNet-50 (bf16 autocast, channels_last) for one warm-up and one timed
epoch on an ImageNet-like folder with RandomResizedCrop(224) + flip +
normalize, fed by (a) nostall with that many prep threads and (b) torch's
DataLoader with that many workers running torchvision's transforms on PIL
images (pin_memory=True). Also measures the GPU's own ingestion rate with a
synthetic batch already on the device. Prints a markdown table.
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

    step = model_and_step()
    if args.child == "synthetic":
        images = torch.randn(args.batch, 3, 224, 224, device="cuda")
        labels = torch.randint(0, 1000, (args.batch,), device="cuda")
        for _ in range(10):
            step(images, labels)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(30):
            step(images, labels)
        torch.cuda.synchronize()
        print(json.dumps({"rate": 30 * args.batch / (time.perf_counter() - t0), "stall": 0.0}))
        return
    if args.child == "nostall-uint8":
        # uint8 batches (4x fewer bytes to copy), normalized on the GPU.
        import nostall

        mean = torch.tensor(MEAN, device="cuda").view(1, 3, 1, 1) * 255
        std = torch.tensor(STD, device="cuda").view(1, 3, 1, 1) * 255
        float_step = step

        def step(images, labels):  # noqa: F811
            images = images.cuda(non_blocking=True).float().sub_(mean).div_(std)
            return float_step(images, labels)

        loader = nostall.Loader(args.data, batch_size=args.batch, shuffle=True,
                                num_threads=args.cores[0], drop_last=True,
                                transforms=[nostall.RandomResizedCrop(224),
                                            nostall.RandomHorizontalFlip()])
    elif args.child == "nostall":
        import nostall

        loader = nostall.Loader(args.data, batch_size=args.batch, shuffle=True,
                                num_threads=args.cores[0], drop_last=True,
                                transforms=[nostall.RandomResizedCrop(224),
                                            nostall.RandomHorizontalFlip(),
                                            nostall.Normalize(MEAN, STD)])
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
    n, secs, waited = timed_epoch(loader, step)
    print(json.dumps({"rate": n / secs, "stall": waited / secs}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="bench_data/imagenet-like-gpu")
    ap.add_argument("--images", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--cores", type=int, nargs="+", default=[2, 4, 8, 16])
    ap.add_argument("--child", choices=["nostall", "nostall-uint8", "torch", "synthetic"])
    ap.add_argument("--uint8", action="store_true",
                    help="also run nostall with uint8 batches normalized on the GPU")
    args = ap.parse_args()
    if args.child:
        os.sched_setaffinity(0, set(range(args.cores[0])))
        return child(args)

    from nostall.datasets import make_imagenet_like

    make_imagenet_like(args.data, num_images=args.images)
    me = [sys.executable, __file__, "--data", args.data, "--batch", str(args.batch)]

    def run(kind, cores):
        out = subprocess.run(me + ["--cores", str(cores), "--child", kind], capture_output=True,
                             text=True, check=True,
                             preexec_fn=lambda: os.sched_setaffinity(0, set(range(cores))))
        return json.loads(out.stdout.strip().splitlines()[-1])

    gpu = run("synthetic", max(args.cores))
    print(f"GPU ingestion rate (synthetic batches on device): {gpu['rate']:.0f} images/s", flush=True)
    rows = ["| CPU cores | nostall images/s | nostall stall | DataLoader images/s | DataLoader stall | ratio |",
            "|---:|---:|---:|---:|---:|---:|"]
    for cores in args.cores:
        a, b = run("nostall", cores), run("torch", cores)
        rows.append(f"| {cores} | {a['rate']:.0f} | {100 * a['stall']:.0f}% | {b['rate']:.0f} | "
                    f"{100 * b['stall']:.0f}% | {a['rate'] / b['rate']:.2f}× |")
        if args.uint8:
            u = run("nostall-uint8", cores)
            rows[-1] += f" uint8 + GPU normalize: {u['rate']:.0f} images/s, stall {100 * u['stall']:.0f}%"
        print(rows[-1], flush=True)
    print()
    print(f"ResNet-50 training, batch {args.batch}, bf16; GPU alone: {gpu['rate']:.0f} images/s")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
