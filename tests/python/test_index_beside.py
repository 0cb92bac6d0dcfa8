"""The index beside the data (`nostall index PATH`): every job on any node or
container that opens the dataset starts from it; it is mapped, not copied,
into each process; a stale, damaged or untrusted one is never used (the
loader says why and indexes as if it were not there), so no batch is ever
wrong because of it."""
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import nostall
from conftest import write_jpeg_folder, write_shards

NOSTALL = shutil.which("nostall", path=str(Path(sys.executable).parent)) or shutil.which("nostall")


def index(path, *args):
    out = subprocess.run([NOSTALL, "index", str(path), *args], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def loader(path, cache_dir, **kw):
    kw.setdefault("index_cache", True)
    old = os.environ.get("NOSTALL_CACHE_DIR")
    os.environ["NOSTALL_CACHE_DIR"] = str(cache_dir)  # a node that never saw the data
    try:
        return nostall.Loader(str(path), batch_size=4, transforms=[nostall.Resize((16, 16))],
                              seed=5, output="numpy", return_indices=True, **kw)
    finally:
        if old is None:
            del os.environ["NOSTALL_CACHE_DIR"]
        else:
            os.environ["NOSTALL_CACHE_DIR"] = old


def epoch(ld):
    keys, images = [], []
    for im, _, idx in ld:
        keys += [ld.key(int(i)) for i in idx]
        images.append(np.array(im))
    return keys, np.concatenate(images)


@pytest.fixture
def folder(tmp_path):
    return write_jpeg_folder(tmp_path / "train", classes=3, per_class=6, seed=2, min_side=40,
                             max_side=90)


def test_an_index_beside_a_folder_is_found_by_a_fresh_node_and_gives_the_same_batches(folder, tmp_path):
    out = index(folder)
    assert (folder / ".nostall-index").is_file()
    assert "written beside the data" in out and "items:       18" in out
    assert oct((folder / ".nostall-index").stat().st_mode & 0o777) == "0o644"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no note: it is used
        ld = loader(folder, tmp_path / "node1")
    assert ld.index_origin == f"beside the data: {folder}/.nostall-index"
    # Mapped from the file, not copied into the process.
    assert f"{folder}/.nostall-index" in Path("/proc/self/maps").read_text()
    ref = loader(folder, tmp_path / "node2", index_beside="off")
    assert ref.index_origin.startswith("built in")
    assert ld._core.fingerprint == ref._core.fingerprint
    a, b = epoch(ld), epoch(ref)
    assert a[0] == b[0] and len(set(a[0])) == 18
    np.testing.assert_array_equal(a[1], b[1])
    ld.close()
    ref.close()


def test_a_copy_of_the_dataset_uses_its_index_and_reads_its_own_files(folder, tmp_path):
    index(folder)
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy, copy_function=shutil.copy2)  # as cp -a / rsync -a keep mtimes
    for d in [copy, *copy.iterdir()]:  # the folders' mtimes too (copytree sets them first)
        if d.is_dir():
            src = folder / d.relative_to(copy)
            os.utime(d, ns=(src.stat().st_atime_ns, src.stat().st_mtime_ns))
    ld = loader(copy, tmp_path / "node")
    assert ld.index_origin == f"beside the data: {copy}/.nostall-index"
    keys, _ = epoch(ld)
    assert all(k.startswith(str(copy) + "/") for k in keys) and len(keys) == 18
    ld.close()


def test_a_stale_index_is_said_and_not_used(folder, tmp_path):
    index(folder)
    extra = folder / "class_0" / "zz-new.jpg"
    shutil.copy(folder / "class_0" / "000.jpg", extra)
    with pytest.warns(UserWarning, match=r"is stale: the data changed after it was written"):
        ld = loader(folder, tmp_path / "node")
    assert ld.index_origin.startswith("built in")
    keys, _ = epoch(ld)
    assert str(extra) in keys and len(keys) == 19
    ld.close()
    # index_beside="write" writes it again as it builds (nothing to warn of
    # then); the next job uses it.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ld = loader(folder, tmp_path / "node2", index_beside="write")
    assert "written beside the data" in ld.index_origin
    ld.close()
    ld = loader(folder, tmp_path / "node3")
    assert ld.index_origin.startswith("beside the data") and ld.num_items == 19
    ld.close()


@pytest.mark.parametrize("damage", ["flip", "truncate", "writable", "garbage"])
def test_a_damaged_or_open_to_all_index_is_never_used(folder, tmp_path, damage):
    index(folder)
    path = folder / ".nostall-index"
    data = bytearray(path.read_bytes())
    if damage == "flip":  # one label byte: the hash no longer matches
        data[len(data) // 2] ^= 0x01
        path.write_bytes(bytes(data))
    elif damage == "truncate":
        path.write_bytes(bytes(data[: len(data) - 10]))
    elif damage == "writable":  # anyone could have replaced it
        path.chmod(0o666)
    else:
        path.write_bytes(b"not an index at all")
    with pytest.warns(UserWarning, match="the index beside the data is not used"):
        ld = loader(folder, tmp_path / "node")
    assert ld.index_origin.startswith("built in")
    ref = loader(folder, tmp_path / "node2", index_beside="off")
    a, b = epoch(ld), epoch(ref)
    assert a[0] == b[0]
    np.testing.assert_array_equal(a[1], b[1])
    ld.close()
    ref.close()


def test_tar_shards_index_beside_the_pattern_and_every_sample_once(folder, tmp_path):
    pattern = write_shards(folder, tmp_path / "shards", shards=3)
    out = index(pattern)
    beside = Path(pattern + ".nostall-index")
    assert beside.is_file() and "written beside the data" in out
    ld = loader(pattern, tmp_path / "node")
    assert ld.index_origin == f"beside the data: {beside}"
    for e in range(2):
        ld.set_epoch(e)
        keys, _ = epoch(ld)
        assert sorted(keys) == sorted(set(keys)) and len(keys) == 18
    ld.close()
    # A shard rewritten (another sample in it): stale, never its old spans.
    shutil.copy(Path(pattern.replace("{0..2}", "0")), tmp_path / "keep.tar")
    write_shards(write_jpeg_folder(tmp_path / "other", classes=3, per_class=4, seed=9, min_side=40,
                                   max_side=60), tmp_path / "shards", shards=3)
    with pytest.warns(UserWarning, match="stale"):
        ld = loader(pattern, tmp_path / "node2")
    assert ld.num_items == 12
    ld.close()


def test_index_cli_refuses_what_it_cannot_do(tmp_path):
    out = subprocess.run([NOSTALL, "index", str(tmp_path / "missing")], capture_output=True,
                         text=True)
    assert out.returncode != 0 and "missing" in out.stderr
    out = subprocess.run([NOSTALL, "index", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and ".nostall-index" in out.stdout
    with pytest.raises(ValueError, match="index_beside"):
        nostall.Loader(str(tmp_path), batch_size=2, index_beside="sometimes")


def test_a_long_start_shows_how_far_indexing_has_come(folder, tmp_path):
    env = dict(os.environ, NOSTALL_CACHE_DIR=str(tmp_path / "cache"), NOSTALL_PROGRESS_AFTER="0")
    out = subprocess.run([NOSTALL, "inspect", str(folder)], capture_output=True, text=True,
                         env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = [l for l in out.stderr.splitlines() if l.startswith("nostall: indexing")]
    assert lines[-1] == (f"nostall: indexing {folder}: 3 of 3 class folders, 18 items, "
                         f"{lines[-1].rsplit(', ', 1)[1].split(' (')[0]} (done)")
    assert "1 of 3 class folders" in lines[0]
    env["NOSTALL_QUIET"] = "1"
    env["NOSTALL_CACHE_DIR"] = str(tmp_path / "cache2")
    out = subprocess.run([NOSTALL, "inspect", str(folder)], capture_output=True, text=True,
                         env=env, timeout=60)
    assert out.returncode == 0 and "nostall: indexing" not in out.stderr


def test_a_job_running_beside_nostall_index_keeps_its_index_and_its_epoch(folder, tmp_path):
    """`nostall index` run again while a job has the index mapped (the data
    grew: the new index has another layout) must not touch the job's: it
    finishes its epoch on the items it started with."""
    index(folder)
    child = subprocess.Popen([sys.executable, "-c", f"""
import os, sys
os.environ["NOSTALL_CACHE_DIR"] = {str(tmp_path / 'node')!r}
import nostall
ld = nostall.Loader({str(folder)!r}, batch_size=2, transforms=[nostall.Resize((16, 16))], seed=5,
                    shuffle=True, output="numpy", return_indices=True)
assert ld.index_origin.startswith("beside the data"), ld.index_origin
it = iter(ld)
keys = [ld.key(int(i)) for _, _, idx in (next(it), next(it)) for i in idx]
print("ready", flush=True)
sys.stdin.readline()
for _, _, idx in it:
    keys += [ld.key(int(i)) for i in idx]
print(len(keys), len(set(keys)), sum(os.path.exists(k) for k in keys), flush=True)
"""], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready", child.stderr.read()
        # The data grows by a class and 5 images; the index is written again.
        rng = np.random.default_rng(9)
        from PIL import Image

        from nostall.datasets import natural_image
        (folder / "class_9").mkdir()
        for k in range(5):
            Image.fromarray(natural_image(rng, 50, 40)).save(folder / "class_9" / f"{k}.jpg")
        assert "items:       23" in index(folder)
        out, err = child.communicate("go\n", timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 0, err
    assert out.split() == ["18", "18", "18"]  # its epoch, whole, on the items it started with
    ld = loader(folder, tmp_path / "node3")  # and a new job sees the new index
    assert ld.index_origin.startswith("beside the data") and ld.num_items == 23
    ld.close()
