"""A newcomer's first hour: what people bring from torch and torchvision,
and errors that say what is wrong."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest
import torch

import nostall
from nostall import transforms as T

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


# ------------------------------------------------------------ torchvision's arguments
def test_torchvision_arguments_are_taken_with_their_meaning(jpeg_folder):
    a = nostall.Loader(jpeg_folder, batch_size=6, seed=1, transforms=[
        nostall.RandomResizedCrop(48, scale=(0.5, 1.0), interpolation="bilinear", antialias=True),
        nostall.Normalize(nostall.IMAGENET_MEAN, nostall.IMAGENET_STD, inplace=True)])
    b = nostall.Loader(jpeg_folder, batch_size=6, seed=1, transforms=[
        nostall.RandomResizedCrop(48, scale=(0.5, 1.0)),
        nostall.Normalize(nostall.IMAGENET_MEAN, nostall.IMAGENET_STD)])
    assert torch.equal(next(iter(a))[0], next(iter(b))[0])
    r = nostall.Resize(64, interpolation=T.InterpolationMode.BILINEAR, max_size=80, antialias=None)
    assert r.to_dict() == {"type": "Resize", "size": 64, "max_size": 80}
    assert nostall.Resize(64, 2).to_dict() == nostall.Resize(64).to_dict()  # PIL's BILINEAR


@pytest.mark.parametrize("make, says", [
    (lambda: nostall.RandomResizedCrop(224, antialias=False), "antialias=False is not supported"),
    (lambda: nostall.Resize(256, interpolation="bicubic"), "interpolation 'bicubic' is not supported"),
    (lambda: nostall.Resize(256, interpolation=3), "nostall resamples bilinear"),
])
def test_a_torchvision_value_nostall_does_not_implement_is_named(make, says):
    with pytest.raises(ValueError, match=says):
        make()


def test_a_transform_called_on_a_tensor_says_what_to_do():
    for t in (nostall.RandomResizedCrop(224), T.ColorJitter(0.4), nostall.Normalize([0.5], [0.5])):
        with pytest.raises(TypeError, match=r"transforms=\[\.\.\.\]\).*sample_params"):
            t(torch.zeros(3, 8, 8))


def test_transforms_that_are_not_a_list_name_the_argument(jpeg_folder):
    with pytest.raises(TypeError, match="transforms must be a list of nostall transforms, not 5"):
        nostall.Loader(jpeg_folder, transforms=5)
    one = nostall.Loader(jpeg_folder, transforms=nostall.Resize((16, 16)))  # one transform
    assert one.sample_shape == (3, 16, 16)


# ------------------------------------------------------------ errors that say what is wrong
def test_a_rank_without_a_world_size_names_both_and_the_environment(jpeg_folder, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(ValueError, match="rank=1 is given without world_size.*WORLD_SIZE"):
        nostall.Loader(jpeg_folder, rank=1)
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(ValueError, match="sets RANK='1' but not WORLD_SIZE"):
        nostall.Loader(jpeg_folder)


def test_exception_text_does_not_repeat_its_class(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    loader = nostall.Loader(tmp_path, batch_size=1, transforms=[nostall.Resize((8, 8))])
    with pytest.raises(nostall.DataError) as e:
        next(iter(loader))
    assert str(e.value).startswith("decode: "), str(e.value)
    with pytest.raises(ValueError) as e:
        nostall.Loader(tmp_path, batch_size=1, layout="CHW")
    assert not str(e.value).startswith("InvalidArgument"), str(e.value)
    with pytest.raises(FileNotFoundError) as e:
        nostall.Loader(tmp_path / "missing")
    assert not str(e.value).startswith("NotFound"), str(e.value)


@pytest.mark.parametrize("listen, says", [
    ("127.0.0.1", "NOSTALL_CACHE_SERVERS=127.0.0.1:{port} (this node only"),
    ("10.1.2.3", "NOSTALL_CACHE_SERVERS=10.1.2.3:{port},<the other nodes"),
])
def test_cache_serve_suggests_the_address_it_listens_on(listen, says):
    from conftest import MEMCACHED, free_port

    assert os.access(MEMCACHED, os.X_OK), "memcached is not installed (make test does)"
    port = free_port()
    # It says what to set, then memcached serves (loopback) or cannot bind (10.1.2.3).
    p = subprocess.Popen([BIN / "nostall", "cache", "serve", "--size", "64MiB", "--port", str(port),
                          "--listen", listen], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    time.sleep(1.0)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=20)
    hint = err.split("loaders: ", 1)[1].splitlines()[0]
    assert hint.startswith(says.format(port=port)), err
    assert os.uname().nodename not in hint  # a name the server does not listen on


def test_fuzz_runner_without_clang_says_what_to_install(tmp_path):
    (tmp_path / "dirname").symlink_to("/usr/bin/dirname")  # and nothing else on PATH
    r = subprocess.run(["/bin/bash", str(ROOT / "fuzz" / "run.sh")], capture_output=True,
                       text=True, env={"PATH": str(tmp_path)})
    assert r.returncode == 2, r
    assert "clang-16 is not installed" in r.stderr
    assert "apt-get install clang-16 libfuzzer-16-dev" in r.stderr
    assert "CMake" not in r.stderr.replace("CMake and Ninja", "")


# ------------------------------------------------------------ specs
def test_from_spec_of_a_loaders_spec_keeps_the_autotuner(jpeg_folder):
    loader = nostall.Loader(jpeg_folder, batch_size=4, transforms=[nostall.Resize((24, 24))])
    spec = loader.spec
    assert (spec["num_threads"], spec["reads_in_flight"], spec["prefetch"]) == (0, 0, -1)
    again = nostall.Loader.from_spec(spec)
    for _ in again:
        pass
    assert again.stats()["autotune"]["knobs"] == ["threads", "reads_in_flight", "prefetch"]
    fixed = nostall.Loader(jpeg_folder, batch_size=4, num_threads=1, prefetch=3,
                           transforms=[nostall.Resize((24, 24))])
    assert (fixed.spec["num_threads"], fixed.spec["prefetch"]) == (1, 3)
    assert nostall.Loader.from_spec(fixed).spec == fixed.spec


def test_from_spec_takes_a_path_like_analyze(jpeg_folder, tmp_path):
    path = tmp_path / "train.json"
    path.write_text(json.dumps({"source": str(jpeg_folder), "batch_size": 5}))
    for given in (path, str(path)):
        assert len(nostall.Loader.from_spec(given)) == -(-36 // 5)
    with pytest.raises(FileNotFoundError, match="nope.json"):
        nostall.Loader.from_spec(str(tmp_path / "nope.json"))
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="bad.json: not a JSON loader spec"):
        nostall.Loader.from_spec(str(tmp_path / "bad.json"))


# ------------------------------------------------------------ serve from Python
SERVE_SCRIPT = """
import sys, time, nostall
spec = {{"source": sys.argv[1], "batch_size": 4, "transforms": [{{"type": "Resize", "size": [16, 16]}}]}}
{how}
"""


def _serving(name, proc, timeout=30):
    deadline = time.monotonic() + timeout
    while name not in nostall.list_shared():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the server never appeared"
        time.sleep(0.05)


@pytest.mark.parametrize("how", [
    "server = nostall.serve(spec, sys.argv[2])\nprint('up', flush=True)\ntime.sleep(600)",
    "nostall.serve(spec, sys.argv[2], block=True, verbose=False)",
])
def test_sigterm_to_a_python_server_removes_its_segment(jpeg_folder, tmp_path, how):
    name = f"sigterm-{os.getpid()}-{len(how)}"
    script = tmp_path / "serve.py"
    script.write_text(SERVE_SCRIPT.format(how=how))
    p = subprocess.Popen([sys.executable, str(script), str(jpeg_folder), name],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _serving(name, p)
        consumer = nostall.Loader.attach(name, batch_size=4)
        assert next(iter(consumer))[0].shape == (4, 3, 16, 16)
        consumer.close()
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert name not in nostall.list_shared(), "the segment outlived its server"
    assert not list(Path("/dev/shm").glob(f"nostall-shared-*-{name}"))


def test_serve_returns_a_server_a_script_can_attach_to(jpeg_folder):
    name = f"script-{os.getpid()}"
    spec = {"source": str(jpeg_folder), "batch_size": 4,
            "transforms": [{"type": "Resize", "size": [16, 16]}]}
    with nostall.serve(spec, name) as server:
        assert isinstance(server, nostall.Server)
        loader = nostall.Loader.attach(name, batch_size=2)
        assert sum(len(labels) for _, labels in loader) == 36
        loader.close()
    assert name not in nostall.list_shared()
    with pytest.raises(RuntimeError, match="closed"):
        server.status()


# ------------------------------------------------------------ pinned memory
def test_pin_memory_is_taken_as_torch_takes_it(jpeg_folder):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = nostall.Loader(jpeg_folder, batch_size=6, pin_memory=True,
                                transforms=[nostall.Resize((16, 16))])
        images, labels = next(iter(loader))
    if torch.cuda.is_available():
        assert images.is_pinned() and labels.is_pinned()
    else:  # as torch's DataLoader: said once, then ignored
        assert any("no CUDA device" in str(w.message) for w in caught)
        assert images.shape == (6, 3, 16, 16)
    with pytest.raises(ValueError, match='needs output="torch"'):
        nostall.Loader(jpeg_folder, pin_memory=True, output="numpy")
    with pytest.raises(TypeError, match="pin_memory must be True or False"):
        nostall.Loader(jpeg_folder, pin_memory="yes")


# ------------------------------------------------------------ torchvision code as it is
def test_compose_and_to_tensor_port_as_written(jpeg_folder):
    ported = nostall.Loader(jpeg_folder, batch_size=6, seed=2, transforms=T.Compose([
        nostall.RandomResizedCrop(32), nostall.RandomHorizontalFlip(), T.ToTensor(),
        nostall.Normalize(nostall.IMAGENET_MEAN, nostall.IMAGENET_STD)]))
    native = nostall.Loader(jpeg_folder, batch_size=6, seed=2, transforms=[
        nostall.RandomResizedCrop(32), nostall.RandomHorizontalFlip(),
        nostall.Normalize(nostall.IMAGENET_MEAN, nostall.IMAGENET_STD)])
    assert torch.equal(next(iter(ported))[0], next(iter(native))[0])
    scaled = nostall.Loader(jpeg_folder, batch_size=6, seed=2,
                            transforms=[nostall.Resize((16, 16)), T.ToTensor()])
    raw = nostall.Loader(jpeg_folder, batch_size=6, seed=2,
                         transforms=[nostall.Resize((16, 16)), T.PILToTensor()])
    a, b = next(iter(scaled))[0], next(iter(raw))[0]
    assert a.dtype == torch.float32 and b.dtype == torch.uint8
    assert torch.allclose(a, b.float() / 255)
    with pytest.raises(ValueError, match="contradicts"):
        nostall.Loader(jpeg_folder, dtype="uint8", transforms=[T.ToTensor()])
    p = T.sample_params(T.Compose([nostall.RandomResizedCrop(32), T.ToTensor()]), 100, 80)
    assert p["size"] == [32, 32]


def test_a_loader_printed_says_what_it_is(jpeg_folder):
    loader = nostall.Loader(jpeg_folder, batch_size=5, transforms=[nostall.Resize((16, 16))])
    text = repr(loader)
    assert str(jpeg_folder) in text and "36 items" in text and "8 batches of 5" in text, text
    assert "Resize -> uint8 NCHW" in text, text
    loader.close()
    assert repr(loader) == "<nostall.Loader (closed)>"


FORK_SCRIPT = """
import os, signal, sys, time, nostall
spec = {"source": sys.argv[1], "batch_size": 4, "transforms": [{"type": "Resize", "size": [16, 16]}]}
server = nostall.serve(spec, sys.argv[2])
loader = nostall.Loader(sys.argv[1], batch_size=4, transforms=[nostall.Resize((16, 16))])
pid = os.fork()
if pid == 0:
    sys.exit(0)  # atexit and garbage collection run in the child
os.waitpid(pid, 0)
pid = os.fork()
if pid == 0:
    time.sleep(60)
    os._exit(0)
time.sleep(0.3)
os.kill(pid, signal.SIGTERM)  # as a pool's terminate() does
_, status = os.waitpid(pid, 0)
assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM, status
assert server.status()["running"]
consumer = nostall.Loader.attach(sys.argv[2], batch_size=4)
assert next(iter(consumer))[0].shape == (4, 3, 16, 16)
assert next(iter(loader))[0].shape == (4, 3, 16, 16)
print("parent still serving")
"""


def test_forked_children_leave_their_parents_server_and_loader_alone(jpeg_folder, tmp_path):
    name = f"fork-{os.getpid()}"
    script = tmp_path / "fork.py"
    script.write_text(FORK_SCRIPT)
    r = subprocess.run([sys.executable, str(script), str(jpeg_folder), name], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and "parent still serving" in r.stdout, r.stdout + r.stderr
    assert name not in nostall.list_shared()  # removed when the parent exited
