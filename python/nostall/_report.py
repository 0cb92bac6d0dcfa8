"""Renders an analysis (``Analysis.result``) as a terminal table or a self-contained HTML page.

The HTML needs no network: styles are inline and the charts are SVG drawn here.
"""

from __future__ import annotations

import html
import math

_COLORS = {"compute": "#2f7d32", "hooks": "#7b4fa0", "prep": "#e0892b", "fetch": "#c0392b"}
_LIMIT_WORDS = {
    "compute": "the step's own rate",
    "cpu": "CPU cores",
    "prep_threads": "prep threads",
    "bandwidth": "storage bandwidth",
    "latency": "storage latency (too few reads in flight)",
}
_BOTTLENECK_WORDS = {
    "compute": "compute: the training step itself; the data pipeline keeps up",
    "prep": "prep: decoding and augmenting on the CPU",
    "fetch": "fetch: reading from storage",
}


def _bytes(n):
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n} TB"


def _bw(b):
    return "unlimited" if not b else f"{b / 1e6:,.1f} MB/s"


def _limit_words(r):
    """The binding limit in words; for CPU, who uses it (the step may be the bigger user)."""
    limit = r["predicted"]["limit"]
    if limit != "cpu":
        return _LIMIT_WORDS[limit]
    p = r["profile"]
    h = p["measured"]["cache_fraction"]
    pipeline = p["prep_cpu"] + h * p["fetch_cpu_hit"] + (1 - h) * p["fetch_cpu_miss"]
    return (f"CPU cores, shared by the pipeline ({pipeline * 1e3:.2f} ms CPU per sample) "
            f"and your step ({p['step_cpu'] * 1e3:.2f} ms)")


def _reads_words(r):
    """The reads in flight of the measured configuration, in words."""
    fixed = r["profile"]["measured"]["reads_in_flight"]
    if fixed > 0:
        return f"{fixed} reads in flight"
    return (f"reads in flight adaptive (about {r['predicted'].get('reads_in_flight', 0):.0f} "
            "at this latency)")


def hit_rate(config):
    """The fraction of items a configuration's cache holds (a cluster cache pools N nodes')."""
    return min(1.0, config["cache_fraction"] * config.get("cache_nodes", 1))


def _changes(rec, m):
    """What the recommendation changes, as (field, new, now) for every field it raises
    (the cache as the hit rate it gives)."""
    c = rec["config"]
    out = [("cache", hit_rate(c), hit_rate(m))] if hit_rate(c) > hit_rate(m) + 1e-9 else []
    return out + [(k, c[k], m[k]) for k in ("reads_in_flight", "cores", "prep_threads")
                  if c[k] > m[k] + 1e-9]


def _recommendation_lines(r):
    prof = r["profile"]
    m = prof["measured"]
    rec = r["recommendation"]
    c = rec["config"]
    g = r["predicted"]["limits"]["compute"] or prof["step_rate"]
    lines = _step_threads_lines(r)
    if r["bottleneck"] == "compute":
        if lines:
            return lines + [f"-> predicted {rec['rate']:,.0f} samples/s (now "
                            f"{r['predicted']['rate']:,.0f})"]
        where = ("the step's own rate" if g >= prof["step_rate"] * 0.995
                 else "the step's rate in the training loop")
        return [f"nothing: {where} ({g:,.0f} samples/s) is the limit; "
                "the data pipeline keeps up."]
    if not _changes(rec, m) and not lines:
        cold = prof["cold_rate"]
        return [f"the model finds nothing to change, yet a {r['bottleneck']} stall was measured: "
                f"it predicts {r['predicted']['rate']:,.0f} samples/s where {cold:,.0f} were "
                f"measured ({(r['predicted']['rate'] - cold) / cold:+.0%}); see the notes"]
    if hit_rate(c) > hit_rate(m) + 1e-9:
        alt = (f", or storage at {_bw(rec['bandwidth_instead'])}" if rec["bandwidth_instead"]
               else "")
        nodes = c.get("cache_nodes", 1)
        if nodes > 1:
            per = _bytes(rec["cache_bytes_per_node"]).replace(" ", "")
            lines.append(f"cache {hit_rate(c):.0%} of the dataset ({_bytes(rec['cache_bytes'])}) "
                         f"across your {nodes} nodes, {per} on each: `nostall cache serve "
                         f"--size {per}` on every node, then cache=nostall.Cache(name, "
                         f"size=\"{per}\", servers=[every node's host:11211]){alt}")
        else:
            lines.append(f"cache {c['cache_fraction']:.0%} of the dataset "
                         f"({_bytes(rec['cache_bytes'])}): cache=nostall.Cache(name, "
                         f"size=\"{_bytes(rec['cache_bytes']).replace(' ', '')}\"){alt}")
    if c["reads_in_flight"] > m["reads_in_flight"]:
        now = (f"now adaptive, about {r['predicted']['reads_in_flight']:.0f}"
               if m["reads_in_flight"] == 0 else f"now {m['reads_in_flight']}")
        slots = r["profile"].get("slot_items", 0)
        prefetch = rec.get("prefetch", 0)
        batch = r["profile"].get("batch", 0)
        if batch and slots and prefetch > slots // batch - 1:  # the slots must hold the reads
            lines.append(f"reads_in_flight={c['reads_in_flight']}, prefetch={prefetch} ({now}, prefetch "
                         f"{slots // batch - 1}: each read needs room in a batch slot, and prefetch "
                         f"{prefetch} gives {prefetch + 1} slots of {batch})")
        else:
            lines.append(f"reads_in_flight={c['reads_in_flight']} ({now})")
    if c["cores"] > m["cores"] or c["prep_threads"] > m["prep_threads"]:
        lines.append(f"{c['cores']:.0f} cores (now {m['cores']:.0f}), "
                     f"num_threads={c['prep_threads']}")
    verdict = ("= the step's rate: no stall" if rec["reaches_step_rate"]
               else f"of the step's {g:,.0f}: more than 4x the cores would be needed")
    lines.append(f"-> predicted {rec['rate']:,.0f} samples/s {verdict}")
    return lines + _remote_lines(r)


def _remote_lines(r):
    """Prep on other machines, where the model says it pays (docs/remote.md)."""
    remote = r.get("remote")
    if not remote or not remote["pays"]:
        return []
    mb = remote["sample_bytes"] / 1e6
    return [f"or, keeping this node as it is, prep on other machines: remote=nostall.ray.Prep("
            f"num_workers={remote['workers']}, cpus_per_worker={remote['cpus_per_worker']:.0f}) "
            f"-> predicted {remote['rate']:,.0f} samples/s ({remote['limit']} limits; assumes "
            f"{remote['network'] * 8 / 1e9:.0f} Gb/s into this node and Ray's transport as measured in "
            f"docs/benchmarks.md: {remote['trainer_cpu_per_sample'] * 1e3:.2f} ms of this node's CPU "
            f"per {mb:.2f} MB sample received)"]


def _step_threads_lines(r):
    """The step's own intra-op threads, where the recommendation changes them."""
    prof = r["profile"]
    k = r["recommendation"]["config"].get("step_threads", 0)
    now = prof.get("step_threads", 1)
    if not k or k == now:
        return []
    one = prof.get("step_rate_1", 0)
    seen = (f": the step alone ran at {one:,.0f} samples/s on one thread against "
            f"{prof['step_rate']:,.0f} on {now}" if one else "")
    return [f"torch.set_num_threads({k}) in the training process, or OMP_NUM_THREADS={k} (and "
            f"MKL_NUM_THREADS={k}) in its environment (now {now}; its intra-op "
            f"threads and the prep threads share the cores){seen}"]


def _reading_on_busy_cores(r):
    """The cores limit, and only reading cold made the step wait."""
    return r["bottleneck"] == "fetch" and r.get("model_bottleneck") == "prep" \
        and r["predicted"]["limit"] == "cpu"


def _bottleneck_line(r):
    words = _BOTTLENECK_WORDS[r["bottleneck"]]
    stall = r["breakdown"]["prep_stall"] + r["breakdown"]["fetch_stall"]
    noise = r.get("stall_noise", r["profile"].get("noise", 0))
    waited = r["profile"].get("waited", -1.0)
    if r["bottleneck"] == "compute" and stall > noise and 0 <= waited <= noise:
        words += (f" (the real-data runs were {stall:.1%} slower than the step alone, yet the loop "
                  f"waited for data {waited:.1%} of the time: the step ran slower beside the "
                  "pipeline on a busy machine, not for want of data)")
    elif r["bottleneck"] == "compute" and stall > 0.05:
        words += (f" (the stalls measured, {stall:.1%}, are within this analysis's noise, "
                  f"{noise:.0%}: see the notes)")
    elif stall > noise and max(r["breakdown"]["prep_stall"], r["breakdown"]["fetch_stall"]) <= noise:
        words += (f" (the stall, {stall:.1%}, is beyond this analysis's noise, {noise:.0%}, but split: "
                  f"prep {r['breakdown']['prep_stall']:.1%}, fetch {r['breakdown']['fetch_stall']:.1%}, "
                  "each within it; named by the larger part)")
    if r["bottleneck"] == r.get("model_bottleneck", r["bottleneck"]):
        return f"{words} (limit: {_limit_words(r)})"
    if _reading_on_busy_cores(r):
        p = r["profile"]
        return (f"{words}: its CPU ({p['fetch_cpu_miss'] * 1e3:.3f} ms per sample from storage, "
                f"{p['fetch_cpu_hit'] * 1e3:.3f} ms from cache) on cores the step and the "
                "pipeline already fill (limit: CPU cores)")
    return f"{words} (from the measured stalls; the model disagrees, see the notes)"


def disagreement_notes(r):
    """One line per run where the model and the measurement differ by more than the noise."""
    out = []
    seen = set()
    for d in r.get("disagreements", []):
        key = d["run"]
        if key in seen:
            continue
        seen.add(key)
        both = [x for x in r["disagreements"] if x["run"] == key]
        parts = ", ".join(f"{x['model']} {x['predicted']:,.0f} ({x['off']:+.0%})" for x in both)
        fixed = all(x["model"] == "uncalibrated" for x in both)
        out.append(f"the {key} run measured {d['measured']:,.0f} samples/s; the model said "
                   f"{parts}" + ("; calibration closed the gap (efficiencies above)" if fixed
                                 else "; the model does not explain this run"))
    if r.get("bottleneck") != r.get("model_bottleneck") and not _reading_on_busy_cores(r):
        out.append(f"the measured stalls name {r['bottleneck']} where the model alone names "
                   f"{r['model_bottleneck']}")
    timings = r.get("run", {}).get("step_timings") or []
    # The timings' own spread (the noise may be larger: a real-data run
    # faster than the step alone raises it, and a note of its own says so).
    spread = (max(timings) - min(timings)) / (sum(timings) / len(timings)) if timings else 0.0
    if len(timings) >= 2 and spread > 0.05:
        ran = ", ".join(f"{t:,.0f}" for t in timings)
        out.append(f"the step alone ran at {ran} samples/s (before, between and after the runs: "
                   f"{spread:.0%} apart): the machine's speed moved during the "
                   "analysis, and model and runs closer than that are not called a disagreement")
    return out


def _parts(b):
    """The breakdown's parts in order: the Python hooks only when there are any."""
    parts = [("compute", "compute (your step)")]
    if b.get("hooks", 0) > 0:
        parts.append(("hooks", "Python hooks"))
    return parts + [("prep_stall", "prep stall"), ("fetch_stall", "fetch stall")]


def _measured_lines(r) -> list:
    """The measured rates beside the model's: the step alone, in the loop, cached, cold."""
    prof, pred, m = r["profile"], r["predicted"], r["profile"]["measured"]
    out = [f"{'measured':<30} {'samples/s':>10} {'model':>10} {'uncalibrated':>13}"]
    threads = prof.get("step_threads", 1)
    alone = "step alone (G)" + (f", {threads} threads" if threads > 1 else "")
    out.append(f"  {alone:<28} {prof['step_rate']:10,.0f}")
    loop = pred["limits"]["compute"]
    if loop is not None and loop < prof["step_rate"] * 0.995:
        out.append(f"  {'step in the loop, no stall':<28} {'':>10} {loop:10,.0f}"
                   f"   (+{prof['loop_overhead'] * 1e3:.3f} ms per sample taking batches)")
    for key, label in (("cached", "real data, cached"), ("cold", "real data, cold")):
        chk = r["check"][key]
        out.append(f"  {label:<28} {prof[key + '_rate']:10,.0f} {chk['model']:10,.0f} "
                   f"{chk.get('uncalibrated', chk['model']):13,.0f}")
    out.append(f"  {'predicted as configured':<28} {'':>10} {pred['rate']:10,.0f}"
               f"   (cache {m['cache_fraction']:.0%})")
    return out


def _fewer_cores_faster(curves, prof) -> list:
    """Why a core count below the measured one predicts more, where it does:
    the step then runs on as many intra-op threads as there are cores (torch's
    default), and it was timed faster on fewer threads."""
    if prof is None or "step_threads" not in curves:
        return []
    now = prof["measured"]["cores"]
    at_now = next((p["rate"] for p in curves["cores"] if p["x"] == now), None)
    faster = [p for p in curves["cores"] if p["x"] < now and at_now and p["rate"] > at_now]
    one, many = prof.get("step_rate_1", 0), prof.get("step_rate", 0)
    if not faster or not one or not many:
        return []
    return [f"             (fewer cores predict more here: with fewer cores the step runs on fewer intra-op "
            f"threads, torch's default,",
            f"              and it ran at {one:,.0f} samples/s on one thread against {many:,.0f} on "
            f"{prof.get('step_threads', 1)}; the same gain at {now:.0f} cores is the \"step thr.\" row)"]


def _what_if_lines(curves, profile=None) -> list:
    """The what-if curves, a row each: x:rate and the bottleneck's initial."""
    out = ["what if (predicted samples/s per job; bottleneck initial: c/p/f)"]

    def row(label, points, fmt):
        cells = [f"{fmt(p['x'])}:{p['rate']:,.0f}{p['bottleneck'][0]}" for p in points]
        out.append(f"  {label:<10} " + "  ".join(cells))

    row("cache", curves["cache_fraction"][::2], lambda x: f"{x:.0%}")
    cores = curves["cores"]
    row("cores", cores if len(cores) <= 12 else cores[:: max(1, len(cores) // 12)],
        lambda x: f"{x:.0f}")
    out += _fewer_cores_faster(curves, profile)
    row("bandwidth", curves["bandwidth"],
        lambda x: f"{x / 1e6:,.0f}MB/s" if x >= 10e6 else f"{x / 1e6:.2g}MB/s")
    row("latency", curves["latency_s"], lambda x: f"{x * 1e3:g}ms")
    if "reads_in_flight" in curves:
        row("reads", curves["reads_in_flight"], lambda x: f"{x:.0f}")
    if "step_threads" in curves:
        row("step thr.", curves["step_threads"], lambda x: f"{x:.0f}")
    if "cache_nodes" in curves:
        nodes = curves["cache_nodes"]
        per = nodes[0]["hit_rate"]
        out.append("  nodes      " + "  ".join(
            f"{p['x']:.0f}:{p['rate']:,.0f}{p['bottleneck'][0]}" for p in nodes)
            + f"   (a cache of {per:.0%} per node pooled across N nodes: hit rate "
            "min(1, N x that), peers over a 10 Gb/s network)")
    out.append("  jobs       " + "  ".join(
        f"{p['x']}:{p['shared']:,.0f}/{p['independent']:,.0f}" for p in curves["jobs"])
        + "   (shared pipeline / one loader each)")
    if "remote_workers" in curves:
        cores = (profile or {}).get("measured", {}).get("cores", 1)
        out.append("  remote     " + "  ".join(
            f"{p['x']:.0f}:{p['rate']:,.0f}{p['bottleneck'][0]}" for p in curves["remote_workers"])
            + f"   (N prep workers of {max(1, int(cores + 1e-9))} CPUs on other machines, "
            "nostall.ray.Prep; Ray's transport as measured, 10 Gb/s)")
    return out


def render_table(r) -> str:
    prof = r["profile"]
    m = prof["measured"]
    run = r.get("run", {})
    b = r["breakdown"]
    t_cold = 1.0 / prof["cold_rate"] if prof["cold_rate"] else 0.0
    total_ms = 1e3 * max(t_cold, 1.0 / prof["step_rate"] + prof.get("loop_overhead", 0.0))
    out = [f"nostall analyze: {run.get('source', '?')} "
           f"({run.get('items', '?'):,} of {run.get('dataset_items', '?'):,} items sampled; "
           f"batch {run.get('batch_size', '?')}; {m['cores']:.0f} cores)", "",
           "where the time goes (per sample, storage cold)"]
    for key, name in _parts(b):
        out.append(f"  {name:<22} {b[key] * total_ms:8.3f} ms  {b[key]:6.1%}")
    out.append(f"bottleneck: {_bottleneck_line(r)}")
    out.append("")
    out += _measured_lines(r)
    out.append("")
    io = run.get("fetch_cpu_cold", {}).get("io_thread", 0.0)
    io_words = f" (the I/O thread's {io * 1e3:.3f} ms)" if io > 0 else ""
    out.append(f"per sample: prep {prof['prep_cpu'] * 1e3:.2f} ms CPU; fetch "
               f"{prof['fetch_cpu_miss'] * 1e3:.3f} ms CPU from storage{io_words}, "
               f"{prof['fetch_cpu_hit'] * 1e3:.3f} ms from cache; step "
               f"{prof['step_cpu'] * 1e3:.3f} ms CPU; {_bytes(prof['item_bytes'])} encoded")
    out.append(f"storage: {_bw(m['bandwidth'])}, {m['latency_s'] * 1e3:.2f} ms per read, "
               f"{_reads_words(r)}; dataset {_bytes(prof['dataset_bytes'])}")
    out.append("")
    out += _what_if_lines(r["curves"], r["profile"])
    out.append("")
    out.append("what removes the stall:")
    for line in _recommendation_lines(r):
        out.append("  " + line)
    start = r.get("autotune_start")
    if start:
        out.append("")
        out.append(f"autotune would start from: num_threads={start['threads']}, "
                   f"reads_in_flight={start['reads_in_flight']}, prefetch={start['prefetch']} "
                   f"({start['why']}); Loader(..., autotune=True) with these starts there")
    for note in disagreement_notes(r) + run.get("notes", []):
        out.append(f"note: {note}")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- HTML


def _svg_chart(title, points, xlabel, xfmt, step_rate, *, logx=False, even=False, series=None):
    """A line chart of rate vs x; markers coloured by bottleneck; G as a dashed line.

    The y axis fits the curve; a step rate far above it is marked at the top
    instead of flattening the curve. ``even`` spaces the x values evenly.
    """
    w, h, left, right, top, bottom = 460, 250, 62, 16, 30, 44
    series = series or [("rate", None)]
    xs = [p["x"] for p in points]
    ys = [p[key] for p in points for key, _ in series]
    ymax = max(ys) * 1.15 or 1.0
    g_on_chart = step_rate <= ymax * 1.5
    if g_on_chart:
        ymax = max(ymax, step_rate * 1.08)

    def tx(x):
        if even:
            v = xs.index(x) / (len(xs) - 1) if len(xs) > 1 else 0.5
        elif logx:
            lo, hi = math.log(min(xs)), math.log(max(xs))
            v = (math.log(x) - lo) / (hi - lo) if hi > lo else 0.5
        else:
            lo, hi = min(xs), max(xs)
            v = (x - lo) / (hi - lo) if hi > lo else 0.5
        return left + v * (w - left - right)

    def ty(y):
        return top + (1 - y / ymax) * (h - top - bottom)

    e = html.escape
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
             f'viewBox="0 0 {w} {h}" role="img" aria-label="{e(title)}">',
             f'<text x="{w / 2}" y="18" text-anchor="middle" class="t">{e(title)}</text>',
             f'<line x1="{left}" y1="{h - bottom}" x2="{w - right}" y2="{h - bottom}" class="ax"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}" class="ax"/>']
    for k in range(5):
        y = ymax * k / 4
        parts.append(f'<text x="{left - 6}" y="{ty(y) + 4:.1f}" text-anchor="end" class="l">'
                     f'{y:,.0f}</text>')
        parts.append(f'<line x1="{left}" y1="{ty(y):.1f}" x2="{w - right}" y2="{ty(y):.1f}" '
                     'class="grid"/>')
    ticks = xs if len(xs) <= 9 else xs[:: math.ceil(len(xs) / 8)]
    for x in ticks:
        parts.append(f'<text x="{tx(x):.1f}" y="{h - bottom + 16}" text-anchor="middle" '
                     f'class="l">{e(xfmt(x))}</text>')
    parts.append(f'<text x="{(left + w - right) / 2}" y="{h - 6}" text-anchor="middle" '
                 f'class="l">{e(xlabel)}</text>')
    if g_on_chart:
        parts.append(f'<line x1="{left}" y1="{ty(step_rate):.1f}" x2="{w - right}" '
                     f'y2="{ty(step_rate):.1f}" class="g"/>')
        parts.append(f'<text x="{w - right - 2}" y="{ty(step_rate) - 4:.1f}" text-anchor="end" '
                     f'class="l">step rate G</text>')
    else:
        parts.append(f'<text x="{w - right - 2}" y="{top + 10}" text-anchor="end" class="l">'
                     f'step rate G = {step_rate:,.0f}, above the chart</text>')
    for key, bkey in series:
        path = " ".join(f"{'M' if i == 0 else 'L'}{tx(p['x']):.1f},{ty(p[key]):.1f}"
                        for i, p in enumerate(points))
        dash = ' stroke-dasharray="5,3"' if key == "independent" else ""
        parts.append(f'<path d="{path}" class="line"{dash}/>')
        for p in points:
            bn = p[bkey or "bottleneck"]
            parts.append(f'<circle cx="{tx(p["x"]):.1f}" cy="{ty(p[key]):.1f}" r="3.5" '
                         f'fill="{_COLORS[bn]}"><title>{e(xfmt(p["x"]))}: {p[key]:,.0f} '
                         f'samples/s ({bn}-bound)</title></circle>')
    parts.append("</svg>")
    return "".join(parts)


def _breakdown_bar(b):
    w, h = 460, 52
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
             f'viewBox="0 0 {w} {h}" role="img" aria-label="stall breakdown">']
    x = 0.0
    for key, name in _parts(b):
        color = _COLORS[key.replace("_stall", "")]
        name = name.replace(" (your step)", "")
        width = b[key] * w
        if width > 0:
            parts.append(f'<rect x="{x:.1f}" y="0" width="{width:.1f}" height="30" '
                         f'fill="{color}"><title>{name}: {b[key]:.1%}</title></rect>')
            if width > 70:
                parts.append(f'<text x="{x + width / 2:.1f}" y="20" text-anchor="middle" '
                             f'class="in">{name} {b[key]:.0%}</text>')
        x += width
    legend = " · ".join(f"{name.replace(' (your step)', '')} {b[key]:.1%}" for key, name in _parts(b))
    parts.append(f'<text x="0" y="46" class="l">{legend}</text>')
    parts.append("</svg>")
    return "".join(parts)


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;max-width:1000px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:22px 0 8px}
.sub{color:#666;font-size:13px}.big{font-size:18px;margin:10px 0}
table{border-collapse:collapse;font-size:14px}td,th{padding:3px 10px;text-align:right}
td:first-child,th:first-child{text-align:left}tr:nth-child(even){background:#f4f4f4}
.charts{display:flex;flex-wrap:wrap;gap:12px}.charts svg{border:1px solid #ddd;background:#fff}
svg .t{font-size:13px;font-weight:600}svg .l{font-size:11px;fill:#444}svg .in{font-size:12px;fill:#fff}
svg .ax{stroke:#888}svg .grid{stroke:#eee}svg .g{stroke:#2f7d32;stroke-dasharray:6,4}
svg .line{fill:none;stroke:#345;stroke-width:2}
.key span{display:inline-block;width:10px;height:10px;border-radius:5px;margin:0 4px 0 12px}
ul{margin:6px 0}code{background:#f2f2f2;padding:1px 4px}
"""


def _charts(curves, g) -> list:
    """The what-if curves drawn, one SVG chart each; g: the step's rate."""
    charts = [
        _svg_chart("vs cache size (MinIO)", curves["cache_fraction"], "fraction of dataset cached",
                   lambda x: f"{x:.0%}", g),
        _svg_chart("vs nodes pooling their caches (cluster cache)", curves["cache_nodes"],
                   f"nodes, each caching {curves['cache_nodes'][0]['hit_rate']:.0%} of the dataset",
                   lambda x: f"{x:.0f}", g, logx=True),
        _svg_chart("vs cores", curves["cores"], "cores (a prep thread per core, or per core "
                   "the step leaves free)",
                   lambda x: f"{x:.0f}", g),
        _svg_chart("vs storage bandwidth", curves["bandwidth"], "MB/s",
                   lambda x: f"{x / 1e6:,.3g}", g, logx=True),
        _svg_chart("vs storage latency", curves["latency_s"], "ms per read",
                   lambda x: f"{x * 1e3:g}", g, even=True),
        _svg_chart("vs jobs on the node (per job)", curves["jobs"],
                   "jobs (solid: one shared pipeline; dashed: a loader each)",
                   lambda x: f"{x:.0f}", g,
                   series=[("shared", "shared_bottleneck"),
                           ("independent", "independent_bottleneck")]),
    ]
    if "reads_in_flight" in curves:
        charts.append(_svg_chart("vs reads in flight", curves["reads_in_flight"],
                                 "reads in flight (a batch slot each read needs bounds them)",
                                 lambda x: f"{x:.0f}", g, logx=True))
    if "step_threads" in curves:
        charts.append(_svg_chart("vs the step's own threads (torch.set_num_threads)",
                                 curves["step_threads"], "intra-op threads of the step",
                                 lambda x: f"{x:.0f}", g))
    if "remote_workers" in curves:
        charts.append(_svg_chart("vs prep workers on other machines (nostall.ray.Prep)",
                                 curves["remote_workers"], "workers the size of this node (Ray's transport "
                                 "as measured, 10 Gb/s)", lambda x: f"{x:.0f}", g, even=True))
    return charts


def render_html(r) -> str:
    e = html.escape
    prof = r["profile"]
    m = prof["measured"]
    run = r.get("run", {})
    g = r["predicted"]["limits"]["compute"] or prof["step_rate"]
    curves = r["curves"]
    pred = r["predicted"]
    chk = r["check"]
    rows = [("step alone, in-memory batches (G)", prof["step_rate"], None, None),
            ("step in the training loop, no stall (loop overhead "
             f"{prof.get('loop_overhead', 0) * 1e3:.3f} ms per sample)", None, g, None),
            ("real data, all cached", prof["cached_rate"], chk["cached"]["model"],
             chk["cached"].get("uncalibrated")),
            ("real data, cold storage", prof["cold_rate"], chk["cold"]["model"],
             chk["cold"].get("uncalibrated")),
            (f"as configured (cache {m['cache_fraction']:.0%})", None, pred["rate"], None)]

    def cell(x):
        return "" if x is None else f"{x:,.0f}"

    table = "".join(
        f"<tr><td>{e(name)}</td><td>{cell(meas)}</td><td>{cell(model)}</td><td>{cell(raw)}</td></tr>"
        for name, meas, model, raw in rows)
    words = _bottleneck_line(r)
    limit = e(words[len(_BOTTLENECK_WORDS[r["bottleneck"]]):])
    charts = _charts(curves, g)
    rec = "".join(f"<li>{e(line)}</li>" for line in _recommendation_lines(r))
    notes = "".join(f"<li>{e(n)}</li>" for n in disagreement_notes(r) + run.get("notes", []))
    key = "".join(f'<span style="background:{c}"></span>{e(n)}-bound' for n, c in _COLORS.items())
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>nostall analyze: {e(str(run.get('source', '')))}</title>
<style>{_CSS}</style></head><body>
<h1>Where the time goes</h1>
<div class="sub">{e(str(run.get('source', '')))} &middot; {run.get('items', 0):,} of {run.get('dataset_items', 0):,} items sampled &middot;
batch {run.get('batch_size', '?')} &middot; {m['cores']:.0f} cores &middot; storage {e(_bw(m['bandwidth']))}, {m['latency_s'] * 1e3:.2f} ms/read</div>
<div class="big">Bottleneck: <b style="color:{_COLORS[r['bottleneck']]}">{e(_BOTTLENECK_WORDS[r['bottleneck']])}</b>{limit}</div>
<h2>Time per sample, storage cold</h2>
{_breakdown_bar(r['breakdown'])}
<h2>Measured and modelled (samples/s)</h2>
<table><tr><th>run</th><th>measured</th><th>model</th><th>uncalibrated model</th></tr>{table}</table>
<h2>What removes the stall</h2><ul>{rec}</ul>
<h2>What if</h2><div class="sub key">markers:{key}; dashed green line: the step's rate G</div>
<div class="charts">{''.join(charts)}</div>
<h2>Per-sample costs</h2>
<table>
<tr><td>decode + augment</td><td>{prof['prep_cpu'] * 1e3:.3f} ms CPU</td></tr>
<tr><td>fetch from storage / from cache</td><td>{prof['fetch_cpu_miss'] * 1e3:.3f} / {prof['fetch_cpu_hit'] * 1e3:.3f} ms CPU</td></tr>
<tr><td>training step</td><td>{1e3 / prof['step_rate']:.3f} ms wall, {prof['step_cpu'] * 1e3:.3f} ms CPU</td></tr>
<tr><td>encoded item</td><td>{e(_bytes(prof['item_bytes']))}</td></tr>
<tr><td>dataset</td><td>{e(_bytes(prof['dataset_bytes']))}, {prof['dataset_items']:,} items</td></tr>
</table>
{f'<h2>Notes</h2><ul>{notes}</ul>' if notes else ''}
</body></html>
"""
