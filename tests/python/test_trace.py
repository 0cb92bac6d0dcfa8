"""nostall.analyze_trace and `nostall analyze --trace`: real torch.profiler
traces of CPU loops recorded here, GPU traces written in the format
torch.profiler writes (no GPU on these machines), and bad files."""

import gzip
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import nostall
from nostall.errors import DataError

BATCH = 16


class SleepyDataset(torch.utils.data.Dataset):
    """Items that cost `sleep_s` each, like a slow store."""

    def __init__(self, sleep_s, n=4096):
        self.sleep_s, self.n = sleep_s, n
        self.x = torch.randn(3, 32, 32)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.sleep_s)
        return self.x, i % 10


def small_model():
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                               torch.nn.Linear(8 * 30 * 30, 10))


def record(path, batches, steps=8, model=None, timings=None):
    """Runs a training loop over `batches` under torch.profiler; the trace at
    `path`. `timings`, a list, gets (seconds waiting for the batch, seconds of
    the whole step) of each traced step, as measured here beside the trace."""
    model = model or small_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    it = iter(batches)
    schedule = torch.profiler.schedule(wait=1, warmup=1, active=steps, repeat=1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                schedule=schedule,
                                on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for k in range(steps + 2):
            t0 = time.perf_counter()
            x, y = next(it)
            t1 = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            prof.step()
            if timings is not None and k >= 2:
                timings.append((t1 - t0, time.perf_counter() - t0))
    return path


def steady_steps(timings):
    """The traced steps the analysis averages (its steady ones: the first
    pays the profiler's start, the last is cut where it stops), so that a
    busy machine's uneven steps are compared one for one."""
    return timings[1:-1] if len(timings) >= 4 else timings


def one_thread(fn, *args, **kw):
    """fn under one intra-op torch thread (two on two busy cores fight each
    other and the machine, which is not what these traces are about)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return fn(*args, **kw)
    finally:
        torch.set_num_threads(before)


@pytest.fixture(scope="module")
def inline_trace(tmp_path_factory):
    """A DataLoader without workers whose items cost 4 ms: a data-bound loop.
    `.timings`: (wait, step) seconds of each traced step, measured beside."""
    loader = torch.utils.data.DataLoader(SleepyDataset(0.004), batch_size=BATCH)
    timings = []
    path = _TracePath(tmp_path_factory.mktemp("tr") / "inline.json")
    one_thread(record, path, loader, timings=timings)
    path.timings = timings
    return path


class _TracePath(type(Path())):
    """A trace's path with what the loop measured beside it."""


def test_a_dataloader_without_workers_is_its_wait_and_free_data_removes_it(inline_trace):
    t = nostall.analyze_trace(inline_trace)
    assert t.facts["loader"] == "inline"
    assert t.facts["steps"] == 8
    # 16 items x 4 ms of sleeping are waited for on the training thread.
    assert t.path["data"] >= BATCH * 0.004
    # The share of the step the trace says was waiting for data is the share
    # the loop measured (the machine's load changes both alike).
    steady = steady_steps(inline_trace.timings)
    waited = sum(w for w, _ in steady) / sum(s for _, s in steady)
    assert t.stall == pytest.approx(waited, abs=0.1), inline_trace.timings
    assert t.stall > 0.5 and t.critical == "data"
    # The replayed trace reproduces the traced steps.
    assert t.step_s == pytest.approx(sum(t.path.values()), rel=1e-6)
    free = t.predict(loader="free")
    assert free["path"]["data"] < 1e-4
    assert free["step_s"] == pytest.approx(t.step_s - t.path["data"], rel=0.02)
    half = t.predict(loader_speedup=2)
    assert half["step_s"] == pytest.approx(t.step_s - t.path["data"] / 2, rel=0.02)
    # A loader beside the loop that makes a batch in less than the loop's own time hides.
    fastest = min(s["seconds"] for s in free["steps"])
    beside = t.predict(loader_period=0.5 * fastest)
    # (the first step waits for the first batch; the steady steps pay only taking it)
    assert beside["step_s"] == pytest.approx(free["step_s"] + 50e-6, rel=0.01)
    assert "waiting for data" in t.table()


def test_workers_beside_the_loop_show_their_period(tmp_path):
    # 2 workers, 16 items x 6 ms a batch each: a batch every ~48 ms or more.
    loader = torch.utils.data.DataLoader(SleepyDataset(0.006), batch_size=BATCH, num_workers=2,
                                         persistent_workers=True)
    timings = []
    t = nostall.analyze_trace(one_thread(record, tmp_path / "workers.json", loader, steps=10,
                                         timings=timings))
    assert t.facts["loader"] == "beside" and t.facts["loader_period_seen"]
    # The loop is bound by the workers: its step, as measured beside the
    # trace, is their period (on a busy machine both stretch alike).
    steady = steady_steps(timings)
    measured = sum(s for _, s in steady) / len(steady)
    # (No less than the workers' sleeps allow, but for batches the workers
    # had ready before the traced steps, which shorten the period seen.)
    assert t.facts["loader_period_s"] >= BATCH * 0.006 / 2 * 0.8
    assert t.facts["loader_period_s"] == pytest.approx(measured, rel=0.35), timings
    assert t.step_s == pytest.approx(measured, rel=0.1), timings
    # Twice as fast a loader: the step is bound by whichever is slower, the
    # loader or the loop's own work and taking each batch from the workers
    # (the least wait seen: on a busy machine, milliseconds). The workers
    # still share the cores, so the loop's work is as contended as traced:
    # "loader free" takes it at its least contended (x least_contended).
    fast = t.predict(loader_speedup=2)
    free = t.predict(loader="free")
    contended = free["step_s"] / t.facts["least_contended"]
    loop = contended + t.facts["wait_floor_s"]
    assert fast["step_s"] == pytest.approx(max(t.facts["loader_period_s"] / 2, loop), rel=0.2), \
        (fast["step_s"], t.facts["loader_period_s"], free["step_s"], t.facts["least_contended"],
         t.facts["wait_floor_s"])
    # Replacing a worker-process loader takes the loop's CPU at its least contended.
    assert 0 < t.facts["least_contended"] <= 1


def _marked_loop(path, threads, loader=None, schedule=True):
    """A few steps on `threads` intra-op threads, the trace marked by nostall.trace.mark."""
    model = small_model()
    kw = {"schedule": torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=1)} if schedule else {}
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], **kw) as prof:
            wrote = nostall.trace.mark(prof, loader=loader)
            for _ in range(5):
                model(torch.randn(BATCH, 3, 32, 32)).sum().backward()
                prof.step()
    finally:
        torch.set_num_threads(before)
    prof.export_chrome_trace(str(path))
    return wrote


@pytest.mark.parametrize("schedule", [True, False])
def test_the_loops_threads_are_read_from_a_marked_trace(tmp_path, schedule):
    loader = torch.utils.data.DataLoader(SleepyDataset(0), batch_size=BATCH, num_workers=3)
    wrote = _marked_loop(tmp_path / "t.json", 3, loader, schedule)
    assert wrote["intra_op_threads"] == 3 and wrote["num_workers"] == 3
    written = json.loads((tmp_path / "t.json").read_text())["nostall"]
    assert {k: written[k] for k in wrote} == wrote
    # (and the CPU of this process's children while steps were recorded: none here)
    assert written["workers_cpu_s"] == 0 and written["workers_wall_s"] > 0
    if not schedule:  # (no ProfilerStep#N marks without a schedule: nothing to analyse)
        return
    # Analysed where torch has another count: the trace's wins, and says so.
    t = nostall.analyze_trace(tmp_path / "t.json")
    assert t.facts["marks"]["intra_op_threads"] == 3 and t.facts["marks"]["num_workers"] == 3
    assert t.step_threads == 3 and t.threads_source == "trace"
    assert "intra-op threads of the loop: 3 (from the trace" in t.table()
    assert t.to_dict()["step_threads_from"] == "trace"
    # A prediction that scales from them names where the count came from.
    assert "against 3 (from the trace" in t.predict(threads=1)["rules"][0]
    # Given, the count given is used.
    given = nostall.analyze_trace(tmp_path / "t.json", step_threads=1)
    assert given.step_threads == 1 and given.threads_source == "given"


class BusyDataset(SleepyDataset):
    """Items that cost `busy_s` of CPU each, spent in the worker."""

    def __getitem__(self, i):
        end = time.thread_time() + self.sleep_s
        while time.thread_time() < end:
            pass
        return self.x, i % 10


def test_mark_measures_what_the_workers_took_of_the_cores(tmp_path):
    # One worker spending 3 ms of CPU per item, 16 items a batch: while the
    # steps are recorded it is busy whenever the loop waits for it.
    loader = torch.utils.data.DataLoader(BusyDataset(0.003), batch_size=BATCH, num_workers=1,
                                         persistent_workers=True)
    path = tmp_path / "w.json"
    model = small_model()
    batches = iter(loader)
    schedule = torch.profiler.schedule(wait=1, warmup=1, active=6, repeat=1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=schedule,
                                on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        nostall.trace.mark(prof, loader=loader)
        for _ in range(8):
            x, _y = next(batches)
            one_thread(lambda: model(x).sum().backward())
            prof.step()
    marks = json.loads(path.read_text())["nostall"]
    assert marks["num_workers"] == 1 and marks["workers_wall_s"] > 0
    # The worker made about a batch per step (48 ms of CPU each), so it was
    # busy most of the recorded time, and never more than its one core.
    busy = marks["workers_cpu_s"] / marks["workers_wall_s"]
    assert 0.3 < busy <= 1.1, marks
    t = nostall.analyze_trace(path)
    assert t.facts["marks"]["workers_cpu_s"] == pytest.approx(marks["workers_cpu_s"])


def test_an_unmarked_trace_says_it_assumed_the_threads(tmp_path, inline_trace):
    t = nostall.analyze_trace(inline_trace)
    assert t.facts["marks"] == {} and t.threads_source == "assumed"
    assert t.step_threads == torch.get_num_threads()
    assert "assumed, torch's default here: the trace does not say" in t.table()
    # Each what-if row prints what it assumed, in the table and the HTML.
    assert "      assumes: batches cost nothing" in t.table()
    t.save_html(tmp_path / "r.html")
    assert "assumes: batches cost nothing" in (tmp_path / "r.html").read_text()


def test_replacing_worker_processes_says_it_takes_the_least_contended_step(tmp_path):
    loader = torch.utils.data.DataLoader(SleepyDataset(0.003), batch_size=BATCH, num_workers=1,
                                         persistent_workers=True)
    t = nostall.analyze_trace(one_thread(record, tmp_path / "w.json", loader, steps=8))
    free = t.predict(loader="free")
    if t.facts["least_contended"] < 0.999:
        assert any("least contended step, x" in r for r in free["rules"]), free["rules"]
    else:
        assert not any("least contended" in r for r in free["rules"])


def test_nostall_marks_its_waits_in_the_trace(tmp_path, jpeg_folder):
    loader = nostall.Loader(jpeg_folder, batch_size=4, num_threads=1,
                            transforms=[nostall.RandomResizedCrop(32), nostall.Normalize((0.5, 0.5, 0.5), (0.25, 0.25, 0.25))])

    def forever():
        while True:
            yield from loader

    t = nostall.analyze_trace(record(tmp_path / "nostall.json", forever(), steps=4))
    assert t.facts["loader_name"] == "nostall: next batch"
    assert t.facts["loader"] == "beside"


def test_a_loop_without_a_loader_has_no_data_wait(tmp_path):
    x, y = torch.randn(BATCH, 3, 32, 32), torch.randint(0, 10, (BATCH,))
    t = nostall.analyze_trace(record(tmp_path / "synthetic.json", iter(lambda: (x, y), None)))
    assert t.facts["loader"] == "none"
    assert t.path["data"] == 0 and t.critical == "cpu"
    with pytest.raises(ValueError, match="no GPU work"):
        t.predict(amp=True)
    with pytest.raises(ValueError, match="needs the data"):
        t.predict(loader="nostall")
    # Two intra-op threads: only long ATen operators are divided.
    two = t.predict(threads=2)
    scale = two["change"]["parallel_scale"]  # measured here: 2 threads' time over 1's
    assert scale > 0
    assert abs(two["step_s"] - t.step_s) <= abs(1 - scale) * t.step_s + 1e-9


def test_the_fused_optimizer_rule_pays_the_python_once_per_kind(tmp_path):
    layers = [torch.nn.Flatten(), torch.nn.Linear(3 * 32 * 32, 32)]
    for _ in range(30):
        layers += [torch.nn.ReLU(), torch.nn.Linear(32, 32)]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(32, 10))
    x, y = torch.randn(BATCH, 3, 32, 32), torch.randint(0, 10, (BATCH,))
    t = nostall.analyze_trace(record(tmp_path / "opt.json", iter(lambda: (x, y), None),
                                     model=model))
    assert t.facts["optimizer_calls"] >= 8
    fused = t.predict(fused_optimizer=True)
    assert fused["step_s"] < t.step_s
    # Never more than the optimizer's own share of the step.
    assert fused["step_s"] > 0.3 * t.step_s


# ---------------------------------------------------------------- GPU traces

def gpu_trace(steps=6, gz=False, path=None):
    """A trace of a GPU loop as torch.profiler writes one (Kineto's Chrome
    trace: cpu_op, cuda_runtime with args.correlation, kernel and gpu_memcpy
    on a stream with the same correlation). Each 10 ms step: a 0.1 ms wait
    for the batch, a pageable host-to-device copy (0.4 ms, the call blocks
    for it), three kernels (GEMM 3 ms, elementwise 2 ms, GEMM 3 ms) launched
    at 0.7-0.9 ms, cudaDeviceSynchronize until they end, then 1.25 ms of CPU."""
    ev = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}}]
    corr = 100
    for s in range(steps):
        t0 = 1_000_000 + s * 10_000.0  # microseconds
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s + 3}",
                   "pid": 1, "tid": 1, "ts": t0, "dur": 10_000.0})
        ev.append({"ph": "X", "cat": "user_annotation",
                   "name": "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__",
                   "pid": 1, "tid": 1, "ts": t0 + 1, "dur": 99.0})
        corr += 1
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1,
                   "tid": 1, "ts": t0 + 100, "dur": 500.0, "args": {"correlation": corr}})
        ev.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)",
                   "pid": 0, "tid": 7, "ts": t0 + 150, "dur": 400.0,
                   "args": {"correlation": corr, "stream": 7, "device": 0}})
        start = t0 + 720
        for k, (name, dur) in enumerate((("ampere_sgemm_128x64_nn", 3000.0),
                                         ("vectorized_elementwise_kernel", 2000.0),
                                         ("ampere_sgemm_64x64_tn", 3000.0))):
            corr += 1
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                       "tid": 1, "ts": t0 + 700 + 100 * k, "dur": 10.0,
                       "args": {"correlation": corr}})
            ev.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7,
                       "ts": start, "dur": dur,
                       "args": {"correlation": corr, "stream": 7, "device": 0}})
            ev.append({"ph": "s", "id": corr, "pid": 1, "tid": 1, "ts": t0 + 700 + 100 * k,
                       "cat": "ac2g", "name": "ac2g"})
            start += dur
        corr += 1
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "pid": 1,
                   "tid": 1, "ts": t0 + 1000, "dur": start - (t0 + 1000) + 30,
                   "args": {"correlation": corr}})
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::item", "pid": 1, "tid": 1,
                   "ts": start + 30, "dur": 1000.0})
    doc = json.dumps({"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "H100"}],
                      "traceEvents": ev}).encode()
    if gz:
        doc = gzip.compress(doc)
    path.write_bytes(doc)
    return path


def test_a_gpu_bound_trace_split_and_its_changes(tmp_path):
    t = nostall.analyze_trace(gpu_trace(path=tmp_path / "gpu.json.gz", gz=True))
    assert t.facts["gpu_nodes"] == 6 * 4
    assert t.step_s == pytest.approx(0.010, rel=1e-3)
    assert t.critical == "gpu"
    assert t.path["gpu"] == pytest.approx(0.008, rel=0.01)
    assert t.path["data"] == pytest.approx(0.0001, rel=0.05)
    # Each rule's figure: kernels are 8 of the 10 ms.
    assert t.predict(gpu_speedup=2)["step_s"] == pytest.approx(0.006, rel=0.01)
    # Mixed precision: GEMM kernels / 3 (6 -> 2 ms), the elementwise / 2 (2 -> 1).
    assert t.predict(amp=True)["step_s"] == pytest.approx(0.005, rel=0.01)
    assert t.predict(gemm_speedup=2)["step_s"] == pytest.approx(0.007, rel=0.01)
    # Faster CPU work: only the 1 ms after the synchronisation (and launching) is shorter.
    cpu = t.predict(cpu_speedup=2)
    assert cpu["critical"] == "gpu"
    assert 0.0089 < cpu["step_s"] < 0.0096
    # Pinned copies: the copy halves and the CPU launches without waiting for it.
    pinned = t.predict(pinned_copies=True)
    assert pinned["step_s"] < t.step_s
    assert pinned["step_s"] > 0.0094
    # A GPU-bound step: the loader does not matter.
    assert t.predict(loader="free")["step_s"] == pytest.approx(t.step_s, rel=0.02)


def test_the_plain_json_form_and_a_bare_event_list_read_alike(tmp_path):
    plain = nostall.analyze_trace(gpu_trace(path=tmp_path / "gpu.json"))
    events = json.loads((tmp_path / "gpu.json").read_text())["traceEvents"]
    (tmp_path / "bare.json").write_text(json.dumps(events))
    bare = nostall.analyze_trace(tmp_path / "bare.json")
    assert bare.step_s == plain.step_s and bare.path == plain.path


# ---------------------------------------------------------------- bad files

@pytest.mark.parametrize("content, message", [
    (b"", "not a torch.profiler trace"),
    (b"not json at all", "not a torch.profiler trace"),
    (b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1', "not a torch.profiler trace"),
    (b'{"schemaVersion": 1}', "no \"traceEvents\""),
    (b'{"traceEvents": []}', "no ProfilerStep#N"),
    (b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, '
     b'"ts": 5, "dur": 3}]}', "no ProfilerStep#N"),
    (b'{"traceEvents": [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", '
     b'"pid": 1, "tid": 1, "ts": "soon", "dur": 3}]}', "is a string"),
    (b'[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]',
     "no ProfilerStep#N"),
])
def test_a_file_that_is_not_a_trace_is_an_error_naming_it(tmp_path, content, message):
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    with pytest.raises(DataError, match=message) as e:
        nostall.analyze_trace(bad)
    assert "bad.json" in str(e.value)


def test_a_cut_gzip_and_a_missing_file(tmp_path):
    whole = gpu_trace(path=tmp_path / "gpu.json.gz", gz=True).read_bytes()
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(DataError, match="cut.json.gz"):
        nostall.analyze_trace(cut)
    with pytest.raises(FileNotFoundError, match="nowhere.json"):
        nostall.analyze_trace(tmp_path / "nowhere.json")


def test_nan_and_negative_times_place_nothing(tmp_path):
    doc = json.loads(gpu_trace(path=tmp_path / "gpu.json").read_text())
    doc["traceEvents"].append({"ph": "X", "cat": "cpu_op", "name": "aten::odd", "pid": 1,
                               "tid": 1, "ts": -5, "dur": 1e30})
    text = json.dumps(doc).replace('"dur": 1e+30', '"dur": NaN')
    (tmp_path / "odd.json").write_text(json.dumps(doc))
    assert nostall.analyze_trace(tmp_path / "odd.json").step_s == pytest.approx(0.010, rel=1e-3)
    (tmp_path / "nan.json").write_text(text)
    with pytest.raises(DataError, match="nan.json"):  # NaN is not JSON
        nostall.analyze_trace(tmp_path / "nan.json")


def test_bad_changes_are_refused(tmp_path):
    t = nostall.analyze_trace(gpu_trace(path=tmp_path / "gpu.json"))
    with pytest.raises(ValueError, match="loader must be"):
        t.predict(loader="dali")
    with pytest.raises(ValueError, match="gpu_speedup must be a number above 0"):
        t.predict(gpu_speedup=0)
    with pytest.raises(ValueError, match="prep_cores"):
        t.predict(prep_cores=4)


# ---------------------------------------------------------------- the command

def test_the_command_prints_the_split_and_the_predictions(tmp_path, inline_trace):
    out = tmp_path / "report"
    r = subprocess.run([sys.executable, "-m", "nostall", "analyze", "--trace", str(inline_trace),
                        "--predict", "loader=free", "--predict", "loader_speedup=2,fused_optimizer",
                        "--out", str(out)], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "waiting for data" in r.stdout
    assert "--predict loader=free:" in r.stdout
    assert "rule: the loader's work per batch / 2" in r.stdout
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["predictions"][0]["asked"] == "loader=free"
    assert saved["predictions"][0]["change"] == {"loader_free": True}
    assert "<svg" in (tmp_path / "report.html").read_text()
    bad = subprocess.run([sys.executable, "-m", "nostall", "analyze", "--trace", str(inline_trace),
                          "--predict", "gpu_speedup=fast"], capture_output=True, text=True,
                         cwd=tmp_path)
    assert bad.returncode == 2 and "gpu_speedup takes a number" in bad.stderr
    helped = subprocess.run([sys.executable, "-m", "nostall", "analyze", "--trace", "x", "--help"],
                            capture_output=True, text=True, cwd=tmp_path)
    assert helped.returncode == 0 and "pinned_copies" in helped.stdout


def test_loader_nostall_is_predicted_from_the_analyzers_model(tmp_path, jpeg_folder, inline_trace):
    spec = nostall.Loader(jpeg_folder, batch_size=BATCH, num_threads=1,
                          transforms=[nostall.RandomResizedCrop(32), nostall.Normalize((0.5, 0.5, 0.5), (0.25, 0.25, 0.25))])
    t = nostall.analyze_trace(inline_trace, spec, progress=False, step_threads=1)
    p = t.predict(loader="nostall")
    assert p["change"]["loader_period"] > 0
    assert "nostall's pipeline as the analyzer's model predicts it" in p["rules"][0]
    # The period is the model's rate for this pipeline beside this step.
    rate = BATCH / p["change"]["loader_period"]
    free = t.predict(loader="free")
    step = {"step_rate": BATCH / free["step_s"], "step_cpu": free["step_s"] / BATCH,
            "step_threads": 1, "loop_overhead": 0.0}
    model = json.loads(nostall._nostall.predict_with_step_json(
        json.dumps(t.pipeline["profile"]), json.dumps(step), "{}"))
    assert rate == pytest.approx(min(v for k, v in model["limits"].items()
                                     if k != "compute" and v), rel=1e-6)
    # The step cannot be faster than the loop's own work or than nostall's
    # batches: over n steady steps bound by the loader, the mean is the
    # period plus (the last step's work - the first's) / n, so at least the
    # period less the spread of the loop's own step times over n; and the
    # loader starts as the trace does, up to a period before the first
    # step, which may find its batch made: less a period over all steps.
    period = p["change"]["loader_period"]
    steady = [s["seconds"] for s in free["steps"]][1:-1]
    spread = max(steady) - min(steady)
    seen = (p["step_s"], free["step_s"], period, steady)
    assert p["step_s"] >= free["step_s"] * 0.999, seen
    assert p["step_s"] >= period * (1 - 1 / len(free["steps"])) - spread / len(steady) - 1e-6, seen
    assert p["step_s"] <= max(free["step_s"], period) + spread + 1e-3, seen
    more = t.predict(loader="nostall", prep_cores=8)
    assert more["step_s"] <= p["step_s"] * 1.001, (more["step_s"], more["rules"], p["rules"])
