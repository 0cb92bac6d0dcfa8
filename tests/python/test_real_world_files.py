"""Files real datasets hold, and hostile ones: decoded right, or a clear error
naming the item or field; never a hang, a crash or a silent wrong answer."""

import io
import os
import tarfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import nostall
import warm
from nostall.datasets import natural_image

DATA = Path(__file__).parent / "data"


def decoded(path, size=None, mode="RGB"):
    """nostall's uint8 HWC pixels of the one image in a one-class folder."""
    loader = nostall.Loader(path, batch_size=1, layout="NHWC", mode=mode, output="numpy",
                            transforms=[nostall.Resize(size)] if size else [])
    (images, _), = list(loader)
    return images[0].squeeze()


def one_image_folder(tmp_path, data, name="x.jpg"):
    d = tmp_path / "folder" / "c"
    d.mkdir(parents=True)
    (d / name).write_bytes(data)
    return tmp_path / "folder"


@pytest.mark.parametrize("source", ["pil-cmyk", "libjpeg-cmyk", "ycck"])
@pytest.mark.parametrize("mode", ["RGB", "L"])
def test_cmyk_and_ycck_jpegs_decode_as_pil_converts_them(tmp_path, source, mode):
    if source == "pil-cmyk":
        rng = np.random.default_rng(0)
        rgb = Image.fromarray(natural_image(rng, 97, 61))
        buf = io.BytesIO()
        rgb.convert("CMYK").save(buf, "JPEG", quality=95)  # Adobe marker, inverted ink
        data = buf.getvalue()
    else:
        data = (DATA / ("ycck.jpg" if source == "ycck" else "cmyk-libjpeg.jpg")).read_bytes()
    want_img = Image.open(io.BytesIO(data))
    assert want_img.mode == "CMYK"
    want = np.asarray(want_img.convert("RGB").convert(mode))
    got = decoded(one_image_folder(tmp_path, data), mode=mode)
    assert got.shape == want.shape
    # Same libjpeg decode, same conversion: exact (a unit of rounding at most).
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 1


def test_imagenet_like_folder_with_cmyk_and_a_png_named_jpeg_trains_with_raise(tmp_path):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    root = tmp_path / "train"
    for c in range(3):
        d = root / f"n0{c}"
        d.mkdir(parents=True)
        for i in range(8):
            Image.fromarray(natural_image(rng, 160, 120)).save(d / f"{i}.JPEG", quality=85)
    # As in ImageNet's training set: CMYK JPEGs, and a PNG with a .JPEG name.
    Image.fromarray(natural_image(rng, 150, 100)).convert("CMYK").save(root / "n00" / "cmyk.JPEG", "JPEG")
    (root / "n01" / "ycck.JPEG").write_bytes((DATA / "ycck.jpg").read_bytes())
    Image.fromarray(natural_image(rng, 130, 90)).save(root / "n02" / "png.JPEG", "PNG")
    loader = nostall.Loader(root, batch_size=9, shuffle=True, on_error="raise",
                            transforms=[nostall.RandomResizedCrop(32), nostall.RandomHorizontalFlip(),
                                        nostall.Normalize(nostall.IMAGENET_MEAN, nostall.IMAGENET_STD)])
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(1),
                                torch.nn.Flatten(), torch.nn.Linear(4, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = 0
    for epoch in range(2):
        loader.set_epoch(epoch)
        for images, labels in loader:
            loss = torch.nn.functional.cross_entropy(model(images), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            seen += len(labels)
    assert seen == 2 * 27
    assert loader.stats()["errors"] == 0


def test_fifo_in_an_image_folder_is_an_item_error_or_skipped(tmp_path, fresh_folder):
    fifo = fresh_folder / "class_0" / "zz.jpg"
    os.mkfifo(fifo)
    code = f"""
import nostall
loader = nostall.Loader({str(fresh_folder)!r}, batch_size=4, on_error="skip",
                        transforms=[nostall.Resize((16, 16))])
n = sum(len(l) for _, l in loader)
print("skipped", loader.stats()["skipped"], "seen", n)
loader = nostall.Loader({str(fresh_folder)!r}, batch_size=4, transforms=[nostall.Resize((16, 16))])
try:
    for _ in loader: pass
except nostall.DataError as e:
    print("error", e.item, e.stage, str(e))
"""
    # In a child process with a timeout: a hang fails the test instead of the suite.
    out = warm.run(code=code, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "skipped 1 seen 10" in out.stdout
    assert f"error {fifo} fetch" in out.stdout and "FIFO" in out.stdout


def test_fifo_named_as_a_tar_shard_is_an_error_not_a_hang(tmp_path):
    fifo = tmp_path / "x.tar"
    os.mkfifo(fifo)
    code = f"import nostall\ntry:\n  nostall.Loader({str(fifo)!r}, batch_size=2)\nexcept Exception as e:\n  print(type(e).__name__, e)"
    out = warm.run(code=code, timeout=60)
    assert "DataError" in out.stdout and "FIFO" in out.stdout, out


def _shard(path, label_bytes):
    jpg = io.BytesIO()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(jpg, "JPEG")
    with tarfile.open(path, "w") as t:
        for name, data in (("s.jpg", jpg.getvalue()), ("s.cls", label_bytes)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))


@pytest.mark.parametrize("label", [b"\xff\xfe1", b"99999999999999999999"])
def test_bad_cls_labels_are_data_errors_naming_the_sample(tmp_path, label):
    shard = tmp_path / "a.tar"
    _shard(shard, label)
    with pytest.raises(nostall.DataError) as e:
        nostall.Loader(str(shard), batch_size=1)
    assert e.value.item == f"{shard}:s"
    assert e.value.stage == "index"
    assert "bad .cls label" in str(e.value)


def test_symlink_loop_in_an_image_folder_counts_each_file_once(fresh_folder):
    os.symlink("..", fresh_folder / "class_0" / "loop")
    loader = nostall.Loader(fresh_folder, batch_size=4, transforms=[nostall.Resize((8, 8))])
    labels = sorted(int(l) for _, ls in loader for l in ls)
    assert labels == [0] * 5 + [1] * 5


@pytest.mark.parametrize("field,value,words", [
    ("batch_size", "abc", "batch_size must be an integer"),
    ("batch_size", 2.5, "batch_size must be an integer"),
    ("transforms", 5, "transforms must be a list"),
    ("reads_in_flight", 100000, "reads_in_flight must be in [0, 1024]"),
    ("num_threads", -1, "num_threads must be in [0, 256]"),
    ("shuffle", "yes", "shuffle must be true or false"),
    ("layout", 3, "layout must be one of NCHW, NHWC"),
])
def test_spec_mistakes_name_the_field(fresh_folder, field, value, words):
    spec = {"source": str(fresh_folder), "batch_size": 4, field: value}
    with pytest.raises(ValueError) as e:
        nostall.Loader.from_spec(spec)
    assert words in str(e.value)


@pytest.mark.parametrize("transform,words", [
    ({"type": "RandomResizedCrop", "size": 224, "sizes": 3},
     "transforms[0] (RandomResizedCrop): unknown argument 'sizes'"),
    ({"type": "RandomResizedCrop", "size": 224, "antialias": False},
     "transforms[0] (RandomResizedCrop): antialias=False is not supported"),
    ({"type": "Resize", "size": "big"}, "transforms[0] (Resize): size must be"),
    ({"type": "Normalize", "mean": [0.5], "std": "x"}, "std must be a list of numbers"),
    ("CenterCrop", "transforms[0] must be an object"),
])
def test_transform_mistakes_name_the_transform_and_field(fresh_folder, transform, words):
    spec = {"source": str(fresh_folder), "batch_size": 4, "transforms": [transform]}
    with pytest.raises(ValueError) as e:
        nostall.Loader.from_spec(spec)
    assert words in str(e.value)


@pytest.mark.parametrize("kwargs,words", [
    ({"batch_size": 2.5}, "batch_size must be an integer"),
    ({"batch_size": 0}, "batch_size must be in [1, 1048576]"),
    ({"on_error": "ignore"}, "on_error must be one of raise, skip"),
    ({"shuffle": "no"}, "shuffle must be true or false"),
    ({"reads_in_flight": 2.5}, "reads_in_flight must be an integer"),
    ({"num_threads": "2"}, "num_threads must be an integer"),
    ({"reads_in_flight": 100000}, "reads_in_flight must be in [0, 1024]"),
])
def test_loader_arguments_are_never_truncated(fresh_folder, kwargs, words):
    with pytest.raises((TypeError, ValueError)) as e:
        nostall.Loader(fresh_folder, **kwargs)
    assert words in str(e.value)


def test_a_file_name_that_is_not_utf8_is_reported_and_read(tmp_path):
    d = tmp_path / "data" / "c"
    d.mkdir(parents=True)
    name = os.fsdecode(b"bad-\xff.jpg")
    Image.fromarray(np.zeros((20, 20, 3), np.uint8)).save(d / name, "JPEG")
    (d / os.fsdecode(b"worse-\xfe.jpg")).write_bytes(b"not a jpeg")
    loader = nostall.Loader(tmp_path / "data", batch_size=2, transforms=[nostall.Resize((8, 8))])
    with pytest.raises(nostall.DataError) as e:
        list(loader)
    assert e.value.item == str(d / os.fsdecode(b"worse-\xfe.jpg"))  # opens the same file
    assert os.path.exists(e.value.item)
    # The good one is read, and its key names it as os.listdir does.
    skipping = nostall.Loader(tmp_path / "data", batch_size=2, on_error="skip", output="numpy",
                              transforms=[nostall.Resize((8, 8))], return_indices=True)
    (images, labels, indices), = list(skipping)
    assert len(labels) == 1 and skipping.stats()["skipped"] == 1
    assert skipping.key(int(indices[0])) == str(d / name)
    assert skipping.classes == ["c"]
