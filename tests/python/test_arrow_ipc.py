"""Arrow IPC files (docs/parquet.md, "Arrow IPC files"): a folder `datasets`
saved with `save_to_disk`, its cache files, pyarrow's file and stream
formats and Feather v2 give the same batches as the same rows in Parquet
or in an image folder; a row costs its own bytes, not its record batch's;
bad files are errors naming the file."""
import io
import warnings

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.ipc as ipc
import pytest
import torch
from PIL import Image

import nostall
from conftest import epoch_batches, write_jpeg_folder

KW = dict(batch_size=8, shuffle=True, seed=4, return_indices=True,
          transforms=[nostall.RandomResizedCrop(40), nostall.RandomHorizontalFlip()])


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """30 JPEGs of assorted sizes in 3 classes."""
    return write_jpeg_folder(tmp_path_factory.mktemp("ipc-folder"), classes=3, per_class=10, seed=12)


def rows_of(folder):
    classes = sorted(p.name for p in folder.iterdir() if p.is_dir())
    return classes, [(classes.index(f.parent.name), f) for c in classes for f in sorted((folder / c).iterdir())]


def table_of(folder, hf=True):
    """The folder's rows as datasets holds them (an image struct, a ClassLabel
    int64 with its names in the schema) or plainly (binary, string label)."""
    import json

    classes, rows = rows_of(folder)
    if hf:
        image = pa.array([{"bytes": f.read_bytes(), "path": f.name} for _, f in rows],
                         type=pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
        label = pa.array([i for i, _ in rows], type=pa.int64())
        features = {"image": {"_type": "Image"}, "label": {"names": classes, "_type": "ClassLabel"}}
        meta = {b"huggingface": json.dumps({"info": {"features": features}}).encode()}
        return pa.table({"image": image, "label": label}).replace_schema_metadata(meta)
    return pa.table({"image": pa.array([f.read_bytes() for _, f in rows], type=pa.large_binary()),
                     "label": pa.array([classes[i] for i, _ in rows], type=pa.string())})


def same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert all(torch.equal(p, q) for p, q in zip(x, y))


def jpeg(rng, i):
    out = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (24 + i % 9, 30, 3), dtype=np.uint8)).save(out, "JPEG", quality=90)
    return out.getvalue()


def test_a_folder_saved_by_datasets_gives_the_parquet_files_batches(tmp_path):
    datasets = pytest.importorskip("datasets")
    rng = np.random.default_rng(3)
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=["cat", "dog", "eel"]),
                                  "caption": datasets.Value("string"), "score": datasets.Value("float32")})
    ds = datasets.Dataset.from_dict(
        {"image": [{"bytes": jpeg(rng, i), "path": f"{i}.jpg"} for i in range(60)], "label": [i % 3 for i in range(60)],
         "caption": [f"row {i}" if i % 5 else None for i in range(60)], "score": [i / 4 for i in range(60)]},
        features=features)
    ds.save_to_disk(str(tmp_path / "saved"), max_shard_size="40KB")
    assert len(list((tmp_path / "saved").glob("data-*.arrow"))) > 1
    ds.to_parquet(str(tmp_path / "same.parquet"))
    saved = nostall.Loader(str(tmp_path / "saved"), **KW)
    parquet = nostall.Loader(str(tmp_path / "same.parquet"), **KW)
    assert saved.spec["source"]["driver"] == "arrow"
    assert saved.index_origin.startswith("read from 3 Arrow IPC files")
    assert saved.classes == parquet.classes == ["cat", "dog", "eel"]
    assert saved.key(0).endswith("data-00000-of-00003.arrow[0]")
    for epoch in (0, 1):
        same(epoch_batches(saved, epoch), epoch_batches(parquet, epoch))
    # Opened again: the headers and each row's place from the index cache.
    again = nostall.Loader(str(tmp_path / "saved"), **KW)
    assert again.index_origin.startswith("the index cache: ")
    same(epoch_batches(again, 1), epoch_batches(parquet, 1))
    # Every other column is a field of its kind, nulls taken as None when optional.
    fields = {"image": "image", "label": "label", "caption": {"ext": "caption", "kind": "text", "optional": True},
              "score": {"ext": "score", "kind": "json"}}
    resize = [nostall.Resize((8, 8))]
    a = list(nostall.Loader(str(tmp_path / "saved"), fields=fields, batch_size=12, transforms=resize))
    b = list(nostall.Loader(str(tmp_path / "same.parquet"), fields=fields, batch_size=12, transforms=resize))
    for x, y in zip(a, b):
        for k in fields:
            assert torch.equal(x[k], y[k]) if isinstance(x[k], torch.Tensor) else x[k] == y[k]
    assert a[0]["caption"][:2] == [None, "row 1"] and a[0]["score"][1] == 0.25
    # A DatasetDict saved: a folder a split, each named.
    datasets.DatasetDict({"train": ds, "test": ds.select(range(6))}).save_to_disk(str(tmp_path / "dict"))
    with pytest.raises(ValueError, match=r"DatasetDict.*read one split.*dict/t"):
        nostall.Loader(str(tmp_path / "dict"), batch_size=4)
    assert nostall.Loader(str(tmp_path / "dict" / "test"), batch_size=4).num_items == 6


@pytest.mark.parametrize("write", ["file", "stream", "feather", "datasets-cache", "lz4", "zstd"])
def test_every_arrow_ipc_writer_gives_the_image_folders_batches(folder, tmp_path, write):
    here = nostall.Loader(str(folder), **KW)
    table = table_of(folder, hf=write != "feather")
    path = tmp_path / "train.arrow"
    if write == "file":  # the file format: "ARROW1", the batches, a footer
        with ipc.new_file(path, table.schema) as w:
            for b in table.to_batches(max_chunksize=7):
                w.write_batch(b)
    elif write == "stream":
        with ipc.new_stream(path, table.schema) as w:
            for b in table.to_batches(max_chunksize=4):
                w.write_batch(b)
    elif write == "feather":
        path = tmp_path / "train.feather"
        feather.write_feather(table, path, compression="uncompressed", chunksize=9)
    elif write in ("lz4", "zstd"):  # each buffer compressed: Feather's default is lz4
        path = tmp_path / "train.feather"
        feather.write_feather(table, path, compression=write, chunksize=8)
    else:  # what `datasets` writes when it caches a map's result
        datasets = pytest.importorskip("datasets")
        ds = datasets.Dataset(table).map(lambda r: r, cache_file_name=str(path), writer_batch_size=5)
        assert len(ds) == 30
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        loader = nostall.Loader(str(path), **KW)
    # A compressed batch is read whole for any of its rows, and the user is told.
    assert any("compressed" in str(w.message) for w in said) == (write in ("lz4", "zstd"))
    assert loader.classes == here.classes == ["class_0", "class_1", "class_2"]
    for epoch in (0, 1):
        same(epoch_batches(loader, epoch), epoch_batches(here, epoch))


@pytest.mark.parametrize("how,message", [
    ("garbage", "not an Arrow IPC file"),
    ("truncated", "truncated"),
    ("compressed", "does not decompress"),
    ("dictionary", "the label column label holds neither"),
    ("empty", "not an Arrow IPC file"),
])
def test_bad_files_are_errors_naming_the_file(folder, tmp_path, how, message):
    path = tmp_path / "bad.arrow"
    table = table_of(folder, hf=False)
    if how == "garbage":
        path.write_bytes(b"this is not Arrow at all, only text" * 10)
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "truncated":
        with ipc.new_stream(path, table.schema) as w:
            w.write_table(table)
        data = path.read_bytes()
        path.write_bytes(data[:len(data) // 2])
    elif how == "compressed":  # a zstd buffer's bytes damaged
        with ipc.new_file(path, table.schema, options=ipc.IpcWriteOptions(compression="zstd")) as w:
            w.write_table(table)
        data = bytearray(path.read_bytes())
        at = data.find(b"\x28\xb5\x2f\xfd")  # a zstd frame's magic
        data[at + 8:at + 40] = b"\xff" * 32
        path.write_bytes(bytes(data))
    else:
        table = table.set_column(1, "label", table.column("label").dictionary_encode())
        with ipc.new_stream(path, table.schema) as w:
            w.write_table(table)
    with pytest.raises((nostall.DataError, ValueError)) as err:
        list(nostall.Loader(str(path), batch_size=4, transforms=[nostall.Resize((8, 8))]))
    assert message in str(err.value) and "bad.arrow" in str(err.value), str(err.value)


def test_a_list_column_asked_for_is_refused_by_name(folder, tmp_path):
    table = table_of(folder, hf=False).append_column("boxes", pa.array([[1.0, 2.0]] * 30))
    path = tmp_path / "lists.arrow"
    with ipc.new_file(path, table.schema) as w:
        w.write_table(table)
    # Beside the columns read, a list column is passed over ...
    assert len(list(nostall.Loader(str(path), batch_size=10, transforms=[nostall.Resize((8, 8))]))) == 3
    # ... and named when a field asks for it.
    with pytest.raises(ValueError, match="boxes.*list"):
        nostall.Loader(str(path), fields={"image": "image", "boxes": {"ext": "boxes", "kind": "json"}}, batch_size=4)


def test_a_folder_of_arrow_files_not_saved_by_datasets_is_told_its_pattern(folder, tmp_path):
    """A folder of .arrow files without save_to_disk's state.json is not
    claimed as one dataset (a datasets cache folder holds every split): the
    image folder's error says how to read them."""
    with ipc.new_stream(tmp_path / "mnist-train.arrow", table_of(folder).schema) as w:
        w.write_table(table_of(folder))
    with pytest.raises(FileNotFoundError, match=r"no class folders.*mnist-train.arrow.*/\*\.arrow"):
        nostall.Loader(str(tmp_path), batch_size=4)
    assert nostall.Loader(str(tmp_path / "*.arrow"), batch_size=4).num_items == 30
