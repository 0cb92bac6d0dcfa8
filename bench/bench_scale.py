"""Start time and private memory per process at the sizes real datasets have.

    python bench/bench_scale.py [--items 1281000] [--procs 1,8] [--kinds folder,shards]
                                [--data DIR]

Datasets, made once under --data and reused:
- an image folder of N items in 1,000 class folders, every file a hard link
  to one of a few hundred small JPEGs (so 10M items cost inodes, not bytes);
- WebDataset tar shards of N tiny samples (a 16x16 JPEG + .cls), 10,000 per
  shard; above 2M items, 16 shards are written and the rest are hard links
  to them (10M samples are 1,000 shards of 2.5 KB a sample: 25 GB written
  out, 400 MB linked), each a shard of its own to nostall.

For each kind: one process builds the index (cold: no index anywhere, its
time is the walk or the shards read), then P processes at once start from
the saved index. Tar shards also start cold with first_epoch="buffered"
(each shard indexed as the first epoch reads it; its memory is measured
while the rest are still being indexed). Each process times `Loader(...)` to its first batch and
reads its private memory (Private_Clean + Private_Dirty of
/proc/self/smaps_rollup) and its anonymous memory (Anonymous:) after it; the same measured on a 1,000-item
dataset of the kind, with as many processes at once, gives the per-item
cost: (private - private at 1,000) / (N - 1,000). Batch 64, Resize(16, 16), 1 prep thread per process.
"""
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

CLASSES = 1000


def small_jpegs(count=16):
    import numpy as np
    from PIL import Image

    out = []
    for k in range(count):
        px = np.full((16, 16, 3), (k * 16) % 256, np.uint8)
        buf = io.BytesIO()
        Image.fromarray(px).save(buf, format="JPEG", quality=80)
        out.append(buf.getvalue())
    return out


def make_folder(root, n):
    done = root / f".done-{n}"
    if done.exists():
        return str(root)
    root.mkdir(parents=True, exist_ok=True)
    bases = []
    # (A file takes at most 65,000 links on ext4: enough files to link to.)
    for k, data in enumerate(small_jpegs(max(16, n // 50_000 + 1))):
        p = root / f".base{k}.jpg"
        p.write_bytes(data)
        bases.append(p)
    per = -(-n // CLASSES)
    made = 0
    for c in range(CLASSES):
        d = root / f"n{c:08d}"
        d.mkdir(exist_ok=True)
        for i in range(min(per, n - made)):
            target = d / f"img_{c:04d}_{i:06d}.jpg"
            if not target.exists():
                os.link(bases[(c + i) % len(bases)], target)
        made += min(per, n - made)
        if c % 100 == 99:
            print(f"  folder: {made:,} of {n:,} files", file=sys.stderr, flush=True)
    done.write_text("ok")
    return str(root)


def make_shards(root, n, per_shard=10000):
    shards = -(-n // per_shard)
    pattern = str(root / ("train-{0000..%04d}.tar" % (shards - 1)))
    done = root / f".done-{n}"
    if done.exists():
        return pattern
    root.mkdir(parents=True, exist_ok=True)
    jpegs = small_jpegs()
    linked = 16 if n > 2_000_000 else shards  # shards written; the rest link to them
    for s in range(shards):
        full = n - s * per_shard >= per_shard
        if s >= linked and full:
            path = root / f"train-{s:04d}.tar"
            if not path.exists():
                os.link(root / f"train-{s % linked:04d}.tar", path)
            continue
        with tarfile.open(root / f"train-{s:04d}.tar", "w") as tar:
            for i in range(min(per_shard, n - s * per_shard)):
                k = s * per_shard + i
                for ext, data in (("jpg", jpegs[k % len(jpegs)]), ("cls", str(k % CLASSES).encode())):
                    info = tarfile.TarInfo(f"s{s:04d}/{i:06d}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        if s % 20 == 19:
            print(f"  shards: {min(n, (s + 1) * per_shard):,} of {n:,} samples", file=sys.stderr,
                  flush=True)
    done.write_text("ok")
    return pattern


def memory():
    """(private, anonymous) bytes of this process: private = Private_Clean +
    Private_Dirty (what it alone maps, file pages included), anonymous = its
    own memory that no file backs."""
    private = anon = 0
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                private += int(line.split()[1]) * 1024
            elif line.startswith("Anonymous:"):
                anon += int(line.split()[1]) * 1024
    return private, anon


def child(path, first_epoch="auto"):
    import nostall

    t0 = time.perf_counter()
    loader = nostall.Loader(path, batch_size=64, transforms=[nostall.Resize((16, 16))],
                            num_threads=1, output="numpy", first_epoch=first_epoch)
    next(iter(loader))
    seconds = time.perf_counter() - t0
    # Every process measures while all of them hold the dataset open (a
    # page mapped by one process alone counts as its private memory).
    print("ready", flush=True)
    sys.stdin.readline()
    private, anon = memory()
    buffered = loader.index_origin.startswith("being indexed")  # (still indexing: not waited for)
    items = -1 if buffered else loader.num_items
    print(json.dumps({"seconds": seconds, "private": private, "anon": anon, "items": items}),
          flush=True)
    sys.stdin.readline()


def run(path, procs, cache_dir, first_epoch="auto"):
    env = dict(os.environ, NOSTALL_CACHE_DIR=str(cache_dir))
    ps = [subprocess.Popen([sys.executable, __file__, "--child", path, "--first-epoch", first_epoch],
                           stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True, env=env) for _ in range(procs)]

    def line(p):
        text = p.stdout.readline()
        if not text:
            p.wait()
            raise SystemExit(f"a child failed on {path}")
        return text

    for p in ps:
        assert line(p).strip() == "ready"
    for p in ps:
        p.stdin.write("go\n")
        p.stdin.flush()
    out = [json.loads(line(p)) for p in ps]
    for p in ps:
        p.stdin.close()
        p.wait()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--items", type=int, default=1_281_000)
    ap.add_argument("--procs", default="1,8")
    ap.add_argument("--kinds", default="folder,shards")
    ap.add_argument("--data", default="/tmp/nostall-scale")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--first-epoch", default="auto", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.first_epoch)
        return
    data = Path(args.data)
    rows = []
    for kind in args.kinds.split(","):
        make = make_folder if kind == "folder" else make_shards
        print(f"{kind}: making {args.items:,} items (once)", file=sys.stderr, flush=True)
        big = make(data / f"{kind}-{args.items}", args.items)
        small = make(data / f"{kind}-1000", 1000)
        with tempfile.TemporaryDirectory() as cache:
            # Pages of the libraries that only one process maps count as its
            # private memory: the baseline runs as many processes at once.
            def base(procs):
                run(small, 1, cache)  # its index saved
                small_runs = run(small, procs, cache)
                return {m: statistics.median(r[m] for r in small_runs) for m in ("private", "anon")}

            def row(start, procs, runs):
                mem = {m: statistics.median(r[m] for r in runs) for m in ("private", "anon")}
                rows.append((kind, start, procs, statistics.median(r["seconds"] for r in runs), mem,
                             base(procs)))

            if kind == "shards":  # the first epoch buffered: shards indexed as it reads them
                with tempfile.TemporaryDirectory() as fresh:
                    row("cold, first_epoch=\"buffered\"", 1, run(big, 1, fresh, "buffered"))
            row("cold (no index)", 1, run(big, 1, cache))  # builds and saves the index
            for procs in (int(p) for p in args.procs.split(",")):
                row("index saved", procs, run(big, procs, cache))
    print(f"\n{args.items:,} items; medians over the processes started at once. private: what "
          "the process alone maps (a file mapped by one process only counts here); anonymous: "
          "its own memory, no file behind it\n")
    print("| dataset | start | processes | first batch, s | private MiB | private B/item "
          "| anonymous MiB | anonymous B/item |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for kind, start, procs, seconds, mem, base in rows:
        per = {m: (mem[m] - base[m]) / max(1, args.items - 1000) for m in mem}
        print(f"| {kind} | {start} | {procs} | {seconds:.2f} | {mem['private'] / 2**20:.0f} | "
              f"{per['private']:.0f} | {mem['anon'] / 2**20:.0f} | {per['anon']:.0f} |")


if __name__ == "__main__":
    main()
