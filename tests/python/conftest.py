import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

# pytest-xdist's workers share the cores: each gives torch (and the
# processes it starts) its share of them, not every core, so that workers'
# intra-op threads do not fight each other (set before torch is imported).
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    _share = max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    os.environ.setdefault("OMP_NUM_THREADS", str(_share))

# Index files of test datasets go to a private place, not the user's cache.
os.environ.setdefault("NOSTALL_CACHE_DIR", tempfile.mkdtemp(prefix="nostall-test-index-"))

import nostall  # noqa: E402
from nostall.datasets import natural_image  # noqa: E402


TEST_DATA = Path(os.environ.get("NOSTALL_TEST_DATA") or Path.home() / ".cache" / "nostall-tests")


def cached_data(make, *args, **kwargs):
    """The folder `make(folder, *args, **kwargs)` fills, made once and kept in
    ~/.cache/nostall-tests (NOSTALL_TEST_DATA) under a hash of the call and
    of the code that makes it (`make`'s source and nostall.datasets'): a
    change to either makes it anew. Made under a lock (pytest's workers race
    for it) beside, then renamed into place. Read it; damage a copy."""
    import fcntl
    import hashlib
    import inspect
    import shutil as _shutil

    from nostall import datasets

    h = hashlib.sha256()
    for part in (make.__module__, make.__qualname__, repr(args), repr(sorted(kwargs.items())),
                 inspect.getsource(make), Path(datasets.__file__).read_text(), nostall.__version__):
        h.update(part.encode() + b"\0")
    final = TEST_DATA / f"{make.__name__}-{h.hexdigest()[:16]}"
    if final.is_dir():
        return final
    TEST_DATA.mkdir(parents=True, exist_ok=True)
    with open(TEST_DATA / (final.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not final.is_dir():
            work = Path(tempfile.mkdtemp(prefix=final.name + ".making.", dir=TEST_DATA))
            try:
                make(work, *args, **kwargs)
                os.rename(work, final)
            finally:
                _shutil.rmtree(work, ignore_errors=True)
    return final


def write_jpeg_folder(root: Path, classes=3, per_class=12, seed=0, min_side=120, max_side=360):
    rng = np.random.default_rng(seed)
    for c in range(classes):
        d = root / f"class_{c}"
        d.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            w, h = (int(v) for v in rng.integers(min_side, max_side, 2))
            Image.fromarray(natural_image(rng, w, h)).save(d / f"{i:03d}.jpg", quality=90)
    return root


@pytest.fixture(scope="session")
def jpeg_folder(tmp_path_factory):
    """36 natural-looking JPEGs of assorted sizes in 3 classes."""
    return write_jpeg_folder(tmp_path_factory.mktemp("jpegs"))


@pytest.fixture
def fresh_folder(tmp_path):
    """A small folder a test may damage."""
    return write_jpeg_folder(tmp_path / "data", classes=2, per_class=5, seed=1)


def write_shards(folder, out_dir, shards=2):
    """WebDataset shards of an image folder: KEY.jpg + KEY.cls per sample."""
    import io
    import tarfile
    files = sorted(folder.rglob("*.jpg"))
    classes = sorted({p.parent.name for p in files})
    out_dir.mkdir(parents=True, exist_ok=True)
    for s in range(shards):
        with tarfile.open(out_dir / f"train-{s}.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
            for i, path in enumerate(files[s::shards]):
                key = f"sample{s}{i:04d}"
                for name, data in ((key + ".jpg", path.read_bytes()),
                                   (key + ".cls", str(classes.index(path.parent.name)).encode())):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    return str(out_dir / ("train-{0..%d}.tar" % (shards - 1)))


def save_folder_with_datasets(folder, out):
    """An image folder as `datasets.Dataset.save_to_disk` writes it (Image
    and ClassLabel features, shards of 200 KB) at `out`; its classes."""
    datasets = pytest.importorskip("datasets")
    files = sorted(Path(folder).rglob("*.jpg"))
    classes = sorted({f.parent.name for f in files})
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=classes)})
    ds = datasets.Dataset.from_dict({"image": [{"bytes": f.read_bytes(), "path": f.name} for f in files],
                                     "label": [classes.index(f.parent.name) for f in files]}, features=features)
    ds.save_to_disk(str(out), max_shard_size="200KB", num_proc=None)
    return classes


def augment():
    return [nostall.RandomResizedCrop(64), nostall.RandomHorizontalFlip(),
            nostall.Normalize(nostall.IMAGENET_MEAN, nostall.IMAGENET_STD)]


def epoch_batches(loader, epoch=None):
    """[(images, labels, indices)] as private copies."""
    if epoch is not None:
        loader.set_epoch(epoch)
    out = []
    for images, labels, indices in loader:
        out.append((images.clone(), labels.clone(), indices.clone()))
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port, proc, what="the server", seconds=10):
    """Until something accepts on 127.0.0.1:port; an error if `proc` exits
    first or `seconds` pass."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, f"{what} did not start"
            time.sleep(0.02)


_MOTO = {}


def moto_endpoint():
    """The S3 server (moto's server mode) the tests of this process share:
    started on first use, stopped when the process exits. Each user keeps to
    its own bucket (`fresh_bucket`)."""
    import atexit
    import sys

    proc = _MOTO.get("proc")
    if proc is None or proc.poll() is not None:
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_port(port, proc, "moto's S3 server", seconds=60)
        if not _MOTO:
            atexit.register(lambda: _MOTO["proc"].poll() is None and _MOTO["proc"].kill())
        _MOTO.update(proc=proc, endpoint=f"http://127.0.0.1:{port}")
    return _MOTO["endpoint"]


def fresh_bucket(client, bucket):
    """`bucket` on the shared server, empty: made, or emptied of what an
    earlier test put there."""
    try:
        client.create_bucket(Bucket=bucket)
    except client.exceptions.ClientError as e:
        if e.response["Error"]["Code"] not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
            raise
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            for obj in page.get("Contents", []):
                client.delete_object(Bucket=bucket, Key=obj["Key"])


MEMCACHED = shutil.which("memcached") or "/usr/bin/memcached"


class Memcached:
    """A real memcached on loopback, as the cluster cache wants it (-M: refuse, never evict)."""

    def __init__(self, megabytes=64):
        assert os.access(MEMCACHED, os.X_OK), "memcached is not installed (make test installs it)"
        self.port = free_port()
        self.proc = subprocess.Popen([MEMCACHED, "-l", "127.0.0.1", "-p", str(self.port), "-U", "0",
                                      "-M", "-m", str(megabytes), "-u", "root"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_port(self.port, self.proc, "memcached")
        self.address = f"127.0.0.1:{self.port}"

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()


NGINX = shutil.which("nginx") or "/usr/sbin/nginx"


class Nginx:
    """A real web server on loopback serving `root`: autoindex on (a folder
    answers with its index page) but under `plain/` (no index page: a folder
    there is answered 403), Range requests answered as nginx answers them."""

    def __init__(self, root, work):
        assert os.access(NGINX, os.X_OK), "nginx is not installed (make test installs nginx-light)"
        work = Path(work)
        work.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        (work / "nginx.conf").write_text(f"""daemon off; master_process off; worker_processes 1;
pid {work}/nginx.pid; error_log {work}/error.log;
events {{ worker_connections 256; }}
http {{
  access_log off; client_body_temp_path {work}; proxy_temp_path {work}; fastcgi_temp_path {work};
  uwsgi_temp_path {work}; scgi_temp_path {work};
  server {{ listen 127.0.0.1:{self.port}; root {root}; autoindex on; location /plain/ {{ autoindex off; }} }}
}}
""")
        self.proc = subprocess.Popen([NGINX, "-p", str(work), "-c", str(work / "nginx.conf"),
                                      "-e", str(work / "error.log")],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_port(self.port, self.proc, "nginx")
        self.url = f"http://127.0.0.1:{self.port}"

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


# The modules whose tests take longest (tens of seconds: trainings, the
# documentation's analyses, launchers starting processes), run first, each
# whole: pytest-xdist's workers then end together on the short tests
# instead of one waiting for a long test started last. Within a module the
# order is its own, so its module-scoped fixtures are made once per worker.
_LONG_FIRST = ("test_training.py", "test_trainers.py", "test_launchers.py", "test_docs.py",
               "test_analyze.py", "test_s3.py")


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(_LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
