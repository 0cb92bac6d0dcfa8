"""Ctrl-C and `del loader` stop every thread promptly; a real process, a real SIGINT."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import nostall
from conftest import cached_data, write_jpeg_folder


def native_threads():
    return len(os.listdir("/proc/self/task"))


def test_del_loader_joins_every_thread_the_autotuner_started(jpeg_folder, tmp_path):
    # An autotuned loader starts threads as it runs; all are joined by del.
    before = native_threads()
    loader = nostall.Loader(jpeg_folder, batch_size=4, autotune=True, num_threads=1,
                            reads_in_flight=1, source_options={"throttle_latency_ms": 20},
                            transforms=[nostall.RandomResizedCrop(64)])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and loader.stats()["autotune"]["changes"] == 0:
        for _ in loader:  # prep waits on reads of 20 ms: the tuner adds reads
            pass
    assert loader.stats()["autotune"]["reads_in_flight"] > 1
    assert native_threads() > before + 3
    del loader
    assert native_threads() == before


def test_del_loader_joins_every_thread(jpeg_folder):
    before = native_threads()
    loader = nostall.Loader(jpeg_folder, batch_size=4, num_threads=3, reads_in_flight=5,
                            transforms=[nostall.RandomResizedCrop(64)])
    # 3 prep + 5 fetch threads, and the autotuner's (prefetch is left to it).
    assert native_threads() == before + 9
    t0 = time.monotonic()
    batch = next(iter(loader))  # mid-epoch, threads busy
    first = time.monotonic() - t0
    t0 = time.monotonic()
    del loader
    # Threads stop at once, not after the epoch: within the time the first
    # batch took (measured here: a busy machine slows both), plus a margin.
    assert time.monotonic() - t0 < 2 + 2 * first
    assert native_threads() == before
    assert batch[0].shape == (4, 3, 64, 64)  # still readable after the loader is gone


@pytest.mark.slow
def test_ctrl_c_while_waiting_for_a_batch(tmp_path):
    data = cached_data(write_jpeg_folder, classes=1, per_class=40, min_side=700, max_side=800)
    # Python's own Ctrl-C handler, as in a terminal: a process started in
    # the background by a shell without job control inherits SIGINT ignored.
    script = textwrap.dedent(f"""
        import signal, sys, nostall
        signal.signal(signal.SIGINT, signal.default_int_handler)
        loader = nostall.Loader({str(data)!r}, batch_size=40, num_threads=1, prefetch=0,
                                transforms=[nostall.Resize((512, 512))])
        loader.set_epoch(0)
        import time
        t0 = time.monotonic()
        next(iter(loader))
        print("ready", time.monotonic() - t0, flush=True)
        try:
            for _ in range(1000):
                for batch in loader:
                    pass
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(3)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    ready, batch_s = proc.stdout.readline().split()
    assert ready == "ready"
    time.sleep(0.5)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    line = proc.stdout.readline()
    # Interrupted while a batch is made, not after it or the epoch: sooner
    # than a batch takes in this process (timed there, on this machine).
    took = time.monotonic() - t0
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 3, line + out
    assert line.strip() == "interrupted"
    assert took < 1 + float(batch_s), (took, batch_s)


def test_close_from_another_thread_ends_a_next_that_waits(jpeg_folder):
    """A loader closed by another thread while next() waits for a slow batch:
    that next() raises "closed" (no crash, no use of a freed loader), close()
    returns promptly, and every thread is joined; a second close is nothing."""
    import threading

    before = native_threads()
    loader = nostall.Loader(jpeg_folder, batch_size=4, num_threads=1, reads_in_flight=1, autotune=False,
                            source_options={"throttle_latency_ms": 300}, transforms=[nostall.Resize((16, 16))])
    it = iter(loader)
    took = []

    def closer():
        time.sleep(0.5)  # next() is waiting for its batch (4 reads of 300 ms)
        t0 = time.monotonic()
        loader.close()
        took.append(time.monotonic() - t0)

    thread = threading.Thread(target=closer)
    thread.start()
    with pytest.raises(RuntimeError, match="closed"):
        for _ in it:
            pass
    thread.join(timeout=60)
    assert took and took[0] < 10, took
    loader.close()
    assert native_threads() <= before + 1
