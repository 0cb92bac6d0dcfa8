"""nostall reading Parquet shards (and `datasets`' save_to_disk Arrow IPC
files) vs the same images as a folder, and vs torch's DataLoader over the
same files (pyarrow + PIL, and `datasets`).

    make bench-parquet   # or: .venv/bin/python bench/bench_parquet.py [--rounds 3]

Writes the `make bench` image set (ImageNet-like JPEGs) as Parquet shards in
Hugging Face's layout (image struct, ClassLabel; offset index as `datasets`
writes it), row groups of 100 and of 1,000 rows, puts the 1,000-row shards
in a real S3 server on loopback (SeaweedFS) behind tests/tools/latency_proxy.py
adding 20 ms to every request, then, alternating in rounds, runs one epoch of
RandomResizedCrop(224) + flip + Normalize, batch 256, through
  - nostall over the image folder, over each Parquet layout, and over the
    Parquet shards on S3 at 20 ms (its second epoch: steady);
  - torch's DataLoader over the same shards as users write it today: a
    pyarrow table of the image bytes + PIL in the workers, and `datasets`'
    load_dataset("parquet") with the same transform.
Every loader is pinned to core 0 (nostall: 1 prep thread; torch: 1 worker)
and the S3 server and proxy to core 1, as bench_s3 does. Reports median
images/s and the ratios the Parquet issue's bars name; checks that the
batches of the folder and of both Parquet layouts are byte-identical for one
seed. Writes the table to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
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
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
LOADER_CORE = 0


def transforms():
    import nostall
    return [nostall.RandomResizedCrop(224), nostall.RandomHorizontalFlip(), nostall.Normalize(MEAN, STD)]


def run_nostall(path, images, options, loader_args):
    import nostall

    loader = nostall.Loader(path, batch_size=256, shuffle=True, seed=0, num_threads=1, transforms=transforms(),
                            **({"source_options": json.loads(options)} if options else {}),
                            **(json.loads(loader_args) if loader_args else {}))
    t0 = time.perf_counter()
    first = 0
    for _, labels in loader:  # the first epoch: page cache, connections, reads in flight sized
        first += len(labels)
    first_rate = first / (time.perf_counter() - t0)
    loader.set_epoch(1)
    t0 = time.perf_counter()
    n = 0
    for _, labels in loader:
        n += len(labels)
    return n, time.perf_counter() - t0, first_rate


class PilPrep:
    """torchvision's RandomResizedCrop(224) + flip + Normalize in PIL/torch
    (bench_loader's), on one image's bytes."""

    def __init__(self):
        import torch
        from bench_loader import PilImageFolder
        self.prep = PilImageFolder.__new__(PilImageFolder)
        self.prep.mean = torch.tensor(MEAN).view(3, 1, 1)
        self.prep.std = torch.tensor(STD).view(3, 1, 1)
        self.prep.recipe = None

    def __call__(self, data):
        import io
        from PIL import Image
        return self.prep.transform(Image.open(io.BytesIO(data)).convert("RGB"))


def run_torch(pattern, images, how):
    import glob

    import torch
    torch.set_num_threads(1)
    prep = PilPrep()
    files = sorted(glob.glob(pattern))
    if how == "pyarrow":
        import pyarrow.parquet as pq

        class Table(torch.utils.data.Dataset):
            def __init__(self):
                import pyarrow as pa
                t = pa.concat_tables([pq.read_table(f, columns=["image", "label"]) for f in files])
                self.images = t.column("image").combine_chunks().field("bytes")
                self.labels = t.column("label").to_pylist()

            def __len__(self):
                return min(images, len(self.labels))

            def __getitem__(self, i):
                return prep(self.images[i].as_py()), self.labels[i]
        ds = Table()
    else:
        import datasets
        if how == "load_from_disk":  # a folder save_to_disk wrote (Arrow IPC files)
            d = datasets.load_from_disk(pattern)
        else:
            d = datasets.load_dataset("parquet", data_files=files, split="train")
        d = d.cast_column("image", datasets.Image(decode=False)).select(range(min(images, len(d))))

        def tf(batch):
            return {"image": [prep(x["bytes"]) for x in batch["image"]], "label": batch["label"]}
        ds = d.with_transform(tf)
    loader = torch.utils.data.DataLoader(ds, batch_size=256, shuffle=True, num_workers=1,
                                         collate_fn=None if how == "pyarrow" else
                                         (lambda b: (torch.stack([x["image"] for x in b]),
                                                     torch.tensor([x["label"] for x in b]))))
    t0 = time.perf_counter()
    n = 0
    for _, labels in loader:
        n += len(labels)
    return n, time.perf_counter() - t0


def child(args):
    os.sched_setaffinity(0, {LOADER_CORE})
    first = None
    if args.child == "nostall":
        n, secs, first = run_nostall(args.path, args.images, args.options, args.loader_args)
    else:
        n, secs = run_torch(args.path, args.images, args.child)
    print(json.dumps({"images": n, "seconds": secs, "first": first}))


def identical(folder, patterns):
    """The first epoch's batches of the folder and each Parquet layout, equal byte for byte."""
    import nostall
    import torch

    def batches(path):
        return [(x.clone(), y.clone()) for x, y in nostall.Loader(path, batch_size=64, shuffle=True, seed=7,
                                                                 subset=512, transforms=transforms())]
    want = batches(str(folder))
    return all(len(got) == len(want) and all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
                                             for a, b in zip(got, want))
               for got in map(batches, patterns))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(ROOT / "bench_data" / "imagenet-like"))
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--torch-images", type=int, default=768, help="images the (slow) torch runs read")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--write", default=str(ROOT / "docs" / "benchmarks.md"))
    ap.add_argument("--child", choices=["nostall", "pyarrow", "datasets", "load_from_disk"], help=argparse.SUPPRESS)
    ap.add_argument("--only", default="", help="run only the runs whose names contain one of these "
                    "comma-separated texts (and the image folder); prints, writes nothing")
    ap.add_argument("--path", help=argparse.SUPPRESS)
    ap.add_argument("--options", default="", help=argparse.SUPPRESS)
    ap.add_argument("--loader-args", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)
    if (os.cpu_count() or 1) < 2:
        sys.exit("bench_parquet needs 2 cores: one for the loaders, one for the S3 server and proxy")

    import boto3
    from bench_s3 import BUCKET, KEY, SECRET, Server, measure, start_proxy
    from nostall.datasets import folder_to_parquet, make_imagenet_like

    data = Path(make_imagenet_like(args.data, num_images=args.images))
    work = Path(tempfile.mkdtemp(prefix="nostall-bench-parquet-"))
    layouts = {rows: folder_to_parquet(data, work / f"rg{rows}", files=4, row_group_size=rows)
               for rows in (100, 1000)}
    # As pyarrow writes by default: no offset index (pages of about 1 MiB).
    plain = folder_to_parquet(data, work / "plain100", files=4, row_group_size=100, page_index=False)
    # The same rows as `datasets` keeps them on disk: save_to_disk's Arrow IPC files.
    import datasets
    datasets.Dataset.from_parquet(sorted(str(f) for f in (work / "rg1000").glob("*.parquet")),
                                  cache_dir=str(work / "hf-cache")).save_to_disk(str(work / "saved"))
    same = identical(data, list(layouts.values()) + [str(work / "saved")])
    print(f"batches of the folder and both Parquet layouts identical: {same}", flush=True)
    (work / "s3").mkdir()
    server = Server(work / "s3")
    proxy = None
    try:
        client = boto3.client("s3", endpoint_url=server.url, aws_access_key_id=KEY,
                              aws_secret_access_key=SECRET, region_name="us-east-1")
        server.wait_for_bucket(client)
        for f in sorted((work / "rg1000").glob("*.parquet")):
            client.upload_file(str(f), BUCKET, "parquet/" + f.name)
        proxy, slow = start_proxy(server.url, 20)
        # A decoded cache an eighth of the images: an exact shuffle decodes a page per row, the window
        # shuffle each page once an epoch.
        small = json.dumps({"decoded_cache_mb": max(1, sum(f.stat().st_size for f in data.rglob("*.jpg")) >> 23)})
        me = [sys.executable, __file__, "--images", str(args.images)]
        torch_me = [sys.executable, __file__, "--images", str(args.torch_images)]
        runs = {
            "nostall image folder": (me + ["--child", "nostall", "--path", str(data)], server.url),
            "nostall parquet, row groups of 100": (me + ["--child", "nostall", "--path", layouts[100]], server.url),
            "nostall parquet, row groups of 1000": (me + ["--child", "nostall", "--path", layouts[1000]], server.url),
            "nostall parquet, row groups of 100, no offset index, no decoded cache": (
                me + ["--child", "nostall", "--path", plain, "--options", '{"decoded_cache_mb": 0}'], server.url),
            "nostall parquet, data 8x the decoded cache, exact shuffle": (
                me + ["--child", "nostall", "--path", layouts[100], "--options", small], server.url),
            "nostall parquet, data 8x the decoded cache, shuffle_window=auto": (
                me + ["--child", "nostall", "--path", layouts[100], "--options", small,
                      "--loader-args", '{"shuffle_window": "auto"}'], server.url),
            "nostall parquet on S3 +20 ms": (
                me + ["--child", "nostall", "--path", f"s3://{BUCKET}/parquet/train-*.parquet"], slow),
            "DataLoader + pyarrow + PIL": (torch_me + ["--child", "pyarrow", "--path", layouts[1000]], server.url),
            "DataLoader + datasets": (torch_me + ["--child", "datasets", "--path", layouts[1000]], server.url),
            "nostall arrow (datasets' save_to_disk)": (me + ["--child", "nostall", "--path", str(work / "saved")],
                                                       server.url),
            "nostall arrow (datasets' save_to_disk), no decoded cache": (
                me + ["--child", "nostall", "--path", str(work / "saved"), "--options", '{"decoded_cache_mb": 0}'],
                server.url),
            "DataLoader + datasets load_from_disk": (
                torch_me + ["--child", "load_from_disk", "--path", str(work / "saved")], server.url),
        }
        wanted = [w for w in args.only.split(",") if w]
        runs = {k: v for k, v in runs.items() if not wanted or any(w in k for w in wanted)
                or k == "nostall image folder"}
        results = {k: [] for k in runs}
        firsts = {k: [] for k in runs}
        for r in range(args.rounds):
            for name, (cmd, endpoint) in runs.items():
                out = measure(cmd, endpoint)
                rate = out["images"] / out["seconds"]
                results[name].append(rate)
                if out.get("first"):
                    firsts[name].append(out["first"])
                print(f"round {r + 1}: {name:40s} {rate:8.1f} images/s", flush=True)
    finally:
        if proxy is not None:
            proxy.terminate()
        server.stop()
        subprocess.run(["rm", "-rf", str(work)])

    med = {k: statistics.median(v) for k, v in results.items()}
    folder = med["nostall image folder"]
    if args.only:
        for k in runs:
            print(f"{k}: {med[k]:.0f} images/s, {med[k] / folder:.2f} of the image folder")
        return 0
    local = med["nostall parquet, row groups of 1000"]
    arrow = med["nostall arrow (datasets' save_to_disk)"]
    arrow_uncached = med["nostall arrow (datasets' save_to_disk), no decoded cache"]
    lines = ["## Parquet: shards local and on S3 vs the image folder and DataLoader + pyarrow/datasets "
             "(`make bench-parquet`)", "",
             f"{args.images} JPEGs as an image folder and as 4 Parquet shards (Hugging Face's layout, offset "
             f"index), every loader pinned to core {LOADER_CORE} (nostall: 1 prep thread, its second epoch; "
             f"torch: 1 worker, {args.torch_images} images), SeaweedFS + the 20 ms proxy on core 1; "
             f"RandomResizedCrop(224) + flip + Normalize, batch 256; median of {args.rounds} rounds "
             f"(`make bench-parquet`)", "",
             "nostall's images/s are its second epoch; its first (page cache, connections, and without an "
             "offset index the pages found by reading each chunk once) beside them.", "",
             "| run | images/s | vs image folder | first epoch |", "|---|---:|---:|---:|"]
    for k in runs:
        first = f"{statistics.median(firsts[k]):.0f}" if firsts[k] else ""
        lines.append(f"| {k} | {med[k]:.0f} | {med[k] / folder:.2f} | {first} |")
    lines += ["",
              f"- Parquet local / image folder: {med['nostall parquet, row groups of 100'] / folder:.2f} "
              f"(row groups of 100), {local / folder:.2f} (of 1000)",
              f"- Parquet on S3 at 20 ms / Parquet local: {med['nostall parquet on S3 +20 ms'] / local:.2f}",
              f"- a page (about 1 MiB, 9 images) read and decoded for every row, as an exact shuffle over a "
              f"dataset much larger than decoded_cache_mb does: "
              f"{med['nostall parquet, row groups of 100, no offset index, no decoded cache'] / folder:.2f} of the "
              f"image folder (docs/parquet.md: shuffle_window, smaller pages, or shard_shuffle with a cache of "
              f"shuffle_buffer rows)",
              f"- data 8x decoded_cache_mb ({json.loads(small)['decoded_cache_mb']} MiB), row groups of 100: "
              f"the exact shuffle {med['nostall parquet, data 8x the decoded cache, exact shuffle'] / folder:.2f} "
              f"of the image folder, shuffle_window=\"auto\" "
              f"{med['nostall parquet, data 8x the decoded cache, shuffle_window=auto'] / folder:.2f} (bar: >= 0.9)",
              f"- nostall Parquet / DataLoader + pyarrow + PIL: {local / med['DataLoader + pyarrow + PIL']:.1f}x; "
              f"/ DataLoader + datasets: {local / med['DataLoader + datasets']:.1f}x",
              f"- Arrow IPC (save_to_disk) / Parquet local: {arrow / local:.2f}; / DataLoader + datasets "
              f"load_from_disk: {arrow / med['DataLoader + datasets load_from_disk']:.1f}x; without the decoded "
              f"cache (each row its own read, as an exact shuffle over a large dataset): "
              f"{arrow_uncached / folder:.2f} of the image folder",
              f"- batches of the folder, both Parquet layouts and the save_to_disk folder byte-identical for one "
              f"seed: {same}"]
    text = "\n".join(lines)
    print(text)
    write_block(args.write, "bench_parquet", text)


if __name__ == "__main__":
    sys.exit(main())
