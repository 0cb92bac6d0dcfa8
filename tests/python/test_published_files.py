"""Files people publish, damaged or hostile: a DataError naming the file (and
where in it), a skip under on_error="skip", never a crash, never another
sample's data (docs/security.md)."""
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import nostall
from nostall.datasets import folder_to_parquet, make_detection_scenes
from conftest import write_jpeg_folder
import warm


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_jpeg_folder(tmp_path_factory.mktemp("published"), classes=2, per_class=6, seed=12,
                             min_side=40, max_side=80)


def with_hf_metadata(src, dst, metadata: bytes):
    """The Parquet file `src` rewritten to `dst` with this "huggingface" metadata."""
    table = pq.read_table(src)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), b"huggingface": metadata})
    pq.write_table(table, dst)
    return dst


def test_huggingface_metadata_nested_300000_deep_is_an_error_naming_the_file(folder, tmp_path):
    src = folder_to_parquet(folder, tmp_path / "src", files=1).replace("*", "00000")
    deep = b'{"info": {"features": ' + b"[" * 300_000 + b"]" * 300_000 + b"}}"
    bad = with_hf_metadata(src, tmp_path / "deep.parquet", deep)
    # In a child: what used to happen here is a SIGSEGV.
    code = ("import nostall, sys\n"
            "for on_error in ('raise', 'skip'):\n"
            "    try:\n"
            f"        nostall.Loader({str(bad)!r}, batch_size=4, on_error=on_error)\n"
            "    except nostall.DataError as e:\n"
            "        print('DataError:', e)\n")
    out = warm.run(code=code, timeout=120)
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])
    lines = out.stdout.splitlines()
    assert len(lines) == 2, out.stdout
    for line in lines:
        assert "deep.parquet" in line and "huggingface" in line and "nested over 64 levels" in line


@pytest.mark.parametrize("features", [
    {"image": {"_type": 5}, "label": {"_type": ["ClassLabel"], "names": ["a", "b"]}},
    {"image": {"_type": "Image"}, "label": {"_type": "ClassLabel", "names": "a,b"}},
    {"image": {"_type": None}, "label": 7},
])
def test_huggingface_features_of_other_types_are_passed_over(folder, tmp_path, features):
    src = folder_to_parquet(folder, tmp_path / "src", files=1, layout="binary").replace("*", "00000")
    meta = json.dumps({"info": {"features": features}}).encode()
    bad = with_hf_metadata(src, tmp_path / "typed.parquet", meta)
    loader = nostall.Loader(str(bad), batch_size=12, transforms=[nostall.Resize((8, 8))])
    images, labels = next(iter(loader))
    assert images.shape == (12, 3, 8, 8) and sorted(labels.tolist()) == [0] * 6 + [1] * 6


def test_a_coco_category_name_that_is_not_a_string_names_the_category(tmp_path):
    ann = make_detection_scenes(tmp_path, num_images=4, seed=1, min_side=64, max_side=96)
    data = json.loads(Path(ann).read_text())
    data["categories"][1]["name"] = {"en": "rectangle"}
    Path(ann).write_text(json.dumps(data))
    with pytest.raises(nostall.DataError, match=r"category.*\"name\" must be a string, not "
                                                r"\{\"en\":\"rectangle\"\}") as e:
        nostall.Loader(nostall.datasets.Coco(tmp_path / "images", ann), batch_size=2,
                       transforms=[nostall.Resize((32, 32))])
    assert Path(ann).name in str(e.value) or e.value.item


# ------------------------------------------------------------ audio
def flac_of_unknown_length(path, seconds=1.5, rate=16000):
    """A FLAC whose STREAMINFO says 0 total samples, as streaming encoders write it."""
    import numpy as np
    import soundfile

    t = np.arange(int(seconds * rate)) / rate
    wave = (0.5 * np.sin(2 * np.pi * 440 * t)).astype("float32")
    soundfile.write(path, wave, rate, format="FLAC", subtype="PCM_16")
    data = bytearray(Path(path).read_bytes())
    assert data[:4] == b"fLaC" and data[4] & 0x7F == 0  # STREAMINFO first
    info = 8  # after "fLaC" and the block header
    data[info + 13] &= 0xF0  # 36 bits of total samples: 4 here, 4 bytes after
    data[info + 14:info + 18] = b"\0\0\0\0"
    Path(path).write_bytes(bytes(data))
    return wave


def test_a_flac_of_unknown_length_decodes_to_its_end(tmp_path):
    from nostall import audio

    wave = flac_of_unknown_length(tmp_path / "stream.flac")
    assert audio.info(tmp_path / "stream.flac")["frames"] == len(wave)
    tail = audio.load(tmp_path / "stream.flac", start=len(wave) - 1600, frames=1600)
    assert abs(tail[0] - wave[-1600:]).max() < 1e-3  # the signal, not padded zeros
    assert abs(tail[0]).max() > 0.4


def test_an_audio_file_with_no_samples_is_a_data_error_not_silence(tmp_path):
    import numpy as np
    import soundfile

    from nostall import audio

    soundfile.write(tmp_path / "none.wav", np.zeros(0, dtype="float32"), 16000)
    with pytest.raises(nostall.DataError, match="holds no samples"):
        audio.info(tmp_path / "none.wav")
    (tmp_path / "words" / "a").mkdir(parents=True)
    (tmp_path / "words" / "b").mkdir()
    soundfile.write(tmp_path / "words" / "a" / "none.wav", np.zeros(0, dtype="float32"), 16000)
    soundfile.write(tmp_path / "words" / "b" / "one.wav", np.full(16000, 0.25, dtype="float32"), 16000)
    flac_of_unknown_length(tmp_path / "words" / "b" / "two.flac")
    fields = {"audio": "flac;wav", "label": "cls"}
    crop = {"audio": [audio.Resample(16000), audio.RandomCrop(seconds=0.5)]}
    loader = nostall.Loader(tmp_path / "words", batch_size=3, fields=fields, transforms=crop,
                            on_error="skip")
    batch = next(iter(loader))
    assert len(batch["label"]) == 2 and loader.stats()["skipped"] == 1
    assert float(batch["audio"].abs().amax(dim=-1).min()) > 0.2  # no clip of zeros
    with pytest.raises(nostall.DataError, match="none.wav.*holds no samples"):
        list(nostall.Loader(tmp_path / "words", batch_size=3, fields=fields, transforms=crop))


# ------------------------------------------------------------ images
def test_a_truncated_or_corrupt_tiff_is_refused_as_pil_refuses_it(tmp_path):
    import numpy as np
    from PIL import Image

    from nostall.datasets import natural_image

    rng = np.random.default_rng(4)
    (tmp_path / "d" / "a").mkdir(parents=True)
    good = tmp_path / "d" / "a" / "good.tif"
    Image.fromarray(natural_image(rng, 96, 64)).save(good, compression="tiff_lzw",
                                                     tiffinfo={278: 8})  # 8 strips
    data = good.read_bytes()
    broken = {"truncated.tif": data[: len(data) * 2 // 3]}
    corrupt = bytearray(data)
    corrupt[len(data) // 3:len(data) // 3 + 200] = bytes(200)  # zeros over LZW strips
    broken["corrupt.tif"] = bytes(corrupt)
    for name, content in broken.items():
        (tmp_path / "d" / "a" / name).write_bytes(content)
        with pytest.raises(Exception):
            Image.open(tmp_path / "d" / "a" / name).load()  # PIL refuses it
    for name in broken:
        loader = nostall.Loader(tmp_path / "d", batch_size=3, transforms=[nostall.Resize((16, 16))])
        with pytest.raises(nostall.DataError) as e:
            list(loader)
        assert e.value.item.endswith(".tif")
    skipping = nostall.Loader(tmp_path / "d", batch_size=3, on_error="skip",
                              transforms=[nostall.Resize((16, 16))])
    assert sum(len(labels) for _, labels in skipping) == 1 and skipping.stats()["skipped"] == 2


def test_a_top_down_bmp_reads_as_pil_reads_it(tmp_path):
    import numpy as np
    from PIL import Image

    from nostall.datasets import natural_image

    pixels = natural_image(np.random.default_rng(5), 40, 30)
    (tmp_path / "d" / "a").mkdir(parents=True)
    bottom_up = tmp_path / "bu.bmp"
    Image.fromarray(pixels).save(bottom_up)
    data = bytearray(bottom_up.read_bytes())
    offset, height = int.from_bytes(data[10:14], "little"), int.from_bytes(data[22:26], "little", signed=True)
    stride = (40 * 3 + 3) // 4 * 4
    rows = [data[offset + r * stride:offset + (r + 1) * stride] for r in range(height)]
    data[22:26] = (-height).to_bytes(4, "little", signed=True)
    data[offset:offset + height * stride] = b"".join(reversed(rows))
    top_down = tmp_path / "d" / "a" / "td.bmp"
    top_down.write_bytes(bytes(data))
    assert np.array_equal(np.asarray(Image.open(top_down).convert("RGB")), pixels)
    images, _ = next(iter(nostall.Loader(tmp_path / "d", batch_size=1, layout="NHWC")))
    assert np.array_equal(images[0].numpy(), pixels)


# ------------------------------------------------------------ Parquet offset indexes
def _varint(n):
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | 0x80 if n else b)
        if not n:
            return bytes(out)


def _read_varint(buf, i):
    shift = value = 0
    while True:
        b = buf[i]
        value |= (b & 0x7F) << shift
        i += 1
        if not b & 0x80:
            return value, i
        shift += 7


def _zz(n):
    return (n << 1) ^ (n >> 63)


def _unzz(n):
    return (n >> 1) ^ -(n & 1)


def offset_index(data, first_page_offset):
    """The PageLocations of the offset index (Thrift compact) whose first page
    starts at `first_page_offset`: [[offset, size, first_row], ...] and where
    each entry's bytes lie, found by its encoding."""
    for pages in range(1, 15):
        head = b"\x19" + bytes([(pages << 4) | 0x0C]) + b"\x16" + _varint(_zz(first_page_offset))
        at = data.find(head)
        if at < 0:
            continue
        i, entries = at + 2, []
        for _ in range(pages):
            start, values = i, []
            for field in (b"\x16", b"\x15", b"\x16"):
                assert data[i:i + 1] == field
                v, i = _read_varint(data, i + 1)
                values.append(_unzz(v))
            assert data[i] == 0
            i += 1
            entries.append((start, i, values))
        return entries
    raise AssertionError("no offset index found")


def _encode(values):
    return (b"\x16" + _varint(_zz(values[0])) + b"\x15" + _varint(_zz(values[1])) + b"\x16"
            + _varint(_zz(values[2])) + b"\x00")


@pytest.fixture
def paged(folder, tmp_path):
    """One Parquet file with a page index: 12 rows in 1 row group, pages of a
    few rows each."""
    pattern = folder_to_parquet(folder, tmp_path / "src", files=1, layout="binary", row_group_size=12,
                                compression="none", max_page_bytes=6000)
    path = Path(pattern.replace("*", "00000"))
    col = pq.ParquetFile(path).metadata.row_group(0).column(0)
    data = bytearray(path.read_bytes())
    entries = offset_index(data, col.data_page_offset)
    firsts = [e[2][2] for e in entries]
    assert len(entries) >= 3 and firsts == sorted(firsts) and firsts[2] - firsts[1] >= 2
    return path, data, entries


def _rewritten(data, entries, new_values, dst):
    out = bytearray(data)
    for (start, end, _), values in zip(entries, new_values):
        enc = _encode(values)
        assert len(enc) == end - start, "the same length, so the footer stays right"
        out[start:end] = enc
    dst.write_bytes(bytes(out))
    return dst


def plain_images(path):
    return [img.clone() for img, _ in nostall.Loader(str(path), batch_size=1, transforms=[
        nostall.Resize((8, 8))])]


def test_an_offset_index_whose_first_rows_disagree_with_its_pages_is_never_believed(paged, tmp_path):
    path, data, entries = paged
    values = [list(e[2]) for e in entries]
    values[2][2] += 1  # page 2 said to start a row later: it would give row r the image of r - 1
    bad = _rewritten(data, entries, values, tmp_path / "rows.parquet")
    truth = plain_images(path)
    with pytest.raises(nostall.DataError) as e:
        list(nostall.Loader(str(bad), batch_size=1, transforms=[nostall.Resize((8, 8))]))
    assert "rows.parquet" in str(e.value) and "row group 0" in str(e.value), str(e.value)
    skipping = nostall.Loader(str(bad), batch_size=1, on_error="skip", return_indices=True,
                              transforms=[nostall.Resize((8, 8))])
    got = {int(idx[0]): img[0].clone() for img, _, idx in skipping}
    assert 0 < skipping.stats()["skipped"] and len(got) + skipping.stats()["skipped"] == len(truth)
    for i, img in got.items():  # every image handed out is its own row's
        assert (img == truth[i][0]).all(), f"row {i} holds another row's image"


def test_an_offset_index_whose_pages_are_swapped_is_refused(paged, tmp_path):
    path, data, entries = paged
    import itertools

    # Two pages trade places (offset and size, or the offset alone), rows as
    # they were: the first pair whose entries keep their encoded lengths.
    for (a, b), part in itertools.product(itertools.combinations(range(len(entries)), 2),
                                          (slice(0, 2), slice(0, 1))):
        values = [list(e[2]) for e in entries]
        values[a][part], values[b][part] = values[b][part], values[a][part]
        if all(len(_encode(values[k])) == entries[k][1] - entries[k][0] for k in (a, b)):
            break
    else:
        pytest.fail("no two pages can trade places at the same encoded length")
    bad = _rewritten(data, entries, values, tmp_path / "swapped.parquet")
    with pytest.raises(nostall.DataError, match=r"swapped\.parquet.*row group 0.*offset index lies"):
        list(nostall.Loader(str(bad), batch_size=1, transforms=[nostall.Resize((8, 8))]))


# ------------------------------------------------------------ values outside the format
def _one_sample_shard(tmp_path, image_bytes, annotation, name="det.tar"):
    import io
    import tarfile

    tar_path = tmp_path / name
    with tarfile.open(tar_path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for key in ("a", "b"):
            members = {"jpg": image_bytes,
                       "json": json.dumps({"width": 64, "height": 48,
                                           "annotations": [annotation if key == "b" else
                                                           {"bbox": [1, 1, 10, 10], "category_id": 1}]
                                           }).encode()}
            for ext, data in members.items():
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return str(tar_path)


@pytest.fixture(scope="module")
def jpeg_64x48():
    import io

    import numpy as np
    from PIL import Image

    from nostall.datasets import natural_image

    out = io.BytesIO()
    Image.fromarray(natural_image(np.random.default_rng(2), 64, 48)).save(out, "JPEG")
    return out.getvalue()


@pytest.mark.parametrize("annotation, message", [
    ({"bbox": [3e38, 1, 3e38, 10], "category_id": 1}, "beyond float32's range"),
    ({"bbox": [1, 1, 10, 10], "category_id": 2 ** 64 - 1}, "category_id.*0 to 2\\^63 - 1"),
    ({"bbox": [1, 1, 10, 10], "category_id": -4}, "category_id.*0 to 2\\^63 - 1"),
])
def test_webdataset_targets_outside_what_the_format_allows_are_refused(tmp_path, jpeg_64x48,
                                                                      annotation, message):
    shard = _one_sample_shard(tmp_path, jpeg_64x48, annotation)
    fields = {"image": "jpg", "targets": {"ext": "json", "kind": "targets"}}
    flip = [nostall.RandomHorizontalFlip(p=1.0), nostall.Resize((24, 32))]
    with pytest.raises(nostall.DataError, match=message) as e:
        list(nostall.Loader(shard, fields=fields, transforms=flip, batch_size=2))
    assert "det.tar" in str(e.value)
    skipping = nostall.Loader(shard, fields=fields, transforms=flip, batch_size=2, on_error="skip")
    batches = list(skipping)
    assert sum(len(b["targets"]) for b in batches) == 1 and skipping.stats()["skipped"] == 1
    boxes = batches[0]["targets"][0]["boxes"]
    assert bool(boxes.isfinite().all())


def test_a_coco_category_id_beyond_int64_is_refused_not_label_minus_one(tmp_path):
    ann = make_detection_scenes(tmp_path, num_images=3, seed=2, min_side=64, max_side=96)
    data = json.loads(Path(ann).read_text())
    data["annotations"][0]["category_id"] = 2 ** 64 - 1
    Path(ann).write_text(json.dumps(data))
    with pytest.raises(nostall.DataError, match=r"category_id.*0 to 2\^63 - 1"):
        nostall.Loader(nostall.datasets.Coco(tmp_path / "images", ann), batch_size=1,
                       transforms=[nostall.Resize((32, 32))])


def test_parquet_labels_outside_the_classlabel_names_are_refused(folder, tmp_path):
    src = folder_to_parquet(folder, tmp_path / "src", files=1).replace("*", "00000")
    table = pq.read_table(src)
    for bad in (7, -3):
        labels = table.column("label").to_pylist()
        labels[5] = bad
        t = table.set_column(table.schema.get_field_index("label"), "label",
                             pa.array(labels, type=pa.int64()))
        path = tmp_path / f"labels{bad}.parquet"
        pq.write_table(t, path)
        with pytest.raises(nostall.DataError, match=rf"labels{bad}\.parquet\[5\]: the label \(label\) is "
                                                    rf"{bad}, but its ClassLabel has 2 names"):
            nostall.Loader(str(path), batch_size=4)
    labels = table.column("label").to_pylist()
    labels[5] = -1  # Hugging Face's "no label"
    t = table.set_column(table.schema.get_field_index("label"), "label", pa.array(labels, type=pa.int64()))
    pq.write_table(t, tmp_path / "unlabelled.parquet")
    loader = nostall.Loader(str(tmp_path / "unlabelled.parquet"), batch_size=12,
                            transforms=[nostall.Resize((8, 8))])
    assert sorted(next(iter(loader))[1].tolist()).count(-1) == 1


# ------------------------------------------------------------ stale labels
def _replace_keeping_size_and_mtime(path, old: bytes, new: bytes):
    """Rewrites `path` with `old` replaced by `new` (as long), its size and
    mtime kept, as `cp -p` or `rsync -a` of another version would."""
    import os

    assert len(old) == len(new)
    st = os.stat(path)
    data = Path(path).read_bytes()
    assert data.count(old) == 1
    tmp = Path(str(path) + ".new")
    tmp.write_bytes(data.replace(old, new))
    os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(tmp, path)
    after = os.stat(path)
    assert (after.st_size, after.st_mtime_ns) == (st.st_size, st.st_mtime_ns)


def test_a_coco_file_replaced_with_its_size_and_mtime_kept_is_parsed_again(tmp_path):
    ann = make_detection_scenes(tmp_path, num_images=4, seed=3, min_side=64, max_side=96, empty_every=0)
    data = json.loads(Path(ann).read_text())
    data["annotations"][0]["category_id"] = 1
    Path(ann).write_text(json.dumps(data, separators=(",", ":")))

    def first_labels():
        loader = nostall.Loader(nostall.datasets.Coco(tmp_path / "images", ann), batch_size=1,
                                return_indices=True, transforms=[nostall.Resize((32, 32))])
        for _, targets, idx in loader:
            if data["images"][int(idx[0])]["id"] == data["annotations"][0]["image_id"]:
                return targets[0]["labels"].tolist()

    before = first_labels()
    assert 1 in before
    key = json.dumps(data["annotations"][0], separators=(",", ":")).encode()
    _replace_keeping_size_and_mtime(ann, key, key.replace(b'"category_id":1', b'"category_id":3'))
    after = first_labels()
    assert 3 in after and after.count(1) == before.count(1) - 1


def test_a_parquet_file_replaced_with_its_size_and_mtime_kept_is_read_again(folder, tmp_path):
    import numpy as np

    images = [p.read_bytes() for p in sorted(folder.rglob("*.jpg"))]
    path = tmp_path / "plain.parquet"
    pq.write_table(pa.table({"image": pa.array(images, type=pa.binary()),
                             "label": pa.array([0] * 6 + [1] * 6, type=pa.int64())}),
                   path, use_dictionary=False, compression="none", write_statistics=False)
    plain = (np.array([0] * 6 + [1] * 6, dtype="<i8")).tobytes()
    flipped = (np.array([1] * 6 + [0] * 6, dtype="<i8")).tobytes()

    def labels():
        loader = nostall.Loader(str(path), batch_size=12, transforms=[nostall.Resize((8, 8))])
        return next(iter(loader))[1].tolist()

    assert labels() == [0] * 6 + [1] * 6  # and the index is saved
    _replace_keeping_size_and_mtime(path, plain, flipped)
    assert labels() == [1] * 6 + [0] * 6


# ------------------------------------------------------------ record fields
def test_a_json_field_nested_too_deep_or_too_long_is_named_or_skipped_and_counted(tmp_path, jpeg_64x48):
    import io
    import tarfile

    members = {"ok1": b'{"a": 1}', "deep": b"[" * 100_000 + b"]" * 100_000,
               "digits": b"1" * 5000, "ok2": b'{"b": 2}'}
    texts = {"ok1": b"fine", "deep": b"fine", "digits": b"fine", "ok2": b"\xff\xfe not utf-8"}
    with tarfile.open(tmp_path / "rec.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
        for key, meta in members.items():
            for ext, data in (("jpg", jpeg_64x48), ("cls", b"0"), ("json", meta), ("txt", texts[key])):
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    fields = {"image": "jpg", "label": "cls", "meta": "json", "caption": "txt"}
    kw = dict(fields=fields, batch_size=4, transforms={"image": [nostall.Resize((8, 8))]})
    with pytest.raises(nostall.DataError, match=r"deep.*'meta'.*nested too deep") as e:
        list(nostall.Loader(str(tmp_path / "rec.tar"), **kw))
    assert e.value.item and "deep" in e.value.item
    skipping = nostall.Loader(str(tmp_path / "rec.tar"), on_error="skip", **kw)
    batch = next(iter(skipping))
    assert batch["meta"] == [{"a": 1}] and len(batch["label"]) == 1
    assert skipping.stats()["skipped"] == 3  # deep, 5,000 digits, invalid UTF-8


# ------------------------------------------------------------ Parquet footers that lie about rows
class _Compact:
    """Just enough of Thrift's compact protocol to find fields in a Parquet
    footer: walks a struct, noting where each (path of field ids) value lies."""

    def __init__(self, buf):
        self.buf, self.found = buf, []

    def varint(self, i):
        return _read_varint(self.buf, i)

    def value(self, t, i, path):
        start = i
        if t in (1, 2):  # bool true / false: in the header
            pass
        elif t == 3:  # byte
            i += 1
        elif t in (4, 5, 6):  # i16, i32, i64
            _, i = self.varint(i)
        elif t == 7:  # double
            i += 8
        elif t == 8:  # binary
            n, i = self.varint(i)
            i += n
        elif t in (9, 10):  # list, set
            head = self.buf[i]
            i += 1
            n, et = head >> 4, head & 0x0F
            if n == 15:
                n, i = self.varint(i)
            for k in range(n):
                i = self.value(et, i, path + (k,))
        elif t == 11:  # map
            n, i = self.varint(i)
            if n:
                kv = self.buf[i]
                i += 1
                for _ in range(n):
                    i = self.value(kv >> 4, i, path)
                    i = self.value(kv & 0x0F, i, path)
        elif t == 12:
            i = self.struct(i, path)
        self.found.append((path, t, start, i))
        return i

    def struct(self, i, path=()):
        fid = 0
        while True:
            head = self.buf[i]
            i += 1
            if head == 0:
                return i
            delta, t = head >> 4, head & 0x0F
            if delta:
                fid += delta
            else:
                fid, i = self.varint(i)
                fid = _unzz(fid)
            i = self.value(t, i, path + (fid,))


def with_rows_claimed(src, dst, rows, also_values=False):
    """`src` with its footer (and its one row group) claiming `rows` rows."""
    data = Path(src).read_bytes()
    n = int.from_bytes(data[-8:-4], "little")
    footer = data[-8 - n:-8]
    walk = _Compact(footer)
    walk.struct(0)
    targets = [(s, e) for path, t, s, e in walk.found
               if t == 6 and (path == (3,) or (len(path) == 3 and path[0] == 4 and path[2] == 3)
                              or (also_values and len(path) == 6 and path[0] == 4 and path[2] == 1
                                  and path[4] == 3 and path[5] == 5))]
    assert len(targets) >= 2
    out = bytearray(footer)
    for s, e in sorted(targets, reverse=True):
        out[s:e] = _varint(_zz(rows))
    Path(dst).write_bytes(data[:-8 - n] + bytes(out) + len(out).to_bytes(4, "little") + b"PAR1")
    return dst


@pytest.mark.parametrize("rows, also_values, message", [
    (2 ** 27, True, r"claim over 134217728 rows in \d+ bytes"),   # every count agrees: too many
    (1000, False, r"row group 0.*says 1000 rows, the column 12 values"),
])
def test_a_footer_claiming_more_rows_than_its_columns_hold_is_refused_at_open(folder, tmp_path, rows,
                                                                            also_values, message):
    import resource

    src = folder_to_parquet(folder, tmp_path / "src", files=1, layout="binary").replace("*", "00000")
    bad = with_rows_claimed(src, tmp_path / "rows.parquet", rows, also_values)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for on_error in ("raise", "skip"):
        with pytest.raises(nostall.DataError, match=r"rows\.parquet.*" + message):
            nostall.Loader(str(bad), batch_size=4, on_error=on_error)
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown < 200 * 1024, f"{grown} KiB more at its peak"  # not 1 GiB


# ------------------------------------------------------------ Parquet fields by what they are
def test_parquet_fields_are_typed_by_the_users_field_and_the_files_features(folder, tmp_path):
    files = sorted(folder.rglob("*.jpg"))
    images = pa.array([{"bytes": p.read_bytes(), "path": p.name} for p in files],
                      type=pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    coarse = pa.array([i % 2 for i in range(len(files))], type=pa.int64())
    fine = pa.array([i % 3 for i in range(len(files))], type=pa.int64())
    features = {"img": {"_type": "Image"},
                "coarse_label": {"_type": "ClassLabel", "names": ["animal", "vehicle"]},
                "fine_label": {"_type": "ClassLabel", "names": ["cat", "dog", "car"]}}
    table = pa.table({"img": images, "coarse_label": coarse, "fine_label": fine})
    table = table.replace_schema_metadata(
        {b"huggingface": json.dumps({"info": {"features": features}}).encode()})
    pq.write_table(table, tmp_path / "cifar.parquet")
    path = str(tmp_path / "cifar.parquet")
    with pytest.raises(ValueError, match=r"2 ClassLabel columns \(coarse_label, fine_label\).*fields="):
        nostall.Loader(path, batch_size=4)  # which is the label? never a silent choice
    fine_loader = nostall.Loader(path, fields={"image": "img", "label": "fine_label"}, batch_size=len(files),
                                 transforms={"image": [nostall.Resize((8, 8))]})
    assert fine_loader.classes == ["cat", "dog", "car"]
    batch = next(iter(fine_loader))
    assert batch["label"].dtype == torch_int64() and batch["label"].tolist() == fine.to_pylist()
    coarse_loader = nostall.Loader(path, fields={"image": "img", "label": "coarse_label"}, batch_size=4,
                                   transforms={"image": [nostall.Resize((8, 8))]})
    assert coarse_loader.classes == ["animal", "vehicle"]
    # An image column of another name, named by the user's field.
    pq.write_table(pa.table({"picture": pa.array([p.read_bytes() for p in files], type=pa.binary()),
                             "label": coarse}), tmp_path / "plain.parquet")
    plain = nostall.Loader(str(tmp_path / "plain.parquet"), fields={"image": "picture", "label": "label"},
                           batch_size=4, transforms={"image": [nostall.Resize((8, 8))]})
    assert next(iter(plain))["image"].shape == (4, 3, 8, 8)


def torch_int64():
    import torch

    return torch.int64
