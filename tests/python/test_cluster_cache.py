"""The cluster cache tier on real memcached servers (Debian's memcached,
started here on loopback with -M): items partitioned across the servers,
shared by every loader that names them, and a server killed mid-epoch costs
hits, never a sample or its bytes."""
import os
import shutil
import json
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest
import torch

import nostall
from conftest import (Memcached, cached_data, augment, epoch_batches, free_port, wait_for_port,
                      write_jpeg_folder)

HERE = Path(__file__).parent

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
    # Fixed settings: the kill test counts on how far ahead the loader reads
    # (prefetch 2, one fetch thread per read), which the autotuner would move.
    return nostall.Loader(data, batch_size=8, shuffle=True, seed=5, transforms=augment(),
                          return_indices=True, cache=cache, autotune=False)


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
    return cached_data(write_jpeg_folder, classes=3, per_class=64, seed=12)


def test_a_server_killed_mid_epoch_costs_hits_not_samples(more_data, servers):
    data = more_data
    addresses = [s.address for s in servers]
    plain = loader(data)
    cached = loader(data, nostall.Cache("cluster-kill", size="64MiB", servers=addresses))
    epoch_batches(cached, 0)  # fills both servers
    t0 = time.perf_counter()
    expected = epoch_batches(plain, 1)
    plain_epoch_s = time.perf_counter() - t0
    cached.set_epoch(1)
    got = []
    for k, (x, y, i) in enumerate(cached):
        got.append((x.clone(), y.clone(), i.clone()))
        if k == 1:
            servers[1].kill()
    same(got, expected)
    consumer = cached.stats()["consumer"]
    # The dead server costs its lookups at most a few client timeouts (200 ms
    # each), never a batch that waits longer than that and a whole epoch
    # without the cache (timed above, on the same machine).
    assert consumer["max_wait_s"] < 5 * 0.2 + plain_epoch_s, (consumer, plain_epoch_s)
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


def reference(data, rank, world_size, epochs):
    """{epoch: {index: crc}} from a loader without a cache, as the node's."""
    plain = nostall.Loader(data, batch_size=4, shuffle=True, seed=5, transforms=augment(),
                           return_indices=True, output="numpy", rank=rank, world_size=world_size)
    out = []
    for epoch in range(epochs):
        plain.set_epoch(epoch)
        out.append({i: zlib.crc32(x[j].tobytes())
                    for x, _, idx in plain for j, i in enumerate(idx.tolist())})
    return out


@pytest.mark.slow
def test_four_nodes_with_rank_and_world_size_share_one_cache_and_survive_a_kill(more_data, tmp_path):
    """4 node processes (RANK 0-3 of 4), one memcached each; the cache holds
    the dataset. From the second epoch every item is a hit on some node's
    server; one server SIGKILLed in the third epoch costs its share of hits
    and nothing else: every sample once per epoch, its pixels as without a
    cache, no long wait."""
    world, epochs = 4, 4
    servers = [Memcached() for _ in range(world)]
    addresses = ",".join(s.address for s in servers)
    env = dict(os.environ, WORLD_SIZE=str(world), PYTHONPATH=str(HERE))
    env.pop("NOSTALL_CACHE_SERVERS", None)
    nodes = []
    try:
        for rank in range(world):
            out = tmp_path / f"node{rank}.json"
            nodes.append((out, subprocess.Popen(
                [sys.executable, str(HERE / "cluster_node.py"), str(more_data), str(out),
                 str(epochs), addresses, str(64 << 20), "0.05"],
                env=dict(env, RANK=str(rank)))))
        # Mid-epoch 2 (node 0's first batch of it is out), a node's server dies.
        deadline = time.monotonic() + 120
        while not Path(f"{nodes[0][0]}.epoch2").exists():
            assert nodes[0][1].poll() is None and time.monotonic() < deadline, "node 0 stopped"
            time.sleep(0.01)
        servers[3].kill()
        for out, proc in nodes:
            assert proc.wait(timeout=120) == 0, f"{out.name} failed"
    finally:
        for _, proc in nodes:
            if proc.poll() is None:
                proc.kill()
        for s in servers:
            s.kill()
    results = [json.loads(out.read_text()) for out, _ in nodes]
    items = len(list(Path(more_data).rglob("*.jpg")))
    for epoch in range(epochs):
        everyone = [i for r in results for i, _ in r["epochs"][epoch]]
        assert sorted(everyone) == list(range(items)), f"epoch {epoch}: not every sample once"
    for rank, r in enumerate(results):
        expected = reference(more_data, rank, world, epochs)
        for epoch in range(epochs):
            assert dict(map(tuple, r["epochs"][epoch])) == expected[epoch], (rank, epoch)
        assert max(r["max_wait_s"][1:]) < 1.0, (rank, r["max_wait_s"])

    def hit_rate(epoch):
        counts = [e for r in results for e in r["cache"]["epochs"] if e["epoch"] == epoch]
        return sum(e["hits"] for e in counts) / sum(e["hits"] + e["misses"] for e in counts)

    # The nodes start each epoch together (cluster_node.py's barrier): in
    # epoch 0 only a node's last items can meet what a faster node read ahead
    # into epoch 1 while it waited.
    assert hit_rate(0) < 0.05
    assert hit_rate(1) > 0.95  # epoch 1 may start while epoch 0's last inserts are in flight
    # The killed server held about a quarter; the others' items still hit.
    assert 0.5 < hit_rate(2) < 1.0 and 0.5 < hit_rate(3) < 1.0, [hit_rate(e) for e in range(4)]


NOSTALL = shutil.which("nostall", path=str(Path(sys.executable).parent)) or shutil.which("nostall")


@pytest.mark.parametrize("size", ["40G", "40GB", "40GiB", "1.5g", "512M", "512MB", "900 mib",
                                  "1T", "2tb", "409600k", "700000000"])
def test_a_size_means_the_same_in_python_and_on_the_command_line(size):
    printed = subprocess.run([NOSTALL, "cache", "serve", "--size", size, "--print"],
                             capture_output=True, text=True)
    assert printed.returncode == 0, printed.stderr
    command = printed.stdout.split()
    assert int(command[command.index("-m") + 1]) == nostall.cache.parse_size(size) >> 20
    assert nostall.Cache("same-size", size).size == nostall.cache.parse_size(size)
    assert nostall.cache.parse_size("40G") == 40 * 2**30 and nostall.cache.parse_size("40GB") == 40 * 10**9


def test_a_size_that_means_nothing_is_refused_by_both_faces():
    for bad in ("forty", "40 parsecs", "-1G", "0", "1e3G", ""):
        with pytest.raises(ValueError, match="cannot read the size"):
            nostall.cache.parse_size(bad)
        out = subprocess.run([NOSTALL, "cache", "serve", "--size", bad, "--print"],
                             capture_output=True, text=True)
        assert out.returncode == 2 and "--size" in out.stderr


def test_cache_serve_starts_memcached_the_way_the_cluster_cache_needs(data):
    printed = subprocess.run([NOSTALL, "cache", "serve", "--size", "1GiB", "--print"],
                             capture_output=True, text=True)
    assert printed.returncode == 0, printed.stderr
    command = printed.stdout.split()
    assert "-M" in command and command[command.index("-m") + 1] == "1024", printed.stdout
    assert command[command.index("-p") + 1] == "11211"
    small = subprocess.run([NOSTALL, "cache", "serve", "--size", "3MB"], capture_output=True, text=True)
    assert small.returncode == 2 and "--size" in small.stderr
    port = free_port()
    server = subprocess.Popen([NOSTALL, "cache", "serve", "--size", "64MiB", "--port", str(port),
                               "--listen", "127.0.0.1"], stderr=subprocess.PIPE, text=True)
    try:
        wait_for_port(port, server)
        address = f"127.0.0.1:{port}"
        cached = loader(data, nostall.Cache("cluster-serve", size="64MiB", servers=[address]))
        plain = loader(data)
        for epoch in range(3):
            same(epoch_batches(cached, epoch), epoch_batches(plain, epoch))
        assert cached.stats()["cache"]["epochs"][2]["hit_rate"] == 1.0
        inspected = subprocess.run([NOSTALL, "cache", "inspect", "--servers", address],
                                   capture_output=True, text=True)
        assert inspected.returncode == 0, inspected.stderr
        # Every item, and the job's pool counter (cache.h, CacheConfig.pool_parts).
        assert f"{len(list(Path(data).rglob('*.jpg'))) + 1} items, 0 evictions" in inspected.stdout
    finally:
        server.terminate()
        assert server.wait(timeout=10) is not None
    assert "NOSTALL_CACHE_SERVERS=" in server.stderr.read()
    down = subprocess.run([NOSTALL, "cache", "inspect", "--servers", f"127.0.0.1:{port}"],
                          capture_output=True, text=True)
    assert down.returncode == 1 and "down:" in down.stdout


def test_a_node_local_tier_in_front_of_the_cluster_tier(data, servers):
    addresses = [servers[0].address]
    plain = loader(data)
    cache = nostall.Cache("cluster-local", size="64MiB", servers=addresses, local_size="64MiB")
    try:
        first = loader(data, cache)
        same(epoch_batches(first, 0), epoch_batches(plain, 0))
        tiers = first.stats()["cache"]["tiers"]
        assert [t["tier"] for t in tiers] == ["minio", "memcached"]
        items = len(list(Path(data).rglob("*.jpg")))
        assert tiers[0]["items"] == items and tiers[1]["items"] == items, tiers
        # The cluster gone, a second loader on this node still finds every
        # item in the node-local tier, and the cluster tier is never asked.
        servers[0].kill()
        second = loader(data, nostall.Cache("cluster-local", size="64MiB", servers=addresses,
                                            local_size="64MiB"))
        same(epoch_batches(second, 1), epoch_batches(plain, 1))
        stats = second.stats()["cache"]
        assert stats["epochs"][0]["hit_rate"] == 1.0
        front, back = stats["tiers"]
        # (It may have run on into the next epoch: at least this one's lookups.)
        assert front["lookups"] >= items and front["hit_bytes"] > 0 and back["lookups"] == 0
        # (What a lookup costs in each tier is a benchmark's figure, not this
        # test's: make bench-cluster.)
        assert front["lookup_mean_s"] > 0
    finally:
        cache.remove()
    with pytest.raises(ValueError, match="local_size"):
        nostall.Cache("x", size="1MiB", local_size="1MiB")
