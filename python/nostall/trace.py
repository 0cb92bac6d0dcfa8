"""Where a training step's time goes in your own PyTorch profiler trace, and
what a change would give: ``nostall.analyze_trace``.

The trace (what ``torch.profiler`` writes: Chrome-trace JSON, plain or
gzipped) is read in C++ into a dependency graph, as Holistic Trace Analysis
and Daydream build one: CPU threads and GPU streams as chains, kernel
launches, synchronisations, and waiting for the next batch as nodes of its
own. A change is a rule applied to the graph, which is then replayed, so the
overlap the trace shows is kept. With a loader spec, the pipeline nostall
would run on that data is measured with :func:`nostall.analyze.analyze`'s
runs and its rate comes from the same model. See docs/trace.md.
"""

from __future__ import annotations

import html
import json
import os
import time

from . import _nostall

__all__ = ["analyze_trace", "mark", "TraceAnalysis"]

_KINDS = ("data", "cpu", "gpu", "copy", "sync")
_KIND_HELP = {
    "data": "waiting for data",
    "cpu": "CPU (operators, Python, launches)",
    "gpu": "GPU kernels",
    "copy": "GPU copies",
    "sync": "CPU waiting for the GPU",
}
_GPU_CHANGES = ("gpu_speedup", "gemm_speedup", "pinned_copies", "amp")


def _children_cpu_s() -> float | None:
    """CPU seconds (user + system) of this process's descendants now alive
    (a DataLoader's workers), from /proc; None where it cannot be read."""
    try:
        tick = os.sysconf("SC_CLK_TCK")
        todo, total, seen = [os.getpid()], 0, set()
        while todo:
            pid = todo.pop()
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    for child in f.read().split():
                        if int(child) not in seen:
                            seen.add(int(child))
                            todo.append(int(child))
            if pid != os.getpid():
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])  # utime, stime
        return total / tick
    except (OSError, ValueError, IndexError):
        return None


def mark(prof, *, loader=None) -> dict:
    """Writes into the trace what a trace cannot show of the loop that
    records it: its intra-op and inter-op threads (``torch.set_num_threads``),
    the cores it may run on, ``OMP_NUM_THREADS``/``MKL_NUM_THREADS`` where
    set, given the DataLoader (or any loader with ``num_workers``) its
    worker processes, and, while steps are recorded, the CPU this process's
    child processes (the workers) used beside them. :func:`analyze_trace`
    reads them, so its predictions start from the threads the loop really
    ran on and from how much the workers took of its cores.

    Call it inside ``with torch.profiler.profile(...) as prof:``, schedule
    or not (the profiler's metadata, ``"nostall"`` at the trace's top level),
    before the loop's first ``prof.step()``. Returns what it wrote at first.
    """
    import torch

    marks = {"intra_op_threads": torch.get_num_threads(),
             "interop_threads": torch.get_num_interop_threads(),
             "cores": len(os.sched_getaffinity(0))}
    workers = getattr(loader, "num_workers", None)
    if isinstance(workers, int):
        marks["num_workers"] = workers
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        if os.environ.get(name, "").strip().isdigit():
            marks[name.lower()] = int(os.environ[name])
    value = json.dumps(marks)
    # Preset: added each time the profiler starts (a schedule's cycles);
    # where it already records, added now as well.
    prof.preset_metadata_json("nostall", value)
    recording = (torch.profiler.ProfilerAction.RECORD, torch.profiler.ProfilerAction.RECORD_AND_SAVE)
    if getattr(prof, "current_action", None) in recording:
        prof.add_metadata_json("nostall", value)
    _sample_workers_each_step(prof, dict(marks), recording)
    return marks


def _sample_workers_each_step(prof, marks, recording):
    """After each prof.step() of a recorded step: the children's CPU since
    recording began, rewritten into the trace's metadata (the last write
    before the trace is saved holds the recorded span)."""
    step, start = prof.step, []

    def sampled_step():
        step()
        if getattr(prof, "current_action", None) not in recording:
            start.clear()
            return
        cpu = _children_cpu_s()
        if cpu is None:
            return
        now = time.perf_counter()
        if not start or cpu < start[0]:  # (a worker that ended took its CPU with it)
            start[:] = [cpu, now]
            return
        marks.update(workers_cpu_s=round(cpu - start[0], 4), workers_wall_s=round(now - start[1], 4))
        prof.add_metadata_json("nostall", json.dumps(marks))

    prof.step = sampled_step


def analyze_trace(path, spec=None, *, batch_size: int | None = None,
                  step_threads: int | None = None, items: int | None = None,
                  progress: bool = True) -> "TraceAnalysis":
    """Reads a torch.profiler trace and returns a :class:`TraceAnalysis`.

    path: the trace (``.json`` or ``.json.gz``) of a few steps of your loop,
        with ``prof.step()`` after each (the ``ProfilerStep#N`` marks).
    spec: a nostall loader spec for the same data and transforms (dict, JSON
        text, a JSON file or a Loader). With it, ``predict(loader="nostall")``
        answers at the rate nostall's pipeline is measured to reach here.
    batch_size: samples per step (default: the spec's batch size).
    step_threads: the intra-op threads the traced loop ran with (default:
        what the trace says, where it was recorded with :func:`mark`; else
        ``torch.get_num_threads()`` here, and the report says it assumed
        that); ``predict(threads=N)`` scales from it.
    items: samples the pipeline's measurement reads (see :func:`nostall.analyze`).
    """
    path = os.fspath(path)
    result = TraceAnalysis(_nostall.read_trace(path), batch_size=batch_size)
    traced = result.facts["marks"].get("intra_op_threads")
    if step_threads is not None:
        source = "given"
    elif traced is not None and traced >= 1:
        step_threads, source = int(traced), "trace"
    else:
        try:
            import torch
            step_threads = torch.get_num_threads()
        except ImportError:
            step_threads = 1
        source = "assumed"
    result.step_threads, result.threads_source = int(step_threads), source
    if spec is not None:
        result.pipeline = _measure_pipeline(result, spec, items, progress)
        if result.batch_size is None:
            result.batch_size = int(result.pipeline["run"]["batch_size"])
    return result


def _measure_pipeline(trace, spec, items, progress):
    """nostall's pipeline on the spec's data, measured by the analyzer's runs
    beside a stand-in for the traced loop: convolutions and matrix products on its threads
    for the CPU time it spends a step without waiting for data. Sharing the
    cores with the step (threads, and a core's two hyperthreads) is then
    measured, not assumed."""
    import torch

    from .analyze import analyze

    seconds, threads = trace._loop_cpu()
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        step = _stand_in_step(seconds)
        return analyze(spec, step, items=items, step_seconds=max(0.5, 20 * seconds),
                       progress=progress).result
    finally:
        torch.set_num_threads(before)


def _stand_in_step(seconds):
    """A step that does `seconds` of convolutions and matrix products alone (on torch's threads
    as they are): as many products as take that long here, so that it takes
    longer when it shares the cores."""
    import torch

    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 16, 32, 32, generator=g)
    w = torch.randn(16, 16, 3, 3, generator=g, requires_grad=True)
    a = torch.randn(128, 128, generator=g)

    def work():  # a training step's kinds of work: a convolution both ways, a matrix product
        torch.nn.functional.conv2d(x, w, padding=1).sum().backward()
        a @ a
    work()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < 0.2:
        work()
        n += 1
    reps = max(1, round(seconds / ((time.perf_counter() - t0) / n)))

    def step(*args):
        for _ in range(reps):
            work()
    return step


_SCALES = {}


def _parallel_scale(threads_from, threads_to):
    """How much longer a convolution (forward and backward) and a matrix product take on
    ``threads_to`` intra-op threads than on ``threads_from``, measured here
    (best of several runs each): on cores that share a physical core, or
    past the cores there are, it is far from ``threads_from / threads_to``."""
    key = (threads_from, threads_to)
    if key in _SCALES:
        return _SCALES[key]
    import torch

    before = torch.get_num_threads()
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 32, 56, 56, generator=g)
    w = torch.randn(32, 32, 3, 3, generator=g, requires_grad=True)
    a = torch.randn(512, 512, generator=g)

    def best(threads):  # a training step's kinds of work: forward and backward
        torch.set_num_threads(threads)
        times = []
        for _ in range(7):
            t0 = time.perf_counter()
            torch.nn.functional.conv2d(x, w, padding=1).sum().backward()
            a @ a
            times.append(time.perf_counter() - t0)
        return min(times[1:])
    try:  # the smaller of two measurements: a busy moment only ever makes one larger
        scale = min(best(threads_to) / best(threads_from) for _ in range(2))
    finally:
        torch.set_num_threads(before)
    _SCALES[key] = scale
    return scale


class TraceAnalysis:
    """A trace read into its graph: the traced split of each step along its
    critical path, and predictions for changes (:meth:`predict`)."""

    def __init__(self, handle, *, batch_size=None, step_threads=1, pipeline=None):
        self._handle = handle
        self.facts = json.loads(handle.facts_json())
        self.batch_size = batch_size
        self.step_threads = step_threads
        self.threads_source = "given"  # or "trace" (its nostall metadata), "assumed"
        self.pipeline = pipeline
        self.traced = json.loads(handle.simulate_json("{}"))

    # ---- what the trace shows ----
    @property
    def step_s(self) -> float:
        """Mean seconds per step, as traced."""
        return self.traced["step_s"]

    @property
    def path(self) -> dict:
        """Mean seconds per step on the critical path, by kind (data, cpu, gpu, copy, sync)."""
        return dict(self.traced["path"])

    @property
    def stall(self) -> float:
        """The fraction of the step spent waiting for data on the critical path."""
        return self.traced["stall"]

    @property
    def critical(self) -> str:
        """The kind with the largest share of the critical path."""
        return self.traced["critical"]

    # ---- what a change would give ----
    def _threads_change(self, threads, change, rules):
        """predict(threads=...): the ATen operators long enough to split,
        scaled as this machine scales them from the trace's threads."""
        change["threads_from"] = int(self.step_threads)
        change["threads_to"] = threads
        scale = _parallel_scale(int(self.step_threads), threads)
        change["parallel_scale"] = scale
        rules.append(f"ATen operators long enough to split (50 us or more of own time): x "
                     f"{scale:.2f}, what {threads} intra-op threads made of a convolution and "
                     f"a matrix product here against {self.threads_words()}")

    def predict(self, *, loader: str | None = None, loader_speedup: float | None = None,
                loader_free: bool = False, loader_period: float | None = None,
                gpu_speedup: float | None = None, gemm_speedup: float | None = None,
                cpu_speedup: float | None = None, pinned_copies: bool = False,
                fused_optimizer: bool = False, amp: bool = False, threads: int | None = None,
                prep_cores: float | None = None) -> dict:
        """The step with a change made, replayed on the trace's graph.

        loader: "nostall" (the loader replaced by nostall, at the rate measured
            for the spec given to :func:`analyze_trace`), or "free" (synthetic
            batches already in memory).
        loader_speedup: the loader's work per batch k times faster;
        loader_period: a loader beside the loop making a batch every this many seconds.
        gpu_speedup / gemm_speedup: all kernels, or GEMM and convolution kernels, k times faster.
        cpu_speedup: the loop's CPU work (operators, Python, launches) k times faster.
        pinned_copies: host-to-device copies from pinned memory with non_blocking=True.
        fused_optimizer: the optimizer's per-parameter operators fused (foreach=True / fused=True).
        amp: mixed precision (Daydream's rule: GEMM/convolution kernels 3x, the others 2x).
        threads: the loop's intra-op threads (torch.set_num_threads) to predict for.
        prep_cores: with loader="nostall", the cores its pipeline and the step share.

        Returns ``{"step_s", "speedup", "path", "critical", "stall", "change", "rules"}``.
        """
        change, rules = {}, []
        if loader not in (None, "nostall", "free"):
            raise ValueError(f"loader must be 'nostall' or 'free', not {loader!r}")
        if loader == "free" or loader_free:
            change["loader_free"] = True
            rules.append("batches cost nothing (synthetic, in memory)")
        if loader in ("free", "nostall") or loader_free or loader_period is not None:
            rules += self._replaced_loader_assumes()
        if loader == "nostall":
            period, why = self._nostall_period(prep_cores)
            change["loader_period"] = period
            # The batches nostall keeps ready: its slots ahead of the one in use.
            slots = self.pipeline["profile"].get("slot_items", 0)
            batch = int(self.pipeline["run"]["batch_size"])
            change["loader_prefetch"] = max(1, int(round(slots / batch)) - 1) if slots else 2
            rules.append(why)
        elif prep_cores is not None:
            raise ValueError("prep_cores is a question about nostall's pipeline: "
                             "give loader='nostall' (and a spec to analyze_trace)")
        if loader_speedup is not None:
            change["loader_speedup"] = float(loader_speedup)
            rules.append(f"the loader's work per batch / {loader_speedup:g}")
        if loader_period is not None:
            change["loader_period"] = float(loader_period)
            rules.append(f"a loader beside the loop, a batch every {loader_period * 1e3:.2f} ms")
        for key, value, rule in (
                ("gpu_speedup", gpu_speedup, "every GPU kernel / {v:g}"),
                ("gemm_speedup", gemm_speedup, "GEMM and convolution kernels / {v:g}"),
                ("cpu_speedup", cpu_speedup, "the loop's CPU work / {v:g}")):
            if value is not None:
                change[key] = float(value)
                rules.append(rule.format(v=value))
        for key, on, rule in (
                ("pinned_copies", pinned_copies,
                 "pageable host-to-device copies pinned: 2x faster, and the CPU does not wait for them"),
                ("fused_optimizer", fused_optimizer,
                 "the optimizer's Python and launches paid once per operator kind, not per parameter"),
                ("amp", amp, "mixed precision: GEMM/convolution kernels / 3, other kernels / 2 (Daydream)")):
            if on:
                change[key] = True
                rules.append(rule)
        if threads is not None:
            self._threads_change(int(threads), change, rules)
        if not self.facts["gpu_nodes"]:
            asked = [k for k in _GPU_CHANGES if k in change]
            if asked:
                raise ValueError(f"{', '.join(asked)}: the trace has no GPU work (no kernels, "
                                 "copies or sets): record it with "
                                 "activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]")
        out = json.loads(self._handle.simulate_json(json.dumps(change)))
        out["speedup"] = self.step_s / out["step_s"] if out["step_s"] > 0 else float("inf")
        out["change"] = change
        out["rules"] = rules
        return out

    def _replaced_loader_assumes(self) -> list:
        """What replacing the traced loader assumes of the loop's own work."""
        f = self.facts
        if f["loader"] != "beside" or f["contention"] >= 0.999:
            return []
        if f["contention_from_workers"]:
            m = f["marks"]
            busy = m["workers_cpu_s"] / m["workers_wall_s"]
            return [f"the loop's CPU work x{f['contention']:.2f}: its {m['intra_op_threads']:.0f} "
                    f"intra-op threads and the loader's workers ({busy:.1f} cores busy, measured "
                    f"by nostall.trace.mark) shared {m['cores']:.0f} cores, the loop's fair share "
                    f"{m['cores']:.0f} / {m['intra_op_threads'] + busy:.1f}"]
        return [f"the loop's CPU work at its least contended step, x{f['least_contended']:.2f} of "
                "the mean: the traced loader's worker processes (not in the trace) shared the cores"]

    def threads_words(self) -> str:
        """The loop's intra-op threads and where that number came from."""
        n = self.step_threads
        return {"given": f"{n} (given)",
                "trace": f"{n} (from the trace: nostall.trace.mark)",
                "assumed": f"{n} (assumed, torch's default here: the trace does not say; record it "
                           "with nostall.trace.mark(prof), or give step_threads=)"}[self.threads_source]

    def _nostall_period(self, prep_cores):
        if self.pipeline is None:
            raise ValueError("loader='nostall' needs the data: give analyze_trace(path, spec=...) "
                             "(or `nostall analyze --trace T --spec SPEC`)")
        batch = self.batch_size or int(self.pipeline["run"]["batch_size"])
        free = self.predict(loader="free")
        compute = max(1e-9, free["step_s"] - free["path"]["data"])
        cpu, threads = self._loop_cpu()
        step = {"step_rate": batch / compute, "step_cpu": cpu * threads / batch,
                "step_threads": threads, "loop_overhead": 0.0}
        config = {}
        if prep_cores is not None:
            config["cores"] = float(prep_cores)
        pred = json.loads(_nostall.predict_with_step_json(
            json.dumps(self.pipeline["profile"]), json.dumps(step), json.dumps(config)))
        limits = {k: v for k, v in pred["limits"].items() if k != "compute" and v}
        limit = min(limits, key=limits.get)
        rate = limits[limit]
        why = (f"nostall's pipeline as the analyzer's model predicts it beside this step: "
               f"{rate:,.0f} samples/s ({limit}), a batch of {batch} every "
               f"{batch / rate * 1e3:.2f} ms, the step's CPU on {threads} intra-op "
               f"thread{'s' if threads != 1 else ''}")
        return batch / rate, why

    def _loop_cpu(self):
        """(seconds, threads): the CPU time a step of the loop takes without
        waiting for data (where the traced loader's processes shared the
        cores, at its least contended), and the threads it runs on: on a
        GPU loop its CPU side on one thread, on a CPU loop all of it on its
        intra-op threads."""
        free = self.predict(loader="free")
        if self.facts["gpu_nodes"]:
            return max(1e-9, free["path"]["cpu"]), 1
        return max(1e-9, free["step_s"] - free["path"]["data"]), max(1, self.step_threads)

    # ---- reports ----
    def whatifs(self) -> list:
        """The standard questions, answered: [(question, prediction)]."""
        out = [("the loader free (synthetic batches)", self.predict(loader="free")),
               ("the loader 2x faster", self.predict(loader_speedup=2))]
        if self.pipeline is not None:
            out.append(("the loader replaced by nostall", self.predict(loader="nostall")))
        if self.facts["gpu_nodes"]:
            out += [("GPU kernels 2x faster", self.predict(gpu_speedup=2)),
                    ("pinned, non_blocking copies", self.predict(pinned_copies=True)),
                    ("mixed precision", self.predict(amp=True))]
        out += [("a fused optimizer", self.predict(fused_optimizer=True)),
                ("CPU work 2x faster", self.predict(cpu_speedup=2))]
        return out

    def to_dict(self) -> dict:
        """Everything: the trace's facts, the traced split, and the what-ifs."""
        return {"facts": self.facts, "traced": self.traced, "batch_size": self.batch_size,
                "step_threads": self.step_threads, "step_threads_from": self.threads_source,
                "whatifs": [{"question": q, **p} for q, p in self.whatifs()]}

    def to_json(self) -> str:
        """:meth:`to_dict` as indented JSON."""
        return json.dumps(self.to_dict(), indent=2)

    def save_json(self, path) -> None:
        """Writes :meth:`to_json` to ``path``."""
        with open(path, "w") as f:
            f.write(self.to_json())

    def table(self) -> str:
        """The report as text: the step's split along its critical path, the
        stall, and the what-ifs."""
        f = self.facts
        lines = [f"trace {f['path']}: {f['steps']} steps, {f['events']:,} events, "
                 f"{len(f['lanes'])} lane{'s' if len(f['lanes']) != 1 else ''} "
                 f"({f['gpu_nodes']:,} GPU operations)"]
        if f.get("events_not_read"):
            lines.append(f"(the first {f['events']:,} events were read; {f['events_not_read']:,} "
                         "more were not, to bound memory: the steps they hold are not analysed. "
                         "Profile fewer steps: torch.profiler.schedule(active=4))")
        if f["loader"] == "none":
            lines.append("loader: no wait for data is marked in the trace (the DataLoader's "
                         "and nostall's are)")
        elif f["loader"] == "inline":
            lines.append(f"loader: {f['loader_name']}: works on the training thread")
        elif f["loader_period_seen"]:
            lines.append(f"loader: {f['loader_name']}: works beside the loop, a batch every "
                         f"{f['loader_period_s'] * 1e3:.2f} ms")
        else:
            lines.append(f"loader: {f['loader_name']}: works beside the loop and kept up (its "
                         "own rate is not visible: a slower loader is predicted as no slower)")
        if not f["gpu_nodes"]:
            lines.append(f"intra-op threads of the loop: {self.threads_words()}")
        lines.append("")
        lines.append(f"step: {self.step_s * 1e3:.2f} ms; along its critical path:")
        for k in _KINDS:
            v = self.path[k]
            share = v / self.step_s if self.step_s else 0
            lines.append(f"  {_KIND_HELP[k]:<36} {v * 1e3:9.2f} ms  {share:6.1%}")
        lines.append(f"stall: {self.stall:.1%} of the step waits for data "
                     f"(the critical path is mostly {_KIND_HELP[self.critical]})")
        lines.append("")
        lines.append(f"  {'what if':<38} {'step':>10} {'speedup':>8}  critical path")
        for q, p in self.whatifs():
            lines.append(f"  {q:<38} {p['step_s'] * 1e3:7.2f} ms {p['speedup']:7.2f}x  "
                         f"{p['critical']}")
            lines += [f"      assumes: {rule}" for rule in p["rules"]]
        return "\n".join(lines) + "\n"

    def save_html(self, path) -> None:
        """A self-contained HTML report: the table and each step's critical path drawn."""
        colors = {"data": "#d62728", "cpu": "#1f77b4", "gpu": "#2ca02c", "copy": "#9467bd",
                  "sync": "#ff7f0e"}
        steps = self.traced["steps"]
        longest = max((s["seconds"] for s in steps), default=1) or 1
        rows = []
        for i, s in enumerate(steps):
            x = 0.0
            y = 24 + i * 22
            rows.append(f'<text x="0" y="{y + 14}" font-size="12">#{s["step"]}</text>')
            for k in _KINDS:
                w = s["path"][k] / longest * 600
                if w > 0:
                    rows.append(f'<rect x="{60 + x:.1f}" y="{y}" width="{w:.1f}" height="18" '
                                f'fill="{colors[k]}"><title>{k}: {s["path"][k] * 1e3:.2f} ms'
                                '</title></rect>')
                x += w
            rows.append(f'<text x="{66 + x:.1f}" y="{y + 14}" font-size="12">'
                        f'{s["seconds"] * 1e3:.1f} ms</text>')
        legend = " ".join(f'<span style="color:{c}">&#9632; {html.escape(_KIND_HELP[k])}</span>'
                          for k, c in colors.items())
        svg = (f'<svg width="760" height="{40 + 22 * len(steps)}" '
               f'xmlns="http://www.w3.org/2000/svg">{"".join(rows)}</svg>')
        doc = ("<!doctype html><meta charset='utf-8'><title>nostall trace analysis</title>"
               "<body style='font-family:sans-serif'>"
               "<h1>Where each step's time goes</h1>"
               f"<p>The critical path of each step, by kind. {legend}</p>{svg}"
               f"<h2>Report</h2><pre>{html.escape(self.table())}</pre></body>")
        with open(path, "w") as f:
            f.write(doc)

    def __str__(self):
        return self.table()

    def __repr__(self):
        return (f"<nostall.TraceAnalysis steps={self.facts['steps']} "
                f"step={self.step_s * 1e3:.2f}ms stall={self.stall:.0%}>")
