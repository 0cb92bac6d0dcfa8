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

from . import _nostall

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
    from . import _measure

    result = _measure.run(spec, step, items, warmup_batches, step_seconds, progress)
    result["autotune_start"] = autotune_start(result, _nostall.available_cores())
    return Analysis(result)



def autotune_start(result: dict, cores: float) -> dict:
    """The configuration the autotuner would start from for this job: just
    enough for the step's rate in the loop (no faster), by the same rules it
    tunes with (docs/autotune.md): prep threads that carry the prep CPU at 80%
    busy, reads in flight by Little's law (AutoReadsInFlight, nostall/model.h), 2
    batches ahead."""
    prof = result["profile"]
    need = result["predicted"]["limits"].get("compute") or prof["step_rate"]  # the step's rate
    start = json.loads(_nostall.autotune_start_json(need, prof["prep_cpu"], prof["measured"]["latency_s"],
                                                    prof["item_bytes"], cores))
    batch = prof.get("batch", 0)
    if batch and start["reads_in_flight"] > (start["prefetch"] + 1) * batch:
        # Each read in flight needs room in a batch slot (as the recommendation says).
        start["prefetch"] = -(-start["reads_in_flight"] // batch) - 1
    return start


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
    # A stall beyond the noise split between prep and fetch, each part within
    # it, is named by its larger part (and the report says it is split).
    split = stall > noise and b["prep_stall"] <= noise and b["fetch_stall"] <= noise
    if named == "fetch" and b["fetch_stall"] <= noise and not (split and b["fetch_stall"] >= b["prep_stall"]):
        out.append(f"bottleneck fetch with a fetch stall of {b['fetch_stall']:.1%}")
    if named == "prep" and b["prep_stall"] <= noise and not (
            limit == "cpu" and stall > noise) and not (split and b["prep_stall"] >= b["fetch_stall"]):
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
