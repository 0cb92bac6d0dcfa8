"""Every format torchvision's ImageFolder takes, decoded as PIL decodes it,
and PNGs whose alpha or 16-bit samples must not borrow from anything else."""
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import nostall
from nostall.datasets import natural_image

W, H = 40, 30
NOSTALL = shutil.which("nostall", path=str(Path(sys.executable).parent)) or shutil.which("nostall")


def pil_rgb(path):
    with Image.open(path) as im:
        return np.array(im.convert("RGB"))


def pil_l(path):
    with Image.open(path) as im:
        return np.array(im.convert("L"))


@pytest.fixture(scope="module")
def formats(tmp_path_factory):
    """One file per ImageFolder extension (some twice), plus files that are not images."""
    root = tmp_path_factory.mktemp("formats")
    d = root / "c"
    d.mkdir()
    rng = np.random.default_rng(3)
    rgb = Image.fromarray(natural_image(rng, W, H))
    gray = rgb.convert("L")
    rgb.save(d / "a.jpg", quality=92)
    rgb.save(d / "b.png")
    rgb.save(d / "c.webp", quality=80)                 # lossy
    rgb.save(d / "c_lossless.webp", lossless=True)
    rgba = rgb.copy()
    rgba.putalpha(Image.fromarray((np.arange(W * H) % 256).reshape(H, W).astype(np.uint8)))
    rgba.save(d / "c_alpha.webp", quality=85)
    rgb.save(d / "d.tiff")                              # uncompressed
    rgb.save(d / "d_lzw.tif", compression="tiff_lzw")
    gray.save(d / "d_gray.tif", compression="tiff_deflate")
    rgb.convert("P", palette=Image.ADAPTIVE).save(d / "d_palette.tif")
    rgb.save(d / "e.bmp")
    rgb.convert("P", palette=Image.ADAPTIVE).save(d / "e_palette.bmp")
    rgb.save(d / "f.ppm")
    gray.save(d / "g.pgm")
    rgb.save(d / "UPPER.WEBP", quality=80)
    (d / "notes.txt").write_text("not an image")
    rgb.save(d / "h.gif")
    (d / "README").write_text("no extension")
    return root


def load(folder, mode="RGB"):
    loader = nostall.Loader(folder, batch_size=32, mode=mode, layout="NHWC", output="numpy",
                            return_indices=True, dct_scaling=False)
    images, _, indices = next(iter(loader))
    return loader, {loader.key(int(i)): img for img, i in zip(images, indices)}


def test_every_imagefolder_format_is_read_with_pils_pixels(formats):
    with pytest.warns(UserWarning, match=r"3 files left out, not images nostall reads: "
                                         r"1 without extension, 1 \.gif, 1 \.txt"):
        loader, got = load(formats)
    names = sorted(p.split("/")[-1] for p in got)
    assert names == sorted(p.name for p in (formats / "c").iterdir()
                           if p.suffix.lower() in (".jpg", ".png", ".webp", ".tif", ".tiff", ".bmp",
                                                   ".ppm", ".pgm"))
    assert len(names) == 14
    for key, img in got.items():
        want = pil_rgb(key)
        assert img.shape == want.shape, key
        if key.endswith(".jpg"):
            assert np.abs(img.astype(int) - want).max() <= 1, key  # PIL's libjpeg build: islow IDCT
        else:
            np.testing.assert_array_equal(img, want, err_msg=key)  # lossless, and WebP (libwebp both)


def test_webp_and_png_crops_decode_only_their_region_with_the_whole_images_pixels(tmp_path):
    """RandomResizedCrop on WebP decodes only the crop's pixels (libwebp's
    cropping, from an even corner), on PNG only the rows down to the crop's
    bottom: the batches are those of the same pixels decoded whole, here BMP
    files of PIL's decode of each file."""
    rng = np.random.default_rng(5)
    webp, png, bmp = tmp_path / "webp" / "c", tmp_path / "png" / "c", tmp_path / "bmp" / "c"
    for d in (webp, png, bmp):
        d.mkdir(parents=True)
    for i, (w, h) in enumerate([(201, 157), (320, 240), (97, 311), (256, 256)]):
        img = Image.fromarray(natural_image(rng, w, h))
        img.save(webp / f"{i}a.webp", quality=80)         # lossy (complex loop filter)
        img.save(webp / f"{i}b.webp", lossless=True)      # VP8L
        rgba = img.copy()
        rgba.putalpha(128)
        rgba.save(webp / f"{i}c.webp", quality=90)        # alpha, dropped
    for f in webp.iterdir():
        pixels = Image.fromarray(pil_rgb(f))
        pixels.save(png / (f.stem + ".png"))
        pixels.save(bmp / (f.stem + ".bmp"))
    for mode, ts in (("RGB", [nostall.RandomResizedCrop(48), nostall.RandomHorizontalFlip()]),
                     ("L", [nostall.RandomResizedCrop((40, 56), scale=(0.02, 0.3))]),
                     ("RGB", [nostall.Resize(64), nostall.CenterCrop(48)])):
        for epoch in range(8):
            got = []
            for root in (tmp_path / "webp", tmp_path / "png", tmp_path / "bmp"):
                loader = nostall.Loader(root, batch_size=12, transforms=ts, mode=mode, output="numpy", seed=epoch)
                loader.set_epoch(epoch)
                got.append(np.concatenate([b[0] for b in loader]))
            np.testing.assert_array_equal(got[0], got[2])  # WebP decoded in part
            np.testing.assert_array_equal(got[1], got[2])  # PNG decoded in part


def test_a_png_cut_short_is_an_error_whatever_rows_a_crop_needs(tmp_path):
    """A PNG sample decodes only the rows down to its crop's bottom; a file
    cut short below them is still a DataError naming it (as a whole decode
    makes it), not a sample of the rows that happen to be there."""
    d = tmp_path / "cut" / "c"
    d.mkdir(parents=True)
    img = Image.fromarray(natural_image(np.random.default_rng(2), 320, 240))
    img.save(d / "0.png")
    data = (d / "0.png").read_bytes()
    (d / "0.png").write_bytes(data[: len(data) * 9 // 10])
    for epoch in range(4):
        loader = nostall.Loader(tmp_path / "cut", batch_size=1, seed=epoch,
                                transforms=[nostall.RandomResizedCrop(32, scale=(0.02, 0.05))])
        with pytest.raises(nostall.DataError, match="0.png"):
            list(loader)


def test_every_format_in_gray_is_pils_convert_l(formats):
    with pytest.warns(UserWarning):
        _, got = load(formats, mode="L")
    for key, img in got.items():
        if key.endswith(".jpg"):
            continue  # the decoder's own luma (docs/transforms.md)
        np.testing.assert_array_equal(img[..., 0], pil_l(key), err_msg=key)


def test_inspect_counts_the_files_it_leaves_out(formats):
    out = subprocess.run([NOSTALL, "inspect", str(formats)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "items:       14" in out.stdout
    assert "left out:    3 files left out, not images nostall reads" in out.stdout


def test_the_progress_line_says_what_was_left_out(formats, capsys):
    with pytest.warns(UserWarning):
        loader = nostall.Loader(formats, batch_size=32, progress="epoch")
    assert "dataset: 3 files left out" in capsys.readouterr().err
    assert loader.num_items == 14


# ---------------------------------------------------------------- PNG


def png_bytes(width, height, color_type, depth, rows, extra=b""):
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    raw = b"".join(b"\0" + r for r in rows)
    ihdr = struct.pack(">IIBBBBB", width, height, depth, color_type, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + extra + chunk(b"IDAT", zlib.compress(raw))
            + chunk(b"IEND", b""))


def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


# Every test PNG is 4x2 (one batch holds them all).
PNGS = {
    # a fully transparent green RGBA: PIL's convert("RGB") keeps the green
    "rgba_transparent": png_bytes(4, 2, 6, 8, [bytes([0, 255, 0, 0] * 4)] * 2),
    "rgba_half": png_bytes(4, 2, 6, 8, [bytes([10, 20, 30, 128, 200, 100, 50, 0] * 2)] * 2),
    "gray_alpha": png_bytes(4, 2, 4, 8, [bytes([77, 0] * 4)] * 2),
    "gray_gama_1": png_bytes(4, 2, 0, 8, [bytes([100] * 4)] * 2, extra=chunk(b"gAMA", struct.pack(">I", 100000))),
    "rgb_gama_1": png_bytes(4, 2, 2, 8, [bytes([100, 50, 200] * 4)] * 2,
                            extra=chunk(b"gAMA", struct.pack(">I", 100000))),
    "rgb16": png_bytes(4, 2, 2, 16, [struct.pack(">12H", 0x12ff, 0x3480, 0xffff, 0x00ff, 0x0180,
                                                 0x7f7f, 1000, 30000, 65535, 5, 6, 7)] * 2),
    "rgba16": png_bytes(4, 2, 6, 16, [struct.pack(">16H", 0x12ff, 0x3480, 0xffff, 0, 5, 6, 7, 0,
                                                  9000, 9000, 9000, 65535, 1, 2, 3, 4)] * 2),
    "gray16": png_bytes(4, 2, 0, 16, [struct.pack(">4H", 0, 100, 255, 40000)] * 2),
    "gray16_gama": png_bytes(4, 2, 0, 16, [struct.pack(">4H", 100, 30000, 7, 256)] * 2,
                             extra=chunk(b"gAMA", struct.pack(">I", 100000))),
    "gray_alpha16": png_bytes(4, 2, 4, 16, [struct.pack(">8H", 0x12ff, 0, 0x80ff, 65535, 9, 9,
                                                        40000, 1)] * 2),
    "gray_2bit": png_bytes(4, 2, 0, 2, [bytes([0b00011011])] * 2),
    "palette_trns": png_bytes(4, 2, 3, 8, [bytes([0, 1, 1, 0])] * 2,
                              extra=chunk(b"PLTE", bytes([10, 20, 30, 200, 100, 50])) +
                              chunk(b"tRNS", bytes([0, 128]))),
}


@pytest.fixture(scope="module")
def pngs(tmp_path_factory):
    root = tmp_path_factory.mktemp("pngs")
    (root / "c").mkdir()
    (root / "c" / "0_opaque_red.png").write_bytes(
        png_bytes(4, 2, 2, 8, [bytes([255, 0, 0] * 4)] * 2))
    for name, data in PNGS.items():
        (root / "c" / f"1_{name}.png").write_bytes(data)
    return root


@pytest.mark.parametrize("batch_size, threads", [(1, 1), (2, 1), (10, 2), (3, 4)])
def test_pngs_are_pils_whatever_was_decoded_before(pngs, batch_size, threads):
    for mode, ref in (("RGB", pil_rgb), ("L", pil_l)):
        loader = nostall.Loader(pngs, batch_size=batch_size, num_threads=threads, mode=mode,
                                layout="NHWC", output="numpy", return_indices=True)
        seen = 0
        for images, _, indices in loader:
            for img, i in zip(images, indices):
                key = loader.key(int(i))
                want = ref(key)
                got = img if mode == "RGB" else img[..., 0]
                np.testing.assert_array_equal(got, want, err_msg=f"{key} ({mode})")
                seen += 1
        assert seen == len(PNGS) + 1


@pytest.mark.parametrize("ext", ["webp", "tiff", "bmp", "ppm", "pgm"])
@pytest.mark.parametrize("damage", ["truncated", "garbled", "empty"])
def test_a_bad_file_of_each_format_is_a_data_error_naming_it_or_skipped(tmp_path, ext, damage):
    d = tmp_path / "data" / "c"
    d.mkdir(parents=True)
    rng = np.random.default_rng(1)
    img = Image.fromarray(natural_image(rng, W, H))
    for i in range(3):
        (img.convert("L") if ext == "pgm" else img).save(d / f"{i}.{ext}")
    bad = d / f"1.{ext}"
    data = bad.read_bytes()
    if damage == "truncated":
        bad.write_bytes(data[: len(data) // 3])
    elif damage == "garbled":
        bad.write_bytes(data[:16] + bytes(b ^ 0x5A for b in data[16:]))
    else:
        bad.write_bytes(b"")
    loader = nostall.Loader(tmp_path / "data", batch_size=1, transforms=[nostall.Resize((8, 8))])
    try:
        list(loader)
    except nostall.DataError as e:
        assert e.item == str(bad) and e.stage == "decode", (e.item, e.stage, str(e))
    else:
        # A garbled body some decoders read as pixels (no checksum in BMP/PPM/
        # uncompressed TIFF): never a crash, and the right size.
        assert damage == "garbled" and ext in ("bmp", "ppm", "pgm", "tiff"), "no error for " + damage
    skipping = nostall.Loader(tmp_path / "data", batch_size=1, on_error="skip",
                              transforms=[nostall.Resize((8, 8))])
    assert sum(len(labels) for _, labels in skipping) in (2, 3)
