"""Parquet datasets (docs/parquet.md): shards as Hugging Face `datasets` and
pyarrow write them, read through Arrow's C++ reader, give the image folder's
batches byte for byte; bad files are errors naming file, row group and column."""
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

import nostall
from nostall.datasets import folder_to_parquet
from conftest import epoch_batches, write_jpeg_folder

KW = dict(batch_size=8, shuffle=True, seed=4, return_indices=True, transforms=[nostall.RandomResizedCrop(48), nostall.RandomHorizontalFlip()])


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """30 JPEGs of assorted sizes in 3 classes."""
    return write_jpeg_folder(tmp_path_factory.mktemp("pq-folder"), classes=3, per_class=10, seed=11)


def same_batches(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert torch.equal(x[0], y[0]) and torch.equal(x[1], y[1])


@pytest.mark.parametrize("layout,rows,page_index,compression", [
    ("hf", 7, True, "snappy"), ("hf", 100, False, "zstd"), ("binary", 1, True, "gzip"),
    ("binary", 4, False, "none"), ("hf", 1000, True, "snappy")])
def test_every_layout_gives_the_image_folders_batches(folder, tmp_path, layout, rows, page_index, compression):
    pattern = folder_to_parquet(folder, tmp_path, files=3, layout=layout, row_group_size=rows,
                                page_index=page_index, compression=compression, max_page_bytes=40000)
    here = nostall.Loader(str(folder), **KW)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        pq_loader = nostall.Loader(pattern, **KW)
    # Files without an offset index are read by whole chunks, and the user is told.
    assert any("no offset index" in str(w.message) for w in said) == (not page_index)
    assert pq_loader.index_origin.startswith("read from 3 Parquet files")
    # Opened again: footers, offset indexes and labels from the index cache.
    again = nostall.Loader(pattern, **KW)
    assert again.index_origin.startswith("the index cache: ")
    assert pq_loader.classes == here.classes == ["class_0", "class_1", "class_2"]
    assert len(pq_loader) == len(here)
    for epoch in (0, 1):
        same_batches(epoch_batches(pq_loader, epoch), epoch_batches(here, epoch))
    assert pq_loader.spec["source"]["driver"] == "parquet"
    assert pq_loader.key(0).endswith("-00000-of-00003.parquet[0]")


def test_files_written_by_datasets_are_read_with_their_class_names(folder, tmp_path):
    datasets = pytest.importorskip("datasets")
    here = nostall.Loader(str(folder), **KW)
    files = sorted((folder / c / f) for c in here.classes for f in sorted(os.listdir(folder / c)))
    features = datasets.Features({"image": datasets.Image(),
                                  "label": datasets.ClassLabel(names=here.classes)})
    # As the Hub's shards hold them: the bytes embedded, with the file's name.
    ds = datasets.Dataset.from_dict({"image": [{"bytes": f.read_bytes(), "path": f.name} for f in files],
                                     "label": [here.classes.index(f.parent.name) for f in files]},
                                    features=features)
    ds.to_parquet(str(tmp_path / "train-00000-of-00001.parquet"))
    meta = pq.ParquetFile(tmp_path / "train-00000-of-00001.parquet").metadata
    assert meta.row_group(0).column(0).has_offset_index  # datasets writes the page index
    loader = nostall.Loader(str(tmp_path / "train-*.parquet"), fields={"image": "image", "label": "label"}, **KW)
    assert loader.classes == here.classes
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        got = [{k: v.clone() for k, v in b.items()} for b in loader]
        want = epoch_batches(here, epoch)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert torch.equal(g["image"], w[0]) and torch.equal(g["label"], w[1])


def test_other_columns_are_fields_of_their_kind(folder, tmp_path):
    pattern = folder_to_parquet(folder, tmp_path / "src", files=1, row_group_size=8)
    table = pq.read_table(pattern.replace("*", "00000"))
    n = table.num_rows
    captions = [None if i % 5 == 3 else f"a photo, number {i}" for i in range(n)]
    table = (table.append_column("caption", pa.array(captions, type=pa.string()))
             .append_column("score", pa.array([i / 4 for i in range(n)], type=pa.float64()))
             .append_column("count", pa.array(list(range(n)), type=pa.int32()))
             .append_column("blob", pa.array([bytes([i]) * i for i in range(n)], type=pa.binary())))
    pq.write_table(table, tmp_path / "rich.parquet", row_group_size=8, write_page_index=True)
    fields = {"image": "image", "label": "label", "caption": {"ext": "caption", "kind": "text", "optional": True},
              "score": {"ext": "score", "kind": "json"}, "count": {"ext": "count", "kind": "json"},
              "blob": "blob"}
    loader = nostall.Loader(str(tmp_path / "rich.parquet"), batch_size=6, fields=fields, return_indices=True,
                            transforms=[nostall.Resize((16, 16))])
    seen = 0
    for batch in loader:
        for k, i in enumerate(batch["__index__"].tolist()):
            assert batch["caption"][k] == captions[i]
            assert batch["score"][k] == i / 4 and isinstance(batch["score"][k], float)
            assert batch["count"][k] == i
            assert batch["blob"][k] == bytes([i]) * i
            seen += 1
    assert seen == n
    # A null where the field is not optional: the error names file, row and column.
    with pytest.raises(nostall.NostallError, match=r"rich\.parquet\[3\].*caption.*null"):
        nostall.Loader(str(tmp_path / "rich.parquet"), batch_size=6, transforms=[nostall.Resize((16, 16))],
                       fields={"image": "image", "caption": {"ext": "caption", "kind": "text"}})


def test_the_saved_index_is_used_until_a_file_changes(folder, tmp_path):
    pattern = folder_to_parquet(folder, tmp_path, files=2, row_group_size=5)
    kw = dict(batch_size=30, transforms=[nostall.Resize((8, 8))])
    assert nostall.Loader(pattern, **kw).index_origin.startswith("read from")
    assert nostall.Loader(pattern, **kw).index_origin.startswith("the index cache")
    assert nostall.Loader(pattern, index_cache=False, **kw).index_origin.startswith("read from")
    # One file rewritten with other labels: read again, and the batch says so.
    first = tmp_path / "train-00000-of-00002.parquet"
    table = pq.read_table(first)
    table = table.set_column(1, "label", pa.array([2] * table.num_rows, type=pa.int64()))
    pq.write_table(table.replace_schema_metadata(pq.read_schema(first).metadata), first, write_page_index=True)
    loader = nostall.Loader(pattern, **kw)
    assert loader.index_origin.startswith("read from")
    _, labels = next(iter(loader))
    assert labels.tolist()[:15] == [2] * 15


def test_string_labels_number_the_sorted_names_and_missing_columns_are_named(folder, tmp_path):
    pattern = folder_to_parquet(folder, tmp_path, files=2, layout="binary", row_group_size=5)
    loader = nostall.Loader(pattern, batch_size=30, transforms=[nostall.Resize((8, 8))])
    assert loader.classes == ["class_0", "class_1", "class_2"]
    _, labels = next(iter(loader))
    assert labels.tolist() == [i // 10 for i in range(30)]
    with pytest.raises(ValueError, match=r"has no column picture.*columns: image, label"):
        nostall.Loader(pattern, batch_size=4, fields={"image": {"ext": "picture", "kind": "image"}})
    # A file whose schema lacks a column the first has.
    pq.write_table(pa.table({"image": pa.array([b"x"], type=pa.binary())}), tmp_path / "train-00001-of-00002.parquet")
    with pytest.raises(ValueError, match=r"train-00001-of-00002\.parquet.*column label is missing"):
        nostall.Loader(pattern, batch_size=4)
    with pytest.raises(FileNotFoundError, match="no Parquet file matches"):
        nostall.Loader(str(tmp_path / "nothing-*.parquet"), batch_size=4)


def damaged(src, dst, how):
    data = bytearray(Path(src).read_bytes())
    if how == "truncated":
        data = data[: len(data) - 100]
    elif how == "magic":
        data[-4:] = b"PAR0"
    elif how == "footer_length":
        data[-8:-4] = (len(data) * 2).to_bytes(4, "little")
    elif how == "empty":
        data = b""
    Path(dst).write_bytes(bytes(data))


@pytest.mark.parametrize("how,message", [
    ("truncated", "not a Parquet file"), ("magic", "no PAR1 magic"),
    ("footer_length", "does not fit the file"), ("empty", "not a Parquet file")])
def test_damaged_footers_are_errors_naming_the_file(folder, tmp_path, how, message):
    pattern = folder_to_parquet(folder, tmp_path / "src", files=1)
    damaged(pattern.replace("*", "00000"), tmp_path / "bad.parquet", how)
    with pytest.raises(nostall.NostallError) as e:
        nostall.Loader(str(tmp_path / "bad.parquet"), batch_size=4)
    assert "bad.parquet" in str(e.value) and message in str(e.value), str(e.value)


def test_a_page_that_lies_about_its_length_is_named_or_skipped(folder, tmp_path):
    pattern = folder_to_parquet(folder, tmp_path / "src", files=1, row_group_size=10, compression="none",
                                max_page_bytes=1)
    path = Path(pattern.replace("*", "00000"))
    meta = pq.ParquetFile(path).metadata
    # The image column's pages of row group 1: overwrite its first page's
    # header (its sizes) with bytes that are not a page header.
    col = meta.row_group(1).column(0)
    data = bytearray(path.read_bytes())
    at = col.data_page_offset
    data[at:at + 12] = b"\xff" * 12
    bad = tmp_path / "pages.parquet"
    bad.write_bytes(bytes(data))
    with pytest.raises(nostall.DataError) as e:
        list(nostall.Loader(str(bad), batch_size=5, transforms=[nostall.Resize((8, 8))]))
    text = str(e.value)
    assert "pages.parquet" in text and "row group 1" in text and "image.bytes" in text, text
    skipping = nostall.Loader(str(bad), batch_size=5, transforms=[nostall.Resize((8, 8))], on_error="skip")
    got = sum(int(l.shape[0]) for _, l in skipping)
    assert 20 <= got < 30 and skipping.stats()["skipped"] == 30 - got


def test_shard_shuffle_reads_row_groups_in_a_random_order_each_epoch(folder, tmp_path):
    pattern = folder_to_parquet(folder, tmp_path, files=2, row_group_size=5, page_index=False)
    kw = dict(batch_size=4, shuffle=True, seed=2, shard_shuffle=True, shuffle_buffer=8, return_indices=True,
              transforms=[nostall.Resize((8, 8))])
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        loader = nostall.Loader(pattern, **kw)
    # No offset index, but read in shard order: nothing to warn of.
    assert not [w for w in said if "no offset index" in str(w.message)], [str(w.message) for w in said]
    orders = []
    for epoch in range(3):
        order = [int(i) for _, _, idx in epoch_batches(loader, epoch) for i in idx]
        assert sorted(order) == sorted(set(order)) and len(order) == 30  # every row once
        orders.append(order)
    assert orders[0] != orders[1]
    again = nostall.Loader(pattern, **kw)
    assert [int(i) for _, _, idx in epoch_batches(again, 1) for i in idx] == orders[1]
    with pytest.raises(ValueError, match="shard_shuffle needs data in shards"):
        nostall.Loader(str(folder), batch_size=4, shuffle=True, shard_shuffle=True)


def test_cache_resume_and_the_command_line_work_on_parquet(folder, tmp_path):
    pattern = folder_to_parquet(folder, tmp_path, files=2, row_group_size=4)
    name = f"pqtest-{os.getpid()}"
    try:
        cached = nostall.Loader(pattern, cache=nostall.Cache(size=64 << 20, name=name), **KW)
        first = epoch_batches(cached, 0)
        second = epoch_batches(cached, 1)
        same_batches(second, epoch_batches(nostall.Loader(pattern, **KW), 1))
        epochs = cached.stats()["cache"]["epochs"]
        assert epochs[0]["misses"] == 30 and epochs[1]["hits"] == 30, epochs
        same_batches(first, epoch_batches(nostall.Loader(pattern, **KW), 0))
    finally:
        nostall.Cache(name, 1).remove()
    loader = nostall.Loader(pattern, **KW)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    rest = list(it)
    resumed = nostall.Loader(pattern, **KW)
    resumed.load_state_dict(state)
    same_batches(list(resumed), rest)
    out = subprocess.run([os.path.join(os.path.dirname(sys.executable), "nostall"), "inspect", pattern],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "parquet" in out.stdout and "30" in out.stdout, out.stdout


def test_the_window_shuffle_gives_every_row_once_and_resumes(folder, tmp_path):
    pattern = folder_to_parquet(folder, tmp_path, files=2, row_group_size=5, max_page_bytes=20000)
    kw = dict(batch_size=4, shuffle=True, seed=3, shuffle_window=6, return_indices=True,
              transforms=[nostall.Resize((8, 8))])
    loader = nostall.Loader(pattern, **kw)
    orders = [[int(i) for _, _, idx in epoch_batches(loader, e) for i in idx] for e in (0, 1)]
    assert all(sorted(o) == list(range(30)) for o in orders) and orders[0] != orders[1]
    assert orders[0] != [int(i) for _, _, idx in epoch_batches(nostall.Loader(pattern, **{**kw, "shuffle_window": None}), 0)
                         for i in idx]
    # Resumed after two batches: the rest of the epoch as it would have come.
    loader.set_epoch(1)
    it = iter(loader)
    next(it), next(it)
    state = loader.state_dict()
    assert state["shuffle_window"] == 6
    resumed = nostall.Loader(pattern, **kw)
    resumed.load_state_dict(state)
    assert [int(i) for _, _, idx in resumed for i in idx] == orders[1][8:]
    with pytest.raises(ValueError, match="shuffle_window"):
        nostall.Loader(pattern, **{**kw, "shuffle_window": 7}).load_state_dict(state)
    with pytest.raises(ValueError, match="shuffle_window is a shuffle of its own"):
        nostall.Loader(pattern, **kw, shard_shuffle=True)
    with pytest.raises(ValueError, match="shuffle_window must be"):
        nostall.Loader(pattern, **{**kw, "shuffle_window": "big"})
    # A served loader's order is its own (fixed blocks any consumer may start at).
    from nostall.shared import Server
    with pytest.raises(ValueError, match="shuffle_window"):
        Server({**loader.spec}, f"pqwin-{os.getpid()}")
    # An image folder's items are their own units: the window shuffle is still every item once.
    plain = nostall.Loader(str(folder), **{**kw, "shuffle_window": "auto"})
    assert sorted(int(i) for _, _, idx in plain for i in idx) == list(range(30))
