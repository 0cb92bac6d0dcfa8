"""The cluster cache tier on real memcached servers (Debian's memcached,
started here on loopback with -M): items partitioned across the servers,
shared by every loader that names them, and a server killed mid-epoch costs
hits, never a sample or its bytes."""
import os
import shutil
import signal
import socket
import subprocess
import time

import pytest
import torch

import nostall
from conftest import augment, epoch_batches, write_jpeg_folder

MEMCACHED = shutil.which("memcached") or "/usr/bin/memcached"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Memcached:
    def __init__(self, megabytes=64):
        assert os.access(MEMCACHED, os.X_OK), "memcached is not installed (make test installs it)"
        self.port = free_port()
        self.proc = subprocess.Popen([MEMCACHED, "-l", "127.0.0.1", "-p", str(self.port), "-U", "0",
                                      "-M", "-m", str(megabytes), "-u", "root"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                assert self.proc.poll() is None and time.monotonic() < deadline, "memcached did not start"
                time.sleep(0.02)
        self.address = f"127.0.0.1:{self.port}"

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()


@pytest.fixture
def servers():
    started = [Memcached(), Memcached()]
    yield started
    for s in started:
        s.kill()


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_jpeg_folder(tmp_path_factory.mktemp("cluster"), classes=3, per_class=16, seed=11)


def loader(data, cache=None):
    return nostall.Loader(data, batch_size=8, shuffle=True, seed=5, transforms=augment(),
                          return_indices=True, cache=cache)


def same(a, b):
    assert len(a) == len(b)
    for (xa, la, ia), (xb, lb, ib) in zip(a, b):
        assert torch.equal(ia, ib) and torch.equal(la, lb) and torch.equal(xa, xb)


def test_every_node_reads_what_any_node_cached(data, servers):
    addresses = [s.address for s in servers]
    plain = loader(data)
    first = loader(data, nostall.Cache("cluster-test", size="64MiB", servers=addresses))
    for epoch in range(3):
        same(epoch_batches(first, epoch), epoch_batches(plain, epoch))
    epochs = first.stats()["cache"]["epochs"]
    # Epoch 1 starts while epoch 0's last reads are in flight (the pipeline
    # runs on), so a few of its items may not be cached yet; from epoch 2 on
    # every item is.
    assert epochs[0]["hit_rate"] == 0 and epochs[1]["hit_rate"] > 0.8, epochs
    assert epochs[2]["hit_rate"] == 1.0, epochs
    # Another node (another loader, its own process in a real job) finds
    # every item already cached: its first epoch is all hits.
    second = loader(data, nostall.Cache("cluster-test", size="64MiB", servers=addresses))
    same(epoch_batches(second, 0), epoch_batches(plain, 0))
    assert second.stats()["cache"]["epochs"][0]["hit_rate"] == 1.0
    assert second.stats()["cache"]["tiers"][0]["tier"] == "memcached"


@pytest.fixture(scope="module")
def more_data(tmp_path_factory):
    # Enough batches that a kill after the second lands before the loader
    # has prefetched the epoch's rest (it asks a batch ahead, 3 batches deep).
    return write_jpeg_folder(tmp_path_factory.mktemp("cluster-more"), classes=3, per_class=64,
                             seed=12)


def test_a_server_killed_mid_epoch_costs_hits_not_samples(more_data, servers):
    data = more_data
    addresses = [s.address for s in servers]
    plain = loader(data)
    cached = loader(data, nostall.Cache("cluster-kill", size="64MiB", servers=addresses))
    epoch_batches(cached, 0)  # fills both servers
    expected = epoch_batches(plain, 1)
    cached.set_epoch(1)
    got = []
    for k, (x, y, i) in enumerate(cached):
        got.append((x.clone(), y.clone(), i.clone()))
        if k == 1:
            servers[1].kill()
    same(got, expected)
    consumer = cached.stats()["consumer"]
    assert consumer["max_wait_s"] < 1.0, consumer
    epoch = cached.stats()["cache"]["epochs"][1]
    assert 0.2 < epoch["hit_rate"] < 1.0, epoch  # the survivor's share still hits
    same(epoch_batches(cached, 2), epoch_batches(plain, 2))


def test_no_servers_is_a_clear_error(data, monkeypatch):
    monkeypatch.delenv("NOSTALL_CACHE_SERVERS", raising=False)
    with pytest.raises(ValueError, match="NOSTALL_CACHE_SERVERS"):
        loader(data, nostall.Cache("cluster-none", size="1MiB", policy="memcached"))
    with pytest.raises(TypeError):
        nostall.Cache("x", size="1MiB", servers="node1:11211")
    with pytest.raises(ValueError, match="servers go with"):
        nostall.Cache("x", size="1MiB", policy="lru", servers=["node1:11211"])
