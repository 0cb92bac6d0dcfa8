"""Where a training job's time goes, and what would fix it: ``nostall.analyze``.

The differential measurement runs the user's own training step three ways on
a sample of the dataset (see docs/analyze.md):

1. on synthetic batches already in memory: the step's ingestion rate G;
2. on real data read cold from storage (page cache dropped, no root needed),
   which also fills a private MinIO cache holding the whole sample;
3. on the same real data again, now all from the cache.

prep stall = time per sample in 3 - time in 1; fetch stall = time in 2 - in 3.
A storage probe times cold reads one at a time and concurrently (latency and
bandwidth), and the pipeline's own stats give each stage's CPU cost per item.
The C++ model (nostall/analyze.h) turns those into rate limits per resource,
calibrated to reproduce the measured runs, and answers what-if questions.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
import time

from . import _nostall
from ._progress import Phase
from .errors import ResourceError

__all__ = ["analyze", "Analysis", "load_step", "contradictions"]

# Same as kModelNoise in nostall/analyze.h.
_NOISE = 0.05

_BOTTLENECK_HELP = {
    "compute": "the training step itself: the data pipeline keeps up",
    "prep": "decoding and augmenting on the CPU",
    "fetch": "reading from storage",
}
_LIMIT_HELP = {
    "compute": "the step's own rate",
    "cpu": "CPU cores",
    "prep_threads": "prep threads",
    "bandwidth": "storage bandwidth",
    "latency": "storage latency (too few reads in flight)",
}


def load_step(target: str):
    """Resolves ``"module:function"`` or ``"path/to/file.py:function"`` to a callable."""
    if ":" not in target:
        raise ValueError(f"step must be MODULE:FUNCTION or FILE.py:FUNCTION, not {target!r}")
    where, name = target.rsplit(":", 1)
    if where.endswith(".py"):
        if not os.path.exists(where):
            raise FileNotFoundError(f"step file {where!r} does not exist")
        mod_name = "_nostall_step_" + os.path.splitext(os.path.basename(where))[0]
        spec = importlib.util.spec_from_file_location(mod_name, where)
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        spec.loader.exec_module(module)
    else:
        # The step's module may sit in the current folder; it is looked for
        # there last, so no file in that folder (a json.py, a numpy.py) ever
        # stands in for a module nostall or Python itself imports.
        if os.getcwd() not in sys.path:
            sys.path.append(os.getcwd())
        module = importlib.import_module(where)
    fn = getattr(module, name, None)
    if not callable(fn):
        raise ValueError(f"{where} has no function {name!r}")
    return fn


# Concurrent reads of the storage probe where the loader's adapt (remote storage).
_PROBE_CONCURRENCY = 32

# A timed window shorter than this many batch arrivals (or seconds) says too
# little: it is widened with more epochs, or refused.
_MIN_GAPS = 8
_MIN_SECONDS = 1.0


def _machine_kernel_s():
    """CPU seconds the cores this process may run on have spent in the kernel
    (system, irq, softirq; all processes), from /proc/stat; None where it
    cannot be read. Other processes' own (user) work is left out: on a busy
    machine it would be taken for the cost of this job's reads."""
    try:
        allowed = {f"cpu{c}" for c in os.sched_getaffinity(0)}
        busy = 0
        with open("/proc/stat") as f:
            for line in f:
                fields = line.split()
                if fields and fields[0] in allowed:
                    _user, _nice, system, _idle, _iowait, irq, softirq = map(int, fields[1:8])
                    busy += system + irq + softirq
        return busy / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, AttributeError):
        return None


def _process_cpu_s():
    t = os.times()
    return t.user + t.system


def _process_system_s():
    return os.times().system


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
        self.process_sys = 0.0
        self.machine_cpu = 0.0
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

    def other_cpu_per_sample(self):
        """The kernel's CPU outside this process's own system time (I/O
        completion, page-cache work for it, mostly) per sample."""
        if self.samples == 0 or self.machine_cpu is None:
            return 0.0
        return max(0.0, self.machine_cpu - self.process_sys) / self.samples

    def run_epoch(self, loader, step, epoch, warm, phase):
        """One epoch through ``step``; the window covers batch ``warm`` to the last."""
        loader.set_epoch(epoch)
        n_batches = len(loader)
        t0 = t_last = None
        samples = gaps = 0
        before = after = cpu0 = machine0 = None
        steps = []  # the steps of the batches from `warm` on
        for k, b in enumerate(loader):
            args = _step_args(b)
            if k == n_batches - 1 and t0 is not None:
                _sync()  # the window ends when the queued GPU work of earlier steps is done
            now = time.perf_counter()
            if k == warm:
                t0, before = now, loader.stats()
                cpu0, sys0, machine0 = _process_cpu_s(), _process_system_s(), _machine_kernel_s()
            elif t0 is not None:
                samples += _batch_size(args)
                gaps += 1
                t_last = now
            if t_last is not None and k == n_batches - 1:
                cpu1, sys1, machine1 = _process_cpu_s(), _process_system_s(), _machine_kernel_s()
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
            cpu1, sys1, machine1 = _process_cpu_s(), _process_system_s(), _machine_kernel_s()
            after = loader.stats()
        self.samples += samples
        self.gaps += gaps
        self.seconds += t_last - t0
        self.process_cpu += cpu1 - cpu0
        self.process_sys += sys1 - sys0
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


def _step_args(batch):
    """What ``step`` is called with for a batch: ``(images, labels)``, or a
    records loader's dict alone (``step(batch)``)."""
    return (batch,) if isinstance(batch, dict) else tuple(batch)[:2]


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


def analyze(spec, step, *, items: int | None = None, warmup_batches: int = 2,
            step_seconds: float = 2.0, progress: bool = True) -> "Analysis":
    """Measures where ``step``'s time goes on the data ``spec`` describes, and models what-ifs.

    spec: a loader spec (dict, JSON text, path to a JSON file, or a Loader).
    step: called as ``step(images, labels)`` for one training step on a batch
        (``step(batch)``, the dict, for a spec with ``fields``: docs/records.md;
        ``step(images, targets)`` for a ``nostall.datasets.Coco`` dataset).
    items: how many items to sample from the dataset (default: all of it, up
        to 4096, and at least 20 batches' worth when the dataset has them).
    warmup_batches: batches of each epoch run before the timing starts (the
        step's first calls: allocation, autotuning of kernels, lazy init).
    step_seconds: how long the step is timed alone, on synthetic batches
        already in memory (its rate G, the rate without any data stall).
    progress: print each phase and a progress bar to stderr.

    The step runs as it is, optimizer included: analyse a copy of the model,
    or before training. Returns an :class:`Analysis`.
    """
    from .loader import Loader

    import torch

    from .cache import parse_size
    from .loader import read_spec, spec_uri

    # A Loader's Python hooks (docs/records.md) run in every loader made here:
    # they are part of taking each batch, and their time is reported apart.
    hooks = getattr(spec, "_hooks", None) if isinstance(spec, Loader) else None

    def loader_of(spec):
        return Loader._built(read_spec(spec), hooks, copy=False, return_indices=False,
                             output="torch")

    base = read_spec(spec)
    batch = int(base.get("batch_size", 1))
    tiers = base.get("cache") or []
    if isinstance(tiers, dict):
        tiers = [tiers]
    # The user's cache as the model sees it: its back tier (the cluster tier
    # behind a node's, or the one tier), and the nodes that pool it.
    back = tiers[-1] if tiers and isinstance(tiers[-1], dict) else {}
    user_cache_bytes = parse_size(back["bytes"]) if back.get("bytes") else 0
    if items is not None and items <= 0:
        raise ValueError("items must be positive")
    # The configuration is analysed as it stands: unset knobs at their
    # defaults, not moved by the autotuner while the runs are measured (the
    # table names where the autotuner would start instead).
    run = {**base, "autotune": "off"}
    run.pop("cache", None)
    # A cluster cache pools every rank's share (cache.h, CacheConfig.pool_parts).
    cache_nodes = (int(base.get("world_size", 1) or 1)
                   if back.get("driver") == "memcached" else 1)
    with loader_of({**run, "batch_size": 1, "prefetch": 0, "num_threads": 1,
                           "reads_in_flight": 1, "subset": 1}) as probe:
        num_items = probe.num_items
        source = probe.spec["source"]  # its driver and every option, resolved

    def page_cache(spec, drop):
        """`spec` reading local files past the page cache (`drop`) or
        through it; remote storage has no page cache to drop."""
        if "drop_page_cache" not in source.get("options", {}):
            return spec
        return {**spec, "source": {**source, "options": {**source["options"],
                                                         "drop_page_cache": drop}}}

    if items is None:
        items = min(num_items, max(4096, 20 * batch))
    items = min(items, num_items)
    run["subset"] = items if items < num_items else 0

    n_batches = -(-items // batch) if not base.get("drop_last") else items // batch
    if n_batches < 3:
        raise ValueError(
            f"a sample of {items} items makes {n_batches} batch(es) of {batch}: too few to "
            "time a step against (at least 3 per epoch); give more items or a smaller batch_size")

    cache_name = f"nostall-analyze-{os.getpid()}"
    cores = _nostall.available_cores()
    notes = []
    phases = Phase(progress, total=7)

    with loader_of(run) as plain:
        resolved = plain.spec
        shape = (batch,) + tuple(plain.sample_shape)
        reads = int(resolved["reads_in_flight"])
        real = None
        if resolved.get("fields"):  # the step takes the records' dict: time it on a real one
            real = _step_args(_copied(next(iter(plain))))
        memory = _InMemory(shape, resolved["dtype"], batch, torch, real)
        step_profile = _step_alone(step, memory, step_seconds, phases, torch)
        # Storage, directly: cold reads one at a time, then `reads` at a time
        # (adaptive reads, 0, on remote storage: as many as the probe's reads
        # can use, so a shared pipe shows).
        phases.begin("storage probe (cold reads)")
        concurrency = reads if reads > 0 else _PROBE_CONCURRENCY
        # At least 8 reads per reader: a few waves say little about a rate.
        storage = json.loads(plain._require_core().probe_storage(
            min(64, items), min(max(128, 8 * concurrency), items), concurrency))
        phases.end(f"{_mb(storage['bandwidth'])}, {storage['latency_s'] * 1e3:.2f} ms latency")
    probed = storage["sequential"]["bytes"] + storage["concurrent"]["bytes"]
    probed_reads = storage["sequential"]["reads"] + storage["concurrent"]["reads"]
    mean_bytes = probed / max(1, probed_reads)

    # A private MinIO cache sized for the whole sample (from the probe's mean
    # item size, with room to spare), filled after the cold run: the cold run
    # is the user's configuration, and copying into a cache as it reads would
    # cost it CPU (about 3% of a prep-bound run) the user's run does not pay.
    cached_spec = page_cache({**run, "cache": [{"driver": "minio", "name": cache_name,
                                                "bytes": int(mean_bytes * items * 1.3) + (8 << 20)}]},
                             True)
    warm = min(warmup_batches, max(0, n_batches // 4))
    cold, cached = _Window(), _Window()
    phases.begin("real data, cold storage")
    with loader_of(page_cache(run, True)) as loader:
        epoch, started = 0, time.perf_counter()
        while epoch == 0 or (cold.too_short() and time.perf_counter() - started < 60):
            # A short epoch is timed again (cold again: the pages are dropped).
            loader._require_core().evict_page_cache()
            cold.run_epoch(loader, step, epoch, warm if epoch == 0 else 0, phases)
            epoch += 1
        cold_storage = loader.stats().get("storage")  # remote storage: requests, latency
    phases.end(f"{cold.rate:,.0f} samples/s")
    _step_again(step, memory, max(0.25, step_seconds / 2), phases,
                step_profile)
    try:
        try:
            loader = loader_of(cached_spec)
        except ResourceError as e:  # /dev/shm too small for the sample: the page cache stands in
            notes.append(f"no shared-memory cache for the sample ({e}); "
                         "the cached run read through the page cache")
            loader = loader_of(page_cache(run, False))
        with loader:
            phases.begin("filling the cache (not timed)")
            loader.set_epoch(0)
            for k, _ in enumerate(loader):
                phases.update(k + 1, n_batches)
            phases.end(f"{items:,} items")

            phases.begin("real data, cached")
            # Cached epochs are quick: time a few, for a steadier CPU rate.
            epoch, started = 1, time.perf_counter()
            while epoch <= 3 or (cached.too_short() and time.perf_counter() - started < 60):
                cached.run_epoch(loader, step, epoch, warm if epoch == 1 else 0, phases)
                epoch += 1
                if cached.seconds >= 2.0 and not cached.too_short():
                    break
            phases.end(f"{cached.rate:,.0f} samples/s")
            stats = loader.stats()
        _step_again(step, memory, max(0.25, step_seconds / 2), phases, step_profile)
        _step_on_one_thread(step, memory, max(0.5, step_seconds / 2), phases, torch,
                            step_profile)
    finally:
        try:
            _nostall.remove_cache(cache_name)
        except Exception:
            pass
    for name, w in (("cold", cold), ("cached", cached)):
        if w.too_short():
            raise RuntimeError(
                f"the {name} run timed only {w.gaps} batches in {w.seconds:.2f} s, too few to "
                "trust; give more items (a larger sample) or a smaller batch_size")

    prep_items = cold.delta("prep", "items") + cached.delta("prep", "items")
    prep_cpu = ((cold.delta("prep", "busy_cpu_s") + cached.delta("prep", "busy_cpu_s"))
                / prep_items if prep_items > 0 else 0.0)
    cache_epochs = stats.get("cache", {}).get("epochs", [])
    if len(cache_epochs) >= 2 and cache_epochs[1]["hit_rate"] < 0.95:
        notes.append(f"the cached run hit only {cache_epochs[1]['hit_rate']:.0%} "
                     "of its reads in the cache")
    # Encoded bytes per item: what the cold epoch read (the index may not know sizes).
    fetched = cold.delta("fetch", "items")
    item_bytes = (cold.delta("fetch", "bytes") / fetched) if fetched > 0 else mean_bytes
    dataset_bytes = item_bytes * num_items
    # Reading cold costs more CPU than the fetch threads' own clocks show:
    # the kernel's work outside this process (I/O completion, page-cache
    # drops) and, in a process whose threads already share the cores, more
    # of everything else (more wake-ups, more spinning). All of it is the
    # price of reading cold, so the fetch CPU per item from storage is the
    # cached fetch CPU plus the whole difference in CPU per sample, cold
    # minus cached, this process and the kernel's work for it, or at least
    # what the fetch threads' clocks say.
    fetch_hit = cached.per_item("fetch")
    fetch_threads = max(0.0, cold.per_item("fetch") - fetch_hit)
    process_extra = max(0.0, cold.cpu_per_sample() - cached.cpu_per_sample())
    # The kernel's work outside the process is counted for local files only
    # (page-cache drops, I/O completion); a remote store's reads are this
    # process's own (the client's I/O thread and its system calls), and
    # anything else in the kernel then belongs to other processes.
    kernel_extra = (max(0.0, cold.other_cpu_per_sample() - cached.other_cpu_per_sample())
                    if cold_storage is None else 0.0)
    fetch_miss = fetch_hit + max(fetch_threads, process_extra) + kernel_extra

    step_timings = step_profile.pop("step_rate_timings", None)
    # A run on real data cannot be faster than the step alone: where one
    # was, the machine's speed moved at least that much.
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
    step_profile.pop("step_cpu_timings", None)
    profile = {
        **step_profile,
        # The loop around the step, as the cached run (no stall from storage) shows it.
        "loop_overhead": cached.loop_overhead(),
        # The share of the real-data runs' time the loop waited for a batch.
        "waited": min(1.0, max(w.wait_s / w.seconds if w.seconds > 0 else 0.0 for w in (cold, cached))),
        # Of that, the Python hooks' part (run as each batch is taken).
        "hooks": min(cached.loop_overhead(), hooks_s),
        "prep_cpu": prep_cpu,
        "fetch_cpu_miss": fetch_miss,
        "fetch_cpu_hit": fetch_hit,
        "item_bytes": item_bytes,
        "dataset_bytes": float(dataset_bytes),
        "dataset_items": num_items,
        "measured": {
            "cores": cores,
            "prep_threads": int(resolved.get("num_threads", cores)),
            "reads_in_flight": reads,
            "cache_fraction": min(1.0, user_cache_bytes / dataset_bytes) if dataset_bytes else 0.0,
            "bandwidth": storage["bandwidth"],
            "latency_s": storage["latency_s"],
            "jobs": 1,
            "shared": False,
            "cache_nodes": cache_nodes,
        },
        "cached_rate": cached.rate,
        "cold_rate": cold.rate,
        # Reads in flight need a batch slot: those ahead of the one in use.
        "slot_items": (int(resolved.get("prefetch", 2)) + 1) * batch,
        # The job's nodes, whose memory a cluster cache could pool.
        "nodes": int(base.get("world_size", 1) or 1),
    }
    result = json.loads(_nostall.analysis_json(json.dumps(profile)))
    result["autotune_start"] = autotune_start(result, cores)
    result["run"] = {"source": spec_uri(base), "batch_size": batch, "items": items,
                     "dataset_items": num_items, "storage_probe": storage, "notes": notes,
                     "spec": base,
                     "windows": {name: {"batches": w.gaps, "samples": w.samples,
                                        "seconds": w.seconds,
                                        "process_cpu_s": w.process_cpu,
                                        "machine_kernel_s": w.machine_cpu}
                                 for name, w in (("cold", cold), ("cached", cached))},
                     "storage_stats": cold_storage,
                     "step_timings": step_timings,
                     "fetch_cpu_cold": {"fetch_threads": fetch_threads,
                                        "process": process_extra, "kernel": kernel_extra}}
    return Analysis(result)


def autotune_start(result: dict, cores: float) -> dict:
    """The configuration the autotuner would start from for this job: just
    enough for the step's rate in the loop (no faster), by the same rules it
    tunes with (docs/autotune.md): prep threads that carry the prep CPU at 80%
    busy, reads in flight by Little's law (AutoReadsInFlight, nostall/model.h), 2
    batches ahead."""
    prof = result["profile"]
    need = result["predicted"]["limits"].get("compute") or prof["step_rate"]  # the step's rate
    return json.loads(_nostall.autotune_start_json(need, prof["prep_cpu"], prof["measured"]["latency_s"],
                                                   prof["item_bytes"], cores))


def contradictions(result: dict) -> list:
    """Where an analysis's printed figures disagree with each other (an empty list: none).

    The stall breakdown, the bottleneck and the recommendation must tell one
    story: a compute bottleneck with no stall beyond the noise, and a
    recommendation of nothing; a prep or fetch bottleneck with a measured
    stall of that kind and a recommendation that changes something (or says
    the model cannot explain the stall); the step's rate printed as measured.
    """
    out = []
    b = result["breakdown"]
    stall = b["prep_stall"] + b["fetch_stall"]
    # A stall within the machine's noise during the analysis is no stall:
    # the step's timings' spread, as a share of the step's own time.
    noise = result.get("stall_noise", max(_NOISE, result["profile"].get("noise", 0.0)))
    named = result["bottleneck"]
    limit = result["predicted"]["limit"]
    rec = result["recommendation"]
    m = result["profile"]["measured"]
    from ._report import hit_rate

    changes = [k for k in ("reads_in_flight", "cores", "prep_threads")
               if rec["config"][k] > m[k] + 1e-9]
    if hit_rate(rec["config"]) > hit_rate(m) + 1e-9:
        changes.insert(0, "cache_fraction")
    waited = result["profile"].get("waited", -1.0)
    if named == "compute" and stall > noise and not 0 <= waited <= noise:
        out.append(f"bottleneck compute with a measured stall of {stall:.1%}")
    if named != "compute" and stall <= noise:
        out.append(f"bottleneck {named} with no stall beyond the noise ({stall:.1%})")
    if named == "fetch" and b["fetch_stall"] <= noise:
        out.append(f"bottleneck fetch with a fetch stall of {b['fetch_stall']:.1%}")
    if named == "prep" and b["prep_stall"] <= noise and not (
            limit == "cpu" and stall > noise):
        out.append(f"bottleneck prep with a prep stall of {b['prep_stall']:.1%}")
    if named == "compute" and changes:
        out.append(f"bottleneck compute, yet the recommendation changes {', '.join(changes)}")
    if named == "fetch" and changes and not {"cache_fraction", "reads_in_flight"} & set(changes) \
            and result["predicted"]["bottleneck"] == "fetch":
        out.append("bottleneck fetch, yet the recommendation changes neither cache nor reads")
    g = result["predicted"]["limits"]["compute"]
    prof = result["profile"]
    loop_rate = 1 / (1 / prof["step_rate"] + prof.get("loop_overhead", 0.0))
    if g is not None and abs(g - loop_rate) > 1e-6 * g:
        out.append(f"the step's rate in the loop printed as {g:,.0f}, measured "
                   f"{loop_rate:,.0f}")
    return out


class Analysis:
    """The result of :func:`analyze`: measurements, the calibrated model and its answers."""

    def __init__(self, result: dict):
        self.result = result
        self.profile = result["profile"]

    @property
    def bottleneck(self) -> str:
        """"compute", "prep" or "fetch" at the measured configuration."""
        return self.result["bottleneck"]

    @property
    def breakdown(self) -> dict:
        """Fractions of time per sample (cold storage): compute, prep_stall, fetch_stall."""
        return dict(self.result["breakdown"])

    @property
    def recommendation(self) -> dict:
        """The smallest change that removes the stall: ``["config"]`` (the
        whole configuration; where it equals ``profile["measured"]``, nothing
        to change), ``["rate"]`` its predicted samples/s, ``["cache_bytes"]``
        the cache it needs, ``["reaches_step_rate"]`` whether it feeds the step."""
        return dict(self.result["recommendation"])

    def contradictions(self) -> list:
        """Where the printed figures disagree with each other (an empty list: none);
        see :func:`nostall.analyze.contradictions`."""
        return contradictions(self.result)

    def predict(self, **config) -> dict:
        """Predicted samples/s per job for a configuration (fields not given: as measured).

        Fields: cores, prep_threads, reads_in_flight, cache_fraction,
        bandwidth (bytes/s), latency_s, jobs, shared; cache_nodes (the cache
        pooled across that many nodes, each holding cache_fraction: the
        cluster cache), peer_latency_s, peer_bandwidth (bytes/s). ``cores``
        without ``prep_threads`` means what the table's "cores" row means: a
        prep thread per core (fewer where the step's own threads need some).
        Returns ``["rate"]`` (samples/s), ``["limit"]`` (what bounds it),
        ``["config"]`` (the configuration predicted, defaults filled in).
        """
        return json.loads(_nostall.predict_json(json.dumps(self.profile), json.dumps(config)))

    def to_json(self) -> str:
        """Everything measured and predicted, as indented JSON."""
        return json.dumps(self.result, indent=2)

    def save_json(self, path) -> None:
        """Writes :meth:`to_json` to ``path``."""
        with open(path, "w") as f:
            f.write(self.to_json())

    def save_html(self, path) -> None:
        """Writes a self-contained HTML report (tables and what-if charts) to ``path``."""
        from ._report import render_html

        with open(path, "w") as f:
            f.write(render_html(self.result))

    def table(self) -> str:
        """The report as text: the stall breakdown, the bottleneck, what removes
        the stall, and the what-if rows (cache, cores, storage, jobs)."""
        from ._report import render_table

        return render_table(self.result)

    def __str__(self):
        return self.table()

    def __repr__(self):
        return (f"<nostall.Analysis bottleneck={self.bottleneck} "
                f"rate={self.result['predicted']['rate']:.0f}/s>")
