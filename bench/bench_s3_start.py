"""Time to the first batch, and bytes read before it, of tar shards on S3.

    make bench-s3-start   # or: .venv/bin/python bench/bench_s3_start.py [--sizes 1,8] [--rounds 3]

Writes WebDataset shards of 128 MB (ImageNet-like JPEGs of ~110 kB and a
.cls each) to a real S3 server on loopback (SeaweedFS's S3 gateway), 1 GB
and 8 GB of them under two prefixes, and reads them through
tests/tools/latency_proxy.py adding 20 ms to every request. For each size,
alternating in rounds, a fresh process times `nostall.Loader(...)` to its
first batch (batch 256, RandomResizedCrop(224)) and reads the client's
bytes and requests so far, starting
  - cold: no index anywhere (an empty index cache, no index object), as a
    loader starts by default (first_epoch="auto": buffered on S3, each shard
    indexed as the first epoch reads it);
  - cold, exact: the same with first_epoch="exact" (every shard indexed
    before the first batch, as before the buffered epoch existed);
  - beside: the index object beside the shards (`nostall index s3://...`),
    an empty index cache (a new node or container);
  - home cache: the node's own index cache holds the index, no object
    beside the shards.
Prints a markdown table of medians (docs/benchmarks.md keeps it).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_s3 import BUCKET, KEY, SECRET, Server, start_proxy  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SHARD_BYTES = 128 << 20


def jpegs(count=64):
    import numpy as np
    from PIL import Image

    from nostall.datasets import natural_image

    rng = np.random.default_rng(0)
    out = []
    for _ in range(count):
        buf = io.BytesIO()
        Image.fromarray(natural_image(rng, 500, 375)).save(buf, "JPEG", quality=92)
        out.append(buf.getvalue())
    return out


def make_shards(folder, gigabytes, images):
    """`gigabytes` GB of 128 MB shards in `folder`; returns their count."""
    shards = max(1, int(gigabytes * 1e9) // SHARD_BYTES)
    folder.mkdir(parents=True, exist_ok=True)
    k = 0
    for s in range(shards):
        path = folder / f"train-{s:04d}.tar"
        if path.exists():
            continue
        with tarfile.open(path, "w") as tar:
            size = 0
            while size < SHARD_BYTES:
                for ext, data in (("jpg", images[k % len(images)]), ("cls", str(k % 1000).encode())):
                    info = tarfile.TarInfo(f"s{s:04d}/{k:08d}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                    size += 512 + -(-len(data) // 512) * 512
                k += 1
    return shards


def child(uri, first_epoch):
    import nostall

    t0 = time.perf_counter()
    loader = nostall.Loader(uri, batch_size=256, num_threads=1, shuffle=True, first_epoch=first_epoch,
                            transforms=[nostall.RandomResizedCrop(224)])
    opened = loader.stats()["storage"]["bytes"]
    next(iter(loader))
    seconds = time.perf_counter() - t0
    storage = loader.stats()["storage"]
    print(json.dumps({"seconds": seconds, "bytes": storage["bytes"], "opened": opened, "requests": storage["requests"],
                      "origin": loader.index_origin.split(":")[0].split(";")[0]}))


def run(uri, endpoint, cache_dir, first_epoch="auto"):
    env = dict(os.environ, AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID=KEY,
               AWS_SECRET_ACCESS_KEY=SECRET, AWS_REGION="us-east-1", NOSTALL_CACHE_DIR=str(cache_dir),
               NOSTALL_QUIET="1")
    out = subprocess.run([sys.executable, __file__, "--child", uri, "--first-epoch", first_epoch],
                         env=env, capture_output=True,
                         text=True, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1,8", help="GB of shards, comma separated")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--latency-ms", type=float, default=20)
    ap.add_argument("--data", default="/tmp/nostall-s3-start")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--first-epoch", default="auto", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.first_epoch)
        return
    import boto3

    data = Path(args.data)
    sizes = [float(s) for s in args.sizes.split(",")]
    images = jpegs()
    counts = {}
    for gb in sizes:
        print(f"making {gb:g} GB of shards", file=sys.stderr, flush=True)
        counts[gb] = make_shards(data / f"{gb:g}gb", gb, images)
    with tempfile.TemporaryDirectory() as work:
        server = Server(work)
        proxy = None
        try:
            client = boto3.client("s3", endpoint_url=server.url, region_name="us-east-1",
                                  aws_access_key_id=KEY, aws_secret_access_key=SECRET)
            server.wait_for_bucket(client)
            uris = {}
            for gb in sizes:
                print(f"uploading {gb:g} GB", file=sys.stderr, flush=True)
                for s in range(counts[gb]):
                    client.upload_file(str(data / f"{gb:g}gb" / f"train-{s:04d}.tar"), BUCKET,
                                       f"{gb:g}gb/train-{s:04d}.tar")
                uris[gb] = f"s3://{BUCKET}/{gb:g}gb/train-{{0000..{counts[gb] - 1:04d}}}.tar"
            proxy, endpoint = start_proxy(server.url, args.latency_ms)
            rows = {}
            for r in range(args.rounds):
                for gb in sizes:
                    uri = uris[gb]
                    beside = uri.split(f"s3://{BUCKET}/", 1)[1] + ".nostall-index"
                    client.delete_object(Bucket=BUCKET, Key=beside)
                    home = Path(work) / f"home-{gb:g}-{r}"
                    cold = run(uri, endpoint, Path(work) / f"cold-{gb:g}-{r}")
                    exact = run(uri, endpoint, home, "exact")  # also fills `home`
                    env = dict(os.environ, AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID=KEY,
                               AWS_SECRET_ACCESS_KEY=SECRET, AWS_REGION="us-east-1",
                               NOSTALL_CACHE_DIR=str(Path(work) / f"indexer-{gb:g}-{r}"), NOSTALL_QUIET="1")
                    subprocess.run([str(Path(sys.executable).parent / "nostall"), "index", uri],
                                   env=env, check=True, capture_output=True)
                    beside_run = run(uri, endpoint, Path(work) / f"fresh-{gb:g}-{r}")
                    client.delete_object(Bucket=BUCKET, Key=beside)
                    cached = run(uri, endpoint, home)
                    for name, res in (("cold (buffered first epoch, the default)", cold),
                                      ("cold, first_epoch=\"exact\"", exact),
                                      ("index beside the shards", beside_run),
                                      ("index in the home cache only", cached)):
                        rows.setdefault((gb, name), []).append(res)
                    print(f"round {r + 1}: {gb:g} GB: cold {cold['seconds']:.2f} s, exact "
                          f"{exact['seconds']:.2f} s, beside "
                          f"{beside_run['seconds']:.2f} s, home cache {cached['seconds']:.2f} s",
                          file=sys.stderr, flush=True)
        finally:
            if proxy is not None:
                proxy.terminate()
            server.stop()
    print(f"\nTar shards of 128 MB on S3 (SeaweedFS) at {args.latency_ms:g} ms per request; "
          f"medians of {args.rounds} rounds\n")
    print("| shards | start | first batch, s | MB read opening | MB read by the first batch | "
          "requests | index from |")
    print("|---|---|---:|---:|---:|---:|---|")
    for (gb, name), res in rows.items():
        print(f"| {gb:g} GB ({counts[gb]} shards) | {name} | "
              f"{statistics.median(r['seconds'] for r in res):.2f} | "
              f"{statistics.median(r['opened'] for r in res) / 1e6:.1f} | "
              f"{statistics.median(r['bytes'] for r in res) / 1e6:.1f} | "
              f"{statistics.median(r['requests'] for r in res):.0f} | {res[0]['origin']} |")


if __name__ == "__main__":
    main()
