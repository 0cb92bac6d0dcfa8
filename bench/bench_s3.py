"""nostall reading from S3 vs from local disk vs torch's DataLoader + boto3.

    make bench-s3      # or: .venv/bin/python bench/bench_s3.py [--rounds 3]

Puts the `make bench` image set (ImageNet-like JPEGs) into a real S3 server
on loopback (SeaweedFS's S3 gateway, `weed server -s3`), then, alternating in
rounds, runs one epoch of RandomResizedCrop(224) + flip + Normalize, batch
256, through
  - nostall from local disk (page cache warm),
  - nostall from s3:// directly, and through tests/tools/latency_proxy.py adding
    0, 20 and 50 ms to every request (reads in flight left to adapt),
  - nostall from the same images as 8 tar shards, local and on S3 at +20 and
    +50 ms, in an exact shuffle and with shard_shuffle=True (shards in order),
  - torch's DataLoader fetching each object with boto3 through the 20 ms
    proxy (what users write today), with as many workers as nostall has
    threads, and with 16.
This machine has 2 cores and the S3 server and the proxy cost CPU per GET,
so the server and the proxy are pinned to core 1 and every loader, local or
remote, to core 0 (nostall: 1 prep thread; torch: workers on that core).
Reports median images/s, the ratios the S3 issue's bars name, and CPU spent
on networking per image (the S3 client's I/O thread). Writes the table to
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from report import write_block

ROOT = Path(__file__).resolve().parent.parent
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
KEY, SECRET, BUCKET = "benchkey", "benchsecret", "bench"
LOADER_CORE, SERVER_CORE = 0, 1


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def weed_port():
    """A port that is free, and so is port + 10000 (SeaweedFS's gRPC port)."""
    import random
    while True:
        p = random.randrange(20000, 30000)
        try:
            for q in (p, p + 10000):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", q))
            return p
        except OSError:
            continue


# ----------------------------------------------------------------- children

def run_nostall(path, images, shard_shuffle=False):
    import nostall

    extra = {"shard_shuffle": True} if shard_shuffle else {}
    loader = nostall.Loader(path, batch_size=256, shuffle=True, seed=0, num_threads=1, **extra,
                            transforms=[nostall.RandomResizedCrop(224), nostall.RandomHorizontalFlip(),
                                        nostall.Normalize(MEAN, STD)])
    t0 = time.perf_counter()
    n = 0
    for _, labels in loader:  # the first epoch: connections made, reads in flight sized
        n += len(labels)
    first = n / (time.perf_counter() - t0)
    loader.set_epoch(1)
    t0 = time.perf_counter()
    n = 0
    for _, labels in loader:  # a steady epoch (the pipeline ran on into it)
        n += len(labels)
    stats = loader.stats()
    stats["first_epoch_rate"] = first
    stats["images_read"] = stats["samples"]  # both epochs: what the CPU figures cover
    return n, time.perf_counter() - t0, stats


def run_torch(path, images, workers):
    import boto3
    import torch
    from bench_loader import PilImageFolder

    torch.set_num_threads(1)

    class S3Folder(torch.utils.data.Dataset):
        def __init__(self):
            self.keys = sorted(o["Key"] for page in boto3.client("s3").get_paginator(
                "list_objects_v2").paginate(Bucket=BUCKET, Prefix="train/") for o in page.get("Contents", []))
            self.keys = self.keys[:images]
            self.classes = sorted({k.split("/")[1] for k in self.keys})
            self.prep = PilImageFolder.__new__(PilImageFolder)  # its transform only
            self.prep.mean = torch.tensor(MEAN).view(3, 1, 1)
            self.prep.std = torch.tensor(STD).view(3, 1, 1)
            self.client = None

        def __len__(self):
            return len(self.keys)

        def __getitem__(self, i):
            if self.client is None:
                self.client = boto3.client("s3")
            import io
            from PIL import Image
            body = self.client.get_object(Bucket=BUCKET, Key=self.keys[i])["Body"].read()
            img = Image.open(io.BytesIO(body)).convert("RGB")
            return self.prep.transform(img), self.classes.index(self.keys[i].split("/")[1])

    loader = torch.utils.data.DataLoader(S3Folder(), batch_size=256, shuffle=True, num_workers=workers)
    t0 = time.perf_counter()
    n = 0
    for _, labels in loader:
        n += len(labels)
    return n, time.perf_counter() - t0, None


def child(args):
    os.sched_setaffinity(0, {LOADER_CORE})
    if args.child == "nostall":
        n, secs, stats = run_nostall(args.path, args.images, args.shard_shuffle)
    else:
        n, secs, stats = run_torch(args.path, args.images, args.workers)
    import resource
    ru = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    cpu = sum(r.ru_utime + r.ru_stime for r in ru)
    print(json.dumps({"images": n, "seconds": secs, "cpu_s": cpu, "stats": stats}))


# ----------------------------------------------------------------- parent

class Server:
    """SeaweedFS (master, volume, filer, S3 gateway) on loopback, pinned."""

    def __init__(self, workdir):
        cfg = Path(workdir) / "s3.json"
        cfg.write_text(json.dumps({"identities": [{"name": "bench", "credentials": [
            {"accessKey": KEY, "secretKey": SECRET}], "actions": ["Admin", "Read", "Write", "List"]}]}))
        self.port = weed_port()
        weed = Path(sys.executable).parent / "weed"
        ports = [weed_port() for _ in range(6)]
        # (Every listener on a port of its own: the Iceberg and Lance catalogs
        # and IAM default to fixed ports, which a second SeaweedFS would take.)
        self.proc = subprocess.Popen(
            ["taskset", "-c", str(SERVER_CORE), str(weed), "server", "-s3", "-ip=127.0.0.1",
             "-ip.bind=127.0.0.1", f"-dir={workdir}", f"-s3.config={cfg}", f"-s3.port={self.port}",
             f"-master.port={ports[0]}", f"-volume.port={ports[1]}", f"-filer.port={ports[2]}",
             f"-s3.port.iceberg={ports[3]}", f"-s3.port.lance={ports[4]}", f"-iam.port={ports[5]}"],
            stdout=subprocess.DEVNULL, stderr=open(Path(workdir) / "weed.log", "w"))
        self.log = Path(workdir) / "weed.log"
        self.url = f"http://127.0.0.1:{self.port}"

    def wait_for_bucket(self, client):
        deadline = time.monotonic() + 90
        while True:
            try:
                client.create_bucket(Bucket=BUCKET)
                return
            except Exception:  # the gateway answers before the filer is ready
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("SeaweedFS did not start:\n" + self.log.read_text()[-2000:])
                time.sleep(1)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def start_proxy(upstream, latency_ms):
    tool = ROOT / "tests" / "tools" / "latency_proxy.py"
    proc = subprocess.Popen(["taskset", "-c", str(SERVER_CORE), sys.executable, str(tool),
                             "--upstream", upstream, "--latency-ms", str(latency_ms)],
                            stdout=subprocess.PIPE, text=True)
    port = int(proc.stdout.readline().split()[1])
    return proc, f"http://127.0.0.1:{port}"


def measure(cmd, endpoint):
    env = dict(os.environ, AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID=KEY,
               AWS_SECRET_ACCESS_KEY=SECRET, AWS_REGION="us-east-1")
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(ROOT / "bench_data" / "imagenet-like"))
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--torch-images", type=int, default=512,
                    help="objects the (slow) torch+boto3 runs read")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--write", default=str(ROOT / "docs" / "benchmarks.md"))
    ap.add_argument("--child", choices=["nostall", "torch"], help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    ap.add_argument("--workers", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--shard-shuffle", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--only", help="run only the runs whose names hold one of these (comma-separated) words")
    args = ap.parse_args()
    if args.child:
        return child(args)
    if (os.cpu_count() or 1) < 2:
        sys.exit("bench_s3 needs 2 cores: one for the loaders, one for the server and proxy")

    import boto3
    from nostall.datasets import folder_to_shards, make_imagenet_like

    data = Path(make_imagenet_like(args.data, num_images=args.images))
    files = sorted(p for p in data.rglob("*.jpg"))
    work = tempfile.mkdtemp(prefix="nostall-bench-s3-")
    server = Server(work)
    proxies = []
    try:
        client = boto3.client("s3", endpoint_url=server.url, aws_access_key_id=KEY,
                              aws_secret_access_key=SECRET, region_name="us-east-1")
        server.wait_for_bucket(client)
        print(f"uploading {len(files)} JPEGs to SeaweedFS ...", flush=True)
        for f in files:
            client.put_object(Bucket=BUCKET, Key="train/" + str(f.relative_to(data)), Body=f.read_bytes())
        # The same images as 8 tar shards (WebDataset), local and on S3:
        # one ranged read covers many images.
        shard_dir = Path(work) / "shards"
        pattern = Path(folder_to_shards(data, shard_dir, shards=8))
        for t in sorted(shard_dir.glob("*.tar")):
            client.put_object(Bucket=BUCKET, Key="shards/" + t.name, Body=t.read_bytes())
            t.read_bytes()
        for f in files:
            f.read_bytes()  # warm the page cache for the local runs
        endpoints = {0: server.url}
        for ms in (0, 20, 50):
            proc, url = start_proxy(server.url, ms)
            proxies.append(proc)
            endpoints[f"proxy {ms}"] = url
        me = [sys.executable, __file__, "--images", str(args.images)]
        s3 = f"s3://{BUCKET}/train/"
        runs = {
            "nostall local": (me + ["--child", "nostall", "--path", str(data)], server.url),
            "nostall s3 direct": (me + ["--child", "nostall", "--path", s3], server.url),
            "nostall s3 +0 ms": (me + ["--child", "nostall", "--path", s3], endpoints["proxy 0"]),
            "nostall s3 +20 ms": (me + ["--child", "nostall", "--path", s3], endpoints["proxy 20"]),
            "nostall s3 +50 ms": (me + ["--child", "nostall", "--path", s3], endpoints["proxy 50"]),
            "nostall shards local": (me + ["--child", "nostall", "--path", str(pattern)], server.url),
            "nostall shards s3 +20 ms": (me + ["--child", "nostall", "--path", f"s3://{BUCKET}/shards/{pattern.name}"],
                                         endpoints["proxy 20"]),
            "nostall shards s3 +50 ms": (me + ["--child", "nostall", "--path", f"s3://{BUCKET}/shards/{pattern.name}"],
                                         endpoints["proxy 50"]),
            "nostall shards local, shard_shuffle": (me + ["--child", "nostall", "--path", str(pattern),
                                                         "--shard-shuffle"], server.url),
            "nostall shards s3 +20 ms, shard_shuffle": (
                me + ["--child", "nostall", "--path", f"s3://{BUCKET}/shards/{pattern.name}", "--shard-shuffle"],
                endpoints["proxy 20"]),
            "nostall shards s3 +50 ms, shard_shuffle": (
                me + ["--child", "nostall", "--path", f"s3://{BUCKET}/shards/{pattern.name}", "--shard-shuffle"],
                endpoints["proxy 50"]),
            "torch+boto3 1 worker direct": (
                [sys.executable, __file__, "--images", str(args.torch_images), "--child", "torch",
                 "--workers", "1"], server.url),
            "torch+boto3 1 worker +20 ms": (
                [sys.executable, __file__, "--images", str(args.torch_images), "--child", "torch",
                 "--workers", "1"], endpoints["proxy 20"]),
            "torch+boto3 16 workers +20 ms": (
                [sys.executable, __file__, "--images", str(args.torch_images), "--child", "torch",
                 "--workers", "16"], endpoints["proxy 20"]),
        }
        if args.only:  # (a look at some runs: the table is then not written)
            runs = {k: v for k, v in runs.items() if k == "nostall local" or any(w in k for w in args.only.split(","))}
            args.write = ""
        results = {k: [] for k in runs}
        for r in range(args.rounds):
            for name, (cmd, endpoint) in runs.items():
                out = measure(cmd, endpoint)
                rate = out["images"] / out["seconds"]
                st = (out.get("stats") or {}).get("storage") or {}
                first = (out.get("stats") or {}).get("first_epoch_rate", rate)
                read = (out.get("stats") or {}).get("images_read", out["images"])
                results[name].append({"rate": rate, "first": first, "cpu": out["cpu_s"] / read,
                                      "io_cpu": st.get("io_cpu_s", 0) / read,
                                      "peak": st.get("peak_in_flight", 0),
                                      "p50": st.get("latency_p50_s", 0)})
                print(f"round {r + 1}: {name:30s} {rate:8.1f} images/s"
                      + (f"  peak in flight {st['peak_in_flight']}, p50 {st['latency_p50_s'] * 1e3:.1f} ms"
                         if st else ""), flush=True)
    finally:
        for p in proxies:
            p.terminate()
        server.stop()
        subprocess.run(["rm", "-rf", work])

    if args.only:
        for k, v in results.items():
            print(f"{k:45s} {statistics.median(x['rate'] for x in v):7.0f} images/s  "
                  f"networking {statistics.median(x['io_cpu'] for x in v) * 1e3:.3f} ms/image")
        return 0
    med = {k: statistics.median(x["rate"] for x in v) for k, v in results.items()}
    first = {k: statistics.median(x["first"] for x in v) for k, v in results.items()}
    cpu = {k: statistics.median(x["cpu"] for x in v) for k, v in results.items()}
    io = {k: statistics.median(x["io_cpu"] for x in v) for k, v in results.items()}
    peak = {k: statistics.median(x["peak"] for x in v) for k, v in results.items()}
    local = med["nostall local"]
    lines = [f"{len(files)} JPEGs; loaders pinned to core {LOADER_CORE} (nostall: 1 prep thread), "
             f"SeaweedFS + proxy to core {SERVER_CORE}; batch 256; median of {args.rounds} rounds "
             f"(`make bench-s3`)", "",
             "nostall: images/s of its second epoch (steady), and of its first (from a cold start: "
             "connections made, reads in flight sized); torch: one epoch of "
             f"{args.torch_images} objects. CPU per image counts the whole process, start-up included.", "",
             "| run | images/s | vs local | first epoch | CPU ms/image | networking CPU ms/image | peak reads in flight |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for k in runs:
        lines.append(f"| {k} | {med[k]:.0f} | {med[k] / local:.2f} | {first[k]:.0f} | {cpu[k] * 1e3:.2f} | "
                     f"{io[k] * 1e3:.3f} | {peak[k]:.0f} |")
    lines += ["",
              f"- first epochs: +20 ms / local {first['nostall s3 +20 ms'] / first['nostall local']:.2f}, "
              f"+50 ms / local {first['nostall s3 +50 ms'] / first['nostall local']:.2f}, "
              f"+50 ms / +0 ms {first['nostall s3 +50 ms'] / first['nostall s3 +0 ms']:.2f}",
              f"- S3 +20 ms / local: {med['nostall s3 +20 ms'] / local:.2f}; "
              f"+50 ms / local: {med['nostall s3 +50 ms'] / local:.2f}",
              f"- tar shards (8 of them): S3 +20 ms / local shards "
              f"{med['nostall shards s3 +20 ms'] / med['nostall shards local']:.2f}, +50 ms / local shards "
              f"{med['nostall shards s3 +50 ms'] / med['nostall shards local']:.2f}; local shards / local folder "
              f"{med['nostall shards local'] / local:.2f}; with shard_shuffle (a shard's members read in "
              f"order): +20 ms / local {med['nostall shards s3 +20 ms, shard_shuffle'] / med['nostall shards local, shard_shuffle']:.2f}, "
              f"+50 ms / local {med['nostall shards s3 +50 ms, shard_shuffle'] / med['nostall shards local, shard_shuffle']:.2f}",
              f"- latency hidden: +20 ms / +0 ms {med['nostall s3 +20 ms'] / med['nostall s3 +0 ms']:.2f}; "
              f"+50 ms / +0 ms {med['nostall s3 +50 ms'] / med['nostall s3 +0 ms']:.2f}",
              f"- vs torch+boto3 at +20 ms: {med['nostall s3 +20 ms'] / med['torch+boto3 1 worker +20 ms']:.1f}x "
              f"(1 worker), {med['nostall s3 +20 ms'] / med['torch+boto3 16 workers +20 ms']:.1f}x (16 workers); "
              f"direct, 1 thread vs 1 worker: "
              f"{med['nostall s3 direct'] / med['torch+boto3 1 worker direct']:.1f}x",
              f"- the proxy's own ceiling: +0 ms through it / direct "
              f"{med['nostall s3 +0 ms'] / med['nostall s3 direct']:.2f}"]
    text = "\n".join(lines)
    print(text)
    write_block(args.write, "bench_s3", text)


if __name__ == "__main__":
    sys.exit(main())
