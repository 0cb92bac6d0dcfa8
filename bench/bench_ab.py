"""Two builds of nostall side by side: the cost of a change, as ratios.

    python bench/bench_ab.py --old /path/to/old/site [--rounds 5] [--which loader,s3,cluster]

--old is a folder holding another build's `nostall` package (e.g. made with
`pip install --no-deps --target DIR .` at another commit); the current
environment's is the new one. Each round runs old then new (then the next
round new then old, so neither always goes first), each in a fresh process,
and the table reports medians and new/old ratios of:

  loader   bench_loader.py's nostall run: ImageNet-like JPEGs from the page
           cache, RandomResizedCrop 224 + flip + normalize, 2 cores (images/s)
  s3       bench_s3.py's nostall run from local disk, from SeaweedFS on
           loopback directly and through the 20 ms proxy (images/s, and the
           S3 client's I/O thread CPU per image)
  cluster  bench_cluster.py: 4 nodes, cluster cache (memcached) of 4 x 25%,
           and node-local MinIO caches of 25%: seconds of epochs 2-5
  parquet  bench_parquet.py's nostall run on the same images as Parquet shards
           (row groups of 100 and of 1000, offset index; local disk): images/s
  audio    bench_audio.py's nostall runs: 1 s FLAC clips and 3 s crops of
           10-30 s FLAC/MP3 recordings (samples/s)
  detection  bench_detection.py's nostall run: SSD's recipe on 400 COCO-style
           scenes, with instance masks (images/s)
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))


def env_for(build, old):
    env = dict(os.environ)
    if build == "old":
        env["PYTHONPATH"] = old
    else:
        env.pop("PYTHONPATH", None)
    return env


def order(r):
    return ("old", "new") if r % 2 == 0 else ("new", "old")


def run_json(cmd, env):
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_loader(args, data):
    rates = {"old": [], "new": []}
    cmd = [sys.executable, str(HERE / "bench_loader.py"), "--data", data, "--cores", "2",
           "--batch", "256", "--child", "nostall"]
    for r in range(args.rounds):
        for build in order(r):
            out = run_json(cmd, env_for(build, args.old))
            rates[build].append(out["images"] / out["seconds"])
            print(f"loader round {r} {build}: {rates[build][-1]:.0f} images/s", flush=True)
    return rates


def bench_s3(args, data):
    """bench_s3.py's nostall run (core 0, 1 prep thread) from local disk, from
    SeaweedFS directly and through the 20 ms proxy (server and proxy on
    core 1): images/s, and the I/O thread's CPU per image."""
    import boto3
    import bench_s3 as s3
    work = tempfile.mkdtemp(prefix="nostall-bench-ab-s3-")
    server = s3.Server(work)
    modes = ("local", "direct", "+20 ms")
    rates = {(m, b): [] for m in modes for b in ("old", "new")}
    io = {(m, b): [] for m in modes for b in ("old", "new")}
    proxy = None
    try:
        client = boto3.client("s3", endpoint_url=server.url, aws_access_key_id=s3.KEY,
                              aws_secret_access_key=s3.SECRET, region_name="us-east-1")
        server.wait_for_bucket(client)
        for f in sorted(Path(data).rglob("*.jpg")):
            client.put_object(Bucket=s3.BUCKET, Key="train/" + str(f.relative_to(data)), Body=f.read_bytes())
        proxy, slow = s3.start_proxy(server.url, 20)
        base = [sys.executable, str(HERE / "bench_s3.py"), "--images", str(args.images), "--child", "nostall",
                "--path"]
        runs = {"local": (base + [str(data)], server.url),
                "direct": (base + [f"s3://{s3.BUCKET}/train/"], server.url),
                "+20 ms": (base + [f"s3://{s3.BUCKET}/train/"], slow)}
        for r in range(args.rounds):
            for build in order(r):
                for mode, (cmd, endpoint) in runs.items():
                    env = dict(env_for(build, args.old), AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID=s3.KEY,
                               AWS_SECRET_ACCESS_KEY=s3.SECRET, AWS_REGION="us-east-1")
                    out = run_json(cmd, env)
                    rates[(mode, build)].append(out["images"] / out["seconds"])
                    st = (out.get("stats") or {}).get("storage") or {}
                    read = (out.get("stats") or {}).get("images_read", out["images"])
                    io[(mode, build)].append(st.get("io_cpu_s", 0) / max(1, read))
                    print(f"s3 round {r} {build} {mode}: {rates[(mode, build)][-1]:.0f} images/s, I/O thread "
                          f"{io[(mode, build)][-1] * 1e3:.3f} ms/image", flush=True)
    finally:
        if proxy is not None:
            proxy.terminate()
        server.stop()
    return rates, io


def bench_cluster(args, data):
    import bench_cluster as bc
    ns = argparse.Namespace(data=data, images=args.images, nodes=4, epochs=5, batch=64, fraction=0.25,
                            bandwidth=10e6, latency_ms=2.0, work="/tmp/nostall-bench-ab-cluster")
    seconds = {("cluster", "old"): [], ("cluster", "new"): [], ("local", "old"): [], ("local", "new"): []}
    saved = os.environ.get("PYTHONPATH")
    try:
        for r in range(args.rounds):
            for build in order(r):
                if build == "old":
                    os.environ["PYTHONPATH"] = args.old
                else:
                    os.environ.pop("PYTHONPATH", None)
                for mode in ("cluster", "local"):
                    epochs, _ = bc.run_mode(ns, mode, 0.25, tag=f"-{build}-{r}")
                    s = sum(e["seconds"] for e in epochs[1:])
                    seconds[(mode, build)].append(s)
                    print(f"cluster round {r} {build} {mode}: epochs 2-5 {s:.2f} s, hit "
                          f"{100 * epochs[-1]['byte_hit_rate']:.1f}%", flush=True)
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
    return seconds


def bench_parquet(args, data):
    """bench_parquet.py's nostall child on two local layouts of the same images."""
    from nostall.datasets import folder_to_parquet
    work = Path(tempfile.mkdtemp(prefix="nostall-bench-ab-parquet-"))
    layouts = {f"parquet, row groups of {rows}": folder_to_parquet(data, work / f"rg{rows}", files=4,
                                                                    row_group_size=rows)
               for rows in (100, 1000)}
    rates = {(k, b): [] for k in layouts for b in ("old", "new")}
    for r in range(args.rounds):
        for build in order(r):
            for name, path in layouts.items():
                cmd = [sys.executable, str(HERE / "bench_parquet.py"), "--images", str(args.images),
                       "--child", "nostall", "--path", path]
                out = run_json(cmd, env_for(build, args.old))
                rates[(name, build)].append(out["images"] / out["seconds"])
                print(f"parquet round {r} {build} {name}: {rates[(name, build)][-1]:.0f} images/s", flush=True)
    return rates


def bench_audio(args):
    """bench_audio.py's nostall child: 1 s clips, and 3 s crops of long files."""
    import bench_audio as ba
    clips, longs = ba.make_data(HERE.parent / "bench_data" / "audio", 8)
    rates = {(k, b): [] for k in ("clips", "long") for b in ("old", "new")}
    for r in range(args.rounds):
        for build in order(r):
            for kind, root in (("clips", clips), ("long", longs)):
                cmd = [sys.executable, str(HERE / "bench_audio.py"), "--epochs", "2", "--child", "nostall",
                       kind, str(root)]
                out = run_json(cmd, env_for(build, args.old))
                rates[(kind, build)].append(out["rate"])
                print(f"audio round {r} {build} {kind}: {out['rate']:.0f} samples/s", flush=True)
    return rates


def bench_detection(args):
    """bench_detection.py's nostall child: SSD's recipe with masks."""
    root = HERE.parent / "bench_data" / "detection"
    ann = root / "instances.json"
    if not ann.exists() or len(json.loads(ann.read_text())["images"]) != 400:
        from nostall.datasets import make_detection_scenes
        make_detection_scenes(root, num_images=400, seed=0, min_side=480, max_side=640)
    rates = {"old": [], "new": []}
    for r in range(args.rounds):
        for build in order(r):
            cmd = [sys.executable, str(HERE / "bench_detection.py"), "--epochs", "2", "--masks", "--child",
                   "nostall", str(root / "images"), str(ann)]
            rates[build].append(run_json(cmd, env_for(build, args.old))["rate"])
            print(f"detection round {r} {build}: {rates[build][-1]:.0f} images/s", flush=True)
    return rates


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", required=True, help="folder holding the other build's nostall package")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--which", default="loader,s3,cluster")
    ap.add_argument("--data", default=str(HERE.parent / "bench_data" / "imagenet-like"))
    args = ap.parse_args()
    from nostall.datasets import make_imagenet_like
    data = str(make_imagenet_like(args.data, num_images=args.images))
    for f in Path(data).rglob("*.jpg"):
        f.read_bytes()
    med = statistics.median
    lines = [f"| bench | old | new | new / old |", "|---|---:|---:|---:|"]
    which = args.which.split(",")
    if "loader" in which:
        r = bench_loader(args, data)
        lines.append(f"| loader, images/s | {med(r['old']):.0f} | {med(r['new']):.0f} | "
                     f"{med(r['new']) / med(r['old']):.3f} |")
    if "s3" in which:
        r, io = bench_s3(args, data)
        for mode in ("local", "direct", "+20 ms"):
            o, n = med(r[(mode, "old")]), med(r[(mode, "new")])
            lines.append(f"| {mode}, images/s | {o:.0f} | {n:.0f} | {n / o:.3f} |")
        for mode in ("direct", "+20 ms"):
            o, n = med(io[(mode, "old")]) * 1e3, med(io[(mode, "new")]) * 1e3
            lines.append(f"| {mode}, I/O thread CPU ms/image | {o:.3f} | {n:.3f} | {n / o:.3f} |")
        for build in ("old", "new"):
            lines.append(f"| {build}: +20 ms / local | | | "
                         f"{med(r[('+20 ms', build)]) / med(r[('local', build)]):.3f} |")
    if "cluster" in which:
        r = bench_cluster(args, data)
        for mode, what in (("cluster", "cluster cache 4 x 25%"), ("local", "MinIO caches 25%")):
            o, n = med(r[(mode, "old")]), med(r[(mode, "new")])
            lines.append(f"| 4 nodes, {what}: epochs 2-5, s | {o:.2f} | {n:.2f} | {n / o:.3f} |")
    if "parquet" in which:
        r = bench_parquet(args, data)
        for name in sorted({k for k, _ in r}, key=lambda k: int(k.rsplit(" ", 1)[1])):
            o, n = med(r[(name, "old")]), med(r[(name, "new")])
            lines.append(f"| {name}, images/s | {o:.0f} | {n:.0f} | {n / o:.3f} |")
    if "audio" in which:
        r = bench_audio(args)
        for kind, what in (("clips", "audio, 1 s FLAC clips"), ("long", "audio, 3 s crops of 10-30 s files")):
            o, n = med(r[(kind, "old")]), med(r[(kind, "new")])
            lines.append(f"| {what}, samples/s | {o:.0f} | {n:.0f} | {n / o:.3f} |")
    if "detection" in which:
        r = bench_detection(args)
        lines.append(f"| detection, SSD recipe + masks, images/s | {med(r['old']):.0f} | {med(r['new']):.0f} | "
                     f"{med(r['new']) / med(r['old']):.3f} |")
    print(f"\nmedians of {args.rounds} rounds, old and new alternating\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
