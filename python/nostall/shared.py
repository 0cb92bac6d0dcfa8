"""One pipeline for every training job on the node: ``nostall.serve`` and ``Loader.attach``.

    # the producer (or: nostall serve --spec train.json --name hp-search)
    nostall.serve(spec, name="hp-search")

    # in each training process on the node
    loader = nostall.Loader.attach("hp-search", batch_size=128)

The protocol is in docs/ring_format.md.
"""

from __future__ import annotations

import json
import sys
import time

from . import _nostall
from ._lifetime import Closeable

__all__ = ["serve", "Server", "list_shared"]


def _spec_json(spec):
    from .loader import Loader

    if isinstance(spec, Loader):
        return json.dumps(spec.spec)
    if isinstance(spec, dict):
        return json.dumps(spec)
    if isinstance(spec, str):
        text = spec
        if not text.lstrip().startswith("{"):
            with open(text) as f:
                text = f.read()
        return text
    raise TypeError("spec must be a dict, JSON text, a path to a JSON file, or a nostall.Loader")


class Server(Closeable):
    """A producer serving in background threads of this process; ``close()`` stops it."""

    def __init__(self, spec, name, *, chunk=0, max_consumers=8, slots=0, max_lag=1.0,
                 block_chunks=0, verbose=False):
        self.name = name
        self._core = _nostall.Server(name, _spec_json(spec), int(chunk), int(max_consumers),
                                     int(slots), float(max_lag), int(block_chunks), bool(verbose))

    def status(self) -> dict:
        """Chunks produced, consumers (pid, state, next chunk), evictions, reaped consumers,
        and the pipeline's own stats (``["pipeline"]``: stages, the autotuner's decisions)."""
        return json.loads(self._core.status_json())

    @property
    def spec(self) -> dict:
        return json.loads(self._core.spec_json())

    def close(self) -> None:
        """Stops serving and removes the segment (raises what stopped it early, if anything)."""
        core, self._core = getattr(self, "_core", None), None
        if core is not None:
            core.close()


def serve(spec, name, *, chunk=0, max_consumers=8, slots=0, max_lag=1.0, block_chunks=0,
          block=True, verbose=True):
    """Serves ``spec``'s pipeline to every ``Loader.attach(name, ...)`` on this node.

    chunk: samples per chunk the producer publishes (default: the spec's
        batch_size); consumers whose batch size divides it read zero-copy.
    max_consumers, slots: the consumer table and the chunk slots (default
        4 + 2 x max_consumers) of the shared-memory segment.
    max_lag: seconds the producer waits for one consumer before leaving it
        to a private pipeline.
    block: True serves until Ctrl-C (printing a status line every 5 s when
        ``verbose``); False returns a running :class:`Server`.
    """
    server = Server(spec, name, chunk=chunk, max_consumers=max_consumers, slots=slots,
                    max_lag=max_lag, block_chunks=block_chunks, verbose=verbose)
    if not block:
        return server
    try:
        last = 0.0
        while True:
            st = server.status()
            if not st["running"]:
                break
            if verbose and time.monotonic() - last >= 5:
                last = time.monotonic()
                consumers = ", ".join(f"{c['pid']} {c['state']}" for c in st["consumers"]) or "none"
                tuned = st.get("pipeline", {}).get("autotune")
                setting = (f"; autotuned: {tuned['threads']} threads, {tuned['reads_in_flight']} "
                           f"reads" if tuned else "")
                print(f"nostall serve {name}: {st['produced']:,} chunks "
                      f"(epoch {st['produced'] // max(1, st['chunks_per_epoch'])}), "
                      f"consumers: {consumers}{setting}", file=sys.stderr, flush=True)
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return None


def list_shared():
    """Names of the shared loaders on this node."""
    return list(_nostall.list_shared())
