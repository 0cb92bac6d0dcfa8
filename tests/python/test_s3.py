"""Training straight from S3: a real S3 API server (moto's server mode) on
loopback, the data put there with boto3, read back by nostall over HTTP."""
import json
import os
import shutil
import subprocess
import sys
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

import nostall
from conftest import (augment, epoch_batches, fresh_bucket, moto_endpoint, save_folder_with_datasets, write_jpeg_folder,
                      write_shards)

NOSTALL = shutil.which("nostall", path=str(Path(sys.executable).parent)) or shutil.which("nostall")

boto3 = pytest.importorskip("boto3")  # installed by the test command (make test)

SECRET = "s3cr3t-never-printed"


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    endpoint = moto_endpoint()
    env = {"AWS_ACCESS_KEY_ID": "AKIDTEST", "AWS_SECRET_ACCESS_KEY": SECRET,
           "AWS_ENDPOINT_URL": endpoint, "AWS_REGION": "us-east-1"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id="AKIDTEST", aws_secret_access_key=SECRET)
    fresh_bucket(client, "train-data")
    local = write_jpeg_folder(tmp_path_factory.mktemp("s3src"), classes=3, per_class=7, seed=5)
    for path in sorted(local.rglob("*.jpg")):
        client.upload_file(str(path), "train-data", "imagenet/train/" + str(path.relative_to(local)))
    client.put_object(Bucket="train-data", Key="imagenet/train/README.txt", Body=b"not an image")
    yield client, local
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def test_batches_from_s3_are_the_batches_of_the_local_copy(s3):
    _, local = s3
    kw = dict(batch_size=5, shuffle=True, seed=9, transforms=augment(), return_indices=True)
    remote = nostall.Loader("s3://train-data/imagenet/train/", **kw)
    here = nostall.Loader(local, **kw)
    assert remote.classes == here.classes == ["class_0", "class_1", "class_2"]
    assert remote.num_items == here.num_items == 21
    for epoch in (0, 1):
        a, b = epoch_batches(remote, epoch), epoch_batches(here, epoch)
        assert len(a) == len(b) == 5
        for (ia, la, xa), (ib, lb, xb) in zip(a, b):
            assert torch.equal(xa, xb) and torch.equal(la, lb)
            assert torch.equal(ia, ib)  # byte-identical pixels
    assert remote.key(0).startswith("s3://train-data/imagenet/train/class_0/")


def test_a_missing_object_is_a_data_error_naming_it_or_skipped(s3):
    client, local = s3
    client.copy_object(Bucket="train-data", Key="gone/c/x.jpg",
                       CopySource={"Bucket": "train-data", "Key": "imagenet/train/class_0/000.jpg"})
    client.copy_object(Bucket="train-data", Key="gone/c/y.jpg",
                       CopySource={"Bucket": "train-data", "Key": "imagenet/train/class_0/001.jpg"})
    loader = nostall.Loader("s3://train-data/gone/", batch_size=1, transforms=[nostall.Resize((8, 8))])
    skipping = nostall.Loader("s3://train-data/gone/", batch_size=1, on_error="skip",
                              transforms=[nostall.Resize((8, 8))])
    client.delete_object(Bucket="train-data", Key="gone/c/x.jpg")  # listed, then removed
    with pytest.raises(nostall.DataError) as e:
        list(loader)
    assert "s3://train-data/gone/c/x.jpg" in str(e.value) and "404" in str(e.value)
    assert SECRET not in str(e.value)
    assert sum(int(labels.shape[0]) for _, labels in skipping) == 1
    assert skipping.stats()["skipped"] == 1


def test_a_bucket_that_does_not_exist_is_a_clear_error(s3):
    with pytest.raises(nostall.NostallError) as e:
        nostall.Loader("s3://no-such-bucket/x/", batch_size=1)
    text = str(e.value)
    assert "NoSuchBucket" in text and "404" in text
    assert "credentials from environment" in text or "signed" in text
    assert SECRET not in text and "AKIDTEST" not in text


def test_a_prefix_without_class_folders_says_what_it_expected(s3):
    with pytest.raises(FileNotFoundError) as e:  # as for a local path that holds no dataset
        nostall.Loader("s3://train-data/imagenet/nothing-here/", batch_size=1)
    assert "no class prefixes" in str(e.value)


class FaultProxy:
    """The S3 server behind tests/tools/fault_proxy.py with the given faults,
    made the endpoint (AWS_ENDPOINT_URL) while it runs. finish() stops it
    and returns what it did."""

    def __init__(self, *faults):
        tool = os.path.join(os.path.dirname(__file__), "..", "tools", "fault_proxy.py")
        self.proc = subprocess.Popen([sys.executable, tool, "--upstream", os.environ["AWS_ENDPOINT_URL"],
                                      *faults], stdout=subprocess.PIPE, text=True)
        self.port = int(self.proc.stdout.readline().split()[1])
        self.saved = os.environ["AWS_ENDPOINT_URL"]
        os.environ["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{self.port}"
        self.counts = {}

    def finish(self):
        if not self.counts and self.proc.poll() is None:
            self.proc.terminate()
            out, _ = self.proc.communicate(timeout=10)
            self.counts.update(json.loads(out.strip().splitlines()[-1]))
        return self.counts

    def kill(self):
        self.proc.kill()
        self.proc.wait()

    def restore(self):
        os.environ["AWS_ENDPOINT_URL"] = self.saved
        if self.proc.poll() is None:
            self.finish()


@pytest.fixture
def faulty_endpoint(s3):
    """10% of requests answered 503 SlowDown, 1% of bodies cut in half; never
    more than 3 faults in a row for one object (S3 retries 6 times)."""
    proxy = FaultProxy("--status-503", "0.10", "--cut", "0.01", "--seed", "7", "--max-in-a-row", "3")
    yield proxy.finish
    proxy.restore()


@pytest.fixture
def env():
    """os.environ, restored after the test."""
    saved = dict(os.environ)
    yield os.environ
    os.environ.clear()
    os.environ.update(saved)


@pytest.mark.slow
def test_a_body_that_stalls_times_out_and_is_retried(s3, env):
    _, local = s3
    env["NOSTALL_S3_READ_TIMEOUT"] = "1"
    proxy = FaultProxy("--stall", "0.15", "--seed", "5")
    try:
        kw = dict(batch_size=4, shuffle=True, seed=3, transforms=[nostall.Resize((16, 16))],
                  return_indices=True)
        remote = nostall.Loader("s3://train-data/imagenet/train/", **kw)
        a, b = epoch_batches(remote, 0), epoch_batches(nostall.Loader(local, **kw), 0)
        assert sorted(int(i) for _, _, idx in a for i in idx) == list(range(21))
        for (ia, _, xa), (ib, _, xb) in zip(a, b):
            assert torch.equal(xa, xb) and torch.equal(ia, ib)
        stalls = remote.stats()["storage"]["retries_by_cause"]["timeout"]
        remote.close()
        assert stalls >= 1 and stalls <= proxy.finish()["stall"], (stalls, proxy.counts)
    finally:
        proxy.restore()


def test_storage_gone_mid_epoch_is_a_clear_error_within_the_timeout(s3, env):
    env["NOSTALL_S3_CONNECT_TIMEOUT"] = "1"
    env["AWS_MAX_ATTEMPTS"] = "5"  # the driver's option max_attempts wins over it
    proxy = FaultProxy()
    try:
        loader = nostall.Loader("s3://train-data/imagenet/train/", batch_size=4, prefetch=1,
                                source_options={"max_attempts": 3},
                                transforms=[nostall.Resize((8, 8))])
        it = iter(loader)
        next(it)
        proxy.kill()  # connections are refused from now on
        t0 = time.monotonic()
        with pytest.raises(nostall.DataError) as err:
            for epoch in range(20):  # past what was read ahead
                loader.set_epoch(epoch)
                for _ in (it if epoch == 0 else loader):
                    pass
        assert time.monotonic() - t0 < 20
        text = str(err.value)
        assert "s3://train-data/imagenet/train/" in text and "after 3 attempts" in text, text
        assert loader.stats()["storage"]["retries_by_cause"]["connection"] >= 2
        loader.close()
    finally:
        proxy.restore()


def test_closing_a_loader_with_reads_stalled_in_flight_is_prompt(s3, env):
    proxy = FaultProxy("--stall", "1.0")  # every GET of an item stalls
    try:
        loader = nostall.Loader("s3://train-data/imagenet/train/", batch_size=4,
                                transforms=[nostall.Resize((8, 8))])
        it = iter(loader)  # the epoch starts: its reads go out, and stall
        deadline = time.monotonic() + 10
        while loader.stats()["storage"]["in_flight"] < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert loader.stats()["storage"]["in_flight"] >= 4
        t0 = time.monotonic()
        loader.close()
        assert time.monotonic() - t0 < 2.0
        del it
    finally:
        proxy.restore()


def test_503s_and_cut_bodies_are_retried_and_every_sample_arrives_once(s3, faulty_endpoint):
    _, local = s3
    kw = dict(batch_size=4, shuffle=True, seed=3, transforms=[nostall.Resize((16, 16))],
              return_indices=True)
    remote = nostall.Loader("s3://train-data/imagenet/train/", **kw)
    here = nostall.Loader(local, **kw)
    for epoch in range(6):
        a, b = epoch_batches(remote, epoch), epoch_batches(here, epoch)
        seen = sorted(int(i) for _, _, idx in a for i in idx)
        assert seen == list(range(21))  # every sample exactly once
        for (ia, la, xa), (ib, lb, xb) in zip(a, b):
            assert torch.equal(xa, xb) and torch.equal(ia, ib)
    # The loader reads on into the next epoch until its ring is full: wait
    # until it has stopped asking before comparing counts.
    storage = remote.stats()["storage"]
    while True:
        time.sleep(0.3)
        now = remote.stats()["storage"]
        if now["requests"] == storage["requests"] and now["in_flight"] == 0:
            break
        storage = now
    storage = now
    remote.close()
    counts = faulty_endpoint()
    # 1 listing + 6 x 21 GETs, and about a tenth of them answered 503.
    assert counts["requests"] >= 127
    assert counts["503"] >= 5, counts
    # What the proxy did is what the loader counts: every request it saw, and
    # a retry for each 503 and each body cut short.
    assert storage["requests"] == counts["requests"], (storage, counts)
    assert storage["retries"] == counts["503"] + counts["cut"], (storage, counts)
    causes = storage["retries_by_cause"]
    assert causes["slow_down"] == counts["503"], causes
    assert causes["cut_short"] + causes["connection"] == counts["cut"], causes
    assert storage["errors"] == 0


def test_spec_fields_override_the_environment(s3):
    saved = os.environ["AWS_ENDPOINT_URL"]
    os.environ["AWS_ENDPOINT_URL"] = "http://127.0.0.1:9"  # nothing listens there
    try:
        with pytest.raises(nostall.NostallError):
            nostall.Loader("s3://train-data/imagenet/train/", batch_size=4)
        loader = nostall.Loader("s3://train-data/imagenet/train/", batch_size=4,
                                source_options={"endpoint": saved},
                                transforms=[nostall.Resize((8, 8))])
        assert sum(int(l.shape[0]) for _, l in loader) == 21
        source = json.loads(json.dumps(loader.spec))["source"]
        assert source["driver"] == "s3-image-folder"
        assert source["options"]["endpoint"] == saved
        # The spec builds the same loader again, endpoint and all.
        again = nostall.Loader.from_spec(loader.spec)
        assert sum(int(l.shape[0]) for _, l in again) == 21
        # The old keyword still works, said to be deprecated, into the same spec.
        with pytest.warns(FutureWarning, match=r"s3_endpoint=.*source_options=\{'endpoint'"):
            old = nostall.Loader("s3://train-data/imagenet/train/", batch_size=4, s3_endpoint=saved,
                                 transforms=[nostall.Resize((8, 8))])
        assert old.spec == loader.spec
        assert SECRET not in json.dumps(loader.spec) and SECRET not in json.dumps(loader.stats())
        assert loader.stats()["storage"]["requests"] >= 22
    finally:
        os.environ["AWS_ENDPOINT_URL"] = saved


def test_tar_shards_on_s3_give_the_batches_of_the_local_shards(s3, tmp_path):
    client, local = s3
    pattern = write_shards(local, tmp_path / "shards")
    for s in range(2):
        client.upload_file(str(tmp_path / "shards" / f"train-{s}.tar"), "train-data", f"shards/train-{s}.tar")
    kw = dict(batch_size=6, shuffle=True, seed=4, transforms=augment(), return_indices=True)
    remote = nostall.Loader("s3://train-data/shards/train-{0..1}.tar", **kw)
    here = nostall.Loader(pattern, **kw)
    assert remote.num_items == here.num_items == 21
    for epoch in (0, 1):
        a, b = epoch_batches(remote, epoch), epoch_batches(here, epoch)
        for (ia, la, xa), (ib, lb, xb) in zip(a, b):
            assert torch.equal(ia, ib) and torch.equal(la, lb) and torch.equal(xa, xb)
    assert remote.key(0).startswith("s3://train-data/shards/train-0.tar:")
    # Indexed once: a second loader reuses the saved index (no more ranged GETs
    # of the shards than the one listing), until a shard changes.
    again = nostall.Loader("s3://train-data/shards/train-{0..1}.tar", **kw)
    assert again.stats()["storage"]["requests"] == 1
    client.upload_file(str(tmp_path / "shards" / "train-0.tar"), "train-data", "shards/train-1.tar")
    changed = nostall.Loader("s3://train-data/shards/train-{0..1}.tar", **kw)
    assert changed.stats()["storage"]["requests"] > 1
    assert changed.num_items == 22  # shard 0's 11 samples, twice
    with pytest.raises(FileNotFoundError) as e:
        nostall.Loader("s3://train-data/shards/train-{0..2}.tar", **kw)
    assert "train-2.tar" in str(e.value)


def test_s3_shards_read_in_shard_order_take_many_members_a_request(s3, tmp_path):
    """shard_shuffle=True reads a shard's members close together: once four
    members of one 1 MB block of a shard are asked for, one ranged GET reads
    the block and the rest of its members come from it, so an epoch costs a
    few requests a shard rather than one a member; the batches are the
    local shards' all the same."""
    client, local = s3
    out = tmp_path / "shards"
    pattern = write_shards(local, out)
    for s in range(2):
        client.upload_file(str(out / f"train-{s}.tar"), "train-data", f"ordered/train-{s}.tar")
    kw = dict(batch_size=4, shuffle=True, seed=6, transforms=augment(), return_indices=True, shard_shuffle=True)
    remote = nostall.Loader("s3://train-data/ordered/train-{0..1}.tar", **kw)
    here = nostall.Loader(pattern, **kw)
    for epoch in (0, 1):
        before = remote.stats()["storage"]["requests"]
        a, b = epoch_batches(remote, epoch), epoch_batches(here, epoch)
        assert len(a) == len(b) == 6
        for (ia, la, xa), (ib, lb, xb) in zip(a, b):
            assert torch.equal(ia, ib) and torch.equal(la, lb) and torch.equal(xa, xb)
        # 21 members in 2 shards of one block each (~270 kB): three members
        # of a shard alone, then the block (the rest); the first epoch also
        # reads each shard once for its index.
        assert remote.stats()["storage"]["requests"] - before <= 2 * 4 + (2 if epoch == 0 else 0)
    # An exact shuffle of these small shards reads three members of a block
    # soon too: the same batches either way.
    exact = nostall.Loader("s3://train-data/ordered/train-{0..1}.tar", **dict(kw, shard_shuffle=False))
    for epoch in (0, 1):
        for (ia, la, xa), (ib, lb, xb) in zip(epoch_batches(exact, epoch),
                                              epoch_batches(nostall.Loader(pattern, **dict(kw, shard_shuffle=False)),
                                                            epoch)):
            assert torch.equal(ia, ib) and torch.equal(la, lb) and torch.equal(xa, xb)


def test_an_index_object_beside_s3_shards_starts_a_fresh_node_without_reading_them(s3, tmp_path, env):
    """`nostall index s3://...` PUTs PATTERN.nostall-index beside the shards;
    a node with an empty index cache starts from it (the listing and one GET,
    no shard read), saves it to its own cache for its other processes; a
    shard replaced afterwards makes it stale (said, and not used)."""
    client, local = s3
    pattern = write_shards(local, tmp_path / "shards", shards=3)
    for s in range(3):
        client.upload_file(str(tmp_path / "shards" / f"train-{s}.tar"), "train-data", f"beside/train-{s}.tar")
    uri = "s3://train-data/beside/train-{0..2}.tar"
    env["NOSTALL_CACHE_DIR"] = str(tmp_path / "builder")
    out = subprocess.run([NOSTALL, "index", uri], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "written beside the data: s3://train-data/beside/train-{0..2}.tar.nostall-index" in out.stdout
    head = client.head_object(Bucket="train-data", Key="beside/train-{0..2}.tar.nostall-index")
    assert head["ContentLength"] > 64
    kw = dict(batch_size=5, shuffle=True, seed=8, transforms=[nostall.Resize((16, 16))],
              return_indices=True)
    env["NOSTALL_CACHE_DIR"] = str(tmp_path / "fresh-node")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        remote = nostall.Loader(uri, **kw)
    assert remote.index_origin == "beside the data: s3://train-data/beside/train-{0..2}.tar.nostall-index"
    assert remote.stats()["storage"]["requests"] == 2  # the listing and the index object
    here = nostall.Loader(pattern, index_beside="off", **kw)
    for epoch in (0, 1):
        a, b = epoch_batches(remote, epoch), epoch_batches(here, epoch)
        for (ia, la, xa), (ib, lb, xb) in zip(a, b):
            assert torch.equal(ia, ib) and torch.equal(la, lb) and torch.equal(xa, xb)
    # The node's next process maps its own cached copy: the listing alone.
    again = nostall.Loader(uri, **kw)
    assert again.index_origin.startswith("the index cache: ")
    assert again.stats()["storage"]["requests"] == 1
    # A shard replaced (another ETag): the object is stale, said, not used.
    client.upload_file(str(tmp_path / "shards" / "train-0.tar"), "train-data", "beside/train-1.tar")
    env["NOSTALL_CACHE_DIR"] = str(tmp_path / "third-node")
    with pytest.warns(UserWarning, match="is stale: a shard changed"):
        changed = nostall.Loader(uri, first_epoch="exact", **kw)
    assert changed.index_origin.startswith("built in")
    now = tmp_path / "now"  # the shards as they are now, locally
    now.mkdir()
    for s, src in enumerate((0, 0, 2)):
        shutil.copy(tmp_path / "shards" / f"train-{src}.tar", now / f"train-{s}.tar")
    ref = nostall.Loader(str(now / "train-{0..2}.tar"), index_beside="off", **kw)
    assert changed.num_items == ref.num_items
    a, b = epoch_batches(changed, 0), epoch_batches(ref, 0)
    for (ia, la, xa), (ib, lb, xb) in zip(a, b):
        assert torch.equal(ia, ib) and torch.equal(la, lb) and torch.equal(xa, xb)


def test_cold_s3_shards_start_buffered_and_give_the_local_buffered_epoch(s3, tmp_path, env):
    """With no index anywhere, S3 shards open at once (first_epoch="auto" is
    buffered on S3): the first epoch is WebDataset's order, the very batches
    local shards give in their buffered epoch; the index is saved when every
    shard is in, and the next loader on the node starts exact from it."""
    client, local = s3
    pattern = write_shards(local, tmp_path / "shards", shards=3)
    for s in range(3):
        client.upload_file(str(tmp_path / "shards" / f"train-{s}.tar"), "train-data", f"cold/train-{s}.tar")
    uri = "s3://train-data/cold/train-{0..2}.tar"
    kw = dict(batch_size=4, shuffle=True, seed=2, transforms=augment(), return_indices=True, shuffle_buffer=16)
    env["NOSTALL_CACHE_DIR"] = str(tmp_path / "s3-node")
    remote = nostall.Loader(uri, **kw)
    assert remote.index_origin.startswith("being indexed as the shards are first read")
    # The listing and a look for an index beside the shards: no shard read yet.
    assert remote.stats()["storage"]["requests"] == 2
    a = epoch_batches(remote, 0)
    env["NOSTALL_CACHE_DIR"] = str(tmp_path / "local-node")
    here = nostall.Loader(pattern, first_epoch="buffered", **kw)
    b = epoch_batches(here, 0)
    assert len(a) == len(b) == len(remote)
    for (ia, la, xa), (ib, lb, xb) in zip(a, b):
        assert torch.equal(ia, ib) and torch.equal(la, lb) and torch.equal(xa, xb)
    # Every sample once, named by shard and place (docs/sampling.md).
    named = sorted(remote.key(int(i)) for _, _, x in a for i in x)
    assert len(set(named)) == 21 and all(int(i) >= 2**62 for _, _, x in a for i in x)
    env["NOSTALL_CACHE_DIR"] = str(tmp_path / "s3-node")
    again = nostall.Loader(uri, **kw)
    assert again.index_origin.startswith("the index cache: ")
    assert again.stats()["storage"]["requests"] == 1


@pytest.mark.parametrize("prefetch", [0, 2])
def test_keeping_every_batch_of_an_s3_epoch_works_whatever_the_ring(s3, prefetch):
    """list(loader) over more batches than the ring has slots, with many
    reads in flight: the batch waited for is being made when every other slot
    is held, which is waiting, not a caller holding every slot."""
    _, local = s3
    kw = dict(batch_size=4, shuffle=True, seed=6, transforms=[nostall.Resize((16, 16))],
              return_indices=True, prefetch=prefetch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)  # private copies, said
        for _ in range(3):
            kept = list(nostall.Loader("s3://train-data/imagenet/train/", **kw))
            assert sorted(int(i) for _, _, idx in kept for i in idx) == list(range(21))


def test_reads_in_flight_follow_latency_unless_fixed(s3):
    """100 ms per request: left to adapt, nostall keeps many reads in flight
    (more than the 4 a local source reads at once), sized by Little's law
    alone (the autotuner, which moves a local source's fetch threads,
    leaves them); a fixed reads_in_flight is never exceeded."""
    proxy = FaultProxy("--latency-ms", "100")
    try:
        peaks = {}
        for fixed in (0, 3):
            loader = nostall.Loader("s3://train-data/imagenet/train/", batch_size=8,
                                    reads_in_flight=fixed, transforms=[nostall.Resize((8, 8))])
            t0 = time.monotonic()
            assert sum(int(l.shape[0]) for _, l in loader) == 21
            peaks[fixed] = (loader.stats()["storage"]["peak_in_flight"], time.monotonic() - t0,
                            loader.stats()["storage"]["latency_p50_s"])
            # One controller: Little's law sizes the requests, the autotuner
            # moves the prep threads and prefetch only.
            assert "reads_in_flight" not in loader.stats()["autotune"]["knobs"], loader.stats()["autotune"]
            loader.close()
        assert peaks[0][0] >= 8, peaks
        assert peaks[3][0] <= 3, peaks
        assert 0.08 < peaks[0][2] < 0.5, peaks  # the latency it measured
    finally:
        proxy.restore()


@pytest.mark.slow
def test_a_listing_of_many_pages_is_read_whole(s3):
    """Over 1,000 objects: ListObjectsV2 answers in pages, each after the
    first asked for with a continuation token (signed in canonical order)."""
    client, _ = s3
    src = {"Bucket": "train-data", "Key": "imagenet/train/class_0/000.jpg"}
    def copy(i):  # c0: 1,001 objects (two pages of its own listing), c1: 2
        client.copy_object(Bucket="train-data", Key=f"paged/c{0 if i < 1001 else 1}/{i:05d}.jpg",
                           CopySource=src)

    with ThreadPoolExecutor(8) as pool:  # (boto3's clients are thread-safe)
        list(pool.map(copy, range(1003)))
    loader = nostall.Loader("s3://train-data/paged/", batch_size=64, transforms=[nostall.Resize((8, 8))])
    assert loader.num_items == 1003
    assert loader.classes == ["c0", "c1"]
    assert loader.key(1000) == "s3://train-data/paged/c0/01000.jpg"
    assert loader.key(1001) == "s3://train-data/paged/c1/01001.jpg"
    loader.close()


def test_the_classes_are_listed_at_once(s3):
    """Each class prefix is listed on its own, many at a time: 12 classes 300 ms
    away take a few round trips, not 13 in a row (as one listing would, page
    after page, on a large dataset). The proxy counts the listings it held at
    once."""
    client, _ = s3
    src = {"Bucket": "train-data", "Key": "imagenet/train/class_0/000.jpg"}
    for c in range(12):
        for i in range(2):
            client.copy_object(Bucket="train-data", Key=f"wide/k{c:02d}/{i}.jpg", CopySource=src)
    proxy = FaultProxy("--latency-ms", "300")
    try:
        loader = nostall.Loader("s3://train-data/wide/", batch_size=4,
                                transforms=[nostall.Resize((8, 8))])
        assert loader.num_items == 24 and loader.classes == [f"k{c:02d}" for c in range(12)]
        assert loader.key(23) == "s3://train-data/wide/k11/1.jpg"
        loader.close()
    finally:
        counts = proxy.finish()
        proxy.restore()
    assert counts["requests"] == 13, counts  # the classes, then one listing each
    # The 12 class listings 300 ms each were sent together, not one by one.
    assert counts["max_in_flight"] >= 6, counts


def test_the_shared_memory_cache_in_front_of_s3_saves_every_request(s3):
    """Once every item is cached, epochs come from the MinIO cache: no GET,
    and the batches are those of the local copy. (An item whose read was still
    in flight as the pipeline ran on into the next epoch is read twice, so
    the first epochs may miss a few.)"""
    _, local = s3
    name = f"test-s3-cache-{os.getpid()}"
    kw = dict(batch_size=4, shuffle=True, seed=9, transforms=[nostall.Resize((16, 16))],
              return_indices=True)
    cache = nostall.Cache(name, "64MB")
    try:
        remote = nostall.Loader("s3://train-data/imagenet/train/", cache=cache, reads_in_flight=8, **kw)
        here = nostall.Loader(local, **kw)
        epoch_batches(remote, 0)
        epoch_batches(remote, 1)
        before = remote.stats()["storage"]["requests"]
        for epoch in (2, 3):
            for (ia, _, xa), (ib, _, xb) in zip(epoch_batches(remote, epoch), epoch_batches(here, epoch)):
                assert torch.equal(xa, xb) and torch.equal(ia, ib)
        st = remote.stats()
        assert st["storage"]["requests"] == before, st["storage"]
        assert [e["hit_rate"] for e in st["cache"]["epochs"] if e["epoch"] in (2, 3)] == [1.0, 1.0], st["cache"]
        remote.close()
    finally:
        cache.remove()


@pytest.mark.slow
def test_analyze_on_s3_sees_the_latency_and_predicts_more_reads_in_flight(s3):
    """nostall.analyze on s3:// 30 ms away with 2 reads in flight: the probe
    finds the latency, the run is fetch-bound on it, and the model says what
    more reads in flight (fixed, or left to adapt) would give."""
    proxy = FaultProxy("--latency-ms", "30")
    try:
        spec = {"source": "s3://train-data/imagenet/train/", "batch_size": 4,
                "reads_in_flight": 2, "transforms": [{"type": "Resize", "size": [16, 16]}]}
        a = nostall.analyze(spec, lambda x, y: None, step_seconds=0.5, progress=False)
    finally:
        proxy.restore()
    text = a.table() + a.to_json()
    assert SECRET not in text and "AKIDTEST" not in text
    m = a.profile["measured"]
    cold = a.profile["cold_rate"]
    # At least the proxy's 30 ms, at most what an item took with 2 in flight.
    assert 0.030 * 0.95 <= m["latency_s"] <= 2 * 1.25 / cold, a.table()
    assert a.bottleneck == "fetch" and a.result["predicted"]["limit"] == "latency", a.table()
    assert cold <= 2 / 0.030 * 1.1, a.table()  # 2 reads of 30 ms at a time
    assert a.result["run"]["storage_stats"]["requests"] > 0
    # The I/O thread's CPU is a part of the fetch CPU, and the table says it.
    io = a.result["run"]["fetch_cpu_cold"]["io_thread"]
    assert 0 < io <= a.profile["fetch_cpu_miss"], (io, a.profile["fetch_cpu_miss"])
    assert f"(the I/O thread's {io * 1e3:.3f} ms)" in a.table()
    # Reads in flight: 8 fixed predict 4x. Left to adapt, the loader would
    # keep more than these tiny images need, but a read needs room in a batch
    # slot: 3 batches of 4 ahead of the one in use hold 12.
    # 4x (6x), unless another resource this run measured binds first (the
    # cores, on a busy machine: a loaded run measured prep at 14 batches/s).
    now = a.result["predicted"]
    others = [v for k, v in now["limits"].items() if k != "latency" and v]
    assert a.predict(reads_in_flight=8)["rate"] == pytest.approx(
        min([4 * now["rate"]] + others), rel=0.01), now["limits"]
    adaptive = a.predict(reads_in_flight=0)
    assert adaptive["reads_in_flight"] == 12
    assert adaptive["rate"] == pytest.approx(min([6 * now["rate"]] + others), rel=0.01), now["limits"]
    assert a.recommendation["config"]["reads_in_flight"] > 2
    assert "reads_in_flight=" in a.table()


def test_analyze_on_s3_with_reads_left_to_adapt(s3):
    """The default on s3:// (reads in flight adapt) is analysed as such."""
    # Batches of 8: reads in flight need a slot, and with batches of 2 the 3
    # slots ahead (6 reads) bound them below what a loaded machine's moto
    # latency (1.5 ms and more) needs, whatever adapts.
    spec = {"source": "s3://train-data/imagenet/train/", "batch_size": 8,
            "transforms": [{"type": "Resize", "size": [16, 16]}]}
    a = nostall.analyze(spec, lambda x, y: None, step_seconds=0.5, progress=False)
    assert a.profile["measured"]["reads_in_flight"] == 0
    assert a.result["predicted"]["reads_in_flight"] >= 4
    assert "reads in flight adaptive" in a.table()
    assert a.result["predicted"]["limit"] != "latency", a.table()


def test_the_command_line_inspects_and_benches_s3(s3):
    """`nostall inspect|bench s3://...` as a user runs them (keys from the environment)."""
    from test_cli import run as cli

    r = cli("inspect", "s3://train-data/imagenet/train/")
    assert r.returncode == 0, r.stderr
    assert "s3-image-folder" in r.stdout and "items:       21" in r.stdout
    assert SECRET not in r.stdout + r.stderr
    r = cli("bench", "s3://train-data/imagenet/train/", "--batch-size", 4, "--size", 32)
    assert r.returncode == 0, r.stderr
    assert "21 images" in r.stdout and "reads in flight adaptive" in r.stdout
    assert "storage: " in r.stdout and "requests" in r.stdout and "latency p50" in r.stdout
    j = json.loads(cli("bench", "s3://train-data/imagenet/train/", "--batch-size", 4, "--size", 32,
                       "--json", "--reads-in-flight", 3).stdout)
    assert j["images"] == 21 and j["stats"]["storage"]["peak_in_flight"] <= 3
    assert j["stats"]["storage"]["requests"] >= 21
    r = cli("bench", "s3://no-such-bucket/x/", "--batch-size", 4)
    assert r.returncode == 1 and "NoSuchBucket" in r.stderr and SECRET not in r.stderr


def test_nostall_serve_on_s3_feeds_attached_jobs(s3, tmp_path):
    """`nostall serve` with a spec whose path is s3://: an attached job gets
    every sample once per epoch, the pixels of the local copy."""
    import signal

    _, local = s3
    spec = {"source": "s3://train-data/imagenet/train/", "batch_size": 3, "shuffle": True,
            "seed": 4, "transforms": [{"type": "Resize", "size": [16, 16]}]}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    name = f"s3-serve-{os.getpid()}"
    nostall_cmd = os.path.join(os.path.dirname(sys.executable), "nostall")
    server = subprocess.Popen([nostall_cmd, "serve", "--spec", str(tmp_path / "spec.json"),
                               "--name", name, "--quiet"], stderr=subprocess.PIPE, text=True)
    try:
        here = {}
        with nostall.Loader(local, batch_size=3, transforms=[nostall.Resize((16, 16))],
                            return_indices=True) as ld:
            for x, _, idx in ld:
                for k, i in enumerate(idx.tolist()):
                    here[i] = x[k].clone()
        with nostall.Loader.attach(name, batch_size=3, wait=30, return_indices=True) as job:
            for _ in range(2):
                seen = []
                for x, _, idx in job:
                    for k, i in enumerate(idx.tolist()):
                        assert torch.equal(x[k], here[i])
                        seen.append(i)
                assert sorted(seen) == list(range(21))
    finally:
        server.send_signal(signal.SIGINT)
        _, err = server.communicate(timeout=30)
    assert server.returncode == 0, err
    assert SECRET not in err


def test_records_on_s3_are_the_records_of_the_local_shards(s3, tmp_path):
    """A record is a ranged GET of the span holding its fields (or comes
    from its block's); every field is the local shards' (test_records.py's
    shards: a .json missing once)."""
    from test_records import FIELDS, N, snapshot, write_record_shards

    client, _ = s3
    pattern = write_record_shards(tmp_path / "rec")
    for s in range(2):
        client.upload_file(str(tmp_path / "rec" / f"rec-{s}.tar"), "train-data", f"rec/rec-{s}.tar")
    kw = dict(fields=FIELDS, batch_size=8, shuffle=True, seed=2, return_indices=True,
              transforms={"image": [nostall.RandomResizedCrop(32)]})
    with nostall.Loader("s3://train-data/rec/rec-{0..1}.tar", **kw) as remote, \
            nostall.Loader(pattern, **kw) as here:
        assert remote.num_items == here.num_items == N
        got, want = snapshot(list(remote)), snapshot(list(here))
        assert got == want
        st = remote.stats()
        # A ranged GET per record at first; once four of a block are asked
        # for, the block's records come from one read of it (coalesce.h).
        assert st["storage"]["requests"] < N
        # (bytes per field count what was prepared: every caption at least once)
        assert st["fields"]["caption"]["bytes"] >= sum(
            len(c.encode()) for b in got for c in b["caption"])


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is installed by `make test` (apt)")
def test_audio_shards_on_s3_give_the_local_shards_samples_buffered_then_exact(s3, tmp_path, env):
    """Spoken words as shards on S3: the cold first epoch (buffered) and the
    next (exact) are the very batches the local shards give."""
    from nostall import audio, datasets

    client, _ = s3
    words = datasets.make_spoken_words(tmp_path / "words", words=datasets.SPOKEN_WORDS[:4], voices=2,
                                       speeds=(150,), rates=(16000, 22050), formats=("flac", "mp3", "wav"))
    pattern = datasets.folder_to_shards(words, tmp_path / "local", shards=2, name="speech")
    for s in range(2):
        client.upload_file(str(tmp_path / "local" / f"speech-{s:04d}.tar"), "train-data",
                           f"audio/speech-{s:04d}.tar")
    kw = dict(fields={"audio": "flac;mp3;wav", "label": "cls"}, batch_size=3, shuffle=True, seed=1,
              transforms={"audio": [audio.Resample(16000), audio.RandomCrop(seconds=0.5),
                                    audio.MelSpectrogram(n_mels=32)]},
              return_indices=True, shuffle_buffer=4)
    env["NOSTALL_CACHE_DIR"] = str(tmp_path / "s3-node")
    remote = nostall.Loader("s3://train-data/audio/speech-{0000..0001}.tar", **kw)
    assert remote.index_origin.startswith("being indexed as the shards are first read")
    env["NOSTALL_CACHE_DIR"] = str(tmp_path / "local-node")
    here = nostall.Loader(pattern, first_epoch="buffered", **kw)
    for epoch in (0, 1):
        remote.set_epoch(epoch)
        here.set_epoch(epoch)
        a, b = list(remote), list(here)
        assert len(a) == len(b) == 3
        seen = []
        for x, y in zip(a, b):
            assert x["__index__"].tolist() == y["__index__"].tolist(), epoch
            assert torch.equal(x["label"], y["label"])
            for k in range(len(x["label"])):
                assert torch.equal(x["audio"][k], y["audio"][k]), (epoch, remote.key(int(x["__index__"][k])))
            seen += x["__index__"].tolist()
        assert len(set(seen)) == 8  # every clip once
    remote.close()
    here.close()


def same_epochs_reading(remote, here, batches, epochs=3):
    """Epochs 0.. of `remote` equal `here`'s batch for batch (indices, labels,
    images); the S3 bytes `remote` had read after each."""
    read = []
    for epoch in range(epochs):
        a, b = epoch_batches(remote, epoch), epoch_batches(here, epoch)
        assert len(a) == len(b) == batches
        for (ia, la, xa), (ib, lb, xb) in zip(a, b):
            assert torch.equal(ia, ib) and torch.equal(la, lb) and torch.equal(xa, xb)
        read.append(remote.stats()["storage"]["bytes"])
    return read


def test_parquet_shards_on_s3_read_by_ranges_give_the_local_batches(s3, tmp_path):
    """Parquet files on S3: footers and pages by ranged GETs (never a whole
    file), many in flight, the same batches as the same files on disk."""
    from nostall.datasets import folder_to_parquet

    client, local = s3
    pattern = folder_to_parquet(local, tmp_path, files=3, row_group_size=4, max_page_bytes=1)
    files = sorted(tmp_path.glob("train-*.parquet"))
    for f in files:
        client.upload_file(str(f), "train-data", "parquet/" + f.name)
    kw = dict(batch_size=4, shuffle=True, seed=3, transforms=[nostall.Resize((16, 16))], return_indices=True)
    # (No decoded-page cache: each epoch's reads are its own.)
    remote = nostall.Loader("s3://train-data/parquet/train-*-of-00003.parquet",
                            source_options={"decoded_cache_mb": 0}, **kw)
    here = nostall.Loader(pattern, **kw)
    assert remote.spec["source"]["driver"] == "parquet" and remote.classes == here.classes
    read = same_epochs_reading(remote, here, batches=6)
    storage = remote.stats()["storage"]
    remote.close()
    # Pages of one image each, with their offset index: an epoch reads each
    # row's page once, not its row group of 4 (which would be 4x), nor a file.
    image_bytes = sum(f.stat().st_size for f in sorted(local.rglob("*.jpg")))
    epoch = read[2] - read[1]
    assert 0.6 * image_bytes < epoch < 1.4 * image_bytes, (read, image_bytes)
    assert storage["errors"] == 0
    with pytest.raises(FileNotFoundError, match="no Parquet file matches"):
        nostall.Loader("s3://train-data/parquet/nothing-*.parquet", batch_size=4)


def test_the_window_shuffle_reads_each_page_once_where_the_exact_shuffle_reads_a_page_a_row(s3, tmp_path):
    """Data 4x the decoded cache, pages of about 3 images: the exact shuffle
    reads a page for nearly every row; shuffle_window="auto" reads each page
    once an epoch, gives the local files' batches, and its state says the
    window, which a loader with another cache refuses."""
    from nostall.datasets import folder_to_parquet

    client, _ = s3
    big = write_jpeg_folder(tmp_path / "big", classes=2, per_class=15, seed=3, min_side=600, max_side=900)
    image_bytes = sum(f.stat().st_size for f in big.rglob("*.jpg"))
    assert image_bytes > 3 << 20  # 4x the 1 MiB cache or so
    pattern = folder_to_parquet(big, tmp_path / "pq", files=2, row_group_size=15, max_page_bytes=3 * image_bytes // 30)
    for f in sorted((tmp_path / "pq").glob("*.parquet")):
        client.upload_file(str(f), "train-data", "windowed/" + f.name)
    # One read at a time: reads of one page in flight together would be joined, so how much the exact
    # shuffle reads would hang on timing.
    kw = dict(batch_size=5, shuffle=True, seed=1, transforms=[nostall.Resize((16, 16))], return_indices=True,
              source_options={"decoded_cache_mb": 1}, reads_in_flight=1, autotune=False)
    uri = "s3://train-data/windowed/train-*.parquet"
    exact = nostall.Loader(uri, **kw)
    epoch_batches(exact, 0)
    exact_read = exact.stats()["storage"]["bytes"]
    exact.close()
    windowed = nostall.Loader(uri, shuffle_window="auto", **kw)
    here = nostall.Loader(pattern, shuffle_window="auto", **kw)
    read = same_epochs_reading(windowed, here, batches=6)
    windowed.close()
    it = iter(here)
    next(it)
    state = here.state_dict()
    # Three epochs (and the fourth's first batches read ahead) about once the pages each; one epoch
    # of the exact shuffle about three times.
    assert 2.4 * image_bytes < read[2] < 4.5 * image_bytes, (read, image_bytes)
    assert exact_read > 2 * image_bytes, (exact_read, image_bytes)
    assert state["shuffle_window"] >= 1
    bigger = nostall.Loader(pattern, shuffle_window="auto", **{**kw, "source_options": {"decoded_cache_mb": 64}})
    with pytest.raises(ValueError, match="shuffle_window"):
        bigger.load_state_dict(state)


def test_arrow_ipc_files_on_s3_read_a_row_by_its_own_bytes(s3, tmp_path):
    """A folder `datasets` saved, on S3: the headers and each binary column's
    offsets read when the loader is made, then each row by one ranged GET of
    its own bytes (not its record batch of 8), the local files' batches."""
    client, local = s3
    files = sorted(local.rglob("*.jpg"))
    classes = save_folder_with_datasets(local, tmp_path / "saved")
    for f in sorted((tmp_path / "saved").iterdir()):
        client.upload_file(str(f), "train-data", "saved/" + f.name)
    kw = dict(batch_size=4, shuffle=True, seed=3, transforms=[nostall.Resize((16, 16))], return_indices=True)
    # A prefix is read as Arrow IPC files when the spec names the driver (or as "saved/*.arrow").
    remote = nostall.Loader({"uri": "s3://train-data/saved/", "driver": "arrow", "options": {"decoded_cache_mb": 0}},
                            **kw)
    here = nostall.Loader(str(tmp_path / "saved"), **kw)
    assert remote.spec["source"]["driver"] == "arrow" and remote.classes == here.classes == classes
    read = same_epochs_reading(remote, here, batches=6)
    remote.close()
    # About the images' bytes an epoch (the next epoch's first reads may
    # have begun): a record batch of ~8 rows read whole would be ~8x.
    image_bytes = sum(f.stat().st_size for f in files)
    epoch = read[2] - read[1]
    assert 0.6 * image_bytes < epoch < 1.4 * image_bytes, (read, image_bytes)


def test_parquet_without_an_offset_index_learns_its_pages_from_the_first_read(s3, tmp_path):
    """A file as pyarrow writes it by default (no page index; one row group):
    the first read of the chunk costs the chunk, every later row its page."""
    import pyarrow.parquet as pq

    from nostall.datasets import folder_to_parquet

    client, local = s3
    pattern = folder_to_parquet(local, tmp_path, files=1, row_group_size=1000, page_index=False,
                                max_page_bytes=1)
    path = sorted(tmp_path.glob("train-*.parquet"))[0]
    assert not pq.ParquetFile(path).metadata.row_group(0).column(0).has_offset_index
    client.upload_file(str(path), "train-data", "parquet-plain/" + path.name)
    kw = dict(batch_size=4, shuffle=True, seed=3, transforms=[nostall.Resize((16, 16))], return_indices=True)
    with pytest.warns(UserWarning, match="no offset index"):
        remote = nostall.Loader("s3://train-data/parquet-plain/" + path.name,
                                source_options={"decoded_cache_mb": 0}, **kw)
    here = nostall.Loader(pattern, **kw)
    read = []
    for epoch in (0, 1, 2):
        a, b = epoch_batches(remote, epoch), epoch_batches(here, epoch)
        for (ia, la, xa), (ib, lb, xb) in zip(a, b):
            assert torch.equal(ia, ib) and torch.equal(la, lb) and torch.equal(xa, xb)
        read.append(remote.stats()["storage"]["bytes"])
    remote.close()
    image_bytes = sum(f.stat().st_size for f in sorted(local.rglob("*.jpg")))
    # Without the pages learned, each of the 21 rows would read the whole chunk.
    assert 0.6 * image_bytes < read[2] - read[1] < 1.4 * image_bytes, (read, image_bytes)


@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs the ffmpeg program (apt-get install ffmpeg)")
def test_a_video_folder_on_s3_gives_the_local_folders_clips(s3, tmp_path):
    from nostall import datasets, video

    client, _ = s3
    local = datasets.make_videos(tmp_path / "videos", per_class=2, classes=2, seconds=(2.0, 3.0),
                                 sizes=((320, 240),), codecs=(("h264", "mp4"), ("vp9", "webm")))
    for path in sorted(p for p in local.rglob("*") if p.suffix in (".mp4", ".webm")):
        client.upload_file(str(path), "train-data", "videos/" + str(path.relative_to(local)))
    kw = dict(transforms=[video.Clip(4, step=3), nostall.Resize(40), video.RandomCrop(32)], batch_size=2,
              shuffle=True, seed=4)
    remote = [c.numpy() for c, _ in nostall.Loader("s3://train-data/videos/", **kw)]
    here = [c.numpy() for c, _ in nostall.Loader(str(local), **kw)]
    assert len(remote) == len(here) == 2
    assert all((a == b).all() for a, b in zip(remote, here))
