"""A broken or hostile S3 server gives a clear error in bounded time and
memory, never a hang, a crash, another key's bytes or unbounded buffering.
The server is hostile_s3.py, a real HTTP server on loopback."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import nostall
from conftest import write_jpeg_folder, write_shards

HERE = Path(__file__).parent


class Server:
    def __init__(self, mode, folder, log):
        self.log = log
        self.proc = subprocess.Popen([sys.executable, str(HERE / "hostile_s3.py"), mode, str(folder), str(log)],
                                     stdout=subprocess.PIPE, text=True)
        self.endpoint = "http://127.0.0.1:" + self.proc.stdout.readline().split()[1]

    def paths(self):
        return self.log.read_text().splitlines() if self.log.exists() else []

    def stop(self):
        self.proc.kill()
        self.proc.wait()


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_jpeg_folder(tmp_path_factory.mktemp("hostile"), classes=2, per_class=3, seed=3)


@pytest.fixture
def serve(folder, tmp_path, monkeypatch):
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("NOSTALL_CACHE_DIR", str(tmp_path / "index-cache"))
    servers = []

    def start(mode):
        servers.append(Server(mode, folder, tmp_path / f"{mode}.log"))
        return servers[-1]

    yield start
    for s in servers:
        s.stop()


def load(endpoint, **kw):
    return nostall.Loader("s3://bkt/train/", batch_size=3,
                          source_options={"endpoint": endpoint, "unsigned": True},
                          transforms=[nostall.Resize((16, 16))], **kw)


def pixels(loader):
    return np.concatenate([x.numpy() for x, _ in loader])


def test_a_plain_server_loads_and_so_does_the_local_copy(serve, folder):
    s = serve("plain")
    got = pixels(load(s.endpoint))
    want = pixels(nostall.Loader(str(folder), batch_size=3, transforms=[nostall.Resize((16, 16))]))
    assert np.array_equal(got, want)


def test_signed_requests_carry_the_payload_hash_that_aws_requires(serve, folder, monkeypatch):
    s = serve("aws-headers")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDSIGNED")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret-signed")
    got = pixels(nostall.Loader("s3://bkt/train/", batch_size=3, source_options={"endpoint": s.endpoint},
                                transforms=[nostall.Resize((16, 16))]))
    want = pixels(nostall.Loader(str(folder), batch_size=3, transforms=[nostall.Resize((16, 16))]))
    assert np.array_equal(got, want)


def run_child(code, *args):
    """Runs `code` in a fresh Python; returns (stdout, peak resident MB).

    The peak is the process's own (VmHWM, of the memory exec gave it), not
    getrusage's ru_maxrss, which Linux carries over fork and exec from the
    parent: under a pytest grown to a gigabyte it would be the parent's."""
    code = "import sys, numpy as np, nostall\n" + code + (
        "\nhwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0]"
        "\nprint('peak', int(hwm.split()[1]) // 1024)\n")
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120,
                       env=os.environ)
    return p, int(p.stdout.split()[-1]) if "peak" in p.stdout else None


def test_a_server_ignoring_range_is_read_only_as_far_as_needed(serve, tmp_path, folder):
    # Every GET is answered 200 with the whole shard and then 1.5 GB of
    # zeros: each ranged read stops at the bytes it needs, so the batches
    # are right and the process stays small.
    shards = tmp_path / "shards"
    write_shards(folder, shards / "s", shards=1)
    s = Server("ignore-range-endless", shards, tmp_path / "log")
    try:
        out = tmp_path / "x.npy"
        p, peak = run_child(f"l = nostall.Loader('s3://bkt/train/s/train-0.tar', batch_size=3, source_options="
                            f"{{'endpoint': '{s.endpoint}', 'unsigned': True}}, transforms=[nostall.Resize((16, 16))])\n"
                            "np.save(sys.argv[1], np.concatenate([b.numpy() for b, _ in l]))", str(out))
    finally:
        s.stop()
    assert p.returncode == 0, p.stderr
    assert peak < 1000, "peak resident MB"
    want = nostall.Loader(str(shards / "s" / "train-0.tar"), batch_size=3, transforms=[nostall.Resize((16, 16))])
    assert np.array_equal(np.load(out), pixels(want))


def test_an_object_sent_without_end_is_stopped_at_its_listed_size(serve):
    s = serve("ignore-range-endless")
    t0 = time.monotonic()
    p, peak = run_child(f"l = nostall.Loader('s3://bkt/train/', batch_size=3, "
                        f"source_options={{'endpoint': '{s.endpoint}', 'unsigned': True}}, transforms=[nostall.Resize((16, 16))])\n"
                        "try:\n    [b for b in l]\nexcept nostall.DataError as e:\n    print(e)\n")
    assert p.returncode == 0, p.stderr
    assert "more than the" in p.stdout and "bytes listed for it" in p.stdout, p.stdout
    assert peak < 1000, "peak resident MB"
    assert time.monotonic() - t0 < 60


def test_a_206_longer_than_asked_is_an_error_saying_so(serve):
    s = serve("overlong-206")
    with pytest.raises(nostall.DataError, match=r"sent more than the \d+ bytes"):
        pixels(load(s.endpoint))


def test_a_key_with_dot_segments_is_requested_as_written_never_as_another_key(serve):
    s = serve("dotdot")
    loader = load(s.endpoint)
    # train/class_0/../../other/x.jpg is an image of class ".." ... under
    # class_0's listing: read by its own name.
    assert len(pixels(loader)) == 7
    paths = s.paths()
    assert any("/class_0/../../other/x.jpg" in p for p in paths), paths
    assert not any(p.startswith("/bkt/other/") or p.startswith("/other/") for p in paths), paths


@pytest.mark.parametrize("mode, message, seconds, timeout", [
    ("same-token", "continuation token 'again' a second time", 10, None),
    ("short-key", "not under the prefix", 10, None),
    ("quadratic", "never closed", 10, None),
    # 2 bytes a second would keep a read alive forever without the deadline.
    ("trickle", "request deadline of 3.0 s", 15, "3"),
    # Retry-After: 3600, past the deadline: an error at once, not an hour.
    ("retry-after", "Retry-After", 10, None),
])
def test_a_broken_or_stalling_server_is_a_clear_error_in_seconds(serve, monkeypatch, mode, message,
                                                                 seconds, timeout):
    if timeout is not None:
        monkeypatch.setenv("NOSTALL_S3_REQUEST_TIMEOUT", timeout)
    s = serve(mode)
    t0 = time.monotonic()
    with pytest.raises(nostall.NostallError, match=message):
        load(s.endpoint)
    assert time.monotonic() - t0 < seconds


def test_the_cli_reports_a_broken_listing_without_terminating(serve):
    s = serve("short-key")
    p = subprocess.run([str(Path(sys.executable).parent / "nostall"), "inspect", "s3://bkt/train/"],
                       capture_output=True, text=True, timeout=60,
                       env={**os.environ, "AWS_ENDPOINT_URL": s.endpoint})
    assert p.returncode == 1, (p.returncode, p.stderr)
    assert "not under the prefix" in p.stderr and "terminate" not in p.stderr


@pytest.mark.parametrize("mode", ["hang", "trickle"])
def test_ctrl_c_interrupts_a_constructor_waiting_on_a_server(serve, mode):
    # hang: the first listing never answers (the constructor's own wait);
    # trickle: the class folders' listings never end, on listing threads
    # that may have taken every class while the constructor waits for them.
    s = serve(mode)
    # A child still there after 20 s prints where each thread is, and exits.
    # Ctrl-C as a terminal delivers it: a test suite started in the background
    # by a shell without job control has SIGINT ignored, and passes that on.
    code = ("import faulthandler\nfaulthandler.dump_traceback_later(20, exit=True)\n"
            "import signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
            "import nostall\n"
            "try:\n"
            f"    nostall.Loader('s3://bkt/train/', batch_size=3, "
            f"source_options={{'endpoint': '{s.endpoint}', 'unsigned': True}})\n"
            "except KeyboardInterrupt:\n"
            "    print('interrupted', flush=True)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=os.environ)
    deadline = time.monotonic() + 60
    while not s.paths() and time.monotonic() < deadline:  # the listing is in flight
        time.sleep(0.1)
    time.sleep(0.5)
    t0 = time.monotonic()
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=30)
    assert "interrupted" in out, (s.paths(), err[-3000:])
    assert time.monotonic() - t0 < 5
