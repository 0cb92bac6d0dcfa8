"""make bench-trace: how right `nostall analyze --trace` is.

For each case: a training loop runs under torch.profiler (a fresh process,
its own trace, marked with nostall.trace.mark: no hints are given to the
analysis); the trace is analysed and a change predicted; the loop with that
change made runs for real, under the profiler too, once before and once
after the traced loop, and the prediction is compared with their mean step
(each the mean of the profiled steps, so the profiler's own cost is in
both). Alternating rounds; medians of the errors. Every loop is pinned to
the same cores.

  python bench/bench_trace.py [--rounds 3] [--images 640] [--data DIR]
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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
BATCH = 32

# (name, model, base loop, changed loop, the prediction's arguments)
CASES = [
    ("DataLoader 0 workers -> nostall", "conv", {"loader": "dl", "workers": 0},
     {"loader": "nostall"}, {"loader": "nostall"}),
    ("DataLoader 1 worker -> nostall", "conv", {"loader": "dl", "workers": 1},
     {"loader": "nostall"}, {"loader": "nostall"}),
    ("DataLoader 2 workers -> nostall", "conv", {"loader": "dl", "workers": 2},
     {"loader": "nostall"}, {"loader": "nostall"}),
    ("DataLoader 0 workers -> synthetic batches", "mlp", {"loader": "dl", "workers": 0},
     {"loader": "synthetic"}, {"loader": "free"}),
    ("loader 2x faster (2 workers, 8 -> 4 ms a sample)", "mlp",
     {"loader": "slow", "workers": 2, "sleep_ms": 8}, {"loader": "slow", "workers": 2, "sleep_ms": 4},
     {"loader_speedup": 2}),
    ("loader 2x slower (0 workers, 1 -> 2 ms a sample)", "transformer",
     {"loader": "slow", "workers": 0, "sleep_ms": 1}, {"loader": "slow", "workers": 0, "sleep_ms": 2},
     {"loader_speedup": 0.5}),
    ("optimizer foreach=False -> True", "deep_mlp", {"loader": "synthetic", "foreach": False},
     {"loader": "synthetic", "foreach": True}, {"fused_optimizer": True}),
    ("step threads 1 -> 2", "conv", {"loader": "synthetic", "threads": 1},
     {"loader": "synthetic", "threads": 2}, {"threads": 2}),
    ("step threads 2 -> 1 (traced on 2)", "conv", {"loader": "synthetic", "threads": 2},
     {"loader": "synthetic", "threads": 1}, {"threads": 1}),
    ("GRU, Python-heavy samples: DataLoader 1 worker -> synthetic", "gru",
     {"loader": "python", "workers": 1}, {"loader": "synthetic"}, {"loader": "free"}),
    ("GRU, Python-heavy samples: DataLoader 0 workers -> synthetic", "gru",
     {"loader": "python", "workers": 0}, {"loader": "synthetic"}, {"loader": "free"}),
    ("audio 1-D conv net, waveforms made per sample: DataLoader 1 worker -> synthetic", "audio",
     {"loader": "audio", "workers": 1}, {"loader": "synthetic"}, {"loader": "free"}),
    ("detection (SSD-style heads): DataLoader 2 workers -> nostall", "detect",
     {"loader": "dl", "workers": 2}, {"loader": "nostall"}, {"loader": "nostall"}),
    ("transformer on 2 threads: DataLoader 1 worker -> synthetic", "transformer",
     {"loader": "dl", "workers": 1, "threads": 2}, {"loader": "synthetic", "threads": 2},
     {"loader": "free"}),
]

# The inputs a model takes, per sample (images otherwise: 3 x 224 x 224).
SHAPES = {"gru": (40, 32), "audio": (1, 16000)}


# ------------------------------------------------------------------ the loop

def make_model(kind):
    import torch
    from torch import nn

    if kind == "conv":
        return nn.Sequential(
            nn.Conv2d(3, 16, 5, stride=4), nn.ReLU(), nn.Conv2d(16, 32, 3, stride=2), nn.ReLU(),
            nn.Conv2d(32, 64, 3, stride=2), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
            nn.Linear(64, 10))
    if kind == "mlp":
        return nn.Sequential(nn.AvgPool2d(4), nn.Flatten(), nn.Linear(3 * 56 * 56, 256), nn.ReLU(),
                             nn.Linear(256, 10))
    if kind == "deep_mlp":  # many small parameters: the optimizer's per-parameter cost shows
        layers = [nn.AvgPool2d(8), nn.Flatten(), nn.Linear(3 * 28 * 28, 64)]
        for _ in range(40):
            layers += [nn.ReLU(), nn.Linear(64, 64)]
        return nn.Sequential(*layers, nn.Linear(64, 10))
    if kind == "gru":  # a recurrent model over sequences
        class Gru(nn.Module):
            def __init__(self):
                super().__init__()
                self.rnn = nn.GRU(32, 128, batch_first=True, num_layers=2)
                self.head = nn.Linear(128, 10)

            def forward(self, x):
                return self.head(self.rnn(x)[0][:, -1])
        return Gru()
    if kind == "audio":  # M5-style 1-D convolutions over a 1 s waveform
        return nn.Sequential(
            nn.Conv1d(1, 32, 80, stride=16), nn.BatchNorm1d(32), nn.ReLU(), nn.MaxPool1d(4),
            nn.Conv1d(32, 32, 3), nn.BatchNorm1d(32), nn.ReLU(), nn.MaxPool1d(4),
            nn.Conv1d(32, 64, 3), nn.BatchNorm1d(64), nn.ReLU(), nn.AdaptiveAvgPool1d(1),
            nn.Flatten(), nn.Linear(64, 10))
    if kind == "detect":  # a backbone and SSD-style class and box heads
        class Ssd(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = nn.Sequential(
                    nn.Conv2d(3, 16, 5, stride=4), nn.ReLU(), nn.Conv2d(16, 32, 3, stride=2), nn.ReLU(),
                    nn.Conv2d(32, 64, 3, stride=2), nn.ReLU())
                self.cls = nn.Conv2d(64, 6 * 10, 3, padding=1)
                self.box = nn.Conv2d(64, 6 * 4, 3, padding=1)

            def forward(self, x):
                f = self.body(x)
                return self.cls(f), self.box(f)
        return Ssd()
    if kind == "transformer":
        class Tiny(nn.Module):
            def __init__(self):
                super().__init__()
                self.patch = nn.Conv2d(3, 64, 16, stride=16)
                layer = nn.TransformerEncoderLayer(64, 4, 128, batch_first=True)
                self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
                self.head = nn.Linear(64, 10)

            def forward(self, x):
                t = self.patch(x).flatten(2).transpose(1, 2)
                return self.head(self.enc(t).mean(1))
        return Tiny()
    raise ValueError(kind)


def loss_of(kind, out, y):
    import torch
    import torch.nn.functional as F

    if kind != "detect":
        return F.cross_entropy(out, y)
    cls, box = out  # each anchor of each cell: class y, box a fixed target
    n, _, h, w = cls.shape
    labels = y.view(n, 1, 1, 1).expand(n, 6, h, w).reshape(-1)
    logits = cls.view(n, 6, 10, h, w).permute(0, 1, 3, 4, 2).reshape(-1, 10)
    return F.cross_entropy(logits, labels) + F.smooth_l1_loss(box, torch.full_like(box, 0.5))


class PythonDataset:
    """Sequences made in Python, item by item (a tokenizer's or a parser's
    work): the GIL-bound loader that DataLoader workers exist for."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import torch

        steps, dim = SHAPES["gru"]
        for attempt in range(8):  # (a parser's retries: the same work again)
            rows, s = [], i + attempt
            for _ in range(steps):
                row = []
                for _ in range(dim):
                    s = (s * 1103515245 + 12345) % 2147483648
                    row.append((s % 1000) / 500.0 - 1.0)
                rows.append(row)
        for _ in range(6):  # the parsing that has no tensor to show for it
            rows = [[v * 0.5 + 0.25 for v in r] for r in rows]
        return torch.tensor(rows), i % 10


class WaveDataset:
    """1 s of 16 kHz audio made per item with torch ops: a chirp, noise,
    a random gain and a pre-emphasis, as a feature pipeline would."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import torch

        g = torch.Generator().manual_seed(i)
        t = torch.arange(SHAPES["audio"][1]) / 16000.0
        f0 = 100 + 400 * torch.rand(1, generator=g)
        x = torch.sin(2 * torch.pi * f0 * t * (1 + t)) + 0.1 * torch.randn(t.shape, generator=g)
        for _ in range(8):  # filters of a front end
            x = torch.cat([x[:1], x[1:] - 0.97 * x[:-1]])
        spec = torch.fft.rfft(x)
        x = torch.fft.irfft(spec * (torch.arange(spec.shape[0]) < 3000), n=t.shape[0])
        return (x * (0.5 + torch.rand(1, generator=g))).unsqueeze(0), i % 10


class SlowDataset:
    """A dataset whose items cost `sleep_ms` each (storage latency, say)."""

    def __init__(self, n, sleep_ms):
        import torch

        self.n, self.sleep = n, sleep_ms / 1e3
        self.x = torch.randn(3, 224, 224)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import torch

        time.sleep(self.sleep)
        return self.x, i % 10


def nostall_loader(data):
    import nostall

    return nostall.Loader(data, batch_size=BATCH, shuffle=True, seed=0, num_threads=2,
                          transforms=[nostall.RandomResizedCrop(224), nostall.RandomHorizontalFlip(),
                                      nostall.Normalize(MEAN, STD)])


def batches(cfg, data):
    """An endless stream of (images, labels) for the loop's configuration."""
    import torch

    kind = cfg["loader"]
    if kind == "synthetic":
        x = torch.randn((BATCH,) + SHAPES.get(cfg.get("model"), (3, 224, 224)))
        y = torch.randint(0, 10, (BATCH,))
        while True:
            yield x, y
    if kind == "nostall":
        loader = nostall_loader(data)
        epoch = 0
        while True:
            loader.set_epoch(epoch)
            yield from loader
            epoch += 1
    if kind == "dl":
        from bench_loader import PilImageFolder
        ds = PilImageFolder(data)
    elif kind == "python":
        ds = PythonDataset(100_000)
    elif kind == "audio":
        ds = WaveDataset(100_000)
    else:
        ds = SlowDataset(100_000, cfg["sleep_ms"])
    workers = cfg.get("workers", 0)
    loader = torch.utils.data.DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=workers,
                                         persistent_workers=workers > 0)
    batches.loader = loader  # what nostall.trace.mark writes of it
    while True:
        yield from loader


def child(spec):
    import torch

    cfg, model_kind, out = spec["cfg"], spec["model"], spec["out"]
    torch.manual_seed(0)
    torch.set_num_threads(cfg.get("threads", 1))
    model = make_model(model_kind)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9,
                          foreach=cfg.get("foreach", False))
    import nostall.trace

    stream = batches(dict(cfg, model=model_kind), spec["data"])
    for _ in range(3):  # warm-up: workers started, first allocations
        x, y = next(stream)
        loss = loss_of(model_kind, model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    schedule = torch.profiler.schedule(wait=1, warmup=2, active=16, repeat=1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=schedule,
                                on_trace_ready=lambda p: p.export_chrome_trace(out)) as prof:
        # What the trace cannot show: the loop's threads, the loader's workers.
        nostall.trace.mark(prof, loader=getattr(batches, "loader", None))
        for _ in range(19):
            x, y = next(stream)
            loss = loss_of(model_kind, model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            prof.step()
    os._exit(0)  # DataLoader workers and nostall's threads: no teardown to time


def run(model, cfg, data, out, cores):
    spec = {"model": model, "cfg": cfg, "data": str(data), "out": str(out)}
    cmd = ["taskset", "-c", cores, sys.executable, __file__, "--child", json.dumps(spec)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return out


# ------------------------------------------------------------------ a big trace

def big_trace(path, megabytes):
    """A trace of about `megabytes`: steps of a GPU loop as Kineto writes
    them (nested ATen operators, launches with correlation ids, kernels on
    two streams, a synchronisation), written as a stream."""
    import random

    rnd = random.Random(0)
    with open(path, "w") as f:
        f.write('{"schemaVersion": 1, "traceEvents": [\n')
        t, corr, step, first = 1e6, 0, 0, True
        while f.tell() < megabytes * 1e6:
            events = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}",
                       "pid": 1, "tid": 1, "ts": t, "dur": 20000.0}]
            cur, gpu = t + 10, t + 50
            for k in range(400):
                events.append({"ph": "X", "cat": "cpu_op", "name": f"aten::op{k % 37}", "pid": 1,
                               "tid": 1, "ts": cur, "dur": 30.0,
                               "args": {"External id": corr, "Sequence number": k}})
                corr += 1
                events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                               "pid": 1, "tid": 1, "ts": cur + 5, "dur": 8.0,
                               "args": {"correlation": corr, "cbid": 211}})
                dur = rnd.uniform(5, 40)
                events.append({"ph": "X", "cat": "kernel", "name": f"kernel_{k % 53}_sm90_gemm",
                               "pid": 0, "tid": 7 + k % 2, "ts": max(gpu, cur + 10), "dur": dur,
                               "args": {"correlation": corr, "stream": 7 + k % 2, "device": 0,
                                        "grid": [128, 1, 1], "block": [256, 1, 1]}})
                gpu = max(gpu, cur + 10) + dur
                cur += 40
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize",
                           "pid": 1, "tid": 1, "ts": cur, "dur": max(1.0, gpu - cur),
                           "args": {"correlation": corr + 1}})
            corr += 2
            for e in events:
                f.write(("" if first else ",\n") + json.dumps(e))
                first = False
            t = max(cur, gpu) + 100
            step += 1
        f.write("\n]}\n")
    return step


def bench_big(megabytes, tmp):
    path = tmp / "big.json"
    steps = big_trace(path, megabytes)
    size = path.stat().st_size
    code = ("import nostall, resource, time, sys\n"
            "t0 = time.perf_counter()\n"
            f"t = nostall.analyze_trace({str(path)!r})\n"
            "t1 = time.perf_counter()\n"
            "p = t.predict(gpu_speedup=2)\n"
            "t2 = time.perf_counter()\n"
            "rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024\n"
            "print(f'{t1 - t0:.1f} {t2 - t1:.1f} {rss:.0f} {t.facts[\"events\"]}')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    read_s, predict_s, rss_mb, events = out.stdout.split()
    print(f"| {size / 1e6:.0f} MB, {int(events):,} events, {steps:,} steps | read + graph + traced "
          f"split {read_s} s | one prediction {predict_s} s | peak RSS {rss_mb} MB |")


# ------------------------------------------------------------------ the bench

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--images", type=int, default=1000,
                    help="images generated (enough that no loop crosses an epoch: the steady state)")
    ap.add_argument("--data", default=None, help="image folder (made if missing)")
    ap.add_argument("--cores", default="0,1", help="taskset cores for every loop")
    ap.add_argument("--cases", default=None, help="comma-separated case numbers (1-based)")
    ap.add_argument("--big", type=float, default=None, metavar="MB",
                    help="only time the analysis of a generated trace of this many MB")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(json.loads(args.child))
    if args.big:
        return bench_big(args.big, Path(tempfile.mkdtemp(prefix="nostall-bench-trace-big-")))

    import nostall
    from nostall.datasets import make_imagenet_like

    tmp = Path(tempfile.mkdtemp(prefix="nostall-bench-trace-"))
    data = Path(args.data) if args.data else tmp / "data"
    make_imagenet_like(data, num_images=args.images)
    cases = list(enumerate(CASES, 1))
    if args.cases:
        keep = {int(c) for c in args.cases.split(",")}
        cases = [(i, c) for i, c in cases if i in keep]
    os.sched_setaffinity(0, {int(c) for c in args.cores.split(",")})
    results = {i: [] for i, _ in cases}
    for r in range(args.rounds):
        for i, (name, model, base, changed, change) in cases if r % 2 == 0 else cases[::-1]:
            # The change run for real before and after the traced loop, and
            # compared with their mean: the machine's speed drifts.
            b = run(model, changed, data, tmp / f"b{i}.json", args.cores)
            a = run(model, base, data, tmp / f"a{i}.json", args.cores)
            b2 = run(model, changed, data, tmp / f"c{i}.json", args.cores)
            # No hints: the threads come from the trace (nostall.trace.mark in the loop).
            if change.get("loader") == "nostall":  # nostall's pipeline measured beside this loop
                ta = nostall.analyze_trace(a, spec=nostall_loader(data), progress=False)
            else:
                ta = nostall.analyze_trace(a)
            assert ta.threads_source == "trace", ta.threads_source
            pred = ta.predict(**change)
            reals = [nostall.analyze_trace(x) for x in (b, b2)]
            real_s = statistics.mean(r.step_s for r in reals)
            err = pred["step_s"] / real_s - 1
            results[i].append({"traced": ta.step_s, "predicted": pred["step_s"],
                               "real": real_s, "error": err, "real_runs": [r.step_s for r in reals],
                               "critical": pred["critical"], "real_critical": reals[0].critical})
            print(f"round {r + 1} case {i} {name}: traced {ta.step_s * 1e3:.1f} ms, predicted "
                  f"{pred['step_s'] * 1e3:.1f}, real {' and '.join(f'{x.step_s * 1e3:.1f}' for x in reals)} "
                  f"({err:+.1%}); critical {pred['critical']} / {reals[0].critical}", flush=True)

    print("\n| change | model | traced ms | predicted ms | real ms | error (median) | "
          "worst | critical path predicted / real |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    errors = []
    for i, (name, model, *_rest) in cases:
        rs = results[i]
        med = lambda k: statistics.median(x[k] for x in rs)  # noqa: E731
        e = statistics.median(x["error"] for x in rs)
        worst = max((x["error"] for x in rs), key=abs)
        errors += [abs(x["error"]) for x in rs]
        crit = sorted({f"{x['critical']} / {x['real_critical']}" for x in rs})
        print(f"| {name} | {model} | {med('traced') * 1e3:.1f} | {med('predicted') * 1e3:.1f} | "
              f"{med('real') * 1e3:.1f} | {e:+.1%} | {worst:+.1%} | {', '.join(crit)} |")
    runs = [x for i, _ in cases for r in results[i] for x in [r["real_runs"]]]
    apart = max(max(x) / min(x) - 1 for x in runs)
    print(f"\nall cases, all rounds: median |error| {statistics.median(errors):.1%}, "
          f"worst {max(errors):.1%}; the same change run twice in a round differed by up to "
          f"{apart:.0%} (median {statistics.median(max(x) / min(x) - 1 for x in runs):.0%})")


if __name__ == "__main__":
    sys.exit(main())
