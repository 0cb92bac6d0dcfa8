"""Several training jobs on one GPU: one served pipeline against a loader each.

    python bench/gpu_shared.py --jobs 4 --cores 16      # on a machine with a CUDA GPU

Trains `--jobs` ResNet-50s (bf16, channels_last, batch 256) at once on one
GPU, each for `--epochs` epochs of an ImageNet-like folder (RandomResizedCrop
(224) + flip, uint8 batches on the GPU with device="cuda", normalized in the
step), fed

- "one":      a single job alone, its own nostall loader on every core;
- "served":   one pipeline served on every core (nostall.serve, in this
              process), each job a consumer (Loader.attach(device="cuda"));
- "separate": a loader per job, the cores divided between them;
- "killed":   as "served", one consumer killed with SIGKILL after a few
              steps: the others must finish, each seeing every sample once
              per epoch, and the killed one's GPU memory must be freed.

Prints, per case, images/s over all jobs, the pipelines' CPU seconds (the
decode and augment threads: `stats()` / the server's status) and every
process's CPU seconds, and whether each job saw every sample once per epoch.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_training import MEAN, STD, model_and_step  # noqa: E402


def _cpu_s():
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _pipeline_cpu(stats):
    return sum(s.get("busy_cpu_s", 0.0) for s in stats.get("stages", {}).values())


def child(args):
    import torch

    import nostall

    torch.backends.cudnn.benchmark = True
    cpu0 = _cpu_s()
    float_step = model_and_step()
    mean = torch.tensor(MEAN, device="cuda").view(1, 3, 1, 1) * 255
    std = torch.tensor(STD, device="cuda").view(1, 3, 1, 1) * 255

    def step(images, labels):
        return float_step(images.float().sub_(mean).div_(std), labels)

    # Warmed up (cudnn's autotuning), then every job starts together.
    warm = torch.randint(0, 255, (args.batch, 3, 224, 224), dtype=torch.uint8, device="cuda")
    for _ in range(3):
        step(warm, torch.zeros(args.batch, dtype=torch.int64, device="cuda"))
    torch.cuda.synchronize()
    print(json.dumps({"ready": True}), flush=True)
    sys.stdin.readline()
    if args.child == "attach":
        loader = nostall.Loader.attach(args.name, args.batch, device="cuda", return_indices=True,
                                       wait=60.0)
    else:
        loader = nostall.Loader(args.data, batch_size=args.batch, shuffle=True, seed=1,
                                num_threads=args.threads, device="cuda", return_indices=True,
                                transforms=[nostall.RandomResizedCrop(224),
                                            nostall.RandomHorizontalFlip()])
    n, waited, once, steps = 0, 0.0, True, 0
    t0 = None
    for epoch in range(args.epochs):
        seen = []
        it = iter(loader)
        while True:
            w0 = time.perf_counter()
            try:
                images, labels, indices = next(it)
            except StopIteration:
                break
            if t0 is None:  # timed from the first batch: the jobs start one by one
                torch.cuda.synchronize()
                t0 = w0 = time.perf_counter()
            else:
                waited += time.perf_counter() - w0
            step(images, labels)
            seen += indices.tolist()
            n += len(labels)
            steps += 1
            if steps <= 8:
                print(json.dumps({"step": steps}), flush=True)
        once = once and sorted(seen) == list(range(args.images))
    torch.cuda.synchronize()
    secs = time.perf_counter() - t0
    st = loader.stats()
    print(json.dumps({"rate": n / secs, "stall": waited / secs, "images": n, "once": once,
                      "pipeline_cpu_s": _pipeline_cpu(st), "cpu_s": _cpu_s() - cpu0,
                      "host_copies": st.get("cuda", {}).get("host_copies")}), flush=True)


def _gpu_pids():
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                          "--format=csv,noheader,nounits"], capture_output=True, text=True)
    pids = {}
    for line in out.stdout.strip().splitlines():
        pid, mem = (x.strip() for x in line.split(","))
        pids[int(pid)] = int(mem)
    return pids


def _gpu_used_mib():
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True)
    return int(out.stdout.split()[0])


def run_jobs(args, kind, jobs, threads, kill=None):
    me = [sys.executable, os.path.abspath(__file__), "--data", args.data, "--batch", str(args.batch),
          "--epochs", str(args.epochs), "--images", str(args.images), "--name", args.name,
          "--threads", str(threads), "--child", "attach" if kind in ("served", "killed") else "own"]
    procs = [subprocess.Popen(me, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(jobs)]
    for p in procs:  # every job ready, then all go at once
        line = p.stdout.readline()
        if not line:
            raise SystemExit(f"{kind}: a job died before it was ready:\n{p.stderr.read()[-3000:]}")
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    killed = None
    if kill is not None:
        victim = procs[kill]
        for line in victim.stdout:
            if json.loads(line).get("step") == 5:
                break
        apps = _gpu_pids()  # (empty where the driver cannot see this process namespace)
        used_before = _gpu_used_mib()
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and (
                victim.pid in _gpu_pids() or _gpu_used_mib() > used_before - 1024):
            time.sleep(0.2)
        used_after = _gpu_used_mib()
        killed = {"pid": victim.pid, "victim_mib": apps.get(victim.pid),
                  "gpu_used_mib_before": used_before, "gpu_used_mib_after": used_after,
                  "gpu_freed": victim.pid not in _gpu_pids() and used_after <= used_before - 1024}
    results = []
    for k, p in enumerate(procs):
        out, err = p.communicate()
        if kill is not None and k == kill:
            continue
        lines = [json.loads(x) for x in out.strip().splitlines() if x.startswith("{")]
        final = [x for x in lines if "rate" in x]
        if p.returncode != 0 or not final:
            print(f"{kind} job {k} failed ({p.returncode}):\n{err[-3000:]}", file=sys.stderr)
            results.append(None)
        else:
            results.append(final[-1])
    return results, killed


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="bench_data/imagenet-like-gpu")
    ap.add_argument("--images", type=int, default=6144)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--cores", type=int, default=16)
    ap.add_argument("--cases", nargs="+", default=["one", "served", "separate", "killed"],
                    choices=["one", "served", "separate", "killed"])
    ap.add_argument("--name", default=f"gpu-shared-{os.getpid()}")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--child", choices=["attach", "own"])
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    if args.child:
        return child(args)

    import nostall
    from nostall.datasets import make_imagenet_like

    make_imagenet_like(args.data, num_images=args.images)
    spec = {"source": args.data, "batch_size": args.batch, "shuffle": True, "seed": 1,
            "num_threads": args.cores, "drop_last": False,
            "transforms": [{"type": "RandomResizedCrop", "size": [224, 224]},
                           {"type": "RandomHorizontalFlip"}]}
    rows, report = [], {}
    for case in args.cases:
        pipeline_cpu = server_cpu = None
        if case in ("served", "killed"):
            cpu0 = _cpu_s()
            with nostall.serve(spec, args.name, max_lag=5.0, block=False, verbose=False) as server:
                results, killed = run_jobs(args, case, args.jobs, 0,
                                           kill=args.jobs - 1 if case == "killed" else None)
                status = server.status()
                pipeline_cpu = _pipeline_cpu(status.get("pipeline", {}))
            server_cpu = _cpu_s() - cpu0
        elif case == "one":
            results, killed = run_jobs(args, case, 1, args.cores)
        else:
            results, killed = run_jobs(args, case, args.jobs, max(1, args.cores // args.jobs))
        ok = [r for r in results if r]
        if pipeline_cpu is None:
            pipeline_cpu = sum(r["pipeline_cpu_s"] for r in ok)
        total_cpu = sum(r["cpu_s"] for r in ok) + (server_cpu or 0)
        images = sum(r["images"] for r in ok)
        rate = sum(r["rate"] for r in ok)
        row = {"case": case, "jobs": len(results), "finished": len(ok), "images_per_s": rate,
               "pipeline_cpu_s": pipeline_cpu, "pipeline_cpu_ms_per_job_image": 1e3 * pipeline_cpu / max(1, images),
               "all_cpu_s": total_cpu, "every_sample_once": all(r["once"] for r in ok),
               "stall": [round(r["stall"], 4) for r in ok], "killed": killed,
               "host_copies": [r["host_copies"] for r in ok]}
        report[case] = row
        print(json.dumps(row), flush=True)
        rows.append(f"| {case} | {len(ok)}/{len(results)} | {rate:.0f} | {pipeline_cpu:.1f} | "
                    f"{total_cpu:.1f} | {'yes' if row['every_sample_once'] else 'NO'} | "
                    f"{max(row['stall']) * 100 if ok else float('nan'):.1f}% |"
                    + (f" killed pid {killed['pid']}: GPU memory freed: {killed['gpu_freed']}" if killed else ""))
    print(f"\n{args.jobs} ResNet-50 jobs on one GPU, {args.epochs} epochs of {args.images} images each, "
          f"{args.cores} cores")
    print("| case | jobs finished | images/s (all jobs) | pipeline CPU s | all processes CPU s "
          "| each sample once per epoch | worst stall |")
    print("|---|---:|---:|---:|---:|---|---:|")
    print("\n".join(rows))
    if "one" in report and "served" in report:
        one, served = report["one"], report["served"]
        print(f"\nserved pipeline CPU for {args.jobs} jobs / one job's loader: "
              f"{served['pipeline_cpu_s'] / one['pipeline_cpu_s']:.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
