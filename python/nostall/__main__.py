"""``python -m nostall analyze ...`` (also reached as ``nostall analyze``)."""

from __future__ import annotations

import argparse
import json
import sys

_DESCRIPTION = """\
Where your training job's time goes, and what would remove the stall.

Runs your own training step (FUNCTION(images, labels), one step on one batch)
three ways on a sample of the dataset: on synthetic batches already in memory
(the step's rate G), on real data read cold from storage (the page cache is
dropped for the sample's files, no root needed), and on the same data from a
memory cache. The differences are the fetch and prep stalls. A model built on
those runs, and on a probe of the storage, predicts throughput against cache
size, cores, storage bandwidth and latency, and jobs sharing one pipeline.

Prints a table; writes PREFIX.json and a self-contained PREFIX.html.
"""

_EPILOG = """\
example:
  nostall analyze --spec train.json --step train:step --items 4096
  (train.py defines `def step(images, labels): ...`; run from its folder,
   or give --step path/to/train.py:step)
"""


class _Parser(argparse.ArgumentParser):
    """argparse, with the nostall command's manners: what is wrong in one
    line first, then the synopsis and where the rest is."""

    def error(self, message):
        if message.startswith("the following arguments are required: "):
            message = "missing " + message.split(": ", 1)[1]
        elif message.startswith("unrecognized arguments: "):
            words = message.split(": ", 1)[1].split()
            message = (f"unknown option {words[0]}" if words[0].startswith("-")
                       else f"unexpected argument '{words[0]}'")
        sys.stderr.write(f"{self.prog}: {message}\n{self.format_usage()}"
                         f"({self.prog} --help says more)\n")
        sys.exit(2)


_TRACE_DESCRIPTION = """\
Where your own training loop's time goes, from its torch.profiler trace, and
what a change would give.

The trace (Chrome-trace JSON, plain or .gz) is read into a dependency graph:
CPU threads and GPU streams, kernel launches, synchronisations, and waiting
for the next batch (the DataLoader's and nostall's marks). Each step's
critical path is split into waiting for data, CPU, GPU kernels, copies and
synchronisation. A change is a rule applied to the graph, replayed so that
the overlap the trace shows is kept (docs/trace.md). With --spec, the
pipeline nostall would run on that data is measured, and "loader=nostall"
is predicted at the rate the analyzer's model gives it beside your step.

Prints a table; writes PREFIX.json and a self-contained PREFIX.html.
"""

_TRACE_EPILOG = """\
changes (--predict, repeatable; KEY=VALUE, several joined by commas):
  loader=nostall | loader=free    loader_speedup=K    loader_period=SECONDS
  gpu_speedup=K  gemm_speedup=K   cpu_speedup=K       threads=N
  pinned_copies  fused_optimizer  amp                 prep_cores=N

example:
  nostall analyze --trace run/trace.json.gz --spec train.json \\
      --predict loader=nostall --predict gpu_speedup=2,amp
"""


def _change(text):
    """'gpu_speedup=2,amp' -> {"gpu_speedup": 2.0, "amp": True}."""
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, eq, value = part.partition("=")
        key = key.strip().replace("-", "_")
        if not eq:
            out[key] = True
        elif key == "loader":
            out[key] = value.strip()
        elif key in ("threads",):
            out[key] = int(value)
        else:
            try:
                out[key] = float(value)
            except ValueError:
                raise ValueError(f"--predict {part}: {key} takes a number") from None
    return out


def _analyze_trace(argv):
    ap = _Parser(
        prog="nostall analyze --trace", description=_TRACE_DESCRIPTION, epilog=_TRACE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", required=True, help="the torch.profiler trace (.json or .json.gz)")
    ap.add_argument("--spec", help="a nostall loader spec for the same data (JSON file or text): "
                                   "lets it measure nostall's pipeline here")
    ap.add_argument("--data", help="the image folder (or shards) the loop reads; with no --spec, "
                                   "a spec of nostall's defaults on it")
    ap.add_argument("--batch-size", type=int, help="samples per step (default: the spec's)")
    ap.add_argument("--items", type=int, default=None,
                    help="samples nostall's pipeline is measured on (see nostall analyze --help)")
    ap.add_argument("--threads", type=int, default=None,
                    help="the loop's intra-op threads when traced (default: what the trace says, where it was "
                         "recorded with nostall.trace.mark(prof); else torch's default here)")
    ap.add_argument("--predict", action="append", default=[], metavar="CHANGE",
                    help="a change to predict (see below); repeatable")
    ap.add_argument("--out", default="nostall-trace-analysis",
                    help="write OUT.json and OUT.html (default: %(default)s)")
    ap.add_argument("--quiet", action="store_true", help="no progress lines")
    args = ap.parse_args(argv)

    from .errors import NostallError
    from .trace import analyze_trace

    try:
        spec = args.spec
        if spec is None and args.data is not None:
            from .loader import Loader
            spec = Loader(args.data, batch_size=args.batch_size or 32)
        result = analyze_trace(args.trace, spec, batch_size=args.batch_size,
                               step_threads=args.threads, items=args.items,
                               progress=not args.quiet)
        predictions = [(p, result.predict(**_change(p))) for p in args.predict]
    except (NostallError, ValueError, TypeError, FileNotFoundError) as e:
        print(f"nostall analyze: {e}", file=sys.stderr)
        return 2
    print(result.table(), end="")
    for text, p in predictions:
        print(f"\n--predict {text}: {p['step_s'] * 1e3:.2f} ms a step ({p['speedup']:.2f}x), "
              f"critical path mostly {p['critical']}, stall {p['stall']:.1%}")
        for rule in p["rules"]:
            print(f"  rule: {rule}")
    out = result.to_dict()
    out["predictions"] = [{"asked": t, **p} for t, p in predictions]
    with open(args.out + ".json", "w") as f:
        json.dump(out, f, indent=2)
    result.save_html(args.out + ".html")
    print(f"\nwrote {args.out}.json and {args.out}.html")
    return 0


def _analyze(argv):
    if any(a == "--trace" or a.startswith("--trace=") for a in argv):
        return _analyze_trace(argv)
    ap = _Parser(
        prog="nostall analyze", description=_DESCRIPTION, epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spec", required=True,
                    help="loader spec: a JSON file (as for `nostall bench --spec`) or JSON text")
    ap.add_argument("--step", required=True,
                    help="MODULE:FUNCTION or FILE.py:FUNCTION; called as FUNCTION(images, labels)")
    ap.add_argument("--items", type=int, default=None,
                    help="items to sample from the dataset (default: up to 4096, "
                         "at least 20 batches)")
    ap.add_argument("--out", default="nostall-analysis",
                    help="write OUT.json and OUT.html (default: %(default)s)")
    ap.add_argument("--step-seconds", type=float, default=2.0,
                    help="how long to time the step alone (default: %(default)s)")
    ap.add_argument("--quiet", action="store_true", help="no progress lines")
    args = ap.parse_args(argv)

    from . import analyze
    from .analyze import load_step
    from .errors import NostallError

    try:
        step = load_step(args.step)
        result = analyze(args.spec, step, items=args.items, step_seconds=args.step_seconds,
                         progress=not args.quiet)
    except (NostallError, ValueError, TypeError, FileNotFoundError, ImportError) as e:
        print(f"nostall analyze: {e}", file=sys.stderr)
        return 2
    print(result.table(), end="")
    result.save_json(args.out + ".json")
    result.save_html(args.out + ".html")
    print(f"\nwrote {args.out}.json and {args.out}.html")
    return 0


_SERVE_DESCRIPTION = """\
Serves one pipeline to every training process on this node (as `nostall
serve`), its chunks made on other machines' CPUs by Ray actors
(nostall.ray.Prep): the same chunks, in the same order, as the pipeline
served here would make (docs/remote.md). `nostall serve --ray ...` (or a
spec with "remote") comes here. Serves until Ctrl-C or SIGTERM.
"""


def _prep_of(text):
    """--ray's Prep: its arguments as a JSON object (or the spec's {"ray": {...}}), or a number of workers."""
    from .ray import Prep

    try:
        given = json.loads(text)
    except ValueError:
        raise SystemExit(f"nostall serve: --ray takes nostall.ray.Prep's arguments as JSON "
                         f"(e.g. '{{\"num_workers\": 2}}') or a number of workers, not {text!r}") from None
    if isinstance(given, int) and not isinstance(given, bool):
        return Prep(num_workers=given)
    if isinstance(given, dict) and set(given) == {"ray"}:
        return Prep.from_spec(given)
    if isinstance(given, dict):
        return Prep.from_spec({"ray": given})
    raise SystemExit(f"nostall serve: --ray takes a JSON object or a number of workers, not {text!r}")


def _serve(argv) -> int:
    from . import serve
    from ._spec import read_spec

    p = _Parser(prog="nostall serve", description=_SERVE_DESCRIPTION,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--spec", required=True, help="the loader spec (JSON file)")
    p.add_argument("--name", required=True, help="the name consumers attach to")
    p.add_argument("--ray", help="nostall.ray.Prep's arguments as JSON, or a number of workers "
                                 "(default: the spec's \"remote\")")
    p.add_argument("--chunk", type=int, default=0, help="samples per chunk (default: the spec's batch_size)")
    p.add_argument("--max-consumers", type=int, default=8)
    p.add_argument("--slots", type=int, default=0)
    p.add_argument("--max-lag-ms", type=int, default=1000)
    p.add_argument("--block-chunks", type=int, default=0)
    p.add_argument("--group", help="not with remote prep: serve it from the `nostall` program without --ray")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    if args.group is not None:
        p.error("--group is not served with remote prep (yet): serve for your own user, or without --ray")
    prep = _prep_of(args.ray) if args.ray is not None else None
    try:
        spec = read_spec(args.spec)
    except (OSError, ValueError) as e:
        print(f"nostall serve: --spec {args.spec}: {e}", file=sys.stderr)
        return 1
    if prep is None and "remote" not in spec:
        p.error("no remote prep: give --ray, or a spec with \"remote\" (or serve it with `nostall serve`)")
    print(f"nostall serve: '{args.name}' serving {spec.get('source')} with remote prep; attach with "
          f"nostall.Loader.attach(\"{args.name}\", batch_size=...)", file=sys.stderr, flush=True)
    import signal

    try:
        server = serve(spec, args.name, chunk=args.chunk, max_consumers=args.max_consumers, slots=args.slots,
                       max_lag=args.max_lag_ms / 1000, block_chunks=args.block_chunks, verbose=not args.quiet,
                       remote=prep)

        def stop(signum, frame):
            raise KeyboardInterrupt  # server.wait() closes the server and returns

        # Ray's own SIGTERM handler (installed as it starts) would end the
        # process without removing the segment.
        signal.signal(signal.SIGTERM, stop)
        server.wait()
    except (ValueError, RuntimeError, OSError, ImportError) as e:
        print(f"nostall serve: {e}", file=sys.stderr)
        return 1
    print("nostall serve: stopped", file=sys.stderr)
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "analyze":
        return _analyze(argv[1:])
    if argv and argv[0] == "serve":
        return _serve(argv[1:])
    usage = ("usage: python -m nostall analyze --spec SPEC --step MODULE:FUNCTION [options]\n"
             "       python -m nostall analyze --trace TRACE [--spec SPEC] [--predict CHANGE]\n"
             "       python -m nostall serve --spec SPEC --name NAME --ray PREP [options]\n"
             "(the other commands are in the `nostall` program: `nostall help`)")
    if argv and argv[0] in ("-h", "--help", "help"):
        print(usage)
        return 0
    what = f"unknown command '{argv[0]}'" if argv else "missing command"
    print(f"python -m nostall: {what}\n{usage}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
