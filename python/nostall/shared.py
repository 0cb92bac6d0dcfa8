"""One pipeline for every training job on the node: ``nostall.serve`` and ``Loader.attach``.

```python
import nostall

spec = {"source": "data/train", "batch_size": 64, "shuffle": True,
        "transforms": [nostall.RandomResizedCrop(64).to_dict()]}
# the producer (or, from a shell: nostall serve --spec train.json --name hp-search)
with nostall.serve(spec, "hp-search") as server:
    # in each training process on the node
    loader = nostall.Loader.attach("hp-search", batch_size=32)
    images, labels = next(iter(loader))
    loader.close()
```

``server.wait()`` (or ``nostall.serve(..., block=True)``) serves until Ctrl-C
or SIGTERM. The protocol is in docs/ring_format.md.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import sys
import threading
import time
import weakref

from . import _nostall
from ._lifetime import Closeable

__all__ = ["serve", "Server", "list_shared"]


def _spec_dict(spec) -> dict:
    from .loader import Loader, read_spec

    if isinstance(spec, Loader):
        hooks, batch_transform, _ = getattr(spec, "_hooks", ({}, None, 2))
        named = [f"transforms[{field!r}]: " + ", ".join(getattr(f, "__name__", repr(f)) for f in fns)
                 for field, fns in hooks.items() if fns]
        if batch_transform is not None:
            named.append("batch_transform: " + getattr(batch_transform, "__name__",
                                                        repr(batch_transform)))
        if named:
            raise ValueError(
                "this loader runs Python callables, which a served pipeline (C++ only) cannot: "
                + "; ".join(named) + ". Serve it without them and give them to each consumer: "
                "Loader.attach(name, batch_size, transforms=..., batch_transform=...)")
    return read_spec(spec)


_live = weakref.WeakSet()  # servers of this process not yet closed


def _close_all():
    """Closes this process's servers (never a forked child's copies of its parent's)."""
    for server in list(_live):
        if server._owner_pid != os.getpid():
            continue
        try:
            server.close()
        except Exception:
            pass


def _on_sigterm(signum, frame):
    """SIGTERM while serving: remove the segments (as the CLI does), then die
    of SIGTERM as the process would have."""
    _close_all()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


atexit.register(_close_all)


def _remove_on_sigterm():
    """Installs _on_sigterm where it can run (the main thread) and where the
    program has no SIGTERM handler of its own, which is then left alone."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, _on_sigterm)


class Server(Closeable):
    """A producer serving in background threads of this process.

    ``close()`` (or leaving ``with``) stops it and removes its shared memory;
    so does SIGTERM, unless the program installed its own SIGTERM handler.
    ``wait()`` serves until Ctrl-C or SIGTERM. The arguments (``spec``,
    ``name``, ``chunk``, ``max_consumers``, ``slots``, ``max_lag``,
    ``block_chunks``, ``verbose``, ``remote``: chunks made by Ray actors on
    other machines) are :func:`serve`'s.
    """

    def __init__(self, spec, name, *, chunk=0, max_consumers=8, slots=0, max_lag=1.0,
                 block_chunks=0, verbose=False, remote=None):
        self.name = name
        self._verbose = verbose
        self._owner_pid = os.getpid()
        self._feeder = None
        spec = _spec_dict(spec)
        in_spec = spec.pop("remote", None)
        remote = remote.to_spec() if remote is not None else in_spec  # {"ray": {...}}, or None
        self._core = _nostall.Server(name, json.dumps(spec), int(chunk), int(max_consumers),
                                     int(slots), float(max_lag), int(block_chunks), bool(verbose),
                                     remote is not None)
        _live.add(self)
        _remove_on_sigterm()
        if remote is not None:
            try:
                self._feeder = _Feeder(self._core, remote)
            except BaseException:
                self.close()
                raise
            if signal.getsignal(signal.SIGTERM) is _on_sigterm:
                signal.signal(signal.SIGTERM, _on_sigterm)  # again: Ray's start replaced it

    def status(self) -> dict:
        """Chunks produced, consumers (pid, state, next chunk), evictions, reaped consumers,
        and the pipeline's own stats (``["pipeline"]``: stages, the autotuner's decisions);
        served from prep on other machines, ``["remote"]``: the batches each side made."""
        st = json.loads(self._require().status_json())
        if self._feeder is not None:
            st["remote"] = self._feeder.counts()
        return st

    @property
    def spec(self) -> dict:
        """The spec served, defaults filled in."""
        return json.loads(self._require().spec_json())

    def _require(self):
        if self._core is None:
            raise RuntimeError(f"the server {self.name!r} is closed")
        return self._core

    def wait(self) -> None:
        """Serves until Ctrl-C, SIGTERM or the producer stops, then closes.

        With ``verbose``, prints a status line every 5 s on stderr.
        """
        try:
            last = 0.0
            while True:
                st = self.status()
                if not st["running"]:
                    break
                if self._verbose and time.monotonic() - last >= 5:
                    last = time.monotonic()
                    _print_status(self.name, st)
                time.sleep(0.2)
        except KeyboardInterrupt:
            pass
        finally:
            self.close()

    def close(self) -> None:
        """Stops serving and removes the segment (raises what stopped it early, if anything).

        In a child forked from the serving process it does nothing: the
        parent serves on."""
        if getattr(self, "_owner_pid", os.getpid()) != os.getpid():
            self._core = None
            return
        feeder, self._feeder = getattr(self, "_feeder", None), None
        if feeder is not None:
            feeder.stop()  # before the core: it writes into the segment
        core, self._core = getattr(self, "_core", None), None
        _live.discard(self)
        if core is not None:
            core.close()

    def __repr__(self):
        state = "closed" if self._core is None else "serving"
        return f"<nostall.Server {self.name!r} {state}>"


def _print_status(name, st):
    consumers = ", ".join(f"{c['pid']} {c['state']}" for c in st["consumers"]) or "none"
    tuned = st.get("pipeline", {}).get("autotune")
    setting = (f"; autotuned: {tuned['threads']} threads, {tuned['reads_in_flight']} "
               f"reads" if tuned else "")
    print(f"nostall serve {name}: {st['produced']:,} chunks "
          f"(epoch {st['produced'] // max(1, st['chunks_per_epoch'])}), "
          f"consumers: {consumers}{setting}", file=sys.stderr, flush=True)


class _Feeder:
    """A served pipeline's chunks made by prep on other machines: a loader of
    the producer's own spec (its chunk as the batch, its shuffle blocks: the
    order a served pipeline makes) with ``remote=``, whose batches a thread
    writes into the segment's slots in order, epoch after epoch."""

    def __init__(self, core, remote: dict):
        from .loader import Loader

        spec = json.loads(core.spec_json())
        spec.update(world_size=1, rank=0)  # a served pipeline's order, whatever torchrun's environment says
        spec["remote"] = remote  # (a bad one: Loader.from_spec says what is wrong with it)
        self._core = core
        self._stopping = threading.Event()
        # Made here (Ray starts from the thread that serves), iterated by the feeding thread.
        self._loader = Loader.from_spec(spec, return_indices=True, output="numpy")
        self._thread = threading.Thread(target=self._run, name="nostall-serve-remote", daemon=True)
        self._thread.start()

    def counts(self) -> dict:
        remote = getattr(self._loader, "_remote", None)
        return dict(remote.counts) if remote is not None else {}

    def _run(self):
        try:
            epoch = 0
            while not self._stopping.is_set():
                self._loader.set_epoch(epoch)
                for chunk, (images, labels, indices) in enumerate(self._loader):
                    while not self._core.feed(images, labels, indices, epoch, chunk, 0.2):
                        if self._stopping.is_set():
                            return
                    if self._stopping.is_set():
                        return
                epoch += 1
        except BaseException as e:  # noqa: BLE001 - told to every consumer, and raised by close()
            cause = getattr(e, "cause", None) or e  # a worker's error, without Ray's traceback around it
            self._core.fail(f"the remote prep stopped: {type(cause).__name__}: {cause}")

    def stop(self):
        self._stopping.set()
        self._thread.join()
        self._loader.close()


def serve(spec, name, *, chunk=0, max_consumers=8, slots=0, max_lag=1.0, block_chunks=0,
          block=False, verbose=None, remote=None):
    """Serves ``spec``'s pipeline to every ``Loader.attach(name, ...)`` on this node.

    spec: a dict, JSON text, a path to a JSON file, or a Loader (its spec).
    name: what consumers attach to (per user: another user's ``name`` is
        another segment).
    chunk: samples per chunk the producer publishes (default: the spec's
        batch_size); consumers whose batch size divides it read zero-copy.
    max_consumers, slots: the consumer table and the chunk slots (default
        4 + 2 x max_consumers) of the shared-memory segment.
    max_lag: seconds the producer waits for one consumer before leaving it
        to a private pipeline.
    block_chunks: the shuffle block, in chunks (default: about 1/16 of an
        epoch); a consumer starts at a block boundary.
    block: False (default) returns the running :class:`Server` at once (use
        it in ``with``, or ``close()`` it); True serves until Ctrl-C or
        SIGTERM, as ``nostall serve`` does, then removes the segment.
    verbose: a status line every 5 s on stderr while blocking (default:
        when ``block``).
    remote: a :class:`nostall.ray.Prep` (or the spec's ``"remote"``): the
        chunks are made by Ray actors on other machines' CPUs (and this
        node's idle cores), the same chunks in the same order as the
        pipeline served here would make (docs/remote.md). Batches of one
        sample shape with their labels (no extra fields).

    The segment is removed when the server closes, when the process gets
    SIGTERM (unless it has a SIGTERM handler of its own) or at exit; a
    process killed with SIGKILL leaves it behind, as dead, for ``nostall
    shared rm NAME`` or the next ``serve`` of that name.
    """
    if verbose is None:
        verbose = block
    server = Server(spec, name, chunk=chunk, max_consumers=max_consumers, slots=slots,
                    max_lag=max_lag, block_chunks=block_chunks, verbose=verbose, remote=remote)
    if not block:
        return server
    server.wait()
    return None


def list_shared():
    """Names of the shared loaders on this node (yours; ``nostall shared ls`` shows their state)."""
    return list(_nostall.list_shared())
