"""The autotuner against every static setting, situation by situation.

For each situation, on this machine's cores:

  prep        nothing but the loader: prep-bound
  cpu_step    a training step of fixed CPU work (torch matmuls, one thread) sharing the cores
  train_step  a real CPU training step: a small conv net, forward + backward + SGD on the
              batch, torch's own intra-op threads (every core): each prep thread competes
              with the step's threads
  compute     a step that waits (as on an accelerator) 100 ms per batch: few threads suffice
  latency     storage with 30 ms per read (the source's throttle)
  served      `nostall serve` and 3 consumers attached, each 100 ms per batch

it runs a grid of static settings (prep threads x reads in flight x prefetch,
autotune off), then the autotuner from two bad starts (1 thread / 1 read; all
cores / 64 reads) and from its default, and today's default without it (all
cores, 4 reads, prefetch 2). Rounds alternate; each figure is the median over
rounds. A static run's rate and CPU per image are taken after its first
seconds; an autotuned run's over its last seconds, and its convergence from
its per-batch times: the time after which every 2-second rate stays within 5%
of that final rate, and the reversals of each knob after it.

    .venv/bin/python bench/bench_autotune.py            # also: make bench-autotune
    .venv/bin/python bench/bench_autotune.py --rounds 1 --situations prep,compute
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

SITUATIONS = ("prep", "cpu_step", "train_step", "compute", "latency", "served")
BATCH = 64
STEP_MS = {"cpu_step": 70.0, "compute": 100.0, "served": 100.0}
LATENCY_MS = 30.0
CONSUMERS = 3


def spec_for(data, situation, setting):
    """The loader spec of one run: `setting` is static knobs, or an autotune start."""
    spec = {"source": str(data), "batch_size": BATCH, "shuffle": True, "seed": 1,
            "transforms": [{"type": "RandomResizedCrop", "size": [224, 224]},
                           {"type": "RandomHorizontalFlip"},
                           {"type": "Normalize", "mean": [0.485, 0.456, 0.406],
                            "std": [0.229, 0.224, 0.225]}]}
    if situation == "latency":
        spec["source"] = {"uri": str(data), "options": {"throttle_latency_ms": LATENCY_MS}}
    kind = setting["kind"]
    if kind == "static":
        spec.update(autotune="off", num_threads=setting["threads"],
                    reads_in_flight=setting["reads"], prefetch=setting["prefetch"])
    elif kind == "today":  # the defaults before the autotuner: all cores, 4 reads, 2 ahead
        spec.update(autotune="off")
    elif kind == "auto_low":
        spec.update(autotune="on", num_threads=1, reads_in_flight=1)
    elif kind == "auto_high":
        spec.update(autotune="on", num_threads=os.cpu_count(), reads_in_flight=64)
    # "auto": nothing set, the autotuner's own start
    return spec


def make_step(situation, reps_per_ms):
    if situation == "cpu_step":
        import torch
        torch.set_num_threads(1)
        a = torch.randn(256, 256)
        reps = max(1, int(reps_per_ms * STEP_MS[situation]))

        def step():
            for _ in range(reps):
                a @ a
        return step
    if situation == "train_step":
        return train_step()
    if situation in ("compute", "served"):
        return lambda: time.sleep(STEP_MS[situation] / 1000)
    return lambda: None


def train_step():
    """A small conv net trained on each batch (at a quarter of its size), with
    torch's default intra-op threads."""
    import numpy as np
    import torch
    from torch import nn

    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
                        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
                        nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    state = {}

    def step(images, labels):
        x = torch.nn.functional.avg_pool2d(torch.from_numpy(images), 2)
        y = torch.from_numpy(np.asarray(labels)) % 10
        opt.zero_grad()
        loss = nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        state["loss"] = float(loss.detach())
    step.takes_batch = True
    return step


def consume(loader, step, duration, measure_from):
    """Batches until `duration` s: per-batch times, and CPU from `measure_from` on."""
    times, cpu_at = [], None
    t0 = time.perf_counter()
    epoch = 0
    while True:
        loader.set_epoch(epoch)
        for images, labels in loader:
            now = time.perf_counter() - t0
            times.append((now, images.shape[0]))
            if cpu_at is None and now >= measure_from:
                cpu_at = (now, time.process_time(), sum(n for _, n in times))
            if now >= duration:
                return times, cpu_at, (now, time.process_time())
            if getattr(step, "takes_batch", False):
                step(images, labels)
            else:
                step()
        epoch += 1


def run_child(job):
    import nostall

    step = make_step(job["situation"], job["reps_per_ms"])
    if job.get("attach"):
        loader = nostall.Loader.attach(job["attach"], BATCH, output="numpy", wait=30)
    else:
        loader = nostall.Loader.from_spec(job["spec"], output="numpy")
    times, cpu_at, end = consume(loader, step, job["duration"], job["measure_from"])
    stats = loader.stats()
    loader.close()
    return {"times": times, "cpu_at": cpu_at, "end": end, "autotune": stats.get("autotune")}


def serve_child(job):
    """The served pipeline: a producer in this process; its CPU per image it
    produced while the consumers ran (from `measure_from` to `duration`)."""
    import nostall

    server = nostall.serve(job["spec"], job["name"], max_consumers=CONSUMERS, block=False,
                           verbose=False)
    t0 = time.perf_counter()
    marks = []
    for mark in (job["measure_from"] + 1, job["duration"]):  # consumers start ~1 s later
        while time.perf_counter() - t0 < mark:
            time.sleep(0.02)
        marks.append((time.perf_counter() - t0, time.process_time(),
                      server.status()["produced"] * BATCH))
    # Serving until every consumer is done (each runs `duration` from its
    # own start, which on a loaded machine can be seconds after this one's).
    stop = Path(job["stop_file"])
    while not stop.exists() and time.perf_counter() - t0 < job["duration"] + 120:
        time.sleep(0.05)
    out = {"cpu_ms_per_image": 1e3 * (marks[1][1] - marks[0][1]) / max(1, marks[1][2] - marks[0][2]),
           "autotune": server.status()["pipeline"].get("autotune")}
    server.close()
    return out


def launch(mode, job):
    return subprocess.Popen([sys.executable, __file__, mode, json.dumps(job)],
                            stdout=subprocess.PIPE, text=True)


def result_of(proc):
    out, _ = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"a run failed ({proc.returncode})")
    return json.loads(out.strip().splitlines()[-1])


def rate_between(times, a, b):
    n = sum(k for t, k in times if a < t <= b)
    return n / (b - a) if b > a else 0.0


def summarize(times, cpu_at, end, autotune, final_s):
    """Rate and CPU per image over the measured part; convergence for autotuned runs."""
    t_end = end[0]
    out = {}
    if final_s:  # autotuned: the final rate is that of the last `final_s` seconds
        t_from = t_end - final_s
        out["rate"] = rate_between(times, t_from, t_end)
        converged = 0.0
        t = 0.0
        while t + 2 <= t_from:
            if rate_between(times, t, t + 2) < 0.95 * out["rate"]:
                converged = t + 2
            t += 0.5
        out["converged_s"] = converged
        # After converging, per knob: changes undone ("taken back", "given
        # back": the tuner's reversals) and changes of direction (a probe
        # and its undoing count two).
        undone, turns, last_dir = {}, {}, {}
        for d in (autotune or {}).get("decisions", []):
            direction = 1 if d["to"] > d["from"] else -1
            late = d["time_s"] > converged
            if late and d["knob"] in last_dir and last_dir[d["knob"]] != direction:
                turns[d["knob"]] = turns.get(d["knob"], 0) + 1
            if late and ("taken back" in d["why"] or "given back" in d["why"]):
                undone[d["knob"]] = undone.get(d["knob"], 0) + 1
            last_dir[d["knob"]] = direction
        out["reversals"] = max(undone.values(), default=0)
        out["turns"] = max(turns.values(), default=0)
        out["decisions"] = (autotune or {}).get("decisions", [])
        out["setting"] = {k: (autotune or {}).get(k) for k in ("threads", "reads_in_flight", "prefetch")}
        out["changes"] = (autotune or {}).get("changes", 0)
    else:
        out["rate"] = rate_between(times, cpu_at[0], t_end)
    if cpu_at is not None:
        images = sum(k for t, k in times if cpu_at[0] < t <= t_end)
        out["cpu_ms_per_image"] = 1e3 * (end[1] - cpu_at[1]) / max(1, images)
    return out


_SERVED_RUNS = itertools.count()


def run_one(data, situation, setting, reps_per_ms, duration, measure_from, final_s, tmp):
    spec = spec_for(data, situation, setting)
    if situation != "served":
        job = {"situation": situation, "spec": spec, "reps_per_ms": reps_per_ms,
               "duration": duration, "measure_from": measure_from}
        r = result_of(launch("run", job))
        return summarize(r["times"], r["cpu_at"], r["end"], r["autotune"], final_s)
    name = f"bench-autotune-{os.getpid()}-{next(_SERVED_RUNS)}"  # a run's own segment and stop file
    stop_file = Path(tmp) / f"{name}.stop"
    server = launch("serve", {"spec": spec, "name": name, "duration": duration,
                              "measure_from": measure_from, "stop_file": str(stop_file)})
    while not Path(f"/dev/shm/nostall-shared-{os.geteuid()}-{name}").exists():
        if server.poll() is not None:
            raise RuntimeError("the server failed")
        time.sleep(0.05)
    consumers = [launch("run", {"situation": situation, "attach": name, "reps_per_ms": reps_per_ms,
                                "duration": duration, "measure_from": measure_from})
                 for _ in range(CONSUMERS)]
    try:
        results = [result_of(c) for c in consumers]
    finally:
        stop_file.touch()
    s = result_of(server)
    per = [summarize(r["times"], r["cpu_at"], r["end"], s["autotune"], final_s) for r in results]
    out = dict(per[0])
    out["rate"] = statistics.mean(p["rate"] for p in per)
    if final_s:
        out["converged_s"] = max(p["converged_s"] for p in per)
    out["cpu_ms_per_image"] = s["cpu_ms_per_image"]  # the producer's, per image it produced
    return out


def grid(situation, cores):
    threads = sorted({1, cores})
    reads = (16, 64, 128) if situation == "latency" else (1, 4) if situation == "train_step" else (4,)
    prefetch = ((2, 4) if situation in ("latency", "train_step") else (1, 2) if situation == "served"
                else (1, 2, 4))
    return [{"kind": "static", "threads": t, "reads": r, "prefetch": p}
            for t in threads for r in reads for p in prefetch]


def label(s):
    if s["kind"] == "static":
        return f"{s['threads']} thr / {s['reads']} reads / prefetch {s['prefetch']}"
    return {"today": "today's default (all cores, 4 reads, prefetch 2)",
            "auto": "autotune from its default", "auto_low": "autotune from 1 thread / 1 read",
            "auto_high": "autotune from all cores / 64 reads"}[s["kind"]]


def calibrate():
    import torch
    torch.set_num_threads(1)
    a = torch.randn(256, 256)
    t, k = time.perf_counter(), 0
    while time.perf_counter() - t < 1.0:
        a @ a
        k += 1
    return k / ((time.perf_counter() - t) * 1e3)


def main():
    if len(sys.argv) > 2 and sys.argv[1] in ("run", "serve"):
        job = json.loads(sys.argv[2])
        print(json.dumps(run_child(job) if sys.argv[1] == "run" else serve_child(job)))
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--images", type=int, default=1200)
    p.add_argument("--situations", default=",".join(SITUATIONS))
    p.add_argument("--static-s", type=float, default=5.0, help="length of a static run")
    p.add_argument("--auto-s", type=float, default=24.0, help="length of an autotuned run")
    p.add_argument("--write", default=str(ROOT / "docs" / "benchmarks.md"))
    p.add_argument("--json-out", default="", help="every run's figures and decisions, as JSON")
    args = p.parse_args()
    from nostall.datasets import make_imagenet_like
    from report import write_block

    cores = len(os.sched_getaffinity(0))
    data = Path(tempfile.gettempdir()) / f"nostall-bench-autotune-{args.images}"
    if not data.exists():
        make_imagenet_like(data, num_images=args.images, num_classes=10)
    reps_per_ms = calibrate()
    situations = [s for s in args.situations.split(",") if s]
    settings = {s: grid(s, cores) + [{"kind": k} for k in ("today", "auto", "auto_low", "auto_high")]
                for s in situations}
    results = {s: {label(x): [] for x in settings[s]} for s in situations}
    total = args.rounds * sum(len(v) for v in settings.values())
    done = 0
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for s in situations:
                order = settings[s] if r % 2 == 0 else list(reversed(settings[s]))
                for x in order:
                    auto = x["kind"].startswith("auto")
                    duration = args.auto_s if auto else args.static_s
                    res = run_one(data, s, x, reps_per_ms, duration,
                                  measure_from=1.5 if not auto else args.auto_s - 5,
                                  final_s=5 if auto else 0, tmp=tmp)
                    results[s][label(x)].append(res)
                    done += 1
                    print(f"[{done}/{total}] round {r + 1} {s:8s} {label(x):52s} "
                          f"{res['rate']:7.0f} img/s {res.get('cpu_ms_per_image', 0):5.2f} ms CPU/img"
                          + (f"  converged {res['converged_s']:.1f}s, setting {res['setting']}"
                             if auto else ""), file=sys.stderr, flush=True)
    report(results, situations, args, cores, write_block)


def med(runs, key):
    return statistics.median(r[key] for r in runs)


def report(results, situations, args, cores, write_block):
    lines = [
        "## Autotune: just enough, situation by situation (`bench/bench_autotune.py`)",
        "",
        f"{cores} cores; {args.images} ImageNet-like JPEGs; RandomResizedCrop 224 + flip + normalize "
        f"(float32), batch {BATCH}; medians of {args.rounds} alternating rounds. Static runs "
        f"{args.static_s:.0f} s (measured after 1.5 s), autotuned runs {args.auto_s:.0f} s (rate and "
        "CPU of the last 5 s). CPU per image: the whole process (training step included); served: "
        "the producer's. Situations: prep-bound (no step); cpu_step (70 ms of one-thread matmuls per "
        f"batch); train_step (a small conv net's forward + backward + SGD per batch, torch's own "
        f"threads); compute (100 ms wait per batch); latency ({LATENCY_MS:.0f} ms per read); served "
        f"(`nostall serve` + {CONSUMERS} consumers, 100 ms per batch each).",
        "",
        "| situation | best static | least-CPU static within 2% | today's default | autotune: default "
        "start | from 1 thr / 1 read | from all cores / 64 reads | converged in (s) | reversals (turns) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    summary = {}
    for s in situations:
        rs = results[s]
        static = {k: v for k, v in rs.items() if "thr /" in k}
        best_k = max(static, key=lambda k: med(static[k], "rate"))
        best = med(static[best_k], "rate")
        near = [k for k in static if med(static[k], "rate") >= 0.98 * best]
        least_k = min(near, key=lambda k: med(static[k], "cpu_ms_per_image"))

        def cell(k, ratio=True):
            rate, cpu = med(rs[k], "rate"), med(rs[k], "cpu_ms_per_image")
            return f"{rate:.0f} img/s, {cpu:.2f} ms" + (f" ({rate / best:.0%} of best)" if ratio else "")

        autos = ["autotune from its default", "autotune from 1 thread / 1 read",
                 "autotune from all cores / 64 reads"]
        conv = max(med(rs[k], "converged_s") for k in autos)
        rev = max(max(r["reversals"] for r in rs[k]) for k in autos)
        turns = max(max(r.get("turns", 0) for r in rs[k]) for k in autos)
        settings_seen = rs["autotune from its default"][-1]["setting"]
        lines.append(f"| {s} | {best_k}: {cell(best_k, False)} | {least_k}: {cell(least_k)} | "
                     f"{cell(today := 'today' + chr(39) + 's default (all cores, 4 reads, prefetch 2)')} | "
                     f"{cell(autos[0])} -> {settings_seen} | {cell(autos[1])} | {cell(autos[2])} | "
                     f"{conv:.1f} | {rev} ({turns}) |")
        summary[s] = {
            "rate_vs_best": min(med(rs[k], "rate") for k in autos) / best,
            "cpu_vs_least": max(med(rs[k], "cpu_ms_per_image") for k in autos)
            / med(static[least_k], "cpu_ms_per_image"),
            "cpu_vs_today": med(rs[autos[0]], "cpu_ms_per_image") / med(rs[today], "cpu_ms_per_image"),
            "converged_s": conv, "reversals": rev, "turns": turns}
    lines += ["", "Bars: autotuned rate (worst of the three starts) / best static; autotuned CPU per "
              "image (worst start) / the least-CPU static within 2% of the best; autotune's CPU per "
              "image / today's default's:", ""]
    for s, v in summary.items():
        lines.append(f"- {s}: rate {v['rate_vs_best']:.0%} of best static; CPU {v['cpu_vs_least']:.0%} "
                     f"of the least-CPU static; {v['cpu_vs_today']:.0%} of today's default's CPU; "
                     f"converged in {v['converged_s']:.1f} s (median of the worst start); after "
                     f"converging, at most {v['reversals']} changes undone and {v['turns']} changes "
                     "of direction per knob in any run")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=1))
    if args.write:
        write_block(args.write, "bench-autotune", text)


if __name__ == "__main__":
    main()
