"""Prep on other machines' CPUs with Ray (nostall.ray.Prep): a real Ray
cluster of three nodes on this machine (`ray start --head` and two `ray start
--address` with their own resources), a worker process killed for real."""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest

import nostall
from conftest import write_jpeg_folder

ray = pytest.importorskip("ray")  # installed by `make test` (Makefile PY_PACKAGES)

N = 120
NOSTALL = os.path.join(os.path.dirname(sys.executable), "nostall")
KW = dict(batch_size=4, shuffle=True, seed=4, return_indices=True, copy=True,
          transforms=[nostall.RandomResizedCrop(16), nostall.RandomHorizontalFlip()])


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return str(write_jpeg_folder(tmp_path_factory.mktemp("remote"), classes=4, per_class=30, seed=1,
                                 min_side=40, max_side=56))


@pytest.fixture(scope="module")
def cluster():
    """A head (no CPUs for work) and two worker nodes of one CPU and a "prep" resource."""
    env = dict(os.environ, RAY_AUTH_MODE="disabled")
    ray_bin = os.path.join(os.path.dirname(sys.executable), "ray")
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # socket paths stay short
    port = _free_port()
    address = f"127.0.0.1:{port}"
    common = ["--node-ip-address=127.0.0.1", "--disable-usage-stats"]
    run = lambda *args: subprocess.run([ray_bin, "start", *args, *common], env=env, check=True,  # noqa: E731
                                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=180)
    try:
        run("--head", f"--port={port}", "--num-cpus=0", "--include-dashboard=false", f"--temp-dir={temp}")
        for _ in range(2):
            run(f"--address={address}", "--num-cpus=1", '--resources={"prep": 1}')
        os.environ["RAY_AUTH_MODE"] = "disabled"
        ray.init(address=address, log_to_driver=False)
        yield address
    finally:
        ray.shutdown()
        stop_cluster(temp, port)  # this cluster only: `ray stop` would stop another test process's too
        os.environ.pop("RAY_AUTH_MODE", None)


def stop_cluster(temp, port):
    """Stops the processes of the cluster started in `temp` on `port`, and their children."""
    parents, cmds = {}, {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmds[int(pid)] = open(f"/proc/{pid}/cmdline").read().replace("\0", " ")
            parents[int(pid)] = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    ours = {pid for pid, cmd in cmds.items() if temp in cmd or f"127.0.0.1:{port}" in cmd or f"={port} " in cmd}
    ours.discard(os.getpid())
    grew = True
    while grew:  # and their children (Ray's agents name themselves "ray::...")
        more = {pid for pid, parent in parents.items() if parent in ours} - ours - {os.getpid()}
        grew = bool(more)
        ours |= more
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in ours:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        while sig == signal.SIGTERM and time.monotonic() < deadline and any(_alive(p) for p in ours):
            time.sleep(0.2)


def _alive(pid):
    try:
        os.kill(pid, 0)
        return not open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def batches(loader):
    return [(x.numpy(), [int(i) for i in idx]) for x, _, idx in loader]


def local_epoch(folder, epoch, **kw):
    loader = nostall.Loader(folder, **dict(KW, **kw))
    loader.set_epoch(epoch)
    return batches(loader)


def assert_same(got, want):
    assert [i for _, i in got] == [i for _, i in want], "another order, or a batch missed or twice"
    for (a, _), (b, _) in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_a_worker_killed_mid_epoch_every_batch_once_and_byte_identical(cluster, folder):
    want = local_epoch(folder, 0)
    loader = nostall.Loader(folder, remote=nostall.ray.Prep(num_workers=2, resources={"prep": 1}, local=False),
                            **KW)
    pids = [w["pid"] for w in loader._remote.where]
    assert len(set(pids)) == 2
    got, killed = [], False
    worker0 = loader._remote._sources[0]
    with pytest.warns(RuntimeWarning, match="worker 0 was lost"):
        for n, batch in enumerate(batches_iter(loader)):
            got.append(batch)
            # Mid-epoch, while it holds batches the trainer has not taken.
            if n >= 8 and not killed and worker0.outstanding:
                os.kill(pids[0], signal.SIGKILL)
                killed = True
    assert killed
    assert_same(got, want)
    counts = loader._remote.counts
    assert counts["workers_lost"] == 1 and counts["remade_batches"] >= 1 and counts["workers_replaced"] == 1
    assert counts["remote_batches"] == len(want)
    # A new worker replaces the lost one (on the node its death freed): once
    # up, it makes its share of the next epoch beside the survivor.
    replacement = loader._remote._sources[-1]
    assert replacement.name == "worker 2 (replacing worker 0)"
    ray.get(replacement.ready, timeout=120)
    assert_same(batches(loader), local_epoch(folder, 1))
    assert replacement.made > 0 and loader._remote._sources[1].made > 0
    loader.close()


def batches_iter(loader):
    for x, _, idx in loader:
        yield x.numpy(), [int(i) for i in idx]


def test_local_and_remote_together_resume_from_state(cluster, folder):
    want = local_epoch(folder, 2)
    prep = nostall.ray.Prep(num_workers=1, resources={"prep": 1})
    loader = nostall.Loader(folder, remote=prep, **KW)
    loader.set_epoch(2)
    it = iter(loader)
    head = [next(it) for _ in range(7)]
    state = loader.state_dict()
    assert (state["epoch"], state["batch"]) == (2, 7)
    counts = loader._remote.counts
    spec = loader.spec  # the remote prep is part of it
    loader.close()
    assert counts["remote_batches"] + counts["local_batches"] == 7
    assert spec["remote"] == {"ray": {"num_workers": 1, "cpus_per_worker": 1, "window": 4, "local": True,
                                      "local_window": 2, "resources": {"prep": 1}}}
    resumed = nostall.Loader.from_spec(json.loads(json.dumps(spec)), return_indices=True, copy=True)
    assert resumed._remote is not None
    resumed.load_state_dict(state)
    rest = batches(resumed)
    assert_same([(x.numpy(), [int(i) for i in idx]) for x, _, idx in head] + rest, want)
    both = resumed._remote.counts
    assert both["remote_batches"] > 0 and both["local_batches"] > 0, both
    resumed.close()


def test_elastic_state_of_four_ranks_resumes_remote_at_two(cluster, folder):
    states = []
    for r in range(4):
        loader = nostall.Loader(folder, rank=r, world_size=4, **KW)
        loader.set_epoch(1)
        it = iter(loader)
        for _ in range(3):
            next(it)
        states.append(loader.state_dict())
    for r in range(2):
        local = nostall.Loader(folder, rank=r, world_size=2, **KW)
        local.load_state_dict(states[0])
        remote = nostall.Loader(folder, rank=r, world_size=2,
                                remote=nostall.ray.Prep(num_workers=1, resources={"prep": 1}), **KW)
        remote.load_state_dict(states[0])
        assert len(remote) == len(local)
        assert_same(batches(remote), batches(local))
        remote.close()


def _consumed(name, epochs):
    """The batches of 6 of `epochs` epochs of a consumer attached to the served loader `name`."""
    consumer = nostall.Loader.attach(name, 6, return_indices=True, output="numpy", wait=30)
    got = [(x.copy(), [int(i) for i in idx]) for _ in range(epochs) for x, _, idx in consumer]
    consumer.close()
    return got


def test_a_served_pipeline_made_by_remote_prep_serves_the_same_chunks(cluster, folder):
    """`serve(..., remote=Prep(...))` (the CLI's `serve --ray`): the chunks
    come from Ray workers and are the ones the pipeline served here makes,
    in its order, across an epoch's end; a worker killed meanwhile loses
    nothing."""
    spec = dict(source=folder, batch_size=12, shuffle=True, seed=9,
                transforms=[nostall.RandomResizedCrop(16).to_dict(), nostall.RandomHorizontalFlip().to_dict()])
    name = f"remote-serve-{os.getpid()}"
    with nostall.serve(spec, name + "-here", block_chunks=2):
        want = _consumed(name + "-here", 2)
    with nostall.serve(spec, name, block_chunks=2,
                       remote=nostall.ray.Prep(num_workers=2, resources={"prep": 1}, local=False)) as server:
        pids = [w["pid"] for w in server._feeder._loader._remote.where]
        with pytest.warns(RuntimeWarning, match="was lost"):
            os.kill(pids[1], signal.SIGKILL)
            got = _consumed(name, 2)
        counts = server.status()["remote"]
    assert len(got) == 2 * N // 6
    assert_same(got, want)
    assert counts["remote_batches"] >= 2 * N // 12 and counts["workers_lost"] == 1, counts
    # The spec's "remote" is the same thing.
    with nostall.serve(dict(spec, remote=nostall.ray.Prep(num_workers=1, resources={"prep": 1}).to_spec()),
                       name + "-spec") as server:
        assert len(_consumed(name + "-spec", 1)) == N // 6 and server.status()["remote"]["remote_batches"] > 0


def test_a_bad_file_stops_a_remote_served_pipeline_naming_it(cluster, tmp_path):
    import shutil

    from PIL import Image

    root = tmp_path / "bad" / "a"
    root.mkdir(parents=True)
    for i in range(12):
        Image.new("RGB", (24, 24), (i * 20, 0, 0)).save(root / f"{i:02d}.jpg")
    (root / "05.jpg").write_bytes(b"\xff\xd8\xff\xe0 not the rest of a JPEG")
    name = f"remote-bad-{os.getpid()}"
    server = nostall.serve(dict(source=str(root.parent), batch_size=4,
                                transforms=[nostall.Resize((8, 8)).to_dict()]), name,
                           remote=nostall.ray.Prep(num_workers=1, resources={"prep": 1}, local=False))
    deadline = time.monotonic() + 60
    while server.status()["running"] and time.monotonic() < deadline:
        time.sleep(0.1)
    with pytest.raises(nostall.NostallError, match="05.jpg"):  # a consumer is told which file
        nostall.Loader.attach(name, 4)
    with pytest.raises(nostall.DataError, match="05.jpg"):
        server.close()
    shutil.rmtree(tmp_path / "bad")


def test_the_serve_command_with_ray_serves_the_remote_chunks(cluster, folder, tmp_path):
    """`nostall serve --spec S --name N --ray PREP` hands over to Python and
    serves what nostall.serve(..., remote=...) serves; SIGTERM removes it."""
    spec = dict(source=folder, batch_size=12, shuffle=True, seed=9,
                transforms=[nostall.RandomResizedCrop(16).to_dict(), nostall.RandomHorizontalFlip().to_dict()])
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    name = f"remote-cli-{os.getpid()}"
    with nostall.serve(spec, name + "-here", block_chunks=2):
        want = _consumed(name + "-here", 1)
    prep = json.dumps({"num_workers": 1, "resources": {"prep": 1}, "address": cluster})
    proc = subprocess.Popen([str(NOSTALL), "serve", "--spec", str(tmp_path / "spec.json"), "--name", name,
                             "--block-chunks", "2", "--ray", prep, "--quiet"], stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, RAY_AUTH_MODE="disabled"))
    try:
        got = _consumed(name, 1)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert_same(got, want)
    assert proc.returncode in (0, -signal.SIGTERM), err
    assert not os.path.exists(f"/dev/shm/nostall-shared-{os.geteuid()}-{name}")
    bad = subprocess.run([str(NOSTALL), "serve", "--spec", str(tmp_path / "spec.json"), "--name", name,
                          "--ray", "{\"workers\": 2}"], capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "unknown keys" in bad.stderr, bad.stderr


def test_prep_arguments_are_checked():
    prep = nostall.ray.Prep(num_workers=3, cpus_per_worker=2.5, resources={"prep": 1}, address="auto")
    assert nostall.ray.Prep.from_spec(prep.to_spec()) == prep
    with pytest.raises(ValueError, match="unknown keys"):
        nostall.ray.Prep.from_spec({"ray": {"workers": 2}})
    with pytest.raises(ValueError, match='"remote"'):
        nostall.ray.Prep.from_spec({"dask": {}})
    # What builds a pipeline without Python (the CLI's bench and serve) says where remote prep runs.
    with pytest.raises(ValueError, match="runs through Python"):
        nostall._nostall.Loader(json.dumps({"source": ".", "remote": prep.to_spec()}))
    with pytest.raises(ValueError, match="num_workers"):
        nostall.ray.Prep(num_workers=-1)
    with pytest.raises(ValueError, match="cpus_per_worker"):
        nostall.ray.Prep(cpus_per_worker=0)
    with pytest.raises(ValueError, match="no batches"):
        nostall.ray.Prep(num_workers=0, local=False)
    with pytest.raises(TypeError, match="nostall.ray.Prep"):
        nostall.Loader(".", remote="ray://somewhere")
