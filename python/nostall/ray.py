"""Prep on other machines' CPUs, with Ray (docs/remote.md).

``nostall.Loader(..., remote=nostall.ray.Prep(num_workers=2, cpus_per_worker=8))``
starts Ray actors that run the same pipeline (the spec, seed and rank of the
trainer's loader) and make the batches the trainer asks for: each batch is
the very batch the local loader would make (the same samples, the same
draws), and the trainer hands them out in the local order. The trainer's own
prep threads keep making batches too (``local=True``); every batch goes to
whichever side is expected to finish it first, so the faster side makes
more.

Exactly once: a batch is acknowledged when the trainer takes it, not when a
worker sends it. A worker that dies (its process killed, its node gone) has
every batch it was given and the trainer had not yet taken made again by the
others (or by the trainer's own threads), so the trainer never sees a batch
twice nor misses one.

Ray does the scheduling (actors with ``num_cpus``, custom ``resources``),
the transport (its object store: a batch crosses the network once, lands in
the trainer node's shared memory and is handed out from there without
another copy) and the failure detection; nostall adds the plan of which
batch each side makes.
"""

from __future__ import annotations

import heapq
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Optional

from .errors import DataError

__all__ = ["Prep"]


@dataclass(frozen=True)
class Prep:
    """Where a loader's batches are made besides the trainer (docs/remote.md).

    Args:
        num_workers: Ray actors, each running a nostall pipeline.
        cpus_per_worker: each actor's ``num_cpus`` (Ray places it where that
            many CPUs are free) and its prep threads.
        window: batches each worker may have been asked for and not yet
            handed out by the trainer (the backpressure: a worker never runs
            further ahead).
        local: the trainer's own prep threads make batches too.
        local_window: batches asked of the trainer's own threads at once
            when no worker is left (while workers run: one at a time, made
            in the background, from what the training step leaves idle).
        resources: Ray custom resources each actor needs (e.g.
            ``{"prep": 1}`` to keep workers on the nodes started with that
            resource).
        address: the Ray cluster to join when Ray is not yet initialised in
            this process (``"auto"``: the one ``ray start`` made on this
            node; None: ``ray.init()``'s default).
        replacements: lost workers replaced by new actors over the loader's
            life (None: twice ``num_workers``; 0: none). A replacement is
            given batches once it is up; until then the others (or the
            trainer's own threads, when none is left) make them.
    """

    num_workers: int = 1
    cpus_per_worker: float = 1
    window: int = 4
    local: bool = True
    local_window: int = 2
    resources: Optional[dict] = field(default=None)
    address: Optional[str] = None
    replacements: Optional[int] = None

    def to_spec(self) -> dict:
        """The spec's ``"remote": {"ray": ...}`` object (docs/spec.md)."""
        out = {"num_workers": self.num_workers, "cpus_per_worker": self.cpus_per_worker,
               "window": self.window, "local": self.local, "local_window": self.local_window}
        if self.resources is not None:
            out["resources"] = dict(self.resources)
        if self.address is not None:
            out["address"] = self.address
        if self.replacements is not None:
            out["replacements"] = self.replacements
        return {"ray": out}

    @classmethod
    def from_spec(cls, remote) -> "Prep":
        """The Prep a spec's ``"remote"`` object describes."""
        if not isinstance(remote, dict) or set(remote) != {"ray"} or not isinstance(remote["ray"], dict):
            raise ValueError(f'a spec\'s "remote" is {{"ray": {{"num_workers": N, ...}}}}, not {remote!r}')
        known = {"num_workers", "cpus_per_worker", "window", "local", "local_window", "resources", "address",
                 "replacements"}
        unknown = set(remote["ray"]) - known
        if unknown:
            raise ValueError(f'the spec\'s "remote": unknown keys {sorted(unknown)} (of {sorted(known)})')
        return cls(**remote["ray"])

    def __post_init__(self):
        for name in ("num_workers", "window", "local_window"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < (0 if name == "num_workers" else 1):
                raise ValueError(f"Prep {name} must be an integer >= {0 if name == 'num_workers' else 1}, "
                                 f"not {v!r}")
        if not (isinstance(self.cpus_per_worker, (int, float)) and self.cpus_per_worker > 0):
            raise ValueError(f"Prep cpus_per_worker must be > 0, not {self.cpus_per_worker!r}")
        if self.num_workers == 0 and not self.local:
            raise ValueError("Prep with no workers and local=False would make no batches")
        if self.replacements is not None and (not isinstance(self.replacements, int) or
                                              isinstance(self.replacements, bool) or self.replacements < 0):
            raise ValueError(f"Prep replacements must be an integer >= 0 or None, not {self.replacements!r}")


def _ray():
    try:
        import ray
    except ImportError as e:  # pragma: no cover - said to the user
        raise ImportError("remote prep needs Ray: pip install 'ray>=2.40'") from e
    return ray


# --------------------------------------------------------------------- worker
class _Worker:
    """A Ray actor's body: a nostall pipeline making the planned batches of
    each pass (one epoch's, for one trainer iteration) as they are asked for."""

    def __init__(self, spec_json: str):
        from . import _nostall

        self._nostall = _nostall
        self._core = _nostall.Loader(spec_json)
        self._cv = threading.Condition()
        self._passes = []     # (key, plan, batch list) not yet run, in order
        self._current = None  # the key of the pass the pump runs
        self._done = {}       # (key, batch) -> the batch's arrays
        self._failed = {}     # (key, batch) -> the error that broke it
        self._closed = False
        self._latest = {}     # each trainer's latest pass
        self._waiting = {}    # (key, batch) -> the asks waiting for it
        self._pump = threading.Thread(target=self._run, name="nostall-remote-prep", daemon=True)
        self._pump.start()

    def ready(self) -> dict:
        """Whether the pipeline is up, and where (for the trainer's log)."""
        import os
        import socket
        return {"host": socket.gethostname(), "pid": os.getpid(), "cpus": len(os.sched_getaffinity(0))}

    def make(self, key, epoch: int, elastic, batch: int):
        """Batch `batch` of the pass `key` (of `epoch`): waits until it is made."""
        want = (tuple(key), batch)
        with self._cv:
            owner, number = key
            if number < self._latest.get(owner, 0):
                raise RuntimeError(f"pass {number} of this trainer is over")  # a late call: nobody waits for it
            self._latest[owner] = number
            if self._waiting.get(want, 0) == 0 and want not in self._done:
                plan = self._plan_for(tuple(key), epoch, elastic)
                plan[1].extend([batch])
                plan[2].append(batch)
            # (Asked again while the first ask waits, after a dropped answer:
            # both get the one batch.)
            self._waiting[want] = self._waiting.get(want, 0) + 1
            try:
                while want not in self._done and want not in self._failed and not self._closed:
                    self._cv.wait()
                last = self._waiting[want] == 1
                if want in self._failed:
                    raise self._failed.pop(want) if last else self._failed[want]
                if want not in self._done:
                    raise RuntimeError("the worker is closing")
                return self._done.pop(want) if last else self._done[want]
            finally:
                self._waiting[want] -= 1
                if not self._waiting[want]:
                    del self._waiting[want]

    def _plan_for(self, key, epoch, elastic):
        for p in self._passes:
            if p[0] == key:
                return p
        # A new pass: the ones before it are finished (their batches still made).
        for p in self._passes:
            p[1].finish()
        p = (key, self._nostall.BatchPlan(epoch, [tuple(e) for e in elastic]), [])
        self._passes.append(p)
        self._cv.notify_all()
        return p

    def _run(self):
        while True:
            with self._cv:
                while not self._passes and not self._closed:
                    self._cv.wait()
                if self._closed and not self._passes:
                    self._core.close()
                    return
                key, plan, batches = self._passes[0]
            self._core.start_plan(plan)
            made = 0
            while True:
                try:
                    out = self._core.next_planned()
                except DataError as e:  # a bad batch: its caller raises it, as the local loader would
                    with self._cv:
                        self._failed[(key, batches[made])] = e
                        made += 1
                        self._cv.notify_all()
                    continue
                except Exception as e:  # noqa: BLE001 - the pipeline broke
                    with self._cv:
                        for b in batches[made:]:
                            self._failed[(key, b)] = e
                        self._cv.notify_all()
                    break
                if out is None:
                    break
                images, labels, indices, _copied, _over, fields, dims = out
                # The slot's views go into the object store when make() returns;
                # the slot is freed once they are serialized and dropped.
                with self._cv:
                    self._done[(key, batches[made])] = (images, labels, indices, fields, dims)
                    made += 1
                    self._cv.notify_all()
            with self._cv:
                self._passes.pop(0)

    def close(self):
        """Stops after the batches already asked for; the pump closes the pipeline
        (only the thread that iterates it may)."""
        with self._cv:
            self._closed = True
            for p in self._passes:
                p[1].finish()
            self._cv.notify_all()


# ---------------------------------------------------------------- the trainer
class _Source:
    """One side that makes batches: a worker actor, or the trainer's own core."""

    def __init__(self, name, window, actor=None, ready=None):
        self.name = name
        self.window = window
        self.actor = actor
        self.outstanding = set()  # batches asked of it, not yet taken by the trainer
        self.per_batch = None     # seconds a batch takes it (a running mean)
        self.alive = True
        self.ready = ready        # a replacement's ready() call: given batches once it answered
        self.made = 0             # batches the trainer took from it

    def finish_estimate(self, default):
        t = self.per_batch if self.per_batch is not None else default
        return (len(self.outstanding) + 1) * t


class Remote:
    """The trainer's side: which batch each source makes, and the batches
    taken in order (Loader(remote=...) makes one)."""

    def __init__(self, core, prep: Prep):
        ray = _ray()
        if not ray.is_initialized():
            ray.init(address=prep.address, ignore_reinit_error=True, log_to_driver=False)
        self._ray = ray
        self._core = core
        self._prep = prep
        spec = json.loads(core.spec_json())
        spec["num_threads"] = max(1, int(round(prep.cpus_per_worker)))
        actor = ray.remote(_Worker).options(num_cpus=prep.cpus_per_worker, resources=prep.resources or None,
                                            max_concurrency=prep.window + 4)
        self._actor, self._worker_spec = actor, json.dumps(spec)
        self._replacements_left = 2 * prep.num_workers if prep.replacements is None else prep.replacements
        self._sources = [_Source(f"worker {i}", prep.window, actor.remote(self._worker_spec))
                         for i in range(prep.num_workers)]
        self._local = _Source("local", prep.local_window) if prep.local else None
        if self._local is not None:
            # The trainer's own prep only takes what its training step leaves idle.
            core.run_in_background()
        self._where = [s.actor.ready.remote() for s in self._sources]  # not waited for: a fast start
        self._pass = 0
        self._local_rest = 0
        self.taken = 0          # batches the trainer took, over all passes
        self.local_from = 0     # the trainer's threads rest until it took this many
        self.local_lead = 0     # how far ahead they are asked (0: twice the workers' windows)
        self.counts = {"remote_batches": 0, "local_batches": 0, "remade_batches": 0, "workers_lost": 0,
                       "workers_replaced": 0, "remote_bytes": 0, "remote_wait_s": 0.0}

    def local_made(self, waited):
        """The tuner of the trainer's own share. A batch its threads had made
        in the background by its turn pays. One the trainer had to wait for
        took the step's time (the idle moments before its turn were too few):
        the next is asked twice as far ahead (up to 64 batches), and the
        threads rest for 16, 32, ... up to 256 batches."""
        if waited < 0.01:
            self._local_rest = 0
            return
        self.local_lead = min(64, 2 * self.local_lead)
        self._local_rest = min(256, max(16, 2 * self._local_rest))
        self.local_from = self.taken + self._local_rest

    @property
    def where(self):
        """Each worker's host, pid and cores (waits for them to be up)."""
        return self._ray.get(self._where)

    def begin(self):
        """The next pass: the cursor picks it, the sources make it."""
        epoch, start, elastic, batches = self._core.begin_elsewhere()
        self._pass += 1
        return _Pass(self, (id(self), self._pass), epoch, elastic, start, batches)

    def lost(self, source, error):
        source.alive = False
        self.counts["workers_lost"] += 1
        import warnings
        replaced = self._replacements_left > 0
        warnings.warn(f"nostall remote prep: {source.name} was lost ({type(error).__name__}); its "
                      f"{len(source.outstanding)} batches not yet taken are made again elsewhere"
                      + ("; a new worker replaces it" if replaced else ""), RuntimeWarning, stacklevel=4)
        if replaced:
            self._replacements_left -= 1
            self.counts["workers_replaced"] += 1
            actor = self._actor.remote(self._worker_spec)
            self._sources.append(_Source(f"worker {len(self._sources)} (replacing {source.name})",
                                         self._prep.window, actor, actor.ready.remote()))
        if not self.working() and self._local is None:
            self._local = _Source("local", self._prep.local_window)  # the last resort: our own threads

    def working(self):
        """The workers that are up: alive, and (a replacement) answered ready()."""
        out = []
        for s in self._sources:
            if s.alive and s.ready is not None:
                done, _ = self._ray.wait([s.ready], timeout=0)
                if not done:
                    continue
                try:
                    self._ray.get(s.ready)
                    s.ready = None
                except self._ray.exceptions.RayError as e:  # it died starting
                    self.lost(s, e)
                    continue
            if s.alive:
                out.append(s)
        return out

    def close(self):
        for s in self._sources:
            if s.alive:
                try:
                    self._ray.kill(s.actor)  # its batches not taken go with it
                except Exception:  # noqa: BLE001 - already gone
                    pass
        self._sources = []


class _Pass:
    """One epoch's pass: batches [start, end) handed out in order."""

    def __init__(self, remote, key, epoch, elastic, start, end):
        self.r = remote
        self.key = key
        self.epoch = epoch
        self.elastic = [list(e) for e in elastic]
        self.next = self.first = start
        self.end = end
        self.to_assign = start
        self.again = []      # batches to make again (a lost worker's), lowest first
        self.asked = {}      # batch -> (source, ObjectRef or None, time asked)
        self.local_ready = {}  # batch -> arrays the local core made ahead of their turn
        self.local_plan = None
        self.local_order = []  # the local plan's batches, in its order
        self.local_count = 0  # the local plan's batches handed out so far

    # -- asking
    def fill(self):
        """Asks the sources for the next batches. Workers first: a batch made
        here takes the trainer's own core. The trainer's threads (in the
        background: only what the training step leaves idle) take the first
        batches while the workers start (a fast start), then one batch at a
        time, twice the workers' windows ahead of the trainer, so that the
        moments the step leaves idle make it before its turn."""
        workers = self.r.working()
        local = self.r._local
        warming = all(s.per_batch is None for s in workers)
        if workers and not warming and local is not None and not local.outstanding:
            # Far enough ahead that the idle moments before its turn make it.
            if not self.r.local_lead:
                self.r.local_lead = 2 * sum(s.window for s in workers)
            far = self.next + self.r.local_lead
            if self.to_assign <= far < self.end and self.r.taken >= self.r.local_from and far not in self.asked:
                self.ask(local, far)
        while True:
            again = bool(self.again)
            while self.to_assign in self.asked:  # (the trainer's threads took it)
                self.to_assign += 1
            if again:
                b = self.again[0]
            elif self.to_assign < self.end:
                b = self.to_assign
            else:
                return
            room = [s for s in workers if again or len(s.outstanding) < s.window]
            # Until a worker has made a batch (it may be starting: a process,
            # a pipeline), the trainer's threads make batches as if alone.
            if local is not None and (not workers or (warming and len(local.outstanding) < local.window)):
                src = local if (again or len(local.outstanding) < local.window) else None
            elif room:
                known = [s.per_batch for s in room if s.per_batch is not None]
                default = sum(known) / len(known) if known else 1.0
                src = min(room, key=lambda s: s.finish_estimate(default))
            else:
                src = None
            if src is None:
                return
            if again:
                heapq.heappop(self.again)
            else:
                self.to_assign += 1
            self.ask(src, b)

    def ask(self, src, b):
        src.outstanding.add(b)
        if src.actor is None:
            if self.local_plan is None:
                from . import _nostall
                self.local_plan = _nostall.BatchPlan(self.epoch, [tuple(e) for e in self.elastic])
                self.r._core.start_plan(self.local_plan)
            self.local_plan.extend([b])
            self.local_order.append(b)
            self.asked[b] = (src, None, time.perf_counter())
        else:
            ref = src.actor.make.remote(self.key, self.epoch, self.elastic, b)
            self.asked[b] = (src, ref, time.perf_counter())

    # -- taking
    def take(self):
        """The next batch's arrays (images, labels, indices, fields, dims), or None at the end."""
        while self.next < self.end:
            self.fill()
            b = self.next
            src, ref, t0 = self.asked[b]
            t_take = time.perf_counter()
            try:
                out = self.take_local(b) if ref is None else self.take_remote(src, ref)
            except self.r._ray.exceptions.ActorUnavailableError:
                # The worker is alive but did not answer (a busy node, a
                # dropped connection): this batch is asked again, of any side.
                src.outstanding.discard(b)
                del self.asked[b]
                heapq.heappush(self.again, b)
                self.r.counts["remade_batches"] += 1
                continue
            except self.r._ray.exceptions.RayError as e:
                if isinstance(e, self.r._ray.exceptions.RayTaskError) and not _lost(self.r._ray, e):
                    raise e.as_instanceof_cause() from None  # a bad batch: as the local loader raises it
                self.remake(src, e)
                continue
            if ref is None and workers_alive(self.r) and not all(w.per_batch is None for w in self.r._sources
                                                                 if w.alive):
                self.r.local_made(waited=time.perf_counter() - t_take)
            src.outstanding.discard(b)
            src.made += 1
            del self.asked[b]
            dt = time.perf_counter() - t0
            # A batch's cost: the time it took over the batches queued before it.
            cost = dt / max(1, len(src.outstanding) + 1)
            src.per_batch = cost if src.per_batch is None else 0.8 * src.per_batch + 0.2 * cost
            self.next += 1
            self.r.taken += 1
            return b, out
        return None

    def take_local(self, b):
        while b not in self.local_ready:
            out = self.r._core.next_planned()
            if out is None:
                raise RuntimeError("the trainer's own prep ended its plan early")
            made = self.local_order[self.local_count]
            self.local_count += 1
            images, labels, indices, _copied, _over, fields, dims = out
            self.local_ready[made] = (images, labels, indices, fields, dims)
        self.r.counts["local_batches"] += 1
        return self.local_ready.pop(b)

    def take_remote(self, src, ref):
        t = time.perf_counter()
        out = self.r._ray.get(ref)
        self.r.counts["remote_wait_s"] += time.perf_counter() - t
        self.r.counts["remote_batches"] += 1
        self.r.counts["remote_bytes"] += sum(a.nbytes for a in out[:3])
        return out

    def remake(self, src, error):
        """`src` is lost: every batch it was asked for and not taken, again elsewhere."""
        if src.alive:
            self.r.lost(src, error)
        for b in sorted(src.outstanding):
            del self.asked[b]
            heapq.heappush(self.again, b)
            self.r.counts["remade_batches"] += 1
        src.outstanding.clear()

    def close(self):
        if self.local_plan is not None:
            self.local_plan.finish()
        self.local_ready.clear()
        for b, (src, _ref, _t) in list(self.asked.items()):
            src.outstanding.discard(b)
        self.asked.clear()


def workers_alive(remote):
    return any(s.alive for s in remote._sources)


def _lost(ray, e):
    """Whether a task error means the worker (or its result) is gone, not a bad batch."""
    cause = getattr(e, "cause", None)
    return isinstance(cause, (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError))
