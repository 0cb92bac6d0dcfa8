"""nostall.analyze end to end: real loaders, real files, a real (sleeping) training step.

Three pure situations, each built so one resource is clearly the limit:
compute (a slow step), prep (big JPEGs, one decode thread, an instant step)
and fetch (storage with 10 ms per read, one read in flight).
"""

import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import nostall
from conftest import cached_data, write_jpeg_folder
from nostall.analyze import load_step
from nostall.datasets import fashion_mnist_to_folder


@pytest.fixture(scope="module")
def small_pngs(tmp_path_factory):
    return fashion_mnist_to_folder(tmp_path_factory.mktemp("fm-analyze"), "train", limit=512)


@pytest.fixture(scope="module")
def small_pngs_in_memory(small_pngs):
    """The same files on tmpfs: "storage cold" then cannot mean a disk that
    another program keeps busy (reads of many ms each would make the loop
    wait for data, rightly named fetch, which is not what the CLI test is about)."""
    with tempfile.TemporaryDirectory(dir="/dev/shm", prefix="nostall-test-fm-") as root:
        yield Path(shutil.copytree(small_pngs, Path(root) / "fm"))


@pytest.fixture(scope="module")
def big_jpegs(tmp_path_factory):
    """Large JPEGs on tmpfs: a prep-bound job whose cold reads cost little
    CPU, so what is checked is prep, not a disk another program keeps busy."""
    made = cached_data(write_jpeg_folder, classes=2, per_class=40, min_side=500, max_side=800)
    with tempfile.TemporaryDirectory(dir="/dev/shm", prefix="nostall-test-big-") as root:
        yield Path(shutil.copytree(made, Path(root) / "big"))


def sleeper(seconds):
    """A step that sleeps; `step.took` holds what each call took (a busy
    machine wakes a sleeper late)."""
    def step(images, labels):
        t0 = time.perf_counter()
        time.sleep(seconds)
        step.took.append(time.perf_counter() - t0)
    step.took = []
    return step


def instant(images, labels):
    pass


def run(spec, step, **kw):
    return nostall.analyze(spec, step, step_seconds=0.5, progress=False, **kw)


def test_compute_bound_when_the_step_is_slow(small_pngs):
    # A step of 80 ms: the pipeline makes a batch of 32 small images in a
    # few milliseconds, and in under 60 ms with two busy loops beside the
    # test and its neighbours on two cores, so it keeps up either way.
    step = sleeper(0.08)
    a = run({"source": str(small_pngs), "batch_size": 32, "mode": "L"}, step, items=384)
    assert a.bottleneck == "compute", a.table()
    g = a.profile["step_rate"]
    # 32 samples per step of 80 ms or more (as long as the sleeps took): <= 400/s
    import statistics
    assert g <= 400 * 1.01
    assert g == pytest.approx(32 / statistics.median(step.took), rel=0.15)
    # The data pipeline keeps up: both real-data runs within 15% of G.
    assert a.profile["cached_rate"] > 0.85 * g
    assert a.profile["cold_rate"] > 0.85 * g
    assert a.breakdown["compute"] > 0.8
    assert "nothing" in a.table()  # nothing to fix


@pytest.mark.slow
def test_prep_bound_with_one_decode_thread(big_jpegs):
    spec = {"source": str(big_jpegs), "batch_size": 8, "num_threads": 1,
            "transforms": [t.to_dict() for t in (nostall.Resize(256), nostall.CenterCrop(224),
                                                 nostall.Normalize(nostall.IMAGENET_MEAN,
                                                                   nostall.IMAGENET_STD))]}
    a = run(spec, instant)
    assert a.bottleneck == "prep", a.table()
    assert a.result["predicted"]["limit"] in ("cpu", "prep_threads")
    # The prep stall is the largest part of a sample's time (how large
    # depends on what else the cores run: cold reads cost CPU too).
    b = a.breakdown
    assert b["prep_stall"] > max(b["fetch_stall"], b["compute"]), b
    # Prep is CPU work: more threads and cores help, a cache does not.
    now = a.result["predicted"]["rate"]
    # A second thread on the second core nearly doubles it: the two cores
    # then carry prep and fetch CPU, 2 x prep / (prep + fetch) of one thread's
    # rate (checked against the measured costs: the process's own CPU for
    # its cold reads moves with what else the machine runs).
    p = a.profile
    two = a.predict(cores=2, prep_threads=2)["rate"]
    assert two / now == pytest.approx(2 * p["prep_cpu"] / (p["prep_cpu"] + p["fetch_cpu_miss"]),
                                      rel=0.05)
    assert 1.2 * now < two <= 2 * now * 1.001
    assert a.predict(cache_fraction=1.0)["rate"] == pytest.approx(now, rel=0.05)
    # More cores means what the table's "cores" row means: a prep thread per
    # core, not the one thread measured.
    for point in a.result["curves"]["cores"]:
        predicted = a.predict(cores=point["x"])
        assert predicted["rate"] == pytest.approx(point["rate"], rel=1e-9), point
        assert predicted["config"]["prep_threads"] == point["prep_threads"]
    assert a.predict(cores=2)["rate"] == pytest.approx(two, rel=1e-9)
    assert a.predict(cores=2, prep_threads=1)["rate"] == pytest.approx(now, rel=0.05)
    assert a.recommendation["config"]["cores"] > a.profile["measured"]["cores"] or \
        a.recommendation["config"]["prep_threads"] > 1
    # Prep on other machines pays here: the workers make what the thread cannot.
    remote = a.result["remote"]
    assert remote["pays"] and remote["rate"] > 1.2 * now, remote
    assert a.profile["sample_bytes"] == 3 * 224 * 224 * 4
    rates = [p["rate"] for p in a.result["curves"]["remote_workers"]]
    assert rates[0] == pytest.approx(now, rel=1e-9) and rates[1] > 1.2 * now
    assert f"nostall.ray.Prep(num_workers={remote['workers']}" in a.table()


@pytest.mark.slow
def test_fetch_bound_on_slow_storage(small_pngs):
    spec = {"source": {"uri": str(small_pngs), "options": {"throttle_latency_ms": 10}},
            "batch_size": 16, "mode": "L", "reads_in_flight": 1}
    a = run(spec, sleeper(0.002), items=256)  # G = 16 per 2 ms = 8,000/s
    assert a.bottleneck == "fetch", a.table()
    assert a.result["predicted"]["limit"] == "latency"
    m = a.profile["measured"]
    # Found by the probe: at least the 10 ms of the store, and no more than
    # an item took in the cold run, one read at a time (a busy machine
    # stretches both alike).
    assert 0.010 * 0.95 <= m["latency_s"] <= 1.25 / a.profile["cold_rate"], (m, a.profile["cold_rate"])
    assert a.profile["cold_rate"] < 110  # one 10 ms read at a time
    assert a.profile["cached_rate"] > 3 * a.profile["cold_rate"]
    assert a.breakdown["fetch_stall"] > 0.6
    # More reads in flight hide the latency; so does a cache: 4x (2x) the
    # rate, unless another resource this run measured binds first (the
    # cores or the step's rate, on a busy machine).
    now = a.result["predicted"]
    others = [v for k, v in now["limits"].items() if k != "latency" and v]
    assert a.predict(reads_in_flight=4)["rate"] == pytest.approx(
        min([4 * now["rate"]] + others), rel=0.05), now["limits"]
    # A cache halves the bytes read as well: a bandwidth limit the probe
    # found (a busy machine's) doubles with it.
    lifted = [2 * v if k == "bandwidth" else v for k, v in now["limits"].items() if k != "latency" and v]
    assert a.predict(cache_fraction=0.5)["rate"] == pytest.approx(
        min([2 * now["rate"]] + lifted), rel=0.05), now["limits"]
    # Storage measured as unlimited bandwidth: hide the latency with reads
    # in flight for the step's rate (~8000/s x 10 ms on an idle machine;
    # what the step's sleeps took here sets the rate).
    enough = 0.5 * a.profile["step_rate"] * m["latency_s"]
    rec = a.recommendation
    assert rec["config"]["reads_in_flight"] > enough, (enough, rec)
    # Each read needs room in a batch slot (3 of 16 items at prefetch 2):
    # the recommendation raises prefetch until its reads fit, so they are
    # all in flight at once, and the table prints the JSON's one object.
    reads = rec["config"]["reads_in_flight"]
    assert rec["reads_in_flight"] == reads and (rec["prefetch"] + 1) * 16 >= reads > rec["prefetch"] * 16, rec
    assert f"reads_in_flight={reads}, prefetch={rec['prefetch']} " in a.table(), a.table()
    # The autotuner would start with reads for the step's rate (Little's
    # law), not 1, and the prefetch whose slots hold them.
    start = a.result["autotune_start"]
    assert start["reads_in_flight"] > enough and (start["prefetch"] + 1) * 16 >= start["reads_in_flight"], start
    assert f"reads_in_flight={start['reads_in_flight']}, prefetch={start['prefetch']}" in a.table()


def test_the_report_gives_the_step_timings_their_own_spread(small_pngs):
    from nostall._report import disagreement_notes

    a = run({"source": str(small_pngs), "batch_size": 16, "mode": "L"}, sleeper(0.002), items=64)
    r = json.loads(a.to_json())
    # Three timings within 3% of each other, the noise raised to 53% by a
    # real-data run faster than the step alone (its own note says that).
    r["run"]["step_timings"] = [1000.0, 1030.0, 1010.0]
    r["profile"]["noise"] = 0.53
    assert not any("apart" in n for n in disagreement_notes(r)), disagreement_notes(r)
    r["run"]["step_timings"] = [1000.0, 1500.0, 1010.0]  # 500 over a mean of 1,170
    assert any("1,500, 1,010 samples/s" in n and "43% apart" in n for n in disagreement_notes(r))


def test_a_step_faster_on_fewer_threads_of_its_own_is_told_so(small_pngs, tmp_path):
    import torch

    m = torch.randn(384, 384)

    def step(images, labels):
        if torch.get_num_threads() > 1:
            for _ in range(4):  # keeps both intra-op threads busy...
                m @ m
            time.sleep(0.1)  # ...and loses what threads fighting for busy cores lose
        else:
            m @ m

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        a = run({"source": str(small_pngs), "batch_size": 16, "mode": "L"}, step, items=128)
    finally:
        torch.set_num_threads(before)
    prof = a.profile
    assert prof["step_threads"] == 2 and prof["step_rate_1"] > 3 * prof["step_rate"], prof
    rec = a.recommendation
    assert rec["config"]["step_threads"] == 1, (rec, prof, a.result["predicted"])
    assert "torch.set_num_threads(1)" in a.table(), a.table()
    # One thread: faster than now by more than the analysis's noise, and no
    # faster than the step ran on one thread (the pipeline may bind first).
    one = a.predict(step_threads=1)
    assert rec["rate"] == pytest.approx(one["rate"], rel=1e-6)
    now = a.result["predicted"]["rate"]
    assert now * (1 + prof["noise"]) < one["rate"] <= prof["step_rate_1"] * 1.05, (now, one, prof)
    # The what-if curve over the step's threads, in the table and the HTML.
    curve = {p["x"]: p["rate"] for p in a.result["curves"]["step_threads"]}
    assert curve[1] > 3 * curve[2]
    # One core predicts more than the cores measured (the step then runs on one
    # thread): the table says why beside the row, rather than a cell that looks wrong.
    cores = {p["x"]: p["rate"] for p in a.result["curves"]["cores"]}
    assert cores[1] > cores[prof["measured"]["cores"]], cores
    assert "fewer cores predict more here" in a.table(), a.table()
    a.save_html(tmp_path / "r.html")
    html = (tmp_path / "r.html").read_text()
    assert "torch.set_num_threads(1)" in html and "the step&#x27;s own threads" in html


def test_a_job_on_several_nodes_is_told_to_pool_their_caches(small_pngs):
    """Storage bandwidth binds; the job has 4 ranks: a cache across the 4
    nodes gives the hit rate of one 4 times the size on each."""
    spec = {"source": {"uri": str(small_pngs), "options": {"throttle_bandwidth": 100e3}},
            "batch_size": 16, "mode": "L", "reads_in_flight": 8, "world_size": 4, "rank": 1}
    a = run(spec, sleeper(0.002), items=128)
    assert a.bottleneck == "fetch", a.table()
    alone = a.predict(cache_fraction=0.25)["rate"]
    pooled = a.predict(cache_fraction=0.25, cache_nodes=4)["rate"]
    everything = a.predict(cache_fraction=1.0)["rate"]
    assert pooled > 1.2 * alone, (alone, pooled, a.table())
    assert pooled == pytest.approx(everything, rel=0.1)  # the peers' network is not the limit
    # A 10 MB/s network is.
    assert a.predict(cache_fraction=0.25, cache_nodes=4, peer_bandwidth=10e3)["rate"] < alone
    rec = a.recommendation
    assert rec["config"]["cache_nodes"] == 4, a.table()
    assert rec["cache_bytes_per_node"] == pytest.approx(rec["cache_bytes"] / 4)
    table = a.table()
    assert "across your 4 nodes" in table and "nostall cache serve" in table, table
    assert "nodes      1:" in table, table
    from nostall.analyze import contradictions

    assert contradictions(a.result) == [], a.table()


def test_reports_json_and_self_contained_html(small_pngs, tmp_path):
    a = run({"source": str(small_pngs), "batch_size": 32, "mode": "L"}, sleeper(0.02), items=256)
    a.save_json(tmp_path / "a.json")
    a.save_html(tmp_path / "a.html")
    data = json.loads((tmp_path / "a.json").read_text())
    assert data["bottleneck"] == a.bottleneck
    # (the step sleeps: one thread of its own, so no curve over its threads)
    assert set(data["curves"]) == {"cache_fraction", "cache_nodes", "cores", "bandwidth",
                                   "latency_s", "jobs", "reads_in_flight", "remote_workers"}
    page = (tmp_path / "a.html").read_text()
    # Nothing fetched from anywhere: no scripts, links, images or url() styles.
    assert not re.search(r"<script|<link|<img|src=|href=|url\(", page)
    svgs = re.findall(r"<svg.*?</svg>", page, flags=re.S)
    assert len(svgs) == 9  # the breakdown bar and eight what-if charts (remote workers the eighth)
    for svg in svgs:
        ET.fromstring(svg)  # well-formed
    assert "What removes the stall" in page


def test_bad_step_and_spec_are_clear_errors(small_pngs, tmp_path):
    with pytest.raises(ValueError, match="MODULE:FUNCTION"):
        load_step("no_colon")
    with pytest.raises(FileNotFoundError):
        load_step(str(tmp_path / "missing.py") + ":step")
    with pytest.raises(FileNotFoundError, match="nope"):
        run({"source": str(tmp_path / "nope"), "batch_size": 4}, instant)
    with pytest.raises(ValueError, match="JSON"):
        run("{not json", instant)


NOSTALL = Path(sys.executable).parent / "nostall"


@pytest.mark.slow
def test_cli_runs_the_users_step_and_writes_reports(small_pngs_in_memory, tmp_path):
    (tmp_path / "train.py").write_text(
        "import time\n\ndef step(images, labels):\n    assert images.shape[1:] == (1, 28, 28)\n"
        "    time.sleep(0.03)\n")
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"source": str(small_pngs_in_memory), "batch_size": 32, "mode": "L"}))
    out = subprocess.run([str(NOSTALL), "analyze", "--spec", str(spec), "--step", "train:step",
                          "--items", "256", "--step-seconds", "0.5", "--out",
                          str(tmp_path / "report")],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "bottleneck: compute" in out.stdout, out.stdout + out.stderr
    # Progress, phase by phase, numbered 1..N against one N from the first line.
    ended = [line.rsplit("\r", 1)[-1].replace("\x1b[2K", "") for line in out.stderr.split("\n")]
    marks = [m.groups() for m in (re.match(r"\[(\d+)/(\d+)\] ([^:]+): .* \([\d.]+ s\)$", line)
                                  for line in ended) if m]
    assert [int(k) for k, _, _ in marks] == list(range(1, len(marks) + 1)), out.stderr
    assert {n for _, n, _ in marks} == {str(len(marks))}, out.stderr
    assert "real data, cached" in [name for _, _, name in marks]
    assert (tmp_path / "report.html").exists()
    assert json.loads((tmp_path / "report.json").read_text())["bottleneck"] == "compute"
    bad = subprocess.run([str(NOSTALL), "analyze", "--spec", str(spec), "--step", "train:nope"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "no function 'nope'" in bad.stderr
    helped = subprocess.run([str(NOSTALL), "analyze", "--help"], capture_output=True, text=True)
    assert helped.returncode == 0 and "fetch" in helped.stdout and "--items" in helped.stdout


def test_progress_prints_a_summary_per_epoch(small_pngs, capfd):
    loader = nostall.Loader(small_pngs, batch_size=64, mode="L", progress="epoch")
    for epoch in range(2):
        loader.set_epoch(epoch)
        for _ in loader:
            time.sleep(0.001)
    err = capfd.readouterr().err
    lines = [l for l in err.splitlines() if l.startswith("epoch ")]
    assert len(lines) == 2, err
    assert re.match(r"epoch 0: 512 images in [\d.]+ s, [\d,]+ images/s, waited on data [\d.]+% "
                    r"of the time \(p99 wait [\d.]+ ms\)", lines[0]), lines[0]
    # The tuned setting as it stands (nothing was fixed).
    assert re.search(r"; autotuned: \d+ threads?, \d+ reads, prefetch \d+$", lines[0]), lines[0]
    epochs = loader.stats()["consumer"]["epochs"]
    assert [e["samples"] for e in epochs] == [512, 512]
    assert all(0 <= e["stall_fraction"] <= 1 for e in epochs)
    with pytest.raises(ValueError, match="progress"):
        nostall.Loader(small_pngs, batch_size=4, progress="yes")


def test_every_batch_wait_is_recorded(small_pngs):
    # A slow pipeline (10 ms per read, one at a time) and an instant consumer:
    # nearly all of the consumer's time is waiting, batch by batch.
    loader = nostall.Loader(small_pngs, batch_size=8, mode="L", reads_in_flight=1,
                            source_options={"throttle_latency_ms": 10}, subset=80)
    t0 = time.perf_counter()
    for _ in loader:
        pass
    epoch_s = time.perf_counter() - t0
    c = loader.stats()["consumer"]
    assert c["stall_fraction"] > 0.9
    assert c["epochs"][0]["batches"] == 10
    # Each batch waits for 8 reads of >= 10 ms, one at a time, over several
    # 50 ms polls: counted as one wait, not one per poll. (At least half the
    # batches waited p50 or more, so 5 x p50 fits in the epoch's time.)
    assert 0.06 < c["wait_p50_s"] <= epoch_s / 5
    assert c["wait_p50_s"] <= c["max_wait_s"] <= epoch_s


class _PacedLoader:
    """A loader stand-in whose first `ready` batches are already made and the
    rest arrive one every `gap` seconds: the shape of a pipeline that filled
    its prefetch queue before the timing began."""

    def __init__(self, batches, batch, ready, gap):
        self.batches, self.batch, self.ready, self.gap = batches, batch, ready, gap
        self.made = 0
        self.waited = 0.0
        self.gaps = []  # what each gap took (a busy machine wakes a sleeper late)

    def set_epoch(self, epoch):
        pass

    def __len__(self):
        return self.batches

    def stats(self):
        n = self.made * self.batch
        return {"stages": {s: {"items": n, "busy_cpu_s": 0.0, "bytes": 0}
                           for s in ("fetch", "prep", "batch")},
                "consumer": {"wait_s": self.waited}}

    def __iter__(self):
        import torch

        for k in range(self.batches):
            if k >= self.ready:
                t0 = time.perf_counter()
                time.sleep(self.gap)
                self.gaps.append(time.perf_counter() - t0)
                self.waited += self.gaps[-1]
            self.made += 1
            yield torch.zeros(self.batch, 1), torch.zeros(self.batch)


def test_a_timed_window_counts_only_samples_made_inside_it():
    from nostall._progress import Phase
    from nostall._measure import _Window

    # 8 batches of 10: 3 made before the window, then one every 20 ms; the
    # window opens at batch 2. The pipeline's rate is 10 / 20 ms = 500/s; the
    # old count (every batch from the one that opened the window) said ~700.
    w = _Window()
    paced = _PacedLoader(8, 10, ready=3, gap=0.02)
    w.run_epoch(paced, lambda x, y: None, 0, 2, Phase(False, total=1))
    assert w.samples == 50 and w.gaps == 5
    # 10 samples a gap, as long as the gaps took here (20 ms or more).
    assert w.rate <= 500 * 1.02
    assert w.rate == pytest.approx(50 / sum(paced.gaps), rel=0.12)
    assert w.too_short()  # 5 arrivals: too few to trust
    # All of the window was waiting for data: the loop around the step took a
    # small share of it (a busy machine preempts the loop too, so its time is
    # measured against the window's, not in absolute microseconds; on two
    # busy cores a preempted loop was 12% of it).
    assert w.loop_overhead() * w.samples < 0.25 * w.seconds
    w.run_epoch(_PacedLoader(8, 10, ready=0, gap=0.02), lambda x, y: None, 0, 0,
                Phase(False, total=1))
    assert w.gaps == 12


def test_the_loop_around_the_step_is_timed_apart_from_step_and_waits():
    from nostall._progress import Phase
    from nostall._measure import _Window

    # Batches of 10 always ready; each step ~10 ms; the loop then does ~5 ms
    # of its own per batch (the stand-in for taking a batch on busy cores).
    # What each took is measured here, beside the window: a busy machine
    # stretches every sleep.
    loader = _PacedLoader(12, 10, ready=12, gap=0)
    steps, loops = [], []

    def step(x, y):
        t0 = time.perf_counter()
        time.sleep(0.010)
        steps.append(time.perf_counter() - t0)

    class Slow:
        def __iter__(self):
            for batch in loader:
                t0 = time.perf_counter()
                time.sleep(0.005)
                loops.append(time.perf_counter() - t0)
                yield batch

        def __getattr__(self, name):
            return getattr(loader, name)

        def __len__(self):
            return len(loader)

    w = _Window()
    w.run_epoch(Slow(), step, 0, 1, Phase(False, total=1))
    assert w.gaps == 10 and w.wait_s == 0
    # The window runs from batch 1's arrival to batch 11's: the steps of
    # batches 1-10 and the loop's own time before batches 2-11.
    assert sum(steps[1:11]) <= w.step_s < sum(steps[1:11]) + 0.1 * w.seconds
    assert w.step_s >= 10 * 0.010
    loop = w.loop_overhead() * w.samples
    assert loop >= sum(loops[2:12]) * 0.999
    # What is neither step nor the loop's sleeps (taking the batch, the
    # progress line) is a small part of the window.
    assert loop - sum(loops[2:12]) < 0.25 * w.seconds


def test_short_epochs_are_timed_within_what_storage_allows(small_pngs):
    # 60 items in batches of 8 (7.5 batches) from a store with 20 ms per read
    # and 2 reads in flight: at most 100 samples/s. Counting the samples made
    # before the window, the cold rate came out about 1.2x too high.
    spec = {"source": {"uri": str(small_pngs), "options": {"throttle_latency_ms": 20}},
            "batch_size": 8, "mode": "L", "reads_in_flight": 2}
    a = run(spec, instant, items=60)
    assert a.profile["cold_rate"] <= 100 * 1.04, a.table()
    assert a.result["run"]["windows"]["cold"]["batches"] >= 8  # widened to enough batches
    assert a.bottleneck == "fetch"
    # Nor faster than the store the probe measured allows (on a busy machine
    # the probe's reads take longer than the 20 ms the store adds: the
    # model's storage limit, and so its efficiency, move with them).
    latency = a.profile["measured"]["latency_s"]
    assert a.result["efficiency"]["storage"] <= 1.05 * max(1.0, latency / 0.020), latency


def test_too_few_batches_to_time_is_a_clear_error(small_pngs):
    with pytest.raises(ValueError, match="too few to time"):
        run({"source": str(small_pngs), "batch_size": 32, "mode": "L"}, instant, items=64)


def test_contradictions_are_found_and_a_consistent_report_has_none(small_pngs):
    from nostall.analyze import contradictions

    a = run({"source": str(small_pngs), "batch_size": 32, "mode": "L"}, sleeper(0.04), items=384)
    assert contradictions(a.result) == [], a.table()
    assert a.contradictions() == []
    bad = json.loads(json.dumps(a.result))
    bad["bottleneck"] = "compute"
    bad["stall_noise"] = 0.05
    bad["profile"]["waited"] = 0.2
    bad["breakdown"] = {"compute": 0.79, "prep_stall": 0.07, "fetch_stall": 0.14}
    assert any("measured stall" in c for c in contradictions(bad))
    bad["recommendation"]["config"]["cores"] = 8
    assert any("recommendation changes cores" in c for c in contradictions(bad))
    # On a busy machine (a noise of 36%) a stall of 53% split 31/23 between prep and fetch: beyond the
    # noise together, within it apart. Named by its larger part, it is one story, and the table says so;
    # named by the smaller, it is not.
    split = json.loads(json.dumps(a.result))
    split["stall_noise"] = 0.36
    split["profile"]["waited"] = -1.0
    split["breakdown"] = {"compute": 0.47, "hooks": 0.0, "prep_stall": 0.305, "fetch_stall": 0.225}
    split["predicted"]["limit"] = "storage"
    split["recommendation"] = a.result["recommendation"]
    for named, ok in (("prep", True), ("fetch", False)):
        split["bottleneck"] = named
        assert (contradictions(split) == []) == ok, (named, contradictions(split))
    split["bottleneck"] = "prep"
    from nostall._report import render_table
    assert "but split: prep 30.5%, fetch 22.5%" in render_table(split)


def test_a_multithreaded_torch_step_is_profiled_with_its_threads(small_pngs):
    import torch

    conv = torch.nn.Conv2d(1, 64, 5, padding=2)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        def step(images, labels):  # enough work per batch to keep both threads busy
            conv(images.float()).sum().backward()

        a = run({"source": str(small_pngs), "batch_size": 32, "mode": "L"}, step, items=256)
        assert torch.get_num_threads() == 2  # given back as it was
    finally:
        torch.set_num_threads(before)
    p = a.profile
    assert p["step_threads"] == 2
    assert p["step_rate_1"] > 0 and p["step_cpu_1"] > 0  # measured with one thread too
    # The step's threads take cores from the prep threads: on the measured
    # cores, one prep thread cannot do better than with the cores to itself.
    alone = 1 / p["prep_cpu"]
    assert a.predict(prep_threads=1)["rate"] <= alone * 1.001


@pytest.mark.slow
def test_python_hooks_are_a_stage_of_their_own(small_pngs):
    """A per-sample Python hook of 1 ms on one hook thread, a 2 ms step per
    batch of 16: taking a batch costs 16 ms of hooks, 8x the step. The
    analysis runs the loader's hooks in every run it makes and says where
    that time went, not "compute"."""
    def slow_hook(image):
        t0 = time.perf_counter()
        time.sleep(0.001)
        slow_hook.took.append(time.perf_counter() - t0)
        return image
    slow_hook.took = []

    loader = nostall.Loader(small_pngs, batch_size=16, mode="L", hook_threads=1,
                            transforms=[nostall.Resize((8, 8)), slow_hook])
    a = run(loader, sleeper(0.002), items=128)
    # At least what a hook took here (a busy machine wakes a sleeper late),
    # and no more than a sample took in the loop.
    import statistics
    assert statistics.median(slow_hook.took) * 0.9 <= a.profile["hooks"], a.table()
    assert a.profile["hooks"] <= 1 / min(a.profile["cold_rate"], a.profile["cached_rate"]), a.table()
    assert a.profile["hooks"] <= a.profile["loop_overhead"]
    b = a.breakdown
    assert b["hooks"] > 3 * b["compute"], b
    assert sum(b.values()) == pytest.approx(1.0)
    assert "Python hooks" in a.table()
    notes = a.result["run"]["notes"]
    assert any("the Python hooks take" in n and "hook_threads" in n for n in notes), notes
    # The loop is what binds: a stall beside it (a busy machine slows the
    # cold run too) is small against the hooks, and named only where it is
    # beyond the analysis's own noise (the report tells one story).
    assert b["prep_stall"] + b["fetch_stall"] < b["hooks"] / 3, a.table()
    assert a.bottleneck == "compute" or a.contradictions() == [], a.table()
    # Without hooks the same spec has no such stage.
    plain = run(loader.spec, sleeper(0.002), items=128)
    assert plain.profile["hooks"] == 0 and plain.breakdown["hooks"] == 0
    assert "Python hooks" not in plain.table()
