"""Progress display on stderr: a live bar on a terminal, plain lines elsewhere."""

from __future__ import annotations

import sys
import time

_WIDTH = 24


def _bar(done, total):
    frac = 0.0 if total <= 0 else min(1.0, done / total)
    filled = int(frac * _WIDTH)
    return "[" + "#" * filled + "." * (_WIDTH - filled) + f"] {frac:4.0%}"


class _Line:
    """One rewritable status line; redraws at most 5 times a second."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stderr
        self.live = hasattr(self.stream, "isatty") and self.stream.isatty()
        self._last = 0.0
        self._shown = False

    def due(self):
        return self.live and time.monotonic() - self._last >= 0.2

    def draw(self, text, force=False):
        if not self.live or not (force or self.due()):
            return
        self._last = time.monotonic()
        self.stream.write("\r\x1b[2K" + text)
        self.stream.flush()
        self._shown = True

    def finish(self, text):
        """Replaces the live line (if any) with a permanent one."""
        if self._shown:
            self.stream.write("\r\x1b[2K")
            self._shown = False
        self.stream.write(text + "\n")
        self.stream.flush()


class Phase:
    """Numbered phases of a long job, each with an optional bar."""

    def __init__(self, enabled: bool, total: int, stream=None):
        self.enabled = enabled
        self.total = total
        self.k = 0
        self.name = ""
        self.t0 = 0.0
        self.line = _Line(stream)

    def begin(self, name):
        self.k += 1
        self.name = name
        self.t0 = time.perf_counter()
        if self.enabled:
            self.line.draw(f"[{self.k}/{self.total}] {name}", force=True)

    def update(self, done, total):
        if self.enabled:
            self.line.draw(f"[{self.k}/{self.total}] {self.name} {_bar(done, total)}")

    def end(self, result):
        if self.enabled:
            took = time.perf_counter() - self.t0
            self.line.finish(f"[{self.k}/{self.total}] {self.name}: {result} ({took:.1f} s)")


class EpochProgress:
    """The loader's ``progress=``: images/s and stall % live, a summary per epoch."""

    def __init__(self, mode, stream=None):
        self.bar = mode is True
        self.line = _Line(stream)
        self._told_left_out = False

    def left_out(self, text):
        """Says once, on the progress stream, what the dataset holds that is not read."""
        if text and not self._told_left_out:
            self._told_left_out = True
            self.line.finish(f"dataset: {text}")

    def update(self, loader, epoch, batches, total):
        if not self.bar or not self.line.due():
            return
        stats = loader.stats()
        e = _epoch_stats(stats, epoch)
        if e is None:
            return
        where = (f"{_bar(batches, total)} {batches}/{total}" if total is not None
                 else f"{batches} (count known when the shards are indexed)")
        self.line.draw(f"epoch {epoch} {where} batches, "
                       f"{e['images_per_s']:,.0f} images/s, stalled {e['stall_fraction']:.1%}"
                       f"{_cache_text(stats, epoch)}{_autotune_text(stats)}")

    def finish(self, loader, epoch):
        stats = loader.stats()
        e = _epoch_stats(stats, epoch)
        if e is None:
            return
        wall = e["wait_s"] + e["between_s"]
        p99 = stats["consumer"]["wait_p99_s"]
        self.line.finish(f"epoch {epoch}: {e['samples']:,} images in {wall:.2f} s, "
                         f"{e['images_per_s']:,.0f} images/s, waited on data {e['stall_fraction']:.1%} "
                         f"of the time (p99 wait {p99 * 1e3:.1f} ms){_cache_text(stats, epoch)}"
                         f"{_autotune_text(stats)}")


def _autotune_text(stats):
    """"; autotuned: 1 thread, 4 reads, prefetch 2" or "" (nothing tuned)."""
    a = stats.get("autotune")
    if not a:
        return ""
    return (f"; autotuned: {a['threads']} thread{'s' if a['threads'] != 1 else ''}, "
            f"{a['reads_in_flight']} reads, prefetch {a['prefetch']}")


def _cache_text(stats, epoch):
    """", cache hits 73% of bytes (lookups: minio 0.01 ms, memcached 0.12 ms)" or ""."""
    cache = stats.get("cache")
    if not cache:
        return ""
    e = next((x for x in cache["epochs"] if x["epoch"] == epoch), None)
    if e is None:
        return ""
    text = f", cache hits {e['byte_hit_rate']:.0%} of bytes"
    tiers = cache.get("tiers", [])
    if len(tiers) > 1 or any(t["errors"] for t in tiers):
        text += " (lookups: " + ", ".join(f"{t['tier']} {t['lookup_mean_s'] * 1e3:.2f} ms"
                                          for t in tiers) + ")"
    if e["errors"]:
        text += f", {e['errors']} tier errors"
    return text


def _epoch_stats(stats, epoch):
    for e in stats["consumer"]["epochs"]:
        if e["epoch"] == epoch:
            return e
    return None
