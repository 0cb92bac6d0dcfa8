"""Samples as records: WebDataset shards of .jpg + .cls + .json + .txt (one
sample without its .json) through the Loader, the MinIO cache, resume, a
served pipeline's consumers and Python hooks (a real tokenizer on the .txt).

Every sample's .json names its own key and label, and its .txt is its
caption, so each field is checked against the sample it came with."""

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import nostall
from nostall.datasets import natural_image

NOSTALL = Path(sys.executable).parent / "nostall"
MISSING = "s1/0007"  # the sample without a .json
N = 40
FIELDS = {"image": "jpg", "label": "cls", "meta": {"ext": "json", "optional": True},
          "caption": "txt"}
WORDS = ["red", "green", "blue", "small", "large", "cat", "dog", "car", "tree", "house"]


def caption(k):
    return " ".join(WORDS[(k * 7 + j * 3) % len(WORDS)] for j in range(2 + k % 5)) + f" no{k}"


def write_record_shards(root, shards=2, per_shard=N // 2, missing=MISSING):
    rng = np.random.default_rng(4)
    root.mkdir(parents=True, exist_ok=True)
    for s in range(shards):
        with tarfile.open(root / f"rec-{s}.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
            for i in range(per_shard):
                key, k = f"s{s}/{i:04d}", s * per_shard + i
                w, h = (int(v) for v in rng.integers(60, 140, 2))
                buf = io.BytesIO()
                Image.fromarray(natural_image(rng, w, h)).save(buf, "JPEG", quality=90)
                members = [(".jpg", buf.getvalue()), (".cls", str(k % 5).encode())]
                if key != missing:
                    meta = {"key": key, "label": k % 5, "size": [h, w]}
                    members.append((".json", json.dumps(meta).encode()))
                members.append((".txt", caption(k).encode()))
                for ext, data in members:
                    info = tarfile.TarInfo(key + ext)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    return str(root / ("rec-{0..%d}.tar" % (shards - 1)))


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return write_record_shards(tmp_path_factory.mktemp("records"))


def sample_key(loader, index):
    return loader.key(index).split(".tar:")[1].rsplit(".", 1)[0]


def check_fields(loader, batch):
    """Each sample's fields are its own: the .json names the key and label,
    the .txt is the caption of that sample."""
    n = len(batch["label"])
    assert batch["image"].shape[0] == n and len(batch["meta"]) == n and len(batch["caption"]) == n
    for pos in range(n):
        key = sample_key(loader, int(batch["__index__"][pos]))
        s, i = key.split("/")
        k = int(s[1:]) * (N // 2) + int(i)
        assert batch["caption"][pos] == caption(k)
        assert int(batch["label"][pos]) == k % 5
        if key == MISSING:
            assert batch["meta"][pos] is None
        else:
            assert batch["meta"][pos]["key"] == key and batch["meta"][pos]["label"] == k % 5


def snapshot(batches):
    """Batches as plain values: image bytes, labels, every field."""
    return [{k: (v.numpy().tobytes() if hasattr(v, "numpy") else v) for k, v in b.items()}
            for b in batches]


def run_epoch(loader, epoch=0):
    loader.set_epoch(epoch)
    out = []
    for b in loader:
        check_fields(loader, b)
        out.append({k: (v.clone() if hasattr(v, "clone") else v) for k, v in b.items()})
    return out


def make(shards, **kw):
    args = dict(fields=FIELDS, batch_size=8, shuffle=True, seed=3, return_indices=True,
                transforms={"image": [nostall.RandomResizedCrop(48), nostall.RandomHorizontalFlip()]})
    args.update(kw)
    return nostall.Loader(shards, **args)


def test_every_field_comes_with_its_own_sample(shards):
    with make(shards) as loader:
        batches = run_epoch(loader)
        assert sum(len(b["label"]) for b in batches) == N
        assert batches[0]["image"].shape[1:] == (3, 48, 48)
        st = loader.stats()
        # bytes per field, as prepared into batches (the pipeline may have
        # begun the next epoch): each prepared sample put its caption in
        sizes = [len(caption(k).encode()) for k in range(N)]
        prepared, got = st["stages"]["prep"]["items"], st["fields"]["caption"]["bytes"]
        assert prepared >= N and sum(sizes) <= got
        assert min(sizes) * prepared <= got <= max(sizes) * prepared
        assert st["fields"]["meta"]["bytes"] > 0


def test_the_image_pixels_are_those_of_the_plain_loader(shards):
    """Asking for more fields changes no pixel and no label."""
    kw = dict(batch_size=8, shuffle=True, seed=3, return_indices=True,
              transforms=[nostall.RandomResizedCrop(48), nostall.RandomHorizontalFlip()])
    with nostall.Loader(shards, **kw) as plain:
        expected = [(i.clone(), l.clone(), x.clone()) for i, l, x in plain]
    with make(shards) as records:
        got = run_epoch(records)
    assert len(got) == len(expected)
    for (images, labels, indices), b in zip(expected, got):
        assert bytes(images.numpy()) == bytes(b["image"].numpy())
        assert labels.tolist() == b["label"].tolist()
        assert indices.tolist() == b["__index__"].tolist()


def test_a_missing_member_is_an_error_naming_the_sample_and_field_or_skipped(shards):
    strict = dict(FIELDS, meta="json")
    with pytest.raises(nostall.DataError) as e:
        nostall.Loader(shards, fields=strict, batch_size=8)
    assert MISSING in str(e.value) and "'meta'" in str(e.value) and ".json" in str(e.value)
    with make(shards, fields=strict, on_error="skip") as loader:
        batches = list(loader)
        assert sum(len(b["label"]) for b in batches) == N - 1
        assert loader.stats()["skipped"] == 1
        assert all(m is not None for b in batches for m in b["meta"])


def test_batches_are_byte_identical_across_runs_and_thread_counts(shards):
    runs = []
    for threads, reads in ((1, 1), (2, 3), (2, 1)):
        with make(shards, num_threads=threads, reads_in_flight=reads) as loader:
            runs.append(snapshot(run_epoch(loader, epoch=1)))
    assert runs[0] == runs[1] == runs[2]


def test_the_cache_holds_whole_records(shards, request):
    name = f"test-records-{os.getpid()}"
    try:
        def by_index(batches):
            return {int(i): (b["caption"][p], b["meta"][p], int(b["label"][p]))
                    for b in batches for p, i in enumerate(b["__index__"])}

        with make(shards, cache=nostall.Cache(name, "16MB")) as loader:
            first = by_index(run_epoch(loader, epoch=0))
            second = by_index(run_epoch(loader, epoch=1))  # every record from the cache
            cache = loader.stats()["cache"]
        assert first == second and len(first) == N
        # (The second epoch's entry by its number: the pipeline may already
        # be into the next epoch when the stats are read.)
        second_epoch = next(e for e in cache["epochs"] if e["epoch"] == 1)
        assert second_epoch["hits"] == N and second_epoch["misses"] == 0
        # A loader of the plain images cannot take those records for images:
        # its items are other bytes, a dataset of another fingerprint.
        with pytest.raises(nostall.NostallError, match="holds another dataset"):
            nostall.Loader(shards, batch_size=8, cache=nostall.Cache(name, "16MB"),
                           transforms=[nostall.Resize((32, 32))])
    finally:
        nostall.Cache(name, 1).remove()


def test_resume_mid_epoch_gives_the_same_fields(shards):
    with make(shards) as loader:
        reference = snapshot(run_epoch(loader, epoch=2))
    with make(shards) as loader:
        loader.set_epoch(2)
        it = iter(loader)
        head = [next(it), next(it)]
        state = loader.state_dict()
    with make(shards) as loader:
        loader.load_state_dict(state)
        rest = list(loader)
    assert snapshot(head + rest) == reference


def test_a_served_pipeline_gives_consumers_every_field(shards):
    spec = make(shards).spec
    name = f"test-records-{os.getpid()}"
    with nostall.serve(spec, name):
        with nostall.Loader.attach(name, batch_size=4, output="numpy", return_indices=True) as c:
            seen = handed = 0
            for b in c:
                assert set(b) == {"image", "label", "meta", "caption", "__index__"}
                check_fields(c, b)
                seen += len(b["label"])
                handed += sum(len(text.encode()) for text in b["caption"])
                if seen >= N:
                    break
            assert seen >= N
            # bytes per field, as this consumer was handed them
            assert c.stats()["fields"]["caption"]["bytes"] == handed


def test_serving_a_loader_with_python_hooks_is_refused_and_consumers_run_them(shards):
    def shout(text):
        return text.upper()

    def add_count(batch):
        batch["count"] = len(batch["label"])
        return batch

    hooked = make(shards, transforms={"image": [nostall.RandomResizedCrop(48)], "caption": shout},
                  batch_transform=add_count)
    name = f"test-records-hooks-{os.getpid()}"
    with pytest.raises(ValueError, match=r"transforms\['caption'\]: shout; batch_transform: "
                                         r"add_count.*Loader.attach\(name, batch_size, transforms="):
        nostall.serve(hooked, name)
    hooked.close()
    with nostall.serve(make(shards).spec, name):
        with nostall.Loader.attach(name, batch_size=4, output="numpy", return_indices=True,
                                   transforms={"caption": shout}, batch_transform=add_count) as c:
            b = next(iter(c))
            assert b["count"] == len(b["label"]) == 4
            assert all(text == text.upper() and text.strip() for text in b["caption"])
        with pytest.raises(TypeError, match="the producer runs them"):
            nostall.Loader.attach(name, batch_size=4, transforms=[nostall.Resize((8, 8))])


def test_a_real_tokenizer_runs_on_the_text_field(shards):
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator([caption(k) for k in range(N)],
                            trainers.WordPieceTrainer(vocab_size=100, special_tokens=["[UNK]"]))
    assert tokenizers.__version__

    def ids(text):
        return tok.encode(text).ids

    with make(shards, transforms={"image": [nostall.Resize((32, 32))], "caption": ids}) as loader:
        for b in loader:
            for pos, got in enumerate(b["caption"]):
                key = sample_key(loader, int(b["__index__"][pos]))
                s, i = key.split("/")
                assert got == ids(caption(int(s[1:]) * (N // 2) + int(i)))
                assert got and tok.id_to_token(got[0]) in WORDS
        hooks = loader.stats()["stages"]["hooks"]
        assert hooks["items"] == N and hooks["work_s"] > 0


def test_image_hooks_batch_hooks_and_hook_errors(shards):
    def flip_rows(img):  # a Python op on each sample, after nostall's own
        return img.flip(-2)

    def add_count(batch):
        batch["count"] = len(batch["label"])
        return batch

    kw = dict(transforms={"image": [nostall.Resize((32, 32)), flip_rows]},
              batch_transform=add_count, shuffle=False)
    with make(shards, transforms={"image": [nostall.Resize((32, 32))]}, shuffle=False) as plain:
        expected = [b["image"].clone() for b in plain]
    with make(shards, **kw) as hooked:
        got = list(hooked)
    assert [b["count"] for b in got] == [len(e) for e in expected]
    for e, b in zip(expected, got):
        assert bytes(e.flip(-2).contiguous().numpy()) == bytes(b["image"].contiguous().numpy())

    def bad(text):
        if text == caption(3):
            raise ValueError("no such word")
        return text

    with make(shards, transforms={"image": [nostall.Resize((32, 32))], "caption": bad},
              shuffle=False) as loader:
        with pytest.raises(nostall.DataError) as e:
            list(loader)
    assert "s0/0003" in str(e.value) and "'caption'" in str(e.value) and "no such word" in str(e.value)
    with make(shards, transforms={"image": [nostall.Resize((32, 32))], "caption": bad},
              shuffle=False, on_error="skip") as loader:
        assert sum(len(b["label"]) for b in loader) == N - 1


def test_hooks_on_the_plain_loader_keep_its_tuples(shards):
    with nostall.Loader(shards, batch_size=8, transforms=[nostall.Resize((16, 16)),
                                                          lambda img: img * 0]) as loader:
        images, labels = next(iter(loader))
        assert images.shape == (8, 3, 16, 16) and int(images.sum()) == 0


def test_bad_fields_arguments_are_clear_errors(shards, jpeg_folder):
    with pytest.raises(ValueError, match="exactly one image or audio field"):
        nostall.Loader(shards, fields={"meta": "json"})
    with pytest.raises(ValueError, match="optional"):
        nostall.Loader(shards, fields={"image": "jpg", "m": {"ext": "json", "optinal": True}})
    with pytest.raises(ValueError, match="no such field"):
        nostall.Loader(shards, fields={"image": "jpg"}, transforms={"caption": str.upper})
    with pytest.raises(ValueError, match="name the fields"):
        nostall.Loader(shards, transforms={"image": [nostall.Resize(8)]})
    with pytest.raises(nostall.DataError, match=r"field 'meta': no \.json file beside the image"):
        nostall.Loader(str(jpeg_folder), fields={"image": "jpg", "meta": "json"})
    with pytest.raises(nostall.DataError, match="max_field_bytes=4"):
        nostall.Loader(shards, fields=FIELDS, max_field_bytes=4)


def test_inspect_shows_the_members_samples_hold(shards):
    out = subprocess.run([str(NOSTALL), "inspect", shards], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    line = next(l for l in out.stdout.splitlines() if l.startswith("fields:"))
    assert f".jpg in {N}" in line and f".json in {N - 1}" in line and f".txt in {N}" in line


def test_analyze_runs_a_step_that_takes_the_records_dict(shards):
    seen = []

    def step(batch):  # a records loader's step takes the dict
        assert set(batch) >= {"image", "label", "meta", "caption"}
        seen.append(len(batch["caption"]))

    spec = make(shards, return_indices=False).spec
    result = nostall.analyze(spec, step, step_seconds=0.2, progress=False)
    assert seen and max(seen) == 8
    assert result.profile["step_rate"] > 0 and result.bottleneck in ("compute", "prep", "fetch")


def test_a_bytes_field_can_batch_as_a_padded_tensor_and_lengths(shards):
    fields = dict(FIELDS, caption={"ext": "txt", "kind": "bytes", "batch": "padded"})
    with make(shards, fields=fields) as loader:
        total = 0
        for b in loader:
            values, lengths = b["caption"]
            assert values.dtype == torch_uint8() and values.shape[0] == len(b["label"])
            assert values.shape[1] == int(lengths.max())
            for pos in range(len(lengths)):
                key = sample_key(loader, int(b["__index__"][pos]))
                s, i = key.split("/")
                text = caption(int(s[1:]) * (N // 2) + int(i)).encode()
                n = int(lengths[pos])
                assert bytes(values[pos, :n].numpy()) == text
                assert not values[pos, n:].any()  # zeros after it
            total += len(lengths)
        assert total == N
        assert loader.spec["fields"][3]["batch"] == "padded"
    with pytest.raises(ValueError, match='batch="padded" is for bytes and targets fields'):
        nostall.Loader(shards, fields=dict(FIELDS, meta={"ext": "json", "batch": "padded"}))


def torch_uint8():
    import torch

    return torch.uint8


def test_an_image_folders_fields_are_the_files_beside_each_image(tmp_path, jpeg_folder):
    """img.jpg + img.json + img.txt in class folders: the same dict as from
    shards; the pixels those of the plain loader; whole records cached."""
    import shutil

    root = tmp_path / "folder"
    shutil.copytree(jpeg_folder, root)
    images = sorted(root.rglob("*.jpg"))
    for k, path in enumerate(images):
        if k != 3:  # one image without its .json
            path.with_suffix(".json").write_text(json.dumps({"key": path.stem, "k": k}))
        path.with_suffix(".txt").write_text(caption(k))
    fields = {"image": "jpg", "label": "cls", "meta": {"ext": "json", "optional": True},
              "caption": "txt"}
    kw = dict(batch_size=8, transforms=[nostall.Resize((32, 32))], return_indices=True)
    loader = nostall.Loader(str(root), fields=fields, **kw)
    plain = nostall.Loader(str(jpeg_folder), **kw)
    seen = 0
    for batch, (images_plain, labels_plain, indices_plain) in zip(loader, plain):
        assert torch_equal(batch["image"], images_plain)
        assert torch_equal(batch["label"], labels_plain)
        for p, i in enumerate(batch["__index__"]):
            key = loader.key(int(i))
            k = images.index(Path(key))
            assert batch["caption"][p] == caption(k)
            assert batch["meta"][p] == (None if k == 3 else {"key": Path(key).stem, "k": k})
            seen += 1
    assert seen == len(images)
    # The .json and .txt files are read, not "left out"; inspect counts them.
    out = subprocess.run([str(NOSTALL), "inspect", str(root)], capture_output=True, text=True,
                         timeout=60)
    line = next(l for l in out.stdout.splitlines() if l.startswith("fields:"))
    assert f".jpg in {len(images)}" in line and f".json in {len(images) - 1}" in line, line
    # Cached as whole records: the second epoch all hits, the same fields.
    name = f"test-folder-records-{os.getpid()}"
    try:
        with nostall.Loader(str(root), fields=fields, cache=nostall.Cache(name, "16MB"),
                            **kw) as cached:
            first = snapshot(list(cached))
            second = snapshot(list(cached))
            assert cached.stats()["cache"]["epochs"][-1]["misses"] == 0
        assert first == second
        # The plain folder's loader cannot take those records for images.
        with pytest.raises(nostall.NostallError, match="holds another dataset"):
            nostall.Loader(str(root), batch_size=8, cache=nostall.Cache(name, "16MB"))
    finally:
        nostall.Cache(name, 1).remove()


def torch_equal(a, b):
    import torch

    return torch.equal(a, b)


def test_the_output_size_is_probed_on_the_records_image(tmp_path):
    """Without a transform that fixes the size, the first item's image sets
    it: found inside the record, wherever the image lies in it (after the
    files beside it in a folder, after a .json member in a shard)."""
    pixels = [np.full((12, 20, 3), 40 * k, np.uint8) for k in range(4)]
    folder = tmp_path / "folder" / "c"
    folder.mkdir(parents=True)
    tar_path = tmp_path / "json-first.tar"
    with tarfile.open(tar_path, "w") as tar:
        for k, px in enumerate(pixels):
            buf = io.BytesIO()
            Image.fromarray(px).save(buf, format="PNG")
            (folder / f"{k}.png").write_bytes(buf.getvalue())
            (folder / f"{k}.json").write_text(json.dumps({"k": k}))
            for name, data in ((f"s/{k}.json", json.dumps({"k": k}).encode()),
                               (f"s/{k}.png", buf.getvalue()), (f"s/{k}.cls", b"0")):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    for source in (str(folder.parent), str(tar_path)):
        loader = nostall.Loader(source, fields={"image": "png", "meta": "json"}, batch_size=4,
                                layout="NHWC")
        batch = next(iter(loader))
        assert tuple(batch["image"].shape) == (4, 12, 20, 3), source
        for p in range(4):
            k = batch["meta"][p]["k"]
            assert np.array_equal(batch["image"][p].numpy(), pixels[k]), (source, k)


def test_the_loader_and_a_hand_written_spec_give_a_field_the_same_kind(shards):
    """A field's kind is inferred in one place: Loader(fields=...) states
    what a spec without kinds gets (from the extensions, then the name), and
    a bad kind is an error naming the field."""
    fields = {**FIELDS, "raw": {"ext": "bin", "optional": True}}
    loader = nostall.Loader(shards, fields=fields, batch_size=4)
    by_hand = nostall.Loader.from_spec({"source": shards, "batch_size": 4, "fields": fields})
    kinds = {f["name"]: f["kind"] for f in loader.spec["fields"]}
    assert kinds == {f["name"]: f["kind"] for f in by_hand.spec["fields"]}
    assert kinds == {"image": "image", "label": "label", "meta": "json", "caption": "text", "raw": "bytes"}
    with pytest.raises(ValueError, match="'raw': a field's kind must be one of image, audio"):
        nostall.Loader(shards, fields={"image": "jpg", "raw": {"ext": "bin", "kind": "blob"}})
    loader.close()
    by_hand.close()


def test_a_spec_giving_fields_as_an_object_batches_them_as_the_list_does(shards):
    """docs/spec.md: fields may be an object {"NAME": "ext"}; the loader built
    from such a spec gives the same dict batches as the list form."""
    base = {"source": shards, "batch_size": 4, "seed": 3,
            "transforms": [{"type": "Resize", "size": [16, 16]}]}
    obj = nostall.Loader.from_spec(
        {**base, "fields": {"image": "jpg", "label": "cls", "meta": {"ext": "json", "optional": True}}})
    lst = nostall.Loader.from_spec(
        {**base, "fields": [{"name": "image", "ext": ["jpg"]}, {"name": "label", "ext": ["cls"]},
                            {"name": "meta", "ext": ["json"], "optional": True}]})
    a, b = next(iter(obj)), next(iter(lst))
    assert set(a) == set(b) == {"image", "label", "meta"}
    assert (a["image"] == b["image"]).all() and a["meta"] == b["meta"]
    obj.close()
    lst.close()
