"""Datasets for demos, tests and benchmarks, made on the spot (nothing is downloaded).

- :func:`make_imagenet_like` writes an image folder of natural-looking JPEGs
  (1/f-spectrum texture, shapes, lighting) at ImageNet-like sizes (300-800 px,
  quality 90, about 80-150 KB each).
- :func:`make_spoken_words` and :func:`make_long_recordings` write speech
  (espeak-ng) as audio folders; :func:`make_speech_corpus` writes spoken
  sentences of 1-20 s with their transcripts beside them (a LibriSpeech-like
  speech-recognition set); :func:`folder_to_shards` writes any folder as
  WebDataset shards.
- :func:`make_detection_scenes` writes a COCO-style dataset (an image folder
  and its instances JSON) of generated scenes whose boxes, polygons and RLE
  masks are exactly where the shapes are drawn; :class:`Coco` reads such a
  dataset (or COCO itself).
- :func:`fashion_mnist_to_folder` converts Debian's ``dataset-fashion-mnist``
  (a real labelled image set) to the image-folder layout.
"""

from __future__ import annotations

import gzip
import os
import struct
import sys
from pathlib import Path

import numpy as np

from .detection import Coco  # noqa: F401  (nostall.datasets.Coco)

FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
FASHION_MNIST_CLASSES = ["t-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt",
                         "sneaker", "bag", "ankle-boot"]


def _pink_field(rng, h, w, alpha):
    fy = np.fft.fftfreq(h)[:, None]
    fx = np.fft.rfftfreq(w)[None, :]
    f = np.sqrt(fx * fx + fy * fy)
    f[0, 0] = 1.0
    spec = (rng.standard_normal((h, w // 2 + 1)) + 1j * rng.standard_normal((h, w // 2 + 1)))
    spec /= f ** alpha
    spec[0, 0] = 0
    field = np.fft.irfft2(spec, s=(h, w))
    return field / (field.std() + 1e-9)


def natural_image(rng: np.random.Generator, width: int, height: int) -> np.ndarray:
    """An RGB uint8 image with the statistics of a photograph: a 1/f amplitude
    spectrum, a few smooth objects with edges, colour and soft lighting."""
    h, w = height, width
    lum = _pink_field(rng, h, w, alpha=1.0 + 0.25 * rng.random())
    chroma = [_pink_field(rng, h, w, alpha=1.6) for _ in range(2)]
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    light = 0.6 * ((xx / w - rng.random()) * rng.normal() + (yy / h - rng.random()) * rng.normal())
    img = np.empty((h, w, 3), np.float32)
    base = rng.uniform(60, 190, 3)
    for c in range(3):
        img[..., c] = base[c] + 28 * lum + 14 * chroma[c % 2] * (1 if c else -1) + 30 * light
    tex = _pink_field(rng, h, w, alpha=1.2)
    for _ in range(rng.integers(2, 7)):  # objects: ellipses with a texture of their own
        cx, cy = rng.uniform(0, w), rng.uniform(0, h)
        rx, ry = rng.uniform(0.05, 0.35) * w, rng.uniform(0.05, 0.35) * h
        mask = ((xx - cx) / rx) ** 2 + ((yy - cy) / ry) ** 2 < 1
        color = rng.uniform(20, 235, 3)
        shifted = np.roll(tex, (int(cy), int(cx)), axis=(0, 1))
        for c in range(3):
            img[..., c] = np.where(mask, color[c] + 18 * shifted + 20 * light, img[..., c])
    return np.clip(img, 0, 255).astype(np.uint8)


def _write_natural_jpeg(args):
    from PIL import Image

    path, seed, index, min_side, max_side, quality = args
    rng = np.random.default_rng([seed, index])
    w, h = (int(v) for v in rng.integers(min_side, max_side + 1, 2))
    Image.fromarray(natural_image(rng, w, h)).save(path, format="JPEG", quality=quality)


def make_imagenet_like(root, num_images=2000, num_classes=10, seed=0, min_side=300,
                       max_side=800, quality=90, progress=True, processes=None) -> Path:
    """Writes ``root/class_XX/img_XXXXX.jpg`` (image i from seed (seed, i)), in
    parallel; reuses a complete earlier run with the same arguments."""
    import multiprocessing

    root = Path(root)
    done = root / ".complete"
    want = f"{num_images} {num_classes} {seed} {min_side} {max_side} {quality}"
    if done.exists() and done.read_text() == want:
        return root
    jobs = []
    for i in range(num_images):
        d = root / f"class_{i % num_classes:02d}"
        d.mkdir(parents=True, exist_ok=True)
        jobs.append((d / f"img_{i:05d}.jpg", seed, i, min_side, max_side, quality))
    with multiprocessing.get_context("spawn").Pool(processes or os.cpu_count()) as pool:
        for n, _ in enumerate(pool.imap_unordered(_write_natural_jpeg, jobs, chunksize=8), 1):
            if progress and (n % 50 == 0 or n == num_images):
                print(f"\rgenerating images: {n}/{num_images}", end="", file=sys.stderr,
                      flush=True)
    if progress:
        print(file=sys.stderr)
    done.write_text(want)
    return root


def _read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_fashion_mnist(split="train"):
    """(images uint8 [N, 28, 28], labels int64 [N]) from Debian's package."""
    prefix = "train" if split == "train" else "t10k"
    images = FASHION_MNIST_DIR / f"{prefix}-images-idx3-ubyte.gz"
    if not images.exists():
        raise FileNotFoundError(
            f"{images} not found: install Debian's dataset-fashion-mnist package")
    labels = _read_idx(FASHION_MNIST_DIR / f"{prefix}-labels-idx1-ubyte.gz").astype(np.int64)
    return _read_idx(images), labels


def fashion_mnist_to_folder(root, split="train", limit=None, fmt="png") -> Path:
    """Writes ``root/<class name>/<index>.<fmt>``; reuses a complete earlier run."""
    from PIL import Image

    root = Path(root)
    done = root / ".complete"
    images, labels = load_fashion_mnist(split)
    n = len(labels) if limit is None else min(limit, len(labels))
    want = f"{split} {n} {fmt}"
    if done.exists() and done.read_text() == want:
        return root
    # Class folders are numbered so that sorted order is label order.
    names = [f"{i}-{c}" for i, c in enumerate(FASHION_MNIST_CLASSES)]
    for name in names:
        (root / name).mkdir(parents=True, exist_ok=True)
    for i in range(n):
        path = root / names[labels[i]] / f"{i:05d}.{fmt}"
        Image.fromarray(images[i], mode="L").save(path, **({"quality": 95} if fmt == "jpg" else {}))
    done.write_text(want)
    return root


# --------------------------------------------------------------------- audio
SPOKEN_WORDS = ["yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go", "zero",
                "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "bed",
                "bird", "cat", "dog", "happy", "house", "marvin", "sheila", "tree", "wow"]
ESPEAK_VOICES = ["en-us", "en-gb", "en-gb-scotland", "en-029", "en-gb-x-rp", "en-us+f3",
                 "en-us+m3", "en-gb+f2"]


def _speak(word, voice, speed, pitch):
    """espeak-ng's speech of ``word`` as (float32 samples, rate)."""
    import io
    import subprocess

    import soundfile

    wav = subprocess.run(["espeak-ng", "-v", voice, "-s", str(speed), "-p", str(pitch), "--stdout",
                          word], check=True, capture_output=True).stdout
    x, rate = soundfile.read(io.BytesIO(wav), dtype="float32")
    return x, rate


def _resample_np(x, rate, new_rate):
    if rate == new_rate:
        return x
    n = int(round(len(x) * new_rate / rate))
    t = np.arange(n) * (rate / new_rate)
    return np.interp(t, np.arange(len(x)), x).astype(np.float32)


_SUBTYPES = {"wav": ("WAV", "PCM_16"), "flac": ("FLAC", "PCM_16"), "mp3": ("MP3", "MPEG_LAYER_III"),
             "ogg": ("OGG", "VORBIS"), "opus": ("OGG", "OPUS")}


def _write_audio(path, x, rate, fmt):
    import soundfile

    container, subtype = _SUBTYPES[fmt]
    if fmt == "opus" and rate not in (8000, 12000, 16000, 24000, 48000):
        x, rate = _resample_np(x, rate, 48000), 48000
    soundfile.write(str(path), x, rate, format=container, subtype=subtype)


def make_spoken_words(root, words=None, voices=2, speeds=(140, 190), rates=(16000,),
                      formats=("flac",), noise=0.01, seed=0, seconds=1.0):
    """Writes a spoken-words set: ``root/<word>/<word>_<voice>_<speed>.<fmt>``.

    Real speech from Debian's ``espeak-ng`` (each word in ``voices`` voices at
    each speed in words per minute, pitch varied), with pink background noise
    at ``noise`` RMS, padded to ``seconds`` (a keyword-spotting clip). The
    rates and formats are cycled over the clips, so a set with several of
    each mixes them. Needs ``espeak-ng`` and the ``soundfile`` package;
    reuses a complete earlier run. Returns ``root``.
    """
    root = Path(root)
    words = list(words or SPOKEN_WORDS)
    done = root / ".complete"
    if done.exists():
        return root
    rng = np.random.default_rng(seed)
    k = 0
    for word in words:
        (root / word).mkdir(parents=True, exist_ok=True)
        for v in range(voices):
            voice = ESPEAK_VOICES[v % len(ESPEAK_VOICES)]
            for speed in speeds:
                x, rate = _speak(word, voice, speed, 35 + 10 * v)
                out_rate = rates[k % len(rates)]
                fmt = formats[k % len(formats)]
                k += 1
                x = _resample_np(x, rate, out_rate)
                n = max(len(x), int(seconds * out_rate))
                clip = np.zeros(n, np.float32)
                at = int(rng.integers(0, n - len(x) + 1))
                clip[at:at + len(x)] = x
                pink = np.cumsum(rng.standard_normal(n)).astype(np.float32)
                pink -= np.convolve(pink, np.ones(64) / 64, mode="same")
                pink *= noise / max(1e-9, float(np.sqrt(np.mean(pink ** 2))))
                clip = np.clip(clip + pink, -1, 1)
                _write_audio(root / word / f"{word}_{v}_{speed}.{fmt}", clip, out_rate, fmt)
    done.touch()
    return root


def make_long_recordings(root, count=8, seconds=(10, 30), rate=16000, formats=("flac", "mp3"),
                         seed=0):
    """Writes ``root/<class>/rec_XXX.<fmt>``: long files of spoken sentences
    (espeak-ng) over noise, ``seconds`` long each (uniform in the range), two
    classes (the voice). For crop benchmarks. Reuses a complete earlier run."""
    root = Path(root)
    done = root / ".complete"
    if done.exists():
        return root
    rng = np.random.default_rng(seed)
    for i in range(count):
        cls = f"voice{i % 2}"
        (root / cls).mkdir(parents=True, exist_ok=True)
        n = int(rng.uniform(*seconds) * rate)
        clip = (0.01 * rng.standard_normal(n)).astype(np.float32)
        at = 0
        while at < n:
            word = SPOKEN_WORDS[int(rng.integers(len(SPOKEN_WORDS)))]
            x, r = _speak(" ".join([word] * 3), ESPEAK_VOICES[i % 2], 160, 50)
            x = _resample_np(x, r, rate)[: n - at]
            clip[at:at + len(x)] += x
            at += len(x) + int(rng.integers(rate // 10, rate // 2))
        _write_audio(root / cls / f"rec_{i:03d}.{formats[i % len(formats)]}",
                     np.clip(clip, -1, 1), rate, formats[i % len(formats)])
    done.touch()
    return root


SENTENCE_WORDS = SPOKEN_WORDS + [
    "the", "a", "and", "of", "to", "in", "is", "it", "that", "was", "for", "with", "he", "she", "they",
    "we", "you", "this", "from", "at", "by", "not", "but", "what", "all", "were", "when", "there", "can",
    "an", "your", "which", "their", "said", "if", "will", "each", "about", "how", "many", "then", "them",
    "would", "like", "so", "these", "her", "long", "make", "thing", "see", "him", "has", "look", "more",
    "day", "could", "come", "did", "number", "sound", "most", "people", "over", "know", "water", "than",
    "call", "first", "who", "may", "side", "been", "now", "find", "any", "new", "work", "part", "take",
    "get", "place", "made", "live", "where", "after", "back", "little", "only", "round", "man", "year",
    "came", "show", "every", "good", "give", "our", "under", "name", "very", "through", "just", "form",
    "sentence", "great", "think", "say", "help", "low", "line", "differ", "turn", "cause", "much", "mean",
    "before", "move", "boy", "old", "too", "same", "tell", "does", "set", "three", "want", "air", "well",
    "also", "play", "small", "end", "put", "home", "read", "hand", "port", "large", "spell", "add", "even",
    "land", "here", "must", "big", "high", "such", "follow", "act", "why", "ask", "men", "change", "went",
    "light", "kind", "need", "picture", "try", "us", "again", "animal", "point", "mother", "world",
    "near", "build", "self", "earth", "father", "head", "stand", "own", "page", "should", "country",
    "found", "answer", "school", "grow", "study", "still", "learn", "plant", "cover", "food", "sun",
    "four", "between", "state", "keep", "eye", "never", "last", "let", "thought", "city", "tree",
    "cross", "farm", "hard", "start", "might", "story", "saw", "far", "sea", "draw", "river"]


def make_speech_corpus(root, count=200, seconds=(1.0, 20.0), rate=16000, formats=("flac",), speakers=6,
                       seed=0):
    """Writes a speech-recognition set: ``root/<speaker>/<speaker>-<nnnn>.<fmt>``
    with ``<speaker>-<nnnn>.txt`` beside each, its transcript (lower-case words,
    one line), as LibriSpeech lays a chapter out.

    Each utterance is a sentence of random common words read by Debian's
    ``espeak-ng`` (one voice per speaker, the speed and pitch drawn), long
    enough for a length drawn uniformly in ``seconds`` (espeak's own timing
    decides the exact length), over faint noise. Needs ``espeak-ng`` and
    ``soundfile``; reuses a complete earlier run of the same arguments.
    Returns ``root``.
    """
    root = Path(root)
    done = root / ".complete"
    want = f"{count} {seconds} {rate} {formats} {speakers} {seed}"
    if done.exists() and done.read_text() == want:
        return root
    rng = np.random.default_rng(seed)
    for i in range(count):
        speaker = f"spk{i % speakers}"
        voice = ESPEAK_VOICES[i % speakers % len(ESPEAK_VOICES)]
        speed = int(rng.integers(140, 200))
        target = float(rng.uniform(*seconds))
        # (espeak reads these short words at about 1.6 times `speed` a minute)
        words = [SENTENCE_WORDS[int(k)] for k in rng.integers(len(SENTENCE_WORDS), size=max(1, round(
            1.6 * target * speed / 60)))]
        text = " ".join(words)
        x, r = _speak(text, voice, speed, int(rng.integers(30, 70)))
        x = _resample_np(x, r, rate)
        x = np.clip(x + (0.003 * rng.standard_normal(len(x))).astype(np.float32), -1, 1)
        fmt = formats[i % len(formats)]
        (root / speaker).mkdir(parents=True, exist_ok=True)
        name = f"{speaker}-{i:04d}"
        _write_audio(root / speaker / f"{name}.{fmt}", x, rate, fmt)
        (root / speaker / f"{name}.txt").write_text(text + "\n")
    done.write_text(want)
    return root


def folder_to_shards(folder, out_dir, shards=4, name="train"):
    """Writes an image or audio folder as WebDataset shards
    ``out_dir/<name>-XXXX.tar``: each sample its files (those of one stem in
    a class folder: an utterance's ``.flac`` and ``.txt`` together) and a
    ``.cls`` label, classes numbered in sorted order, samples in sorted order
    dealt round the shards. Returns the brace pattern nostall reads."""
    import io
    import tarfile

    folder, out_dir = Path(folder), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    classes = sorted(p.name for p in folder.iterdir() if p.is_dir())
    samples = {}
    for c in classes:
        for f in sorted((folder / c).iterdir()):
            if f.is_file():
                samples.setdefault((c, f.stem), []).append(f)
    tars = [tarfile.open(out_dir / f"{name}-{s:04d}.tar", "w") for s in range(shards)]
    for k, ((c, stem), members) in enumerate(sorted(samples.items())):
        tar = tars[k % shards]
        key = f"{c}/{stem}"
        for f in members:
            tar.add(f, arcname=f"{key}{f.suffix.lower()}")
        label = str(classes.index(c)).encode()
        info = tarfile.TarInfo(f"{key}.cls")
        info.size = len(label)
        tar.addfile(info, io.BytesIO(label))
    for t in tars:
        t.close()
    return str(out_dir / f"{name}-{{0000..{shards - 1:04d}}}.tar")


def folder_to_parquet(folder, out_dir, files=1, name="train", row_group_size=100, layout="hf",
                      page_index=True, compression="snappy", max_page_bytes=1 << 20):
    """Writes an image folder as Parquet shards ``out_dir/<name>-XXXXX-of-NNNNN.parquet``,
    rows in the folder's order (classes sorted, files sorted), split into
    ``files`` consecutive runs. ``layout="hf"``: as Hugging Face ``datasets``
    writes an Image and a ClassLabel feature (``image`` a struct of ``bytes``
    and ``path``, ``label`` int64, the class names in the schema's
    ``huggingface`` metadata); ``"binary"``: a plain binary ``image``
    column and string ``label`` (the class names). ``page_index`` writes the
    offset index that lets a row be read by its page (docs/parquet.md).
    Returns the glob pattern nostall reads. Needs pyarrow."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    folder, out_dir = Path(folder), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    classes = sorted(p.name for p in folder.iterdir() if p.is_dir())
    rows = [(i, f) for i, c in enumerate(classes)
            for f in sorted((folder / c).rglob("*")) if f.is_file()]
    per = -(-len(rows) // files)
    for k in range(files):
        part = rows[k * per:(k + 1) * per]
        data = [f.read_bytes() for _, f in part]
        if layout == "hf":
            image = pa.array([{"bytes": b, "path": f.name} for b, (_, f) in zip(data, part)],
                             type=pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
            label = pa.array([i for i, _ in part], type=pa.int64())
            features = {"image": {"_type": "Image"}, "label": {"names": classes, "_type": "ClassLabel"}}
            meta = {b"huggingface": json.dumps({"info": {"features": features}}).encode()}
        elif layout == "binary":
            image = pa.array(data, type=pa.binary())
            label = pa.array([classes[i] for i, _ in part], type=pa.string())
            meta = None
        else:
            raise ValueError(f'layout must be "hf" or "binary", not {layout!r}')
        table = pa.table({"image": image, "label": label}).replace_schema_metadata(meta)
        pq.write_table(table, out_dir / f"{name}-{k:05d}-of-{files:05d}.parquet", row_group_size=row_group_size,
                       write_page_index=page_index, compression=compression, use_dictionary=["label"],
                       data_page_size=max_page_bytes,
                       # pages cut within a few values of max_page_bytes
                       write_batch_size=1 if max_page_bytes < (1 << 20) else 64)
    return str(out_dir / f"{name}-*-of-{files:05d}.parquet")


def speech_to_parquet(folder, out_dir, files=1, name="train", row_group_size=50):
    """Writes a speech-recognition folder (make_speech_corpus's layout: audio
    files with a ``.txt`` transcript beside each, one folder per speaker) as
    Parquet shards the way the Hugging Face Hub publishes LibriSpeech
    (``openslr/librispeech_asr``): ``file`` and ``id`` strings, ``audio`` an
    Audio feature (a struct of ``bytes`` and ``path``), ``text``, and
    ``speaker_id`` int64, the features in the schema's ``huggingface``
    metadata. Returns the glob pattern nostall reads. Needs pyarrow."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    folder, out_dir = Path(folder), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    speakers = sorted(p.name for p in folder.iterdir() if p.is_dir())
    rows = [(k, f) for k, sp in enumerate(speakers) for f in sorted((folder / sp).iterdir())
            if f.is_file() and f.suffix != ".txt" and f.with_suffix(".txt").exists()]
    per = -(-len(rows) // files)
    features = {"file": {"dtype": "string", "_type": "Value"}, "audio": {"_type": "Audio"},
                "text": {"dtype": "string", "_type": "Value"}, "speaker_id": {"dtype": "int64", "_type": "Value"},
                "id": {"dtype": "string", "_type": "Value"}}
    meta = {b"huggingface": json.dumps({"info": {"features": features}}).encode()}
    for k in range(files):
        part = rows[k * per:(k + 1) * per]
        table = pa.table({
            "file": pa.array([f.name for _, f in part], type=pa.string()),
            "audio": pa.array([{"bytes": f.read_bytes(), "path": f.name} for _, f in part],
                              type=pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
            "text": pa.array([f.with_suffix(".txt").read_text().strip() for _, f in part], type=pa.string()),
            "speaker_id": pa.array([s for s, _ in part], type=pa.int64()),
            "id": pa.array([f.stem for _, f in part], type=pa.string()),
        }).replace_schema_metadata(meta)
        pq.write_table(table, out_dir / f"{name}-{k:05d}-of-{files:05d}.parquet", row_group_size=row_group_size,
                       write_page_index=True)
    return str(out_dir / f"{name}-*-of-{files:05d}.parquet")


def _rle_counts(mask):
    """COCO's uncompressed RLE of a 0/1 mask: column-major runs, zeros first."""
    flat = np.asarray(mask, dtype=np.uint8).flatten(order="F")
    change = np.flatnonzero(np.diff(flat)) + 1
    bounds = np.concatenate([[0], change, [flat.size]])
    runs = np.diff(bounds).tolist()
    if flat.size and flat[0] == 1:
        runs = [0] + runs
    return runs


# FFmpeg's test sources a video set's classes are drawn from.
VIDEO_SOURCES = ("testsrc2", "mandelbrot", "life", "cellauto", "rgbtestsrc", "smptehdbars", "gradients", "noise")


def make_videos(root, per_class=4, classes=4, seconds=(5.0, 20.0), sizes=((320, 240), (640, 360), (1280, 720)),
                codecs=(("h264", "mp4"), ("vp9", "webm")), gops=(12, 250), fps=(25, 30), seed=0, audio=False):
    """Writes a video set: ``root/<class>/<class>_<k>.<ext>``.

    Each class is one of FFmpeg's test sources (``testsrc2``, ``mandelbrot``,
    ``life``, ...) with moving noise blended in, so that frames differ and
    compress as real footage does; durations in ``seconds``, frame sizes,
    codecs (H.264 in MP4 with B-frames, VP9 in WebM, and ``("mpeg4", "avi")``
    or ``("h264", "mkv")`` when asked), GOP lengths and frame rates are cycled
    over the files. ``audio=True`` gives each file an audio track: a tone
    whose pitch rises over the file (so that each moment sounds different),
    44.1 or 48 kHz, mono or stereo, AAC (Opus in WebM, MP3 in AVI). Needs
    the ``ffmpeg`` program; reuses a complete earlier run. Returns ``root``.
    """
    import subprocess

    root = Path(root)
    done = root / ".complete"
    if done.exists():
        return root
    rng = np.random.default_rng(seed)
    k = 0
    for c in range(classes):
        src = VIDEO_SOURCES[c % len(VIDEO_SOURCES)]
        name = f"{src}{c // len(VIDEO_SOURCES) or ''}"
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            w, h = sizes[k % len(sizes)]
            codec, ext = codecs[k % len(codecs)]
            gop, rate = gops[k % len(gops)], fps[k % len(fps)]
            k += 1
            secs = float(rng.uniform(*seconds))
            lavfi = (f"{src}=size={w}x{h}:rate={rate}" if src != "noise" else
                     f"color=c=gray:size={w}x{h}:rate={rate},noise=alls=60:allf=t")
            enc = {"h264": ["-c:v", "libx264", "-preset", "veryfast", "-crf", "23", "-bf", "3"],
                   "vp9": ["-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8", "-b:v", "800k"],
                   "mpeg4": ["-c:v", "mpeg4", "-q:v", "5"]}[codec]
            out = root / name / f"{name}_{i}.{ext}"
            sound = []
            if audio:
                rate_a, layout = (44100, 48000)[k % 2], ("mono", "stereo")[(k // 2) % 2]
                tone = (f"aevalsrc=0.4*sin(2*PI*(220+{int(rng.integers(0, 200))}*t)*t):s={rate_a}"
                        f":c={layout}:d={secs:.2f}")
                acodec = {"webm": ["-c:a", "libopus"], "avi": ["-c:a", "libmp3lame"]}.get(ext, ["-c:a", "aac"])
                sound = ["-f", "lavfi", "-i", tone]
                enc = enc + acodec + ["-b:a", "96k"]
            subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", lavfi, *sound, "-t", f"{secs:.2f}",
                            "-vf", f"noise=alls={int(rng.integers(5, 20))}:allf=t", *enc, "-g", str(gop),
                            "-keyint_min", str(gop), "-pix_fmt", "yuv420p", str(out)], check=True)
    done.touch()
    return root


def make_detection_scenes(root, num_images=200, seed=0, min_side=320, max_side=640, quality=90,
                          max_objects=8, crowd_every=10, empty_every=25):
    """Writes ``root/images/*.jpg`` and ``root/instances.json`` (COCO's
    instances layout) and returns the JSON's path.

    Each image is a natural-looking background with 0 to ``max_objects``
    shapes (rectangles, triangles, ellipses) of flat colours; each shape is an
    annotation whose ``bbox`` is its exact extent, whose ``segmentation`` is
    its polygon (an ellipse's as 24 points) and ``category_id`` its kind
    (1 rectangle, 2 triangle, 3 ellipse). Every ``crowd_every``-th image adds
    an ``iscrowd`` region given as uncompressed RLE; every ``empty_every``-th
    has no shapes."""
    import json as _json

    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    root = Path(root)
    (root / "images").mkdir(parents=True, exist_ok=True)
    images, anns = [], []
    for i in range(num_images):
        w, h = (int(v) for v in rng.integers(min_side, max_side + 1, size=2))
        img = Image.fromarray(natural_image(rng, w, h))
        draw = ImageDraw.Draw(img)
        n = 0 if empty_every and i % empty_every == empty_every - 1 else int(rng.integers(1, max_objects + 1))
        for _ in range(n):
            kind = int(rng.integers(1, 4))
            bw, bh = (float(v) for v in rng.uniform(0.08, 0.45, size=2) * (w, h))
            x0, y0 = float(rng.uniform(0, w - bw)), float(rng.uniform(0, h - bh))
            colour = tuple(int(c) for c in rng.integers(0, 256, size=3))
            if kind == 1:
                poly = [x0, y0, x0 + bw, y0, x0 + bw, y0 + bh, x0, y0 + bh]
            elif kind == 2:
                poly = [x0 + bw / 2, y0, x0 + bw, y0 + bh, x0, y0 + bh]
            else:
                t = np.linspace(0, 2 * np.pi, 24, endpoint=False)
                poly = np.stack([x0 + bw / 2 + bw / 2 * np.cos(t),
                                 y0 + bh / 2 + bh / 2 * np.sin(t)], 1).flatten().tolist()
            draw.polygon(poly, fill=colour)
            xs, ys = poly[0::2], poly[1::2]
            box = [min(xs), min(ys), max(xs) - min(xs), max(ys) - min(ys)]
            anns.append({"id": len(anns) + 1, "image_id": i + 1, "category_id": kind, "iscrowd": 0,
                         "bbox": [round(v, 2) for v in box], "area": box[2] * box[3],
                         "segmentation": [[round(v, 2) for v in poly]]})
        if crowd_every and i % crowd_every == 0 and n:
            mask = np.zeros((h, w), np.uint8)
            cx0, cy0 = int(rng.integers(0, w // 2)), int(rng.integers(0, h // 2))
            mask[cy0:cy0 + h // 4, cx0:cx0 + w // 4] = 1
            ys_, xs_ = np.nonzero(mask)
            anns.append({"id": len(anns) + 1, "image_id": i + 1, "category_id": 1, "iscrowd": 1,
                         "bbox": [int(xs_.min()), int(ys_.min()), int(xs_.max() - xs_.min() + 1),
                                  int(ys_.max() - ys_.min() + 1)], "area": int(mask.sum()),
                         "segmentation": {"size": [h, w], "counts": _rle_counts(mask)}})
        name = f"{i + 1:012d}.jpg"
        img.save(root / "images" / name, quality=quality)
        images.append({"id": i + 1, "file_name": name, "width": w, "height": h})
    path = root / "instances.json"
    cats = [{"id": 1, "name": "rectangle"}, {"id": 2, "name": "triangle"}, {"id": 3, "name": "ellipse"}]
    path.write_text(_json.dumps({"images": images, "annotations": anns, "categories": cats}))
    return path
