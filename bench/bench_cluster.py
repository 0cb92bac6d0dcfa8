"""The cluster cache: 4 nodes, each with its own memcached, reading slow storage.

    .venv/bin/python bench/bench_cluster.py          # or: make bench-cluster

On this machine the 4 "nodes" are 4 loader processes (RANK 0-3 of
WORLD_SIZE 4, as torchrun sets them), each with its own memcached on
loopback, reading the same generated ImageNet-like JPEGs through the storage
throttle (a slow shared disk or object store, per node). Each mode runs
EPOCHS epochs on all 4 nodes at once:

  none     no cache: every epoch reads the whole dataset from storage
  local    a node-local MinIO cache of FRACTION of the dataset on each node
  cluster  the partitioned cluster cache: each node may insert FRACTION of
           the dataset into the memcached servers (4 x FRACTION in all)
  memory   the whole dataset in memory on every node from epoch 2 (here the
           nodes share one MinIO cache of it, filled in epoch 1): the
           all-in-memory epoch time the cluster cache is held to
  pagecache  no cache, no throttle: the files in the OS page cache (read
           with a system call and a copy each, as from a peer's socket)
  kill     cluster, with one memcached SIGKILLed in epoch KILL_EPOCH

Reported per epoch: byte hit rate (all nodes), bytes read from storage,
epoch time (the slowest node's: data-parallel training waits for it), the
longest wait for a batch. Every epoch is checked: every sample exactly once
across the nodes. Alternating rounds, medians.

On real nodes, run the same script per node (one process per node, its
memcached from `nostall cache serve`), then `report`:

    RANK=r WORLD_SIZE=N python bench/bench_cluster.py node --data /data/train \\
        --mode cluster --servers n1:11211,n2:11211,... --fraction 0.25 --out node-r.json
    python bench/bench_cluster.py report node-*.json
"""

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

from report import write_block

ROOT = Path(__file__).resolve().parent.parent
MEMCACHED = shutil.which("memcached") or "/usr/bin/memcached"


def dataset_bytes(data):
    return sum(p.stat().st_size for p in Path(data).rglob("*.jpg"))


def node(args):
    """One node: its epochs, as JSON."""
    import nostall

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    total = dataset_bytes(args.data)
    if args.mode == "cluster":
        # Each node may insert its part of the cluster's cache; the cluster
        # holds FRACTION x D in all (FRACTION 0.25 x 4 nodes = the dataset).
        cache = nostall.Cache("bench-cluster", size=int(args.fraction * total),
                              servers=args.servers.split(","))
    elif args.mode == "local":
        cache = nostall.Cache(f"bench-cluster-local-{os.getpid()}", size=int(args.fraction * total))
    elif args.mode == "memory":
        # The whole dataset in memory on every node: here the 4 nodes share
        # one MinIO cache of it, filled by epoch 1 (each node reads its part).
        cache = nostall.Cache("bench-cluster-memory", size=int(1.2 * total) + (16 << 20))
    else:
        cache = None
    if args.mode == "pagecache":  # the files in the page cache, read without a throttle
        args.bandwidth, args.latency_ms = 0, 0
    loader = nostall.Loader(args.data, batch_size=args.batch, shuffle=True, seed=1,
                            transforms=[nostall.RandomResizedCrop(224),
                                        nostall.RandomHorizontalFlip(),
                                        nostall.Normalize(nostall.IMAGENET_MEAN,
                                                          nostall.IMAGENET_STD)],
                            output="numpy",
                            return_indices=True, cache=cache, num_threads=1,
                            source_options={"throttle_bandwidth": args.bandwidth,
                                            "throttle_latency_ms": args.latency_ms})
    out = {"rank": rank, "world": world, "mode": args.mode, "epochs": []}
    try:
        for epoch in range(args.epochs):
            loader.set_epoch(epoch)
            seen, longest = [], 0.0
            t0 = t = time.perf_counter()
            for k, (_, _, idx) in enumerate(loader):
                longest = max(longest, time.perf_counter() - t)
                seen += idx.tolist()
                if k == 0 and args.marker:
                    Path(f"{args.marker}.epoch{epoch}").touch()
                t = time.perf_counter()
            out["epochs"].append({"epoch": epoch, "seconds": time.perf_counter() - t0,
                                  "max_wait_s": longest, "indices": seen})
        stats = loader.stats()
        if cache is not None:
            by_epoch = {e["epoch"]: e for e in stats["cache"]["epochs"]}
            for e in out["epochs"]:
                c = by_epoch.get(e["epoch"], {})
                e["hit_bytes"] = c.get("hit_bytes", 0)
                e["miss_bytes"] = c.get("miss_bytes", 0)
                e["errors"] = c.get("errors", 0)
            out["tiers"] = stats["cache"]["tiers"]
    finally:
        loader.close()
        if args.mode == "local":
            cache.remove()  # (the shared memory-mode cache is removed by the orchestrator)
    with open(args.out, "w") as f:
        json.dump(out, f)


class Memcached:
    def __init__(self, megabytes):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc = subprocess.Popen([MEMCACHED, "-l", "127.0.0.1", "-p", str(self.port), "-U", "0",
                                      "-M", "-m", str(megabytes), "-t", "1", "-u", "nobody"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("memcached did not start")
                time.sleep(0.02)
        self.address = f"127.0.0.1:{self.port}"

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()


def stats_bytes(address):
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=2) as s:
        s.sendall(b"stats\r\n")
        buf = b""
        while not buf.endswith(b"END\r\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    for line in buf.decode().splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] == "bytes":
            return int(parts[2])
    return 0


def run_mode(args, mode, fraction, kill_epoch=None, tag=""):
    """Runs the 4 nodes; returns their results (and the killed server's share)."""
    total = dataset_bytes(args.data)
    servers = []
    if mode in ("cluster", "kill"):
        # Room for each server's share of the cluster's cache, with slack for
        # memcached's slabs and an uneven hash (the loaders' budgets bound what is cached).
        mb = int(1.6 * fraction * total / 2**20) + 16
        servers = [Memcached(mb) for _ in range(args.nodes)]
    import nostall

    if mode == "memory":
        try:  # a run that was cut short may have left it
            nostall.Cache("bench-cluster-memory", 1).remove()
        except Exception:  # noqa: BLE001
            pass
    work = Path(args.work) / f"{mode}{tag}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    env = dict(os.environ, WORLD_SIZE=str(args.nodes))
    procs = []
    share = None
    try:
        for rank in range(args.nodes):
            cmd = [sys.executable, __file__, "node", "--data", args.data,
                   "--mode", "cluster" if mode == "kill" else mode, "--fraction", str(fraction),
                   "--epochs", str(args.epochs), "--batch", str(args.batch),
                   "--bandwidth", str(args.bandwidth), "--latency-ms", str(args.latency_ms),
                   "--out", str(work / f"node{rank}.json"), "--marker", str(work / f"node{rank}"),
                   "--servers", ",".join(s.address for s in servers)]
            procs.append(subprocess.Popen(cmd, env=dict(env, RANK=str(rank))))
        if kill_epoch is not None:
            marker = work / f"node0.epoch{kill_epoch}"
            while not marker.exists():
                if procs[0].poll() is not None:
                    raise RuntimeError("node 0 stopped before the kill")
                time.sleep(0.005)
            held = [stats_bytes(s.address) for s in servers]
            share = held[-1] / max(1, sum(held))
            servers[-1].kill()
        for p in procs:
            if p.wait(timeout=900) != 0:
                raise RuntimeError(f"a {mode} node failed")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for s in servers:
            s.kill()
        if mode == "memory":
            nostall.Cache("bench-cluster-memory", 1).remove()
    results = [json.loads((work / f"node{r}.json").read_text()) for r in range(args.nodes)]
    return summarize(results, total), share


def summarize(results, total):
    """Per epoch over all nodes: byte hit rate, storage bytes, slowest node's time, longest wait."""
    n_items = None
    epochs = []
    for e in range(len(results[0]["epochs"])):
        rows = [r["epochs"][e] for r in results]
        everyone = sorted(i for row in rows for i in row["indices"])
        n_items = n_items or len(everyone)
        once = everyone == list(range(len(everyone)))
        hit = sum(row.get("hit_bytes", 0) for row in rows)
        miss = sum(row.get("miss_bytes", 0) for row in rows)
        epochs.append({"epoch": e, "once": once,
                       "byte_hit_rate": hit / (hit + miss) if hit + miss else 0.0,
                       "storage_bytes": miss if hit + miss else total,
                       "seconds": max(row["seconds"] for row in rows),
                       "max_wait_s": max(row["max_wait_s"] for row in rows),
                       "errors": sum(row.get("errors", 0) for row in rows)})
    return epochs


def report(args):
    results = [json.loads(Path(p).read_text()) for p in args.files]
    for e in summarize(results, 0):
        print(f"epoch {e['epoch']}: byte hit rate {100 * e['byte_hit_rate']:.1f}%, "
              f"{e['storage_bytes'] / 1e6:.1f} MB from storage, {e['seconds']:.2f} s "
              f"(slowest node), longest wait {e['max_wait_s'] * 1e3:.0f} ms, "
              f"every sample once: {e['once']}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd")
    n = sub.add_parser("node", help="run one node (RANK/WORLD_SIZE from the environment)")
    n.add_argument("--data", required=True)
    n.add_argument("--mode", choices=["none", "local", "cluster", "memory", "pagecache"],
                   required=True)
    n.add_argument("--servers", default="")
    n.add_argument("--fraction", type=float, default=0.25,
                   help="cache per node as a fraction of the dataset")
    n.add_argument("--epochs", type=int, default=5)
    n.add_argument("--batch", type=int, default=64)
    n.add_argument("--bandwidth", type=float, default=0, help="storage throttle, bytes/s per node")
    n.add_argument("--latency-ms", type=float, default=0)
    n.add_argument("--out", required=True)
    n.add_argument("--marker", default="")
    r = sub.add_parser("report", help="per-epoch figures from the nodes' JSON files")
    r.add_argument("files", nargs="+")
    ap.add_argument("--data", default=str(ROOT / "bench_data" / "imagenet-like"))
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--fraction", type=float, default=0.25)
    ap.add_argument("--bandwidth", type=float, default=10e6, help="storage throttle per node, bytes/s")
    ap.add_argument("--latency-ms", type=float, default=2.0)
    ap.add_argument("--kill-epoch", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--work", default="/tmp/nostall-bench-cluster")
    ap.add_argument("--write", default=str(ROOT / "docs" / "benchmarks.md"))
    args = ap.parse_args()
    if args.cmd == "node":
        return node(args)
    if args.cmd == "report":
        return report(args)
    orchestrate(args)


def orchestrate(args):
    from nostall.datasets import make_imagenet_like

    args.data = str(make_imagenet_like(args.data, num_images=args.images))
    total = dataset_bytes(args.data)
    print(f"{args.images} items, {total / 1e6:.1f} MB; {args.nodes} nodes, storage "
          f"{args.bandwidth / 1e6:.0f} MB/s + {args.latency_ms:g} ms per node", flush=True)
    modes = ["none", "local", "cluster", "memory", "pagecache", "kill"]
    runs = {m: [] for m in modes}
    shares = []
    half = {}
    for rnd in range(args.rounds):
        for m in modes:
            epochs, share = run_mode(args, m, args.fraction,
                                     kill_epoch=args.kill_epoch if m == "kill" else None,
                                     tag=f"-{rnd}")
            runs[m].append(epochs)
            if share is not None:
                shares.append(share)
            print(f"round {rnd} {m}: " + ", ".join(
                f"e{e['epoch']} {100 * e['byte_hit_rate']:.1f}% {e['seconds']:.2f}s"
                for e in epochs), flush=True)
        if rnd == 0:
            # Half the dataset across the cluster: the hit rate is min(1, sum C / D).
            half["cluster"], _ = run_mode(args, "cluster", args.fraction / 2, tag="-half")
            half["local"], _ = run_mode(args, "local", args.fraction / 2, tag="-half")
    write_report(args, total, runs, shares, half)


def med(values):
    return statistics.median(values)


def write_report(args, total, runs, shares, half):
    E = args.epochs
    ep = lambda m, e, k: med([r[e][k] for r in runs[m]])  # noqa: E731
    sum_c = args.fraction * args.nodes
    lines = [f"Dataset {args.images} ImageNet-like JPEGs, {total / 1e6:.0f} MB; {args.nodes} nodes "
             f"(loader processes, RANK 0-{args.nodes - 1}, 1 prep thread each, RandomResizedCrop 224 + "
             f"flip + normalize, batch "
             f"{args.batch}) on this 2-core machine, storage throttled to "
             f"{args.bandwidth / 1e6:.0f} MB/s + {args.latency_ms:g} ms per node; "
             f"cache per node {100 * args.fraction:.0f}% of the dataset "
             f"(cluster: sum C / D = {sum_c:.2f}); medians of {args.rounds} alternating rounds.",
             "",
             "| mode | " + " | ".join(f"epoch {e + 1}: hit / storage MB / s" for e in range(E)) + " |",
             "|---|" + "---:|" * E]
    for m in ("none", "local", "cluster", "memory", "pagecache", "kill"):
        cells = [f"{100 * ep(m, e, 'byte_hit_rate'):.1f}% / {ep(m, e, 'storage_bytes') / 1e6:.0f} / "
                 f"{ep(m, e, 'seconds'):.2f}" for e in range(E)]
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    lines.append("")
    steady = range(1, E)
    cl_hit = med([r[e]["byte_hit_rate"] for r in runs["cluster"] for e in steady])
    cl_bytes = max(r[e]["storage_bytes"] for r in runs["cluster"] for e in range(2, E))
    cl_time = med([r[e]["seconds"] for r in runs["cluster"] for e in range(2, E)])
    mem_time = med([r[e]["seconds"] for r in runs["memory"] for e in range(2, E)])
    page_time = med([r[e]["seconds"] for r in runs["pagecache"] for e in range(2, E)])
    loc_hit = med([r[e]["byte_hit_rate"] for r in runs["local"] for e in steady])
    none_time = med([r[e]["seconds"] for r in runs["none"] for e in steady])
    k = args.kill_epoch
    before = med([r[k - 1]["byte_hit_rate"] for r in runs["kill"]])
    after = med([r[k + 1]["byte_hit_rate"] for r in runs["kill"]]) if k + 1 < E else float("nan")
    drop_ok = all(r[k - 1]["byte_hit_rate"] - r[k + 1]["byte_hit_rate"] <= s + 0.01
                  for r, s in zip(runs["kill"], shares)) if k + 1 < E else False
    once = all(e["once"] for m in runs for r in runs[m] for e in r)
    kill_wait = max(r[k]["max_wait_s"] for r in runs["kill"])
    half_hit = [e["byte_hit_rate"] for e in half["cluster"][1:]]
    lines += [
        f"- Partitioned, sum C / D = {sum_c:.2f}: byte hit rate from epoch 2 {100 * cl_hit:.1f}% "
        f"(bar: min(1, sum C / D) = {100 * min(1, sum_c):.0f}% +- 1 pt); node-local "
        f"{100 * args.fraction:.0f}% each: {100 * loc_hit:.1f}%.",
        f"- Half of that (sum C / D = {sum_c / 2:.2f}): cluster "
        + " / ".join(f"{100 * h:.1f}%" for h in half_hit)
        + f" from epoch 2 (bar {100 * min(1, sum_c / 2):.0f}% +- 1 pt); node-local "
        + " / ".join(f"{100 * e['byte_hit_rate']:.1f}%" for e in half["local"][1:]) + ".",
        f"- Storage bytes read from epoch 3 on (cluster, every round): {cl_bytes / 1e6:.1f} MB "
        f"(bar 0 with sum C >= D; epoch 2 may still read what epoch 1's last inserts had not "
        f"stored when it began).",
        f"- Epoch time from epoch 3: cluster {cl_time:.2f} s, all in memory {mem_time:.2f} s: "
        f"{cl_time / mem_time:.2f}x (bar <= 1.1x); the files in the page cache, no throttle "
        f"{page_time:.2f} s: {cl_time / page_time:.2f}x; no cache {none_time:.2f} s "
        f"({none_time / cl_time:.1f}x the cluster's).",
        f"- One of {args.nodes} servers SIGKILLed in epoch {k + 1}: it held "
        + " / ".join(f"{100 * s:.1f}%" for s in shares)
        + f" of the cached bytes; hit rate epoch {k} {100 * before:.1f}% -> epoch {k + 2} "
        f"{100 * after:.1f}% (drop within its share + 1 pt in every round: {drop_ok}); longest "
        f"wait in the kill epoch {kill_wait * 1e3:.0f} ms (bar < 1 s); every sample exactly once "
        f"in every epoch of every run: {once}.",
        "",
        "Command: `make bench-cluster` (= `.venv/bin/python bench/bench_cluster.py`).",
        ""]
    text = "\n".join(lines)
    print(text)
    write_block(args.write, "bench-cluster", "## Cluster cache (memcached), 4 nodes\n\n" + text)


if __name__ == "__main__":
    main()
