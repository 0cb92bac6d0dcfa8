"""The `nostall` command, run as a user runs it."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

# `pip install .` puts the command beside the interpreter.
NOSTALL = shutil.which("nostall", path=str(Path(sys.executable).parent)) or shutil.which("nostall")


def run(*args):
    return subprocess.run([NOSTALL, *map(str, args)], capture_output=True, text=True, timeout=120)


def test_help_lists_the_commands():
    r = run("--help")
    assert r.returncode == 0
    assert "bench" in r.stdout and "inspect" in r.stdout
    assert "--batch-size" in run("bench", "--help").stdout
    assert "shared ls" in r.stdout and "rm NAME" in run("shared", "--help").stdout
    wrong = run("shared", "frob")
    assert wrong.returncode == 2 and "usage: nostall shared" in wrong.stderr


def test_bench_reports_images_per_second_and_stages(jpeg_folder):
    r = run("bench", jpeg_folder, "--batch-size", 8, "--size", 64)
    assert r.returncode == 0, r.stderr
    assert "images/s" in r.stdout
    for stage in ("fetch", "decode+augment", "batch", "consumer"):
        assert stage in r.stdout
    j = json.loads(run("bench", jpeg_folder, "--batch-size", 8, "--size", 64, "--json",
                       "--epochs", 2, "--no-autotune").stdout)
    assert j["images"] == 72 and j["images_per_s"] > 0
    assert j["stats"]["samples"] == 72
    assert j["stats"]["stages"]["prep"]["items"] >= 72  # may run on into a next epoch
    # Reads in flight at once are counted for the fetch stage only; no stage
    # reports a count it does not keep.
    fetch = j["stats"]["stages"]["fetch"]
    assert 1 <= fetch["peak_in_flight"] <= fetch["threads"]
    assert "peak_in_flight" not in j["stats"]["stages"]["prep"]


def test_bench_autotune_prints_the_configuration_it_chose(jpeg_folder):
    # One read of 20 ms at a time to start: the tuner adds reads.
    r = run("bench", jpeg_folder, "--batch-size", 8, "--size", 64, "--epochs", 8, "--autotune",
            "--threads", 1, "--reads-in-flight", 1, "--throttle-latency-ms", 20)
    assert r.returncode == 0, r.stderr
    m = re.search(r"autotune chose: --threads (\d+) --reads-in-flight (\d+) --prefetch (\d+) "
                  r"\((\d+) changes\)", r.stdout)
    assert m, r.stdout
    assert int(m.group(2)) > 1 and int(m.group(4)) >= 1, r.stdout
    assert re.search(r"reads_in_flight +1 -> \d+: .*prep waited for reads", r.stdout), r.stdout
    assert "autotune (threads, reads_in_flight, prefetch)" in r.stdout  # the stats table's line
    bad = run("bench", jpeg_folder, "--autotune", "--no-autotune")
    assert bad.returncode == 2 and "contradict" in bad.stderr


def test_inspect_describes_the_dataset(jpeg_folder):
    r = run("inspect", jpeg_folder)
    assert r.returncode == 0
    assert "image-folder" in r.stdout and "items:       36" in r.stdout


def test_mistakes_get_clear_messages(tmp_path):
    r = run("bench", tmp_path / "missing")
    assert r.returncode == 1 and "does not exist" in r.stderr
    r = run("bench", tmp_path, "--batch-sise", 3)
    assert r.returncode == 2 and "unknown option --batch-sise" in r.stderr
    r = run("frobnicate")
    assert r.returncode == 2 and "unknown command" in r.stderr


def test_cache_ls_inspect_rm(jpeg_folder):
    import os

    import nostall

    name = f"cli-test-{os.getpid()}"
    loader = nostall.Loader(jpeg_folder, batch_size=6, transforms=[nostall.Resize((8, 8))],
                            cache=nostall.Cache(name, "2MB"))
    for _ in loader:
        pass
    del loader
    assert name in run("cache", "ls").stdout
    r = run("cache", "inspect", name)
    assert r.returncode == 0
    assert "36 items" in r.stdout and "fill:" in r.stdout
    assert run("cache", "rm", name).returncode == 0
    assert name not in run("cache", "ls").stdout
    r = run("cache", "inspect", name)
    assert r.returncode == 1 and "no cache" in r.stderr
