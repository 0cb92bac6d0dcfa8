"""Against an S3 server that checks every signature (SeaweedFS's S3 gateway;
moto's server accepts a request whose signature is wrong): what nostall
writes to S3 (the index object beside tar shards) and reads back."""
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch

import nostall
from conftest import epoch_batches, write_shards

boto3 = pytest.importorskip("boto3")  # installed by the test command (make test)
# SeaweedFS takes seconds to start and to stop: `make check` leaves it out.
pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
KEY, SECRET, BUCKET = "signedkey", "signed-secret-never-printed", "signed"


def ports(n):
    """`n` free ports, each with port + 10000 free too (SeaweedFS's gRPC)."""
    out = []
    while len(out) < n:
        p = random.randrange(20000, 30000)
        try:
            for q in (p, p + 10000):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", q))
            out.append(p)
        except OSError:
            continue
    return out


@pytest.fixture(scope="module")
def weed(tmp_path_factory):
    work = tmp_path_factory.mktemp("weed")
    cfg = work / "s3.json"
    cfg.write_text(json.dumps({"identities": [{"name": "t", "credentials": [
        {"accessKey": KEY, "secretKey": SECRET}], "actions": ["Admin", "Read", "Write", "List"]}]}))
    s3, master, volume, filer, iceberg, lance, iam = ports(7)
    # Every listener on a port of its own (the Iceberg and Lance catalogs
    # and IAM default to fixed ports: a second SeaweedFS on the machine, as
    # bench_s3.py starts, would take them).
    proc = subprocess.Popen(
        [str(BIN / "weed"), "server", "-s3", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-dir={work}",
         f"-s3.config={cfg}", f"-s3.port={s3}", f"-master.port={master}", f"-volume.port={volume}",
         f"-filer.port={filer}", f"-s3.port.iceberg={iceberg}", f"-s3.port.lance={lance}", f"-iam.port={iam}"],
        stdout=subprocess.DEVNULL, stderr=open(work / "weed.log", "w"))
    url = f"http://127.0.0.1:{s3}"
    client = boto3.client("s3", endpoint_url=url, region_name="us-east-1", aws_access_key_id=KEY,
                          aws_secret_access_key=SECRET)
    deadline = time.monotonic() + 90
    while True:
        try:
            client.create_bucket(Bucket=BUCKET)
            break
        except Exception:  # the gateway answers before the filer is ready
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError("SeaweedFS did not start:\n" + (work / "weed.log").read_text()[-2000:])
            time.sleep(1)
    env = {"AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": SECRET,
           "AWS_REGION": "us-east-1"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    yield client
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    # SeaweedFS takes ~25 s over a graceful stop; its data is a temporary
    # folder, so a second is all it gets.
    proc.terminate()
    try:
        proc.wait(timeout=1)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def test_the_index_object_is_written_signed_and_read_back(weed, jpeg_folder, tmp_path, monkeypatch):
    pattern = write_shards(jpeg_folder, tmp_path / "shards", shards=2)
    for s in range(2):
        weed.upload_file(str(tmp_path / "shards" / f"train-{s}.tar"), BUCKET, f"d/train-{s}.tar")
    uri = f"s3://{BUCKET}/d/train-{{0..1}}.tar"
    monkeypatch.setenv("NOSTALL_CACHE_DIR", str(tmp_path / "writer"))
    out = subprocess.run([str(BIN / "nostall"), "index", uri], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert SECRET not in out.stdout + out.stderr
    body = weed.get_object(Bucket=BUCKET, Key="d/train-{0..1}.tar.nostall-index")["Body"].read()
    assert body[:8] == b"NSTIDX01"
    monkeypatch.setenv("NOSTALL_CACHE_DIR", str(tmp_path / "reader"))
    kw = dict(batch_size=5, shuffle=True, seed=1, transforms=[nostall.Resize((16, 16))],
              return_indices=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        remote = nostall.Loader(uri, **kw)
    assert remote.index_origin == f"beside the data: {uri}.nostall-index"
    here = nostall.Loader(pattern, index_beside="off", **kw)
    for (ia, la, xa), (ib, lb, xb) in zip(epoch_batches(remote, 0), epoch_batches(here, 0)):
        assert torch.equal(ia, ib) and torch.equal(la, lb) and torch.equal(xa, xb)
    # Wrong keys: the PUT is refused, said with the object and the status,
    # never the keys.
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    monkeypatch.setenv("NOSTALL_CACHE_DIR", str(tmp_path / "bad"))
    out = subprocess.run([str(BIN / "nostall"), "index", uri], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 1 and "403" in out.stderr and "not-the-secret" not in out.stderr
