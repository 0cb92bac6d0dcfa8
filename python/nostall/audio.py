"""Audio transforms, with torchaudio's names, arguments and defaults.

Like :mod:`nostall.transforms`, they are declarations that the loader's C++
threads run, one sample at a time, from the file's bytes to the batch's
tensor: decode (WAV, FLAC, MP3, Ogg Vorbis, Opus), resample, crop, augment,
and compute features. A crop placed after nothing but ``Resample``,
``SpeedPerturbation`` and ``Gain`` decodes only the source frames it needs.
Every random draw comes from (seed, epoch, index), as for images; see them
with :func:`sample_params`, and run a list on one file with :func:`apply`.

```python
import nostall
from nostall import audio

loader = nostall.Loader("speech/train-{0000..0003}.tar",
    fields={"audio": "flac;wav;mp3;opus;ogg", "label": "cls"},
    transforms={"audio": [audio.Resample(16000), audio.RandomCrop(seconds=1.0),
                          audio.Gain((-6, 6)), audio.MelSpectrogram(n_mels=64),
                          audio.AmplitudeToDB(), audio.FrequencyMasking(8),
                          audio.TimeMasking(20)]},
    batch_size=8)
for batch in loader:
    spectrograms, labels = batch["audio"], batch["label"]   # (8, 1, 64, 81), (8,)
```
docs/audio.md lists every transform, what it matches in torchaudio, and the
tolerances the tests hold each to.
"""

from __future__ import annotations

import json

from . import _nostall
from ._audio_ops import *  # noqa: F401,F403  (the generated classes, one per audio transform)
from ._audio_ops import __all__ as _generated
from ._transform import AudioTransform

__all__ = ["AudioTransform", *_generated, "info", "load", "apply", "sample_params"]


def _bytes(source) -> bytes:
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source)
    with open(source, "rb") as f:
        return f.read()


def _list_json(transforms) -> str:
    items = []
    for t in transforms:
        if not isinstance(t, AudioTransform):
            raise TypeError(f"audio transforms must be nostall.audio transforms, not {t!r}")
        items.append(t.to_dict())
    return json.dumps(items)


def info(source) -> dict:
    """A file's header: ``{"frames", "sample_rate", "channels", "format"}``.

    ``source`` is a path or the file's bytes.
    """
    frames, rate, channels, fmt = _nostall.audio_info(_bytes(source))
    return {"frames": frames, "sample_rate": rate, "channels": channels, "format": fmt}


def load(source, start: int = 0, frames: int = -1, mono: bool = False, dtype: str = "float32"):
    """Decodes frames ``[start, start + frames)`` of a file (``frames=-1``: to the end).

    Returns a NumPy array: float32 ``(channels, frames)`` in [-1, 1) (one row
    with ``mono``), or int16 ``(frames, channels)`` as soundfile gives it.
    Only those frames are decoded (the decoder seeks). ``source`` is a path
    or the file's bytes.
    """
    if dtype not in ("float32", "int16"):
        raise ValueError(f'dtype must be "float32" or "int16", not {dtype!r}')
    if dtype == "int16" and mono:
        raise ValueError("mono mixing is float32 (dtype=\"float32\")")
    return _nostall.audio_decode(_bytes(source), int(start), int(frames), bool(mono),
                                 dtype == "int16")


def apply(transforms, source, seed: int = 0, epoch: int = 0, index: int = 0):
    """Runs the list on one file as the loader would for sample ``index``.

    Returns ``(array, params)``: the float32 sample (any length: no crop is
    needed here) and what was drawn for it (:func:`sample_params`), with
    ``"decoded"``, the source frames read.
    """
    out, trace = _nostall.audio_apply(_list_json(transforms), _bytes(source), int(seed),
                                      int(epoch), int(index))
    return out, json.loads(trace)


def sample_params(transforms, frames: int, sample_rate: int, channels: int = 1, seed: int = 0,
                  epoch: int = 0, index: int = 0) -> dict:
    """What sample ``index`` of a file with this header would be given, without
    decoding: ``{"decoded": [first, end) source frames, "ops": [one per draw]}``."""
    return json.loads(_nostall.audio_trace(_list_json(transforms), int(frames), int(sample_rate),
                                           int(channels), int(seed), int(epoch), int(index)))


def check(transforms, fixed: bool = True):
    """The list as the spec will hold it (every default written out), and one
    sample's shape; the error a loader would raise for a bad list."""
    resolved, shape = _nostall.audio_check(_list_json(transforms), bool(fixed))
    return json.loads(resolved), tuple(shape)
