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

__all__ = ["analyze", "Analysis", "load_step"]

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


def _spec_dict(spec):
    from .loader import Loader

    if isinstance(spec, Loader):
        return spec.spec
    if isinstance(spec, dict):
        return dict(spec)
    if isinstance(spec, (str, os.PathLike)):
        text = str(spec)
        if not text.lstrip().startswith("{"):
            with open(text) as f:
                text = f.read()
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"the loader spec is not valid JSON: {e}") from None
    raise TypeError("spec must be a dict, JSON text, a path to a JSON file, or a nostall.Loader")


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
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        module = importlib.import_module(where)
    fn = getattr(module, name, None)
    if not callable(fn):
        raise ValueError(f"{where} has no function {name!r}")
    return fn


def _timed_epochs(loader, step, first_epoch, warm, phase, min_seconds=0.0, max_epochs=1):
    """Runs epochs through ``step``; returns (samples/s, stats before, stats after).

    The first ``warm`` batches start the pipeline and are not timed; further
    epochs (up to ``max_epochs``) run until ``min_seconds`` have been timed.
    The pipeline runs on from one epoch into the next, so the time is steady.
    """
    samples, t0, before = 0, None, None
    for epoch in range(first_epoch, first_epoch + max_epochs):
        loader.set_epoch(epoch)
        n_batches = len(loader)
        for k, (images, labels) in enumerate(loader):
            if t0 is None and k == warm:
                t0 = time.perf_counter()
                before = loader.stats()
            step(images, labels)
            if t0 is not None:
                samples += images.shape[0]
            phase.update(k + 1, n_batches)
            del images, labels
        if t0 is not None and time.perf_counter() - t0 >= min_seconds:
            break
    _sync()
    elapsed = time.perf_counter() - t0 if t0 is not None else 0.0
    after = loader.stats()
    return (samples / elapsed if elapsed > 0 else 0.0), before, after


def _sync():
    """Waits for queued GPU work, so a timed window counts what the step enqueued."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def _mb(bandwidth):
    return "unlimited" if not bandwidth else f"{bandwidth / 1e6:,.1f} MB/s"


def _step_alone(step, shape, dtype, batch, seconds, phases, torch):
    """Phase 1: the step on one synthetic batch already in memory: (samples/s, CPU s/sample)."""
    phases.begin("step on synthetic in-memory batches")
    images = (torch.rand(shape) if dtype == "float32"
              else torch.randint(0, 256, shape, dtype=torch.uint8))
    labels = torch.zeros(batch, dtype=torch.int64)
    for _ in range(2):
        step(images, labels)
    steps, t0, c0 = 0, time.perf_counter(), time.process_time()
    while True:
        step(images, labels)
        steps += 1
        elapsed = time.perf_counter() - t0
        phases.update(min(elapsed, seconds), seconds)
        if (elapsed >= seconds and steps >= 5) or steps >= 5000:
            _sync()
            elapsed = time.perf_counter() - t0
            break
    rate = steps * batch / elapsed
    phases.end(f"G = {rate:,.0f} samples/s")
    return rate, (time.process_time() - c0) / (steps * batch)


def _delta(after, before, stage, key):
    return after["stages"][stage][key] - before["stages"][stage][key]


def _per_item(after, before, stage):
    items = _delta(after, before, stage, "items")
    return _delta(after, before, stage, "busy_cpu_s") / items if items > 0 else 0.0


def analyze(spec, step, *, items: int | None = None, warmup_batches: int = 2,
            step_seconds: float = 2.0, progress: bool = True) -> "Analysis":
    """Measures where ``step``'s time goes on the data ``spec`` describes, and models what-ifs.

    spec: a loader spec (dict, JSON text, path to a JSON file, or a Loader).
    step: called as ``step(images, labels)`` for one training step on a batch.
    items: how many items to sample from the dataset (default: all of it, up
        to 4096, and at least 20 batches' worth when the dataset has them).
    progress: print each phase and a progress bar to stderr.
    """
    from .loader import Loader

    import torch

    base = _spec_dict(spec)
    batch = int(base.get("batch_size", 1))
    user_cache_bytes = int(base.get("cache_bytes", 0) or 0) if base.get("cache_name") else 0
    if items is not None and items <= 0:
        raise ValueError("items must be positive")
    run = dict(base)
    for key in ("cache_name", "cache_bytes", "cache_policy"):
        run.pop(key, None)
    with Loader.from_spec({**run, "batch_size": 1, "prefetch": 0, "num_threads": 1,
                           "reads_in_flight": 1, "subset": 1}) as probe:
        num_items = probe.num_items
    if items is None:
        items = min(num_items, max(4096, 20 * batch))
    items = min(items, num_items)
    run["subset"] = items if items < num_items else 0

    cache_name = f"nostall-analyze-{os.getpid()}"
    cores = _nostall.available_cores()
    notes = []
    phases = Phase(progress, total=4)

    with Loader.from_spec(run) as plain:
        resolved = plain.spec
        shape = (batch,) + tuple(plain.sample_shape)
        reads = int(resolved["reads_in_flight"])
        step_rate, step_cpu = _step_alone(step, shape, resolved["dtype"], batch, step_seconds,
                                          phases, torch)
        # Storage, directly: cold reads one at a time, then `reads` at a time.
        phases.begin("storage probe (cold reads)")
        storage = json.loads(plain._require_core().probe_storage(
            min(64, items), min(128, items), reads))
        phases.end(f"{_mb(storage['bandwidth'])}, {storage['latency_s'] * 1e3:.2f} ms latency")
    probed = storage["sequential"]["bytes"] + storage["concurrent"]["bytes"]
    probed_reads = storage["sequential"]["reads"] + storage["concurrent"]["reads"]
    mean_bytes = probed / max(1, probed_reads)

    # A private MinIO cache sized for the whole sample (from the probe's mean
    # item size, with room to spare); the cold epoch fills it.
    cached_spec = {**run, "cache_name": cache_name,
                   "cache_bytes": int(mean_bytes * items * 1.3) + (8 << 20),
                   "drop_page_cache": True}
    try:
        try:
            loader = Loader.from_spec(cached_spec)
        except ResourceError as e:  # /dev/shm too small for the sample: the page cache stands in
            notes.append(f"no shared-memory cache for the sample ({e}); "
                         "the cached run read through the page cache")
            loader = Loader.from_spec({**run, "drop_page_cache": False})
        with loader:
            phases.begin("real data, cold storage")
            loader._require_core().evict_page_cache()
            warm = min(warmup_batches, max(0, len(loader) // 4))
            cold_rate, b0, a0 = _timed_epochs(loader, step, 0, warm, phases)
            phases.end(f"{cold_rate:,.0f} samples/s")

            phases.begin("real data, cached")
            # Cached epochs are quick: time a few, for a steadier CPU rate.
            cached_rate, b1, a1 = _timed_epochs(loader, step, 1, warm, phases,
                                                min_seconds=2.0, max_epochs=3)
            phases.end(f"{cached_rate:,.0f} samples/s")
            stats = loader.stats()
    finally:
        try:
            _nostall.remove_cache(cache_name)
        except Exception:
            pass

    prep_items = _delta(a0, b0, "prep", "items") + _delta(a1, b1, "prep", "items")
    prep_cpu = ((_delta(a0, b0, "prep", "busy_cpu_s") + _delta(a1, b1, "prep", "busy_cpu_s"))
                / prep_items if prep_items > 0 else 0.0)
    cache_epochs = stats.get("cache", {}).get("epochs", [])
    if len(cache_epochs) >= 2 and cache_epochs[1]["hit_rate"] < 0.95:
        notes.append(f"the cached run hit only {cache_epochs[1]['hit_rate']:.0%} "
                     "of its reads in the cache")
    # Encoded bytes per item: what the cold epoch read (the index may not know sizes).
    fetched = _delta(a0, b0, "fetch", "items")
    item_bytes = (_delta(a0, b0, "fetch", "bytes") / fetched) if fetched > 0 else mean_bytes
    dataset_bytes = item_bytes * num_items

    profile = {
        "step_rate": step_rate,
        "step_cpu": step_cpu,
        "prep_cpu": prep_cpu,
        "fetch_cpu_miss": _per_item(a0, b0, "fetch"),
        "fetch_cpu_hit": _per_item(a1, b1, "fetch"),
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
        },
        "cached_rate": cached_rate,
        "cold_rate": cold_rate,
    }
    result = json.loads(_nostall.analysis_json(json.dumps(profile)))
    result["run"] = {"source": base.get("source"), "batch_size": batch, "items": items,
                     "dataset_items": num_items, "storage_probe": storage, "notes": notes,
                     "spec": base}
    return Analysis(result)


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
        return dict(self.result["recommendation"])

    def predict(self, **config) -> dict:
        """Predicted samples/s per job for a configuration (fields not given: as measured).

        Fields: cores, prep_threads, reads_in_flight, cache_fraction,
        bandwidth (bytes/s), latency_s, jobs, shared.
        """
        return json.loads(_nostall.predict_json(json.dumps(self.profile), json.dumps(config)))

    def to_json(self) -> str:
        return json.dumps(self.result, indent=2)

    def save_json(self, path) -> None:
        with open(path, "w") as f:
            f.write(self.to_json())

    def save_html(self, path) -> None:
        from ._report import render_html

        with open(path, "w") as f:
            f.write(render_html(self.result))

    def table(self) -> str:
        from ._report import render_table

        return render_table(self.result)

    def __str__(self):
        return self.table()

    def __repr__(self):
        return (f"<nostall.Analysis bottleneck={self.bottleneck} "
                f"rate={self.result['predicted']['rate']:.0f}/s>")
