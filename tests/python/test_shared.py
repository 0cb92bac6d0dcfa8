"""The shared loader with real processes: `nostall serve`, consumers in their own
processes, SIGKILL for real.

The dataset is 512 Fashion-MNIST PNGs without random transforms, so a sample's
pixels depend only on its index: every consumer's samples are checked against
a private loader's, index by index (CRC32 of the pixels).
"""

import json
import os
import signal
import stat
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

import nostall
import warm
from nostall.datasets import fashion_mnist_to_folder

HERE = Path(__file__).resolve().parent
NOSTALL = Path(sys.executable).parent / "nostall"
N = 512


@pytest.fixture(scope="module")
def pngs(tmp_path_factory):
    return fashion_mnist_to_folder(tmp_path_factory.mktemp("fm-shared"), "train", limit=N)


@pytest.fixture(scope="module")
def reference(pngs):
    """index -> CRC32 of the sample's pixels, from a private loader."""
    crc = {}
    with nostall.Loader(pngs, batch_size=64, mode="L", return_indices=True, output="numpy") as ld:
        for images, _, indices in ld:
            for k, i in enumerate(indices.tolist()):
                crc[i] = zlib.crc32(images[k].tobytes())
    assert len(crc) == N
    return crc


def spec_for(pngs):
    return {"source": str(pngs), "batch_size": 64, "mode": "L", "shuffle": True, "seed": 5}


@pytest.fixture
def name(request):
    n = f"test-{os.getpid()}-{request.node.name[:40]}".replace("[", "-").replace("]", "")
    yield n


def start_serving(tmp_path, pngs, name, *extra):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(spec_for(pngs)))
    proc = subprocess.Popen([str(NOSTALL), "serve", "--spec", str(spec), "--name", name,
                             "--quiet", *extra], stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 20
    while not Path(f"/dev/shm/nostall-shared-{os.geteuid()}-{name}").exists():
        assert proc.poll() is None, proc.stderr.read()
        assert time.time() < deadline, "the producer did not start"
        time.sleep(0.05)
    return proc


def cli(*args, check=True):
    done = subprocess.run([str(NOSTALL), *args], capture_output=True, text=True, timeout=30)
    if check:
        assert done.returncode == 0, done.stderr
    return done


def stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=20)


def consumer(tmp_path, name, batch, epochs, sleep=0.0, mode="raise", tag=None):
    out = tmp_path / f"consumer-{tag or batch}.json"
    proc = subprocess.Popen([sys.executable, str(HERE / "shared_consumer.py"), name, str(batch),
                             str(epochs), str(sleep), str(out), mode],
                            stderr=subprocess.PIPE, text=True)
    return proc, out


def wait_attached(proc, out, timeout=30):
    marker = Path(str(out) + ".attached")
    deadline = time.time() + timeout
    while not marker.exists():
        assert proc.poll() is None, proc.stderr.read()
        assert time.time() < deadline, "the consumer did not attach"
        time.sleep(0.02)


def finish(proc, out, timeout=120):
    _, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    return json.loads(out.read_text())


def assert_each_epoch_is_the_dataset(result, reference):
    for seen in result["epochs"]:
        indices = [i for i, _ in seen]
        assert sorted(indices) == list(range(N))  # every sample exactly once
        assert all(reference[i] == crc for i, crc in seen)  # with its own pixels


def test_three_consumers_with_different_batch_sizes(tmp_path, pngs, reference, name):
    producer = start_serving(tmp_path, pngs, name)
    try:
        runs = [consumer(tmp_path, name, b, epochs=2) for b in (16, 64, 100)]
        results = {b: finish(p, out) for b, (p, out) in zip((16, 64, 100), runs)}
    finally:
        stop(producer)
    assert producer.returncode == 0
    for b, r in results.items():
        assert_each_epoch_is_the_dataset(r, reference)
        assert r["shared"]["mode"] == "shared"
        assert r["shared"]["fallbacks"] == 0
    # 16 and 64 divide the 64-sample chunks: zero-copy; 100 spans chunks: copies.
    assert results[16]["shared"]["copied_batches"] == 0
    assert results[64]["shared"]["copied_batches"] == 0
    assert results[100]["shared"]["copied_batches"] > 0
    assert not Path(f"/dev/shm/nostall-shared-{os.geteuid()}-{name}").exists()  # removed on exit


def test_attach_mid_epoch_detach_and_reattach(tmp_path, pngs, reference, name):
    with nostall.serve(spec_for(pngs), name, chunk=32, block=False, verbose=False) as server:
        # A slow consumer keeps the producer moving through the epoch.
        slow, slow_out = consumer(tmp_path, name, 32, epochs=2, sleep=0.01, tag="slow")
        while server.status()["produced"] < 6:
            time.sleep(0.01)
        # Attach mid-epoch: it starts at a block boundary and wraps around.
        late = nostall.Loader.attach(name, 32, return_indices=True, output="numpy")
        seen = []
        for _, _, idx in late:
            seen += idx.tolist()
        assert sorted(seen) == list(range(N))
        # Detach mid-epoch, then attach again: a fresh, complete epoch.
        it = iter(late)
        next(it)
        late.close()
        again = nostall.Loader.attach(name, 48, return_indices=True, output="numpy")
        seen = []
        for _, _, idx in again:
            seen += idx.tolist()
        assert sorted(seen) == list(range(N))
        again.close()
        assert_each_epoch_is_the_dataset(finish(slow, slow_out), reference)


def test_sigkilled_consumer_is_released_within_a_second(tmp_path, pngs, reference, name):
    with nostall.serve(spec_for(pngs), name, block=False, verbose=False) as server:
        victim, victim_out = consumer(tmp_path, name, 16, epochs=50, sleep=0.05, tag="victim")
        wait_attached(victim, victim_out)
        time.sleep(0.3)  # mid-epoch, holding chunks
        assert len(server.status()["consumers"]) == 1
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait()
        killed = time.monotonic()
        while server.status()["consumers"]:
            assert time.monotonic() - killed < 1.0, server.status()
            time.sleep(0.01)
        assert server.status()["reaped"] == 1
        # The others carry on.
        r = finish(*consumer(tmp_path, name, 64, epochs=2, tag="survivor"))
        assert_each_epoch_is_the_dataset(r, reference)


def test_sigkilled_producer_is_a_clear_error_or_a_private_fallback(tmp_path, pngs, reference,
                                                                    name):
    producer = start_serving(tmp_path, pngs, name, "--chunk", "32")
    try:
        strict = nostall.Loader.attach(name, 32, output="numpy", producer_timeout=2.0)
        kept_going, kept_out = consumer(tmp_path, name, 32, epochs=2, sleep=0.05, mode="private",
                                        tag="private")
        wait_attached(kept_going, kept_out)
        it = iter(strict)
        next(it)
        time.sleep(0.3)
        os.kill(producer.pid, signal.SIGKILL)
        producer.wait()
        killed = time.monotonic()
        with pytest.raises(nostall.NostallError, match="producer .* died"):
            for _ in it:
                pass
            for _ in range(10):  # the ring may hold the rest of the epoch and more
                for _ in strict:
                    pass
        # Whatever the ring still held is used up first; then the death is known at once.
        assert time.monotonic() - killed < 2.0
        strict.close()
        r = finish(kept_going, kept_out)
        assert_each_epoch_is_the_dataset(r, reference)
        assert r["shared"]["mode"] == "private" and "died" in r["shared"]["reason"]
        # The killed producer left its segment behind: the CLI shows it dead and removes it.
        ls = cli("shared", "ls")
        assert any(line.split()[:2] == [name, "dead"] for line in ls.stdout.splitlines()), ls.stdout
        shown = cli("shared", "inspect", name)
        assert f"dead, producer pid {producer.pid}" in shown.stdout
        assert cli("shared", "rm", name).returncode == 0
        assert not Path(f"/dev/shm/nostall-shared-{os.geteuid()}-{name}").exists()
        gone = cli("shared", "rm", name, check=False)
        assert gone.returncode == 1 and "no shared loader" in gone.stderr
    finally:
        if producer.poll() is None:
            producer.kill()
        Path(f"/dev/shm/nostall-shared-{os.geteuid()}-{name}").unlink(missing_ok=True)


def test_a_slow_consumer_falls_back_and_the_others_keep_their_speed(tmp_path, pngs, reference,
                                                                   name):
    with nostall.serve(spec_for(pngs), name, chunk=32, max_lag=0.3, block=False, verbose=False):
        # Alone, the fast consumer's two epochs take this long:
        solo = finish(*consumer(tmp_path, name, 32, epochs=2, sleep=0.004, tag="solo"))
        # It stops after its first batch until the fast one has attached, and
        # 1.5 s more: longer than max_lag however fast the producer and however
        # busy the machine (where starting the fast one's process takes seconds).
        fast_attached = tmp_path / "consumer-fast.json.attached"
        slow, slow_out = consumer(tmp_path, name, 32, epochs=2, sleep=f"0.08,1.5,{fast_attached}",
                                  tag="slow")
        wait_attached(slow, slow_out)
        fast = finish(*consumer(tmp_path, name, 32, epochs=2, sleep=0.004, tag="fast"))
        slow_r = finish(slow, slow_out)
    assert_each_epoch_is_the_dataset(slow_r, reference)
    assert_each_epoch_is_the_dataset(fast, reference)
    assert slow_r["shared"]["fallbacks"] >= 1
    assert slow_r["shared"]["private_chunks"] > 0
    assert fast["shared"]["fallbacks"] == 0
    # Held back at most once by max_lag (0.3 s), not paced by the slow one:
    # that would cost at least its 1.5 s stop and 80 ms a batch on top of
    # the fast one's own time alone (measured above, on the same machine).
    paced = 1.5 + 2 * (N // 32) * 0.08
    assert sum(fast["seconds"]) < sum(solo["seconds"]) + 0.5 * paced, (fast["seconds"], solo["seconds"])


def test_segment_is_private_and_checked(tmp_path, pngs, name):
    with nostall.serve(spec_for(pngs), name, block=False, verbose=False):
        mode = os.stat(f"/dev/shm/nostall-shared-{os.geteuid()}-{name}").st_mode
        assert stat.S_IMODE(mode) == 0o600
        ok = nostall.Loader.attach(name, 8, spec=spec_for(pngs), output="numpy")
        ok.close()
        other = dict(spec_for(pngs), seed=6)
        with pytest.raises(nostall.NostallError, match="another pipeline"):
            nostall.Loader.attach(name, 8, spec=other, output="numpy")
        with pytest.raises(nostall.NostallError, match="already served"):
            nostall.serve(spec_for(pngs), name, block=False, verbose=False)
        refused = cli("shared", "rm", name, check=False)
        assert refused.returncode == 1 and f"served by pid {os.getpid()}" in refused.stderr
        assert f"serving, producer pid {os.getpid()}" in cli("shared", "inspect", name).stdout
    with pytest.raises(FileNotFoundError, match="nostall serve"):
        nostall.Loader.attach(name, 8, output="numpy")
    with pytest.raises(ValueError, match="on_error"):
        nostall.serve(dict(spec_for(pngs), on_error="skip"), name, block=False)
    # Not a nostall segment at all.
    bogus = Path(f"/dev/shm/nostall-shared-{os.geteuid()}-{name}-bogus")
    bogus.write_bytes(b"\0" * 4096)
    bogus.chmod(0o600)
    try:
        with pytest.raises(nostall.NostallError, match="not a nostall shared loader"):
            nostall.Loader.attach(f"{name}-bogus", 8, output="numpy")
    finally:
        bogus.unlink()


def test_a_consumer_resumes_mid_epoch_from_its_state_dict(tmp_path, pngs, name):
    with nostall.serve(spec_for(pngs), name, chunk=32, slots=2, block=False, verbose=False):
        first = nostall.Loader.attach(name, 16, return_indices=True, output="numpy")
        it = iter(first)
        for _ in range(5):
            next(it)
        # A checkpoint, as a training script writes it (JSON-able).
        state = json.loads(json.dumps(first.state_dict()))
        assert state["batch"] == 5 and state["shared"] == name
        rest = [idx.tolist() for _, _, idx in it]  # what the interrupted run would have seen
        first.close()

        resumed = nostall.Loader.attach(name, 16, return_indices=True, output="numpy")
        resumed.load_state_dict(state)
        assert [idx.tolist() for _, _, idx in resumed] == rest  # same batches, same order
        assert resumed.stats()["shared"]["private_chunks"] > 0  # the segment had moved on
        # The next epoch is whole, and back on the segment.
        seen = [i for _, _, idx in resumed for i in idx.tolist()]
        assert sorted(seen) == list(range(N))
        assert resumed.stats()["shared"]["mode"] == "shared"
        assert resumed.stats()["shared"]["rejoins"] >= 1

        local = nostall.Loader.from_spec(dict(spec_for(pngs), batch_size=16), output="numpy")
        with pytest.raises(ValueError, match="local loader"):
            resumed.load_state_dict(local.state_dict())
        with pytest.raises(ValueError, match="Loader.attach"):
            local.load_state_dict(state)
        other_size = nostall.Loader.attach(name, 8, output="numpy")
        with pytest.raises(ValueError, match="batch_size"):
            other_size.load_state_dict(state)
        local.close()
        other_size.close()
        resumed.close()


@pytest.mark.parametrize("chunk,batches,serve_args", [
    (16, (128,), ["--max-consumers", "1"]),       # 8 chunks a batch, 6 slots
    (16, (64, 96), ["--max-consumers", "1"]),     # one after the other
    (8, (200,), []),                              # 25 chunks a batch, 20 slots
])
def test_consumer_batches_spanning_many_chunks(tmp_path, pngs, reference, name, chunk, batches,
                                               serve_args):
    """A batch over more chunks than there are slots (of the segment, or of the
    consumer's private pipeline) is served, and still when the producer stops
    and the consumer goes on alone: every sample once, with its own pixels."""
    producer = start_serving(tmp_path, pngs, name, "--chunk", str(chunk), *serve_args)
    try:
        for b in batches:
            proc, out = consumer(tmp_path, name, b, epochs=1, tag=f"shared-{b}")
            assert_each_epoch_is_the_dataset(finish(proc, out, timeout=60), reference)
        proc, out = consumer(tmp_path, name, batches[-1], epochs=3, sleep=0.02, mode="private",
                             tag="alone")
        wait_attached(proc, out)
    finally:
        stop(producer)
    result = finish(proc, out, timeout=120)
    assert_each_epoch_is_the_dataset(result, reference)
    assert len(result["epochs"]) == 3
    assert result["shared"]["mode"] == "private"


def test_a_consumers_in_place_edit_never_reaches_another_consumer(tmp_path, pngs, name, reference):
    # A training step normalising in place, or MixUp(inplace=True): the
    # batches are the producer's read-only memory in every consumer.
    with nostall.serve(spec_for(pngs), name, block=False, verbose=False):
        edit = ("import sys, numpy as np, nostall\n"
                "l = nostall.Loader.attach(sys.argv[1], 64, copy=sys.argv[2] == 'copy')\n"
                "for x, y in l:\n"
                "    x.zero_(); y.fill_(7)\n"
                "    assert int(x.sum()) == 0\n"
                "print('edited')\n"
                "n = nostall.Loader.attach(sys.argv[1], 64, output='numpy')\n"
                "x, y = next(iter(n))\n"
                "try:\n    x[...] = 0\nexcept ValueError:\n    print('read-only')\n")
        done = warm.run(code=edit, args=[name, "copy"], timeout=120)
        assert done.stdout.split() == ["edited", "read-only"], (done.stdout, done.stderr)
        # Zero-copy, asked for: the edit cannot land; the process dies
        # (SIGSEGV), as attach() documents, and no one else sees it.
        forced = warm.run(code=edit, args=[name, "zero-copy"], timeout=120)
        assert forced.returncode == -11, (forced.returncode, forced.stderr[-2000:])
        mine = nostall.Loader.attach(name, 64, return_indices=True, output="numpy")
        for x, y, idx in mine:
            for k in range(len(idx)):
                assert zlib.crc32(x[k].tobytes()) == reference[int(idx[k])]
        mine.close()


def test_a_failed_producer_dropped_without_close_does_not_end_the_process(tmp_path, name):
    # Its error is raised by close(); a server object collected without one
    # (or during unwinding) must not throw from its destructor.
    data = tmp_path / "data"
    from conftest import write_jpeg_folder
    write_jpeg_folder(data, classes=1, per_class=4, seed=2, min_side=30, max_side=40)
    code = ("import json, shutil, sys, time, nostall\n"
            "from nostall import _nostall\n"
            "spec = {'source': sys.argv[1], 'batch_size': 2, 'transforms': [{'type': 'Resize', 'size': [8, 8]}]}\n"
            "core = _nostall.Server(sys.argv[2], json.dumps(spec), 0, 8, 0, 1.0, 0, False)\n"
            "shutil.rmtree(sys.argv[1])\n"
            "deadline = time.monotonic() + 60\n"
            "while json.loads(core.status_json())['running'] and time.monotonic() < deadline:\n"
            "    time.sleep(0.05)\n"
            "del core\n"
            "print('survived')\n")
    done = warm.run(code=code, args=[data, name], timeout=120)
    assert done.returncode == 0 and "survived" in done.stdout, (done.returncode, done.stderr[-2000:])
