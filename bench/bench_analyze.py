"""Validates nostall.analyze: predicted vs measured throughput in known situations.

Each situation is a loader spec plus a synthetic training step (a sleep of a
chosen length per batch) on storage emulated by the throttle: fetch-bound,
prep-bound, compute-bound, latency-bound and mixed. For each, `analyze` runs
once at the situation's configuration; its model then predicts other
configurations (cache fractions, cores and threads, bandwidths, reads in
flight), and each of those is measured for real in a fresh process (pinned
to the cores it is given). Reports every error in docs/benchmarks.md.

    .venv/bin/python bench/bench_analyze.py            # also: make bench-analyze
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

MB = 1e6


def situations(data, items, batch):
    """(name, expected bottleneck, base spec overrides, step seconds per batch, what-ifs).

    A what-if is (label, config for the model, spec overrides for the real
    run, expected bottleneck).
    """
    return [
        ("fetch-bound: 20 MB/s storage", "fetch", {"throttle_bandwidth": 20 * MB}, 0.010, [
            ("cache 50%", {"cache_fraction": 0.5}, {"cache": 0.5}, "fetch"),
            ("bandwidth 40 MB/s", {"bandwidth": 40 * MB}, {"throttle_bandwidth": 40 * MB}, "fetch"),
            ("cache 100%", {"cache_fraction": 1.0}, {"cache": 1.0}, "prep"),
        ]),
        ("prep-bound: 2 cores decoding", "prep", {}, 0.010, [
            ("1 core", {"cores": 1, "prep_threads": 1}, {"cores": 1, "num_threads": 1}, "prep"),
            ("1 prep thread on 2 cores", {"prep_threads": 1}, {"num_threads": 1}, "prep"),
            ("3 jobs, one shared pipeline", {"jobs": 3, "shared": True},
             {"jobs": 3, "shared": True}, "prep"),
        ]),
        ("compute-bound: 100 ms step", "compute", {}, 0.100, [
            ("bandwidth 20 MB/s", {"bandwidth": 20 * MB}, {"throttle_bandwidth": 20 * MB}, "fetch"),
            ("cache 50% at 20 MB/s", {"bandwidth": 20 * MB, "cache_fraction": 0.5},
             {"throttle_bandwidth": 20 * MB, "cache": 0.5}, "compute"),
            ("4 jobs, one shared pipeline", {"jobs": 4, "shared": True},
             {"jobs": 4, "shared": True}, "compute"),
            ("4 jobs, a loader each", {"jobs": 4, "shared": False},
             {"jobs": 4, "shared": False}, "prep"),
        ]),
        ("latency-bound: 25 ms per read, 2 in flight", "fetch",
         {"throttle_latency_ms": 25, "reads_in_flight": 2}, 0.010, [
            ("8 reads in flight", {"reads_in_flight": 8}, {"reads_in_flight": 8}, "fetch"),
            ("cache 50%", {"cache_fraction": 0.5}, {"cache": 0.5}, "fetch"),
        ]),
        ("mixed: 40 MB/s storage, prep and fetch stalls", "fetch",
         {"throttle_bandwidth": 40 * MB}, 0.010, [
            ("1 core", {"cores": 1, "prep_threads": 1}, {"cores": 1, "num_threads": 1}, "prep"),
            ("cache 100%", {"cache_fraction": 1.0}, {"cache": 1.0}, "prep"),
        ]),
    ]


def base_spec(data, items, batch):
    return {"source": data, "batch_size": batch, "shuffle": True, "seed": 1, "subset": items,
            "drop_page_cache": True,
            "transforms": [{"type": "RandomResizedCrop", "size": 224},
                           {"type": "RandomHorizontalFlip"},
                           {"type": "Normalize", "mean": [0.485, 0.456, 0.406],
                            "std": [0.229, 0.224, 0.225]}]}


# ---------------------------------------------------------------- child side


def steady_rate(loader, epochs, step_s, first_timed, warm, set_epoch=True):
    """Samples/s of `for batch in loader: step`, timed from batch `warm` of
    epoch `first_timed` to the end (earlier batches fill the pipeline)."""
    samples, t0 = 0, None
    for epoch in range(epochs):
        if set_epoch:
            loader.set_epoch(epoch)
        for k, (images, labels) in enumerate(loader):
            if epoch == first_timed and k == warm:
                t0 = time.perf_counter()
            time.sleep(step_s)
            if t0 is not None:
                samples += images.shape[0]
            del images, labels
    if t0 is None:
        raise RuntimeError(f"epoch {first_timed} had no batch {warm} to start timing at")
    return samples / (time.perf_counter() - t0)


def child_measure(job):
    """Runs in a fresh process: steady-state samples/s of spec + sleeping step."""
    if job.get("cores"):
        os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[: job["cores"]]))
    import nostall

    spec = dict(job["spec"])
    fraction = job.get("cache")
    name = None
    epochs = job["epochs"]
    first_timed = 0
    if fraction:
        name = f"bench-analyze-{os.getpid()}"
        spec["cache_name"] = name
        spec["cache_bytes"] = int(fraction * job["sample_bytes"])
        first_timed = 1  # epoch 0 fills the cache
        epochs += 1
    loader = nostall.Loader.from_spec(spec)
    try:
        rate = steady_rate(loader, epochs, job["step_s"], first_timed=first_timed, warm=2)
        hit = None
        if name:
            ep = loader.stats()["cache"]["epochs"]
            hit = statistics.mean(e["byte_hit_rate"] for e in ep[first_timed:])
        return {"rate": rate, "hit_rate": hit}
    finally:
        loader.close()
        if name:
            nostall._nostall.remove_cache(name)


def measure(spec, step_s, epochs, cores=None, cache=None, sample_bytes=0):
    job = {"spec": spec, "step_s": step_s, "epochs": epochs, "cores": cores, "cache": cache,
           "sample_bytes": sample_bytes}
    out = subprocess.run([sys.executable, __file__, "--child", json.dumps(job)],
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def child_consume(job):
    """Runs in a fresh process: one job attached to a shared pipeline."""
    import nostall

    loader = nostall.Loader.attach(job["name"], job["batch"], wait=60)
    try:
        # Timed past the chunks the producer made before this process
        # attached: they would come at once and flatter the rate. A consumer
        # follows the producer's epochs; it has no set_epoch of its own.
        return {"rate": steady_rate(loader, job["epochs"], job["step_s"], first_timed=0,
                                    warm=job["warm"], set_epoch=False)}
    finally:
        loader.close()


def measure_jobs(spec, step_s, epochs, jobs, shared):
    """Each job's samples/s (the mean over `jobs` concurrent processes): one
    shared pipeline (`nostall serve` + Loader.attach) or a loader each."""
    import signal
    import tempfile

    server = None
    with tempfile.TemporaryDirectory() as tmp:
        if shared:
            name = f"bench-analyze-{os.getpid()}"
            spec_file = Path(tmp) / "spec.json"
            spec_file.write_text(json.dumps(spec))
            slots = 8
            server = subprocess.Popen([str(Path(sys.executable).parent / "nostall"), "serve",
                                       "--spec", str(spec_file), "--name", name, "--quiet",
                                       "--slots", str(slots)], stderr=subprocess.DEVNULL)
            job = {"name": name, "batch": spec["batch_size"], "epochs": epochs + 1,
                   "step_s": step_s, "warm": slots + 2}
            flag = "--child-consume"
        else:
            job = {"spec": spec, "step_s": step_s, "epochs": epochs}
            flag = "--child"
        procs = []
        try:
            for _ in range(jobs):
                procs.append(subprocess.Popen([sys.executable, __file__, flag, json.dumps(job)],
                                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                              text=True))
            outs = [p.communicate(timeout=900) for p in procs]
        finally:
            for p in procs:  # none left running if one failed or timed out
                if p.poll() is None:
                    p.kill()
                    p.wait()
            if server is not None:
                server.send_signal(signal.SIGINT)
                server.wait(timeout=60)
    rates = []
    for p, (out, err) in zip(procs, outs):
        if p.returncode != 0:
            raise RuntimeError(err)
        rates.append(json.loads(out.strip().splitlines()[-1])["rate"])
    return {"rate": statistics.mean(rates), "rates": rates}


def child_analyze(job):
    import nostall

    def step(images, labels):
        time.sleep(job["step_s"])

    a = nostall.analyze(job["spec"], step, items=job["items"], progress=False)
    return a.result


def analyze(spec, step_s, items):
    job = {"spec": spec, "step_s": step_s, "items": items}
    out = subprocess.run([sys.executable, __file__, "--child-analyze", json.dumps(job)],
                         capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def predict(result, config):
    import nostall

    return json.loads(nostall._nostall.predict_json(json.dumps(result["profile"]),
                                                    json.dumps(config)))


# ---------------------------------------------------------------- parent side


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(ROOT / "bench_data" / "imagenet-like"))
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--items", type=int, default=800, help="sample used by every run")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=2, help="timed epochs per measured run")
    ap.add_argument("--rounds", type=int, default=3,
                    help="repeat every situation (profile and checks); rows report medians")
    ap.add_argument("--only", default=None, help="run only situations whose name has this")
    ap.add_argument("--write", default=str(ROOT / "docs" / "benchmarks.md"))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--child-analyze", help=argparse.SUPPRESS)
    ap.add_argument("--child-consume", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child_measure(json.loads(args.child))))
        return
    if args.child_consume:
        print(json.dumps(child_consume(json.loads(args.child_consume))))
        return
    if args.child_analyze:
        print(json.dumps(child_analyze(json.loads(args.child_analyze))))
        return

    from nostall.datasets import make_imagenet_like

    data = str(make_imagenet_like(args.data, num_images=args.images))
    base = base_spec(data, args.items, args.batch)
    runs = []
    started = time.time()
    for round_no in range(args.rounds):
        print(f"# round {round_no + 1} of {args.rounds}", flush=True)
        runs.append(one_round(args, data, base))
    rows = combine(runs)
    report = render(rows, args, time.time() - started)
    print(report)
    if args.write and not args.only:
        from report import write_block

        write_block(args.write, "bench_analyze", report)


def one_round(args, data, base):
    """Every situation once: profile it, then predict and measure each row."""
    rows = []
    for name, expect, over, step_s, whatifs in situations(data, args.items, args.batch):
        if args.only and args.only not in name:
            continue
        spec = {**base, **over}
        print(f"== {name}", flush=True)
        result = analyze(spec, step_s, args.items)
        prof = result["profile"]
        sample_bytes = prof["item_bytes"] * args.items
        print(f"   analyze: bottleneck {result['bottleneck']} (expected {expect}); "
              f"G {prof['step_rate']:.0f}, cached {prof['cached_rate']:.0f}, "
              f"cold {prof['cold_rate']:.0f}", flush=True)
        # The profiled configuration itself, measured again in a fresh run.
        meas = measure(spec, step_s, args.epochs)
        rows.append({"situation": name, "config": "as profiled", "profiled": True,
                     "expected": expect, "named": result["bottleneck"],
                     "predicted": result["predicted"]["rate"], "measured": meas["rate"]})
        print(f"   as profiled: predicted {rows[-1]['predicted']:.0f}, "
              f"measured {meas['rate']:.0f}", flush=True)
        for label, config, real, w_expect in whatifs:
            p = predict(result, config)
            real = dict(real)
            cores = real.pop("cores", None)
            cache = real.pop("cache", None)
            jobs = real.pop("jobs", None)
            if jobs:
                meas = measure_jobs(spec, step_s, args.epochs, jobs, real.pop("shared"))
            else:
                meas = measure({**spec, **real}, step_s, args.epochs, cores=cores, cache=cache,
                               sample_bytes=sample_bytes)
            rows.append({"situation": name, "config": label, "profiled": False,
                         "expected": w_expect, "named": p["bottleneck"],
                         "predicted": p["rate"], "measured": meas["rate"],
                         "hit_rate": meas.get("hit_rate")})
            print(f"   {label}: predicted {p['rate']:.0f} ({p['bottleneck']}), "
                  f"measured {meas['rate']:.0f}", flush=True)
    for r in rows:
        r["error"] = (r["predicted"] - r["measured"]) / r["measured"]
    return rows


def combine(runs):
    """One row per configuration: medians over the rounds, each round's error
    kept (a prediction is checked against the measurement of its own round)."""
    rows = []
    for same in zip(*runs):
        first = same[0]
        rows.append({**first,
                     "predicted": statistics.median(r["predicted"] for r in same),
                     "measured": statistics.median(r["measured"] for r in same),
                     "error": statistics.median(r["error"] for r in same),
                     "errors": [r["error"] for r in same],
                     "measured_all": [r["measured"] for r in same],
                     "named_all": [r["named"] for r in same]})
    return rows


def render(rows, args, took):
    whatif = [abs(r["error"]) for r in rows if not r["profiled"]]
    everything = [abs(r["error"]) for r in rows]
    worst = max(rows, key=lambda r: abs(r["error"]))
    worst_once = max(((abs(e), r) for r in rows for e in r["errors"]), key=lambda t: t[0])
    named_ok = sum(n == r["expected"] for r in rows for n in r["named_all"])
    named_all = sum(len(r["named_all"]) for r in rows)
    cpu = [r for r in rows if r["expected"] == "prep"]
    other = [r for r in rows if r["expected"] != "prep"]
    lines = [
        "## What-if predictions vs measured (`bench/bench_analyze.py`)",
        "",
        f"`.venv/bin/python bench/bench_analyze.py` (also `make bench-analyze`): "
        f"{args.items} of the generated ImageNet-like JPEGs, batch {args.batch}, "
        "RandomResizedCrop(224) + flip + normalize, a training step that sleeps a chosen "
        "time per batch, storage emulated by the throttle (page cache dropped). `analyze` "
        "runs once per situation; every other row is the model's prediction from that one "
        "profile, then measured for real in a fresh process pinned to its cores "
        f"({args.epochs} timed epochs, steady state); rows with N jobs give each job's rate, "
        "measured as the mean of N concurrent processes (shared: `nostall serve` and N "
        f"`Loader.attach`). The whole benchmark ran {args.rounds} times (rounds); each row "
        "gives the medians over the rounds, and each round's error (a prediction checked "
        f"against the measurement of its own round). {os.cpu_count()} cores, "
        f"{took / 60:.0f} min.",
        "",
        "| situation | configuration | expected bottleneck | named | predicted /s | measured /s "
        "| error (median) | error per round |",
        "|---|---|---|---|---:|---:|---:|---|",
    ]
    for r in rows:
        wrong = [n for n in r["named_all"] if n != r["expected"]]
        named = r["expected"] if not wrong else \
            f"{wrong[0]} **(wrong {len(wrong)} of {len(r['named_all'])})**"
        each = " / ".join(f"{e:+.0%}" for e in r["errors"])
        lines.append(f"| {r['situation']} | {r['config']} | {r['expected']} | {named} | "
                     f"{r['predicted']:,.0f} | {r['measured']:,.0f} | {r['error']:+.1%} | "
                     f"{each} |")
    lines += [
        "",
        f"- What-if configurations: median absolute error "
        f"**{statistics.median(whatif):.1%}** over {len(whatif)} (bar 10%); all "
        f"{len(everything)} rows: median {statistics.median(everything):.1%}.",
        f"- Worst row (median over rounds): {abs(worst['error']):.1%} ({worst['situation']}, "
        f"{worst['config']}); worst single round: {worst_once[0]:.1%} "
        f"({worst_once[1]['situation']}, {worst_once[1]['config']}).",
        f"- Bottleneck named as designed in {named_ok} of {named_all} row-rounds (bar: all).",
    ]
    if cpu and other:  # both kinds ran (not so with --only)
        spread = max(cpu, key=lambda r: max(r["measured_all"]) / min(r["measured_all"]))
        lines.append(
            f"- Where the error comes from: the CPU-bound rows (expected bottleneck prep) have "
            f"median errors up to {max(abs(r['error']) for r in cpu):.1%}, the others up to "
            f"{max(abs(r['error']) for r in other):.1%}. This shared {os.cpu_count()}-core "
            f"machine's decode rate moves from moment to moment and the profile and the check "
            f"run minutes apart: {spread['situation']} / {spread['config']} measured "
            + ", ".join(f"{m:,.0f}" for m in spread["measured_all"])
            + " samples/s in the rounds.")
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
