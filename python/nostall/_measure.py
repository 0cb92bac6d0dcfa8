"""The differential measurement behind ``nostall.analyze`` (docs/analyze.md):
the step timed alone on batches in memory, a storage probe, the real data
read cold and then from a private cache, and what each stage cost per
sample. ``run`` returns the measurements with the C++ model's answers
(nostall/analyze.h); analyze.py wraps them in an Analysis."""

from __future__ import annotations

import json
import math
import os
import sys
import time

from . import _nostall
from ._progress import Phase
from .errors import ResourceError


# Concurrent reads of the storage probe where the loader's adapt (remote storage).
_PROBE_CONCURRENCY = 32

# A timed window shorter than this many batch arrivals (or seconds) says too
# little: it is widened with more epochs, or refused.
_MIN_GAPS = 8
_MIN_SECONDS = 1.0


def _machine_busy_s():
    """CPU seconds the cores this process may run on have spent busy (all
    processes: user, nice, system, irq, softirq, steal), from /proc/stat;
    None where it cannot be read. Used only to say how busy the machine was
    beside the analysis (less this process's own CPU): it is never charged
    to the pipeline, whose CPU is its own threads' clocks."""
    try:
        allowed = {f"cpu{c}" for c in os.sched_getaffinity(0)}
        busy = 0
        with open("/proc/stat") as f:
            for line in f:
                fields = line.split()
                if fields and fields[0] in allowed:
                    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[1:9])
                    busy += user + nice + system + irq + softirq + steal
        return busy / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, AttributeError):
        return None


def _process_cpu_s():
    t = os.times()
    return t.user + t.system


class _Window:
    """Samples made inside a timed window, and the CPU spent in it.

    The window opens when batch ``warm`` arrives and closes when the last
    batch arrives: the samples counted are those of the batches that arrived
    inside it (a batch that arrives as the window opens was made before it).
    Windows add up across epochs and loaders.
    """

    def __init__(self):
        self.samples = 0
        self.gaps = 0
        self.seconds = 0.0
        self.process_cpu = 0.0
        self.machine_cpu = 0.0  # the allowed cores' busy time, all processes (None: unknown)
        self.stats = []  # (before, after) loader stats per window
        self.step_s = 0.0  # inside the window, in the step
        self.wait_s = 0.0  # inside the window, waiting for a batch (the loader's own count)

    @property
    def rate(self):
        return self.samples / self.seconds if self.seconds > 0 else 0.0

    def too_short(self):
        return self.gaps < _MIN_GAPS or self.seconds < _MIN_SECONDS

    def cpu_per_sample(self):
        return self.process_cpu / self.samples if self.samples else 0.0

    def loop_overhead(self):
        """Seconds per sample the loop spent neither in the step nor waiting for data."""
        if self.samples == 0:
            return 0.0
        return max(0.0, self.seconds - self.step_s - self.wait_s) / self.samples

    def other_cores(self):
        """Cores' worth of CPU that other processes used during the window
        (None: unknown): how busy the machine was beside this job."""
        if self.seconds <= 0 or self.machine_cpu is None:
            return None
        return max(0.0, self.machine_cpu - self.process_cpu) / self.seconds

    def run_epoch(self, loader, step, epoch, warm, phase):
        """One epoch through ``step``; the window covers batch ``warm`` to the last."""
        loader.set_epoch(epoch)
        n_batches = len(loader)
        t0 = t_last = None
        samples = gaps = 0
        before = after = cpu0 = machine0 = None
        steps = []  # the steps of the batches from `warm` on
        for k, b in enumerate(loader):
            args = _step_args(b, loader)
            if k == n_batches - 1 and t0 is not None:
                _sync()  # the window ends when the queued GPU work of earlier steps is done
            now = time.perf_counter()
            if k == warm:
                t0, before = now, loader.stats()
                cpu0, machine0 = _process_cpu_s(), _machine_busy_s()
            elif t0 is not None:
                samples += _batch_size(args)
                gaps += 1
                t_last = now
            if t_last is not None and k == n_batches - 1:
                cpu1, machine1 = _process_cpu_s(), _machine_busy_s()
                after = loader.stats()
            s0 = time.perf_counter()
            step(*args)
            if t0 is not None:
                steps.append(time.perf_counter() - s0)
            phase.update(k + 1, n_batches)
            del b, args
        if t_last is None:
            return
        if after is None:  # fewer batches than len() said: close the window here
            cpu1, machine1 = _process_cpu_s(), _machine_busy_s()
            after = loader.stats()
        self.samples += samples
        self.gaps += gaps
        self.seconds += t_last - t0
        self.process_cpu += cpu1 - cpu0
        if self.machine_cpu is not None and machine0 is not None and machine1 is not None:
            self.machine_cpu += machine1 - machine0
        else:
            self.machine_cpu = None
        self.stats.append((before, after))
        # The last batch's step ran after the window closed.
        self.step_s += sum(steps[:-1])
        self.wait_s += after["consumer"]["wait_s"] - before["consumer"]["wait_s"]

    def delta(self, stage, key):
        return sum(a["stages"][stage][key] - b["stages"][stage][key] for b, a in self.stats)

    def hooks_per_sample(self):
        """Seconds per sample the loop spent in the Python hooks (0: none)."""
        if self.samples == 0 or not all("hooks" in a["stages"] for _, a in self.stats):
            return 0.0
        return self.delta("hooks", "work_s") / self.samples

    def per_item(self, stage):
        items = self.delta(stage, "items")
        return self.delta(stage, "busy_cpu_s") / items if items > 0 else 0.0


def _sync():
    """Waits for queued GPU work, so a timed window counts what the step enqueued."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def _mb(bandwidth):
    return "unlimited" if not bandwidth else f"{bandwidth / 1e6:,.1f} MB/s"


def _step_args(batch, loader=None):
    """What ``step`` is called with for a batch: ``(images, labels)`` (the
    loader's tuple of fields: (clips, audio, labels) from a folder of videos
    with their audio), or a records loader's dict alone (``step(batch)``)."""
    if isinstance(batch, dict):
        return (batch,)
    pair = getattr(loader, "_pair", None)
    return tuple(batch)[:len(pair) if pair else 2]


def _copied(batch):
    """A batch (a dict, or a tuple such as (images, targets)) with its tensors
    copied out of the ring's slot."""
    def copy(v):
        return v.clone() if hasattr(v, "clone") else v
    if isinstance(batch, dict):
        return {k: copy(v) for k, v in batch.items()}
    return tuple(copy(v) for v in batch)


def _batch_size(args):
    first = args[0]
    if isinstance(first, dict):
        first = next(v for v in first.values() if hasattr(v, "shape"))
    return first.shape[0]


def _time_step(step, args, seconds, phases=None):
    """The step back to back on one batch: (samples/s, process CPU seconds per sample)."""
    batch = _batch_size(args)
    for _ in range(2):
        step(*args)
    _sync()
    steps, t0, c0 = 0, time.perf_counter(), time.process_time()
    while True:
        step(*args)
        steps += 1
        elapsed = time.perf_counter() - t0
        if phases is not None:
            phases.update(min(elapsed, seconds), seconds)
        if (elapsed >= seconds and steps >= 5) or steps >= 5000:
            _sync()
            elapsed = time.perf_counter() - t0
            break
    return steps * batch / elapsed, (time.process_time() - c0) / (steps * batch)


def _spin_after_step(step, args, rounds=4, idle_s=0.03):
    """CPU seconds per sample the step's threads burn after it returns (spin-waiting)."""
    spent = 0.0
    for _ in range(rounds):
        step(*args)
        _sync()
        c0 = time.process_time()
        time.sleep(idle_s)
        spent += time.process_time() - c0
    return spent / (rounds * _batch_size(args))


def _thread_cpu_ticks():
    """{thread id: CPU clock ticks} of this process's threads (Linux), or None."""
    out = {}
    try:
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            out[tid] = int(fields[11]) + int(fields[12])  # utime + stime
    except (OSError, IndexError, ValueError):
        return None
    return out


def _busy_threads(before, after):
    """Threads that did a real share of the work between two snapshots: each
    burnt at least a quarter of what the busiest did. Counted per thread, so a
    loaded machine (threads slowed, not stopped) gives the same count."""
    if before is None or after is None:
        return None
    deltas = [after[t] - before.get(t, 0) for t in after]
    top = max(deltas, default=0)
    if top < 5:  # under 50 ms of CPU: too little to tell
        return None
    return sum(1 for d in deltas if d >= top / 4)


class _InMemory:
    """The batch the step is timed on alone, already in memory: synthetic
    images and labels, or, for a loader with fields (whose step takes the
    dict, or (images, targets) for a Coco dataset), one real batch, copied:
    `real` is the step's arguments."""

    def __init__(self, shape, dtype, batch, torch, real=None):
        self.shape, self.dtype, self.batch, self.torch, self.real = shape, dtype, batch, torch, real

    def args(self):
        if self.real is not None:
            return self.real
        torch = self.torch
        images = (torch.rand(self.shape) if self.dtype == "float32"
                  else torch.randint(0, 256, self.shape, dtype=torch.uint8))
        return images, torch.zeros(self.batch, dtype=torch.int64)


def _step_alone(step, memory, seconds, phases, torch):
    """Phase 1: the step on one synthetic batch already in memory.

    Gives G and the step's CPU per sample with torch's intra-op threads as
    they are, and (when there are several) the CPU its idle threads spin away
    after each step: the model needs both to know how the step shares the
    cores with the prep threads.
    """
    phases.begin("step on synthetic in-memory batches")
    args = memory.args()
    ticks = _thread_cpu_ticks()
    rate, cpu = _time_step(step, args, seconds, phases)
    busy = _busy_threads(ticks, _thread_cpu_ticks())
    # torch's intra-op threads matter only to a step that keeps more than one
    # of them busy (a step that sleeps or waits on a GPU does not). Counted
    # per thread where the OS tells (a busy machine slows threads, it does
    # not stop them); else from the cores the step kept busy.
    many = busy > 1 if busy is not None else cpu * rate > 1.05
    threads = max(1, torch.get_num_threads()) if many else 1
    out = {"step_rate": rate, "step_cpu": cpu, "step_threads": threads,
           "step_rate_1": 0.0, "step_cpu_1": 0.0, "step_spin_cpu": 0.0}
    if threads > 1:
        out["step_spin_cpu"] = _spin_after_step(step, args)
        phases.total += 1  # and, last, the step on one thread: counted before this line ends
    phases.end(f"G = {rate:,.0f} samples/s" + (f" on {threads} threads" if threads > 1 else ""))
    return out


def _step_again(step, memory, seconds, phases, out):
    """The step alone once more, between and after the real-data runs.

    The machine's speed moves (other processes, frequency, a shared host):
    one timing before the runs may not be the speed they ran at. G is the
    mean of the timings, and how far apart they are (max - min over the
    mean) is the analysis's own noise: model and runs closer than that are
    not called a disagreement.
    """
    phases.begin("step on synthetic batches again (the machine's noise)")
    args = memory.args()
    timings = out.setdefault("step_rate_timings", [out["step_rate"]])
    cpus = out.setdefault("step_cpu_timings", [out["step_cpu"]])
    rate, cpu = _time_step(step, args, seconds, phases)
    timings.append(rate)
    cpus.append(cpu)
    out["step_rate"] = sum(timings) / len(timings)
    out["step_cpu"] = sum(cpus) / len(cpus)
    out["noise"] = (max(timings) - min(timings)) / out["step_rate"]
    phases.end(f"{rate:,.0f} samples/s (all timings {out['noise']:.0%} apart)")


def _step_on_one_thread(step, memory, seconds, phases, torch, out):
    """Last: the step on one intra-op thread, for configurations with fewer cores.

    It runs after the real-data runs because changing torch's thread count
    changes how its thread pool behaves afterwards; the runs above must see
    the process as the user's training does.
    """
    threads = out["step_threads"]
    if threads <= 1:
        return
    phases.begin("step on one intra-op thread")
    args = memory.args()
    torch.set_num_threads(1)
    try:
        out["step_rate_1"], out["step_cpu_1"] = _time_step(step, args, seconds, phases)
    finally:
        torch.set_num_threads(threads)
    phases.end(f"{out['step_rate_1']:,.0f} samples/s")


class _Plan:
    """What the analysis runs: the user's spec as it stands (unset knobs at
    their defaults, the autotuner off while the runs are measured), on a
    sample of `items` items, and what its cache and nodes are."""

    def __init__(self, spec, items, loader_of):
        from .cache import parse_size
        from .loader import read_spec

        base = read_spec(spec)
        # Prep on other machines is not run: the node's own pipeline is
        # measured, and the "remote" row models the workers.
        self.remote = base.pop("remote", None)
        self.base, self.batch = base, int(base.get("batch_size", 1))
        tiers = base.get("cache") or []
        if isinstance(tiers, dict):
            tiers = [tiers]
        # The user's cache as the model sees it: its back tier (the cluster tier
        # behind a node's, or the one tier), and the nodes that pool it.
        back = tiers[-1] if tiers and isinstance(tiers[-1], dict) else {}
        self.user_cache_bytes = parse_size(back["bytes"]) if back.get("bytes") else 0
        if items is not None and items <= 0:
            raise ValueError("items must be positive")
        self.run = {**base, "autotune": "off"}
        self.run.pop("cache", None)
        # A cluster cache pools every rank's share (cache.h, CacheConfig.pool_parts).
        self.nodes = int(base.get("world_size", 1) or 1)
        self.cache_nodes = self.nodes if back.get("driver") == "memcached" else 1
        with loader_of({**self.run, "batch_size": 1, "prefetch": 0, "num_threads": 1,
                        "reads_in_flight": 1, "subset": 1}) as probe:
            self.num_items = probe.num_items
            self.source = probe.spec["source"]  # its driver and every option, resolved
        if items is None:
            items = min(self.num_items, max(4096, 20 * self.batch))
        self.items = min(items, self.num_items)
        self.run["subset"] = self.items if self.items < self.num_items else 0
        self.n_batches = (-(-self.items // self.batch) if not base.get("drop_last")
                          else self.items // self.batch)
        if self.n_batches < 3:
            raise ValueError(
                f"a sample of {self.items} items makes {self.n_batches} batch(es) of {self.batch}: too few "
                "to time a step against (at least 3 per epoch); give more items or a smaller batch_size")

    def page_cache(self, spec, drop):
        """`spec` reading local files past the page cache (`drop`) or
        through it; remote storage has no page cache to drop."""
        source = self.source
        if "drop_page_cache" not in source.get("options", {}):
            return spec
        return {**spec, "source": {**source, "options": {**source["options"], "drop_page_cache": drop}}}


def run(spec, step, items, warmup_batches, step_seconds, progress) -> dict:
    """nostall.analyze's measurements and the model's answers, as a dict."""
    from .loader import Loader, read_spec

    import torch

    # A Loader's Python hooks (docs/records.md) run in every loader made here:
    # they are part of taking each batch, and their time is reported apart.
    hooks = getattr(spec, "_hooks", None) if isinstance(spec, Loader) else None

    def loader_of(spec):
        return Loader._built(read_spec(spec), hooks, copy=False, return_indices=False, output="torch")

    plan = _Plan(spec, items, loader_of)
    phases = Phase(progress, total=7)
    notes = []
    with loader_of(plan.run) as plain:
        resolved = plain.spec
        real = None
        if resolved.get("fields"):  # the step takes the records' dict: time it on a real one
            real = _step_args(_copied(next(iter(plain))), plain)
        memory = _InMemory((plan.batch,) + tuple(plain.sample_shape), resolved["dtype"], plan.batch, torch, real)
        # A sample as handed out: what prep on another machine would send.
        sample_bytes = math.prod(plain.sample_shape) * (4 if resolved["dtype"] == "float32" else 1)
        step_profile = _step_alone(step, memory, step_seconds, phases, torch)
        storage = _probe_storage(plain, int(resolved["reads_in_flight"]), plan.items, phases)
    cold, cold_storage = _cold_run(plan, loader_of, step, warmup_batches, phases)
    _step_again(step, memory, max(0.25, step_seconds / 2), phases, step_profile)
    cached, stats = _cached_run(plan, loader_of, step, storage, warmup_batches, phases, notes)
    _step_again(step, memory, max(0.25, step_seconds / 2), phases, step_profile)
    _step_on_one_thread(step, memory, max(0.5, step_seconds / 2), phases, torch, step_profile)
    for name, w in (("cold", cold), ("cached", cached)):
        if w.too_short():
            raise RuntimeError(
                f"the {name} run timed only {w.gaps} batches in {w.seconds:.2f} s, too few to "
                "trust; give more items (a larger sample) or a smaller batch_size")
    if plan.remote is not None:
        notes.append("the spec's remote prep was not run: this measures the node's own pipeline, and the "
                     "\"remote\" what-if row predicts the workers beside it")
    cache_epochs = stats.get("cache", {}).get("epochs", [])
    if len(cache_epochs) >= 2 and cache_epochs[1]["hit_rate"] < 0.95:
        notes.append(f"the cached run hit only {cache_epochs[1]['hit_rate']:.0%} "
                     "of its reads in the cache")
    step_timings = step_profile.pop("step_rate_timings", None)
    step_profile.pop("step_cpu_timings", None)
    _note_noise_and_hooks(step_profile, cold, cached, hooks, notes)
    fetch = _fetch_cpu(cold, cached, storage)
    _note_busy_machine(cold, cached, notes)
    profile = _profile(plan, resolved, step_profile, storage, cold, cached, fetch)
    profile["sample_bytes"] = float(sample_bytes)
    result = json.loads(_nostall.analysis_json(json.dumps(profile)))
    result["run"] = _run_record(plan, storage, notes, cold, cached, cold_storage, step_timings, fetch)
    return result


def _probe_storage(loader, reads, items, phases) -> dict:
    """Storage, directly: cold reads one at a time, then `reads` at a time
    (adaptive reads, 0, on remote storage: as many as the probe's reads can
    use, so a shared pipe shows)."""
    phases.begin("storage probe (cold reads)")
    concurrency = reads if reads > 0 else _PROBE_CONCURRENCY
    # At least 8 reads per reader: a few waves say little about a rate.
    storage = json.loads(loader._require_core().probe_storage(
        min(64, items), min(max(128, 8 * concurrency), items), concurrency))
    phases.end(f"{_mb(storage['bandwidth'])}, {storage['latency_s'] * 1e3:.2f} ms latency")
    return storage


def _probed_item_bytes(storage) -> float:
    """The mean bytes of an item the storage probe read."""
    probed = storage["sequential"]["bytes"] + storage["concurrent"]["bytes"]
    return probed / max(1, storage["sequential"]["reads"] + storage["concurrent"]["reads"])


def _cold_run(plan, loader_of, step, warmup_batches, phases):
    """The user's configuration on the sample read cold (pages dropped
    before each epoch): its window, and the remote storage's stats."""
    cold = _Window()
    warm = min(warmup_batches, max(0, plan.n_batches // 4))
    phases.begin("real data, cold storage")
    with loader_of(plan.page_cache(plan.run, True)) as loader:
        epoch, started = 0, time.perf_counter()
        while epoch == 0 or (cold.too_short() and time.perf_counter() - started < 60):
            # A short epoch is timed again (cold again: the pages are dropped).
            loader._require_core().evict_page_cache()
            cold.run_epoch(loader, step, epoch, warm if epoch == 0 else 0, phases)
            epoch += 1
        cold_storage = loader.stats().get("storage")  # remote storage: requests, latency
    phases.end(f"{cold.rate:,.0f} samples/s")
    return cold, cold_storage


def _cached_run(plan, loader_of, step, storage, warmup_batches, phases, notes):
    """The sample from a private MinIO cache sized for it (from the probe's
    mean item size, with room to spare), filled after the cold run: the cold
    run is the user's configuration, and copying into a cache as it reads
    would cost it CPU (about 3% of a prep-bound run) the user's run does not
    pay. Its window and the loader's stats."""
    mean_bytes = _probed_item_bytes(storage)
    cache_name = f"nostall-analyze-{os.getpid()}"
    cached_spec = plan.page_cache({**plan.run, "cache": [{
        "driver": "minio", "name": cache_name, "bytes": int(mean_bytes * plan.items * 1.3) + (8 << 20)}]}, True)
    cached = _Window()
    warm = min(warmup_batches, max(0, plan.n_batches // 4))
    try:
        try:
            loader = loader_of(cached_spec)
        except ResourceError as e:  # /dev/shm too small for the sample: the page cache stands in
            notes.append(f"no shared-memory cache for the sample ({e}); "
                         "the cached run read through the page cache")
            loader = loader_of(plan.page_cache(plan.run, False))
        with loader:
            phases.begin("filling the cache (not timed)")
            loader.set_epoch(0)
            for k, _ in enumerate(loader):
                phases.update(k + 1, plan.n_batches)
            phases.end(f"{plan.items:,} items")
            phases.begin("real data, cached")
            # Cached epochs are quick: time a few, for a steadier CPU rate.
            epoch, started = 1, time.perf_counter()
            while epoch <= 3 or (cached.too_short() and time.perf_counter() - started < 60):
                cached.run_epoch(loader, step, epoch, warm if epoch == 1 else 0, phases)
                epoch += 1
                if cached.seconds >= 2.0 and not cached.too_short():
                    break
            phases.end(f"{cached.rate:,.0f} samples/s")
            return cached, loader.stats()
    finally:
        try:
            _nostall.remove_cache(cache_name)
        except Exception:
            pass


# Other processes using at least this many cores' worth beside the runs is said.
_BUSY_CORES = 0.25


def _note_busy_machine(cold, cached, notes):
    """Says how busy the machine was beside the real-data runs: the cores'
    busy time (all processes) less this process's own CPU. Nothing of it is
    charged to the pipeline; it explains rates lower than the machine gives
    when it is free."""
    others = [c for c in (cold.other_cores(), cached.other_cores()) if c is not None]
    if not others or max(others) < _BUSY_CORES:
        return
    cores = len(os.sched_getaffinity(0))
    used = (f"{max(others):.1f}" if max(others) - min(others) < 0.1
            else f"{min(others):.1f}-{max(others):.1f}")
    notes.append(f"the machine was busy: other processes used {used} "
                 f"of the {cores} cores this job may run on during the real-data runs; the rates here "
                 "are what this job got beside them (nothing of their CPU is charged to the pipeline)")


def _note_noise_and_hooks(step_profile, cold, cached, hooks, notes):
    """A run on real data cannot be faster than the step alone: where one
    was, the machine's speed moved at least that much (the noise is raised
    to it). Python hooks slower than the step are said."""
    faster = max(cold.rate, cached.rate) / step_profile["step_rate"] - 1
    if faster > step_profile.get("noise", 0.0):
        step_profile["noise"] = faster
        notes.append(f"a real-data run ({max(cold.rate, cached.rate):,.0f} samples/s) was "
                     f"{faster:.0%} faster than the step alone: the machine's speed moved "
                     "during the analysis; differences under that are noise")
    hooks_s = cached.hooks_per_sample()
    if hooks_s > 1 / step_profile["step_rate"]:
        threads = hooks[2] if hooks else 1
        notes.append(f"the Python hooks take {hooks_s * 1e3:.3f} ms per sample as each batch is "
                     f"taken, more than the step ({1e3 / step_profile['step_rate']:.3f} ms): "
                     f"they run on {threads} Python thread(s) (hook_threads), in parallel only "
                     "where they release the GIL; a native transform, or the work moved off "
                     "the batch path, would give that time back")


def _fetch_cpu(cold, cached, storage) -> dict:
    """The fetch CPU per item, from the cache ("hit") and from storage
    ("miss"), and the encoded bytes per item.

    Reading cold costs more CPU than the fetch threads' own clocks show: in
    a process whose threads already share the cores, more of everything
    else (more wake-ups, more spinning). All of it is the price of reading
    cold, so the fetch CPU per item from storage is the cached fetch CPU
    plus this process's whole difference in CPU per sample, cold minus
    cached, or at least what the fetch threads' clocks say (a remote
    store's I/O thread is one of them). Only this process's own clocks are
    counted: the machine's counters hold other programs' work as well."""
    hit = cached.per_item("fetch")
    threads = max(0.0, cold.per_item("fetch") - hit)
    process = max(0.0, cold.cpu_per_sample() - cached.cpu_per_sample())
    # Encoded bytes per item: what the cold epoch read (the index may not know sizes).
    fetched = cold.delta("fetch", "items")
    mean_bytes = _probed_item_bytes(storage)
    # Of the fetch threads' CPU, a remote store's I/O thread (HTTP, signing, bodies).
    io = sum(a["storage"]["io_cpu_s"] - b["storage"]["io_cpu_s"] for b, a in cold.stats
             if "io_cpu_s" in a.get("storage", {}) and "io_cpu_s" in b.get("storage", {}))
    return {"hit": hit, "miss": hit + max(threads, process), "threads": threads, "process": process,
            "io_thread": io / fetched if fetched > 0 else 0.0,
            "item_bytes": (cold.delta("fetch", "bytes") / fetched) if fetched > 0 else mean_bytes}


def _profile(plan, resolved, step_profile, storage, cold, cached, fetch) -> dict:
    """What the C++ model is calibrated from (nostall/analyze.h)."""
    prep_items = cold.delta("prep", "items") + cached.delta("prep", "items")
    prep_cpu = ((cold.delta("prep", "busy_cpu_s") + cached.delta("prep", "busy_cpu_s"))
                / prep_items if prep_items > 0 else 0.0)
    dataset_bytes = fetch["item_bytes"] * plan.num_items
    cores = _nostall.available_cores()
    return {
        **step_profile,
        # The loop around the step, as the cached run (no stall from storage) shows it.
        "loop_overhead": cached.loop_overhead(),
        # The share of the real-data runs' time the loop waited for a batch.
        "waited": min(1.0, max(w.wait_s / w.seconds if w.seconds > 0 else 0.0 for w in (cold, cached))),
        # Of that, the Python hooks' part (run as each batch is taken).
        "hooks": min(cached.loop_overhead(), cached.hooks_per_sample()),
        "prep_cpu": prep_cpu,
        "fetch_cpu_miss": fetch["miss"],
        "fetch_cpu_hit": fetch["hit"],
        "item_bytes": fetch["item_bytes"],
        "dataset_bytes": float(dataset_bytes),
        "dataset_items": plan.num_items,
        "measured": {
            "cores": cores,
            "prep_threads": int(resolved.get("num_threads", cores)),
            "reads_in_flight": int(resolved["reads_in_flight"]),
            "cache_fraction": min(1.0, plan.user_cache_bytes / dataset_bytes) if dataset_bytes else 0.0,
            "bandwidth": storage["bandwidth"],
            "latency_s": storage["latency_s"],
            "jobs": 1,
            "shared": False,
            "cache_nodes": plan.cache_nodes,
        },
        "cached_rate": cached.rate,
        "cold_rate": cold.rate,
        # Reads in flight need a batch slot: those ahead of the one in use.
        "slot_items": (int(resolved.get("prefetch", 2)) + 1) * plan.batch,
        "batch": plan.batch,
        # The job's nodes, whose memory a cluster cache could pool.
        "nodes": plan.nodes,
    }


def _run_record(plan, storage, notes, cold, cached, cold_storage, step_timings, fetch) -> dict:
    """The analysis's own record of what it ran (Analysis.result["run"])."""
    from .loader import spec_uri

    return {"source": spec_uri(plan.base), "batch_size": plan.batch, "items": plan.items,
            "dataset_items": plan.num_items, "storage_probe": storage, "notes": notes,
            "spec": plan.base,
            "windows": {name: {"batches": w.gaps, "samples": w.samples, "seconds": w.seconds,
                               "process_cpu_s": w.process_cpu, "other_processes_cores": w.other_cores()}
                        for name, w in (("cold", cold), ("cached", cached))},
            "storage_stats": cold_storage,
            "step_timings": step_timings,
            "fetch_cpu_cold": {"fetch_threads": fetch["threads"], "process": fetch["process"],
                               "io_thread": fetch["io_thread"]}}
