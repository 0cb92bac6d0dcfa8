"""``python -m nostall analyze ...`` (also reached as ``nostall analyze``)."""

from __future__ import annotations

import argparse
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


def _analyze(argv):
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


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "analyze":
        return _analyze(argv[1:])
    usage = ("usage: python -m nostall analyze --spec SPEC --step MODULE:FUNCTION [options]\n"
             "(the other commands are in the `nostall` program: `nostall help`)")
    if argv and argv[0] in ("-h", "--help", "help"):
        print(usage)
        return 0
    what = f"unknown command '{argv[0]}'" if argv else "missing command"
    print(f"python -m nostall: {what}\n{usage}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
