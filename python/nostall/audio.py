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
import os
from typing import Optional, Sequence, Union

from . import _nostall

__all__ = ["AudioTransform", "Decode", "Resample", "SpeedPerturbation", "RandomCrop", "CenterCrop",
           "Gain", "TimeShift", "AddNoise", "Spectrogram", "MelSpectrogram", "MFCC",
           "AmplitudeToDB", "FrequencyMasking", "TimeMasking", "info", "load", "apply",
           "sample_params"]


class AudioTransform:
    """An audio transform: its arguments, as the spec's ``audio`` list holds them."""

    def __init__(self, **args):
        self._args = args

    def to_dict(self) -> dict:
        """The spec entry: ``{"type": name, argument: value, ...}``."""
        d = {"type": type(self).__name__}
        for k, v in self._args.items():
            d[k] = list(v) if isinstance(v, tuple) else v
        return d

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self._args.items())
        return f"{type(self).__name__}({args})"

    def __call__(self, *args, **kwargs):
        raise TypeError(f"{type(self).__name__} is run by the loader's C++ threads; pass it in "
                        "transforms={'audio': [...]}, or run a list on one file with "
                        "nostall.audio.apply")


class Decode(AudioTransform):
    """How files are decoded; first in the list when given (else the defaults).

    Args:
        mono: mix the channels down to one (their mean); False keeps them.
        sample_rate: the rate every file has; a file at another rate is an
            error naming it. None: any rate (a later ``Resample`` fixes it).
        channels: with ``mono=False``, the channel count every file must have.
        max_seconds: decoding more than this much of one file is an error
            naming it (a 6-hour file given to a pipeline with no crop).
    """

    def __init__(self, mono: bool = True, sample_rate: Optional[int] = None,
                 channels: Optional[int] = None, max_seconds: float = 3600.0):
        super().__init__(mono=mono, sample_rate=sample_rate, channels=channels,
                         max_seconds=max_seconds)


class Resample(AudioTransform):
    """torchaudio.transforms.Resample: band-limited sinc interpolation.

    Args:
        new_freq: the rate out. (torchaudio's positional order is
            ``(orig_freq, new_freq)``; here ``Resample(16000)`` is the new rate.)
        orig_freq: the rate in; None: each file's own (one kernel per rate).
        resampling_method: ``"sinc_interp_hann"`` or ``"sinc_interp_kaiser"``.
        lowpass_filter_width: the filter's zero crossings on each side.
        rolloff: the cutoff as a fraction of the lower Nyquist rate.
        beta: the Kaiser window's shape (None: torchaudio's 14.769656459379492).
    """

    def __init__(self, new_freq: int, orig_freq: Optional[int] = None,
                 resampling_method: str = "sinc_interp_hann", lowpass_filter_width: int = 6,
                 rolloff: float = 0.99, beta: Optional[float] = None):
        super().__init__(new_freq=new_freq, orig_freq=orig_freq,
                         resampling_method=resampling_method,
                         lowpass_filter_width=lowpass_filter_width, rolloff=rolloff, beta=beta)


class SpeedPerturbation(AudioTransform):
    """torchaudio.transforms.SpeedPerturbation: one of ``factors`` per sample.

    A factor f resamples ``int(f * orig_freq)`` to ``orig_freq`` Hz, as
    torchaudio's ``Speed`` does: the audio plays f times as fast.

    Args:
        factors: the speeds to choose from, uniformly.
        orig_freq: the rate reaching it; None: the rate the list fixes there.
    """

    def __init__(self, factors: Sequence[float], orig_freq: Optional[int] = None):
        super().__init__(factors=list(factors), orig_freq=orig_freq)


class RandomCrop(AudioTransform):
    """A random ``seconds``-long window; shorter audio is padded with zeros at the end.

    Args:
        seconds: the window's length (frames = round(seconds * rate)).
    """

    def __init__(self, seconds: float):
        super().__init__(seconds=seconds)


class CenterCrop(AudioTransform):
    """The middle ``seconds`` (validation); shorter audio padded with zeros at the end.

    Args:
        seconds: the window's length.
    """

    def __init__(self, seconds: float):
        super().__init__(seconds=seconds)


class Gain(AudioTransform):
    """Multiplies by 10^(g/20), g drawn uniformly from ``gain_db`` (no clamping).

    Args:
        gain_db: a range ``(lo, hi)`` in dB, or x for ``(-x, x)``.
    """

    def __init__(self, gain_db: Union[float, Sequence[float]] = (-6.0, 6.0)):
        super().__init__(gain_db=gain_db)


class TimeShift(AudioTransform):
    """Shifts by a whole number of frames drawn from [-seconds, seconds], filling with zeros.

    Args:
        seconds: the largest shift either way.
    """

    def __init__(self, seconds: float):
        super().__init__(seconds=seconds)


class AddNoise(AudioTransform):
    """Mixes in a noise file at an SNR drawn from ``snr_db`` (torchaudio.functional.add_noise).

    The noise files are decoded to mono at the rate reaching the transform
    when the loader is made; each sample takes one file and an offset (the
    noise repeats when shorter), and the scale per channel that gives the SNR.

    Args:
        noise: an audio file, a folder of them, or a list of either.
        snr_db: the SNR range ``(lo, hi)`` in dB.
    """

    def __init__(self, noise: Union[str, os.PathLike, Sequence[Union[str, os.PathLike]]],
                 snr_db: Sequence[float] = (5.0, 20.0)):
        if isinstance(noise, (str, os.PathLike)):
            paths = os.fspath(noise)
        else:
            paths = [os.fspath(p) for p in noise]
        super().__init__(noise=paths, snr_db=tuple(snr_db))


class Spectrogram(AudioTransform):
    """torchaudio.transforms.Spectrogram (a periodic Hann window; power 2 by default).

    Args:
        n_fft: FFT size.
        win_length: window length (None: n_fft).
        hop_length: hop (None: win_length // 2).
        pad: zeros added to both sides first.
        power: 2 for power, 1 for magnitude (complex output is not batched).
        normalized: divide by the window's L2 norm.
        center: pad n_fft // 2 on both sides (``pad_mode``).
        pad_mode: ``"reflect"`` or ``"constant"``.
        onesided: only the n_fft // 2 + 1 non-negative frequencies.
    """

    def __init__(self, n_fft: int = 400, win_length: Optional[int] = None,
                 hop_length: Optional[int] = None, pad: int = 0, power: float = 2.0,
                 normalized: bool = False, center: bool = True, pad_mode: str = "reflect",
                 onesided: bool = True):
        super().__init__(n_fft=n_fft, win_length=win_length, hop_length=hop_length, pad=pad,
                         power=power, normalized=normalized, center=center, pad_mode=pad_mode,
                         onesided=onesided)


class MelSpectrogram(AudioTransform):
    """torchaudio.transforms.MelSpectrogram: a Spectrogram through a mel filter bank.

    Args:
        sample_rate: the audio's rate (None: the rate the list fixes there;
            given, it must agree).
        n_fft: FFT size.
        win_length: window length (None: n_fft).
        hop_length: hop (None: win_length // 2).
        f_min: lowest frequency.
        f_max: highest frequency (None: sample_rate // 2).
        pad: zeros added to both sides first.
        n_mels: mel bands.
        power: 2 for power, 1 for magnitude.
        normalized: divide by the window's L2 norm.
        center: pad n_fft // 2 on both sides.
        pad_mode: ``"reflect"`` or ``"constant"``.
        norm: None or ``"slaney"`` (area normalisation of the bands).
        mel_scale: ``"htk"`` or ``"slaney"``.
    """

    def __init__(self, sample_rate: Optional[int] = None, n_fft: int = 400,
                 win_length: Optional[int] = None, hop_length: Optional[int] = None,
                 f_min: float = 0.0, f_max: Optional[float] = None, pad: int = 0,
                 n_mels: int = 128, power: float = 2.0, normalized: bool = False,
                 center: bool = True, pad_mode: str = "reflect", norm: Optional[str] = None,
                 mel_scale: str = "htk"):
        super().__init__(sample_rate=sample_rate, n_fft=n_fft, win_length=win_length,
                         hop_length=hop_length, f_min=f_min, f_max=f_max, pad=pad, n_mels=n_mels,
                         power=power, normalized=normalized, center=center, pad_mode=pad_mode,
                         norm=norm, mel_scale=mel_scale)


class MFCC(AudioTransform):
    """torchaudio.transforms.MFCC: log mel energies (in dB, floored 80 dB below
    the sample's peak, or ``log(x + 1e-6)`` with ``log_mels``) through a DCT-II.

    Args:
        sample_rate: the audio's rate (None: the rate the list fixes there).
        n_mfcc: coefficients kept.
        dct_type: 2 (the only one torchaudio has).
        norm: ``"ortho"`` or None.
        log_mels: natural log instead of dB.
        melkwargs: MelSpectrogram's arguments (n_fft, hop_length, n_mels, ...).
    """

    def __init__(self, sample_rate: Optional[int] = None, n_mfcc: int = 40, dct_type: int = 2,
                 norm: Optional[str] = "ortho", log_mels: bool = False,
                 melkwargs: Optional[dict] = None):
        super().__init__(sample_rate=sample_rate, n_mfcc=n_mfcc, dct_type=dct_type, norm=norm,
                         log_mels=log_mels, melkwargs=dict(melkwargs or {}))


class AmplitudeToDB(AudioTransform):
    """torchaudio.transforms.AmplitudeToDB (ref 1, amin 1e-10).

    Args:
        stype: ``"power"`` (10 log10) or ``"magnitude"`` (20 log10).
        top_db: floor each sample at its maximum less this (None: no floor).
    """

    def __init__(self, stype: str = "power", top_db: Optional[float] = None):
        super().__init__(stype=stype, top_db=top_db)


class FrequencyMasking(AudioTransform):
    """torchaudio.transforms.FrequencyMasking (SpecAugment): one band of up to
    ``freq_mask_param`` bins set to 0, per sample.

    Args:
        freq_mask_param: the widest band (the width is drawn in [0, param)).
        iid_masks: a band of its own for each channel.
    """

    def __init__(self, freq_mask_param: int, iid_masks: bool = False):
        super().__init__(freq_mask_param=freq_mask_param, iid_masks=iid_masks)


class TimeMasking(AudioTransform):
    """torchaudio.transforms.TimeMasking (SpecAugment): one span of up to
    ``time_mask_param`` frames set to 0, per sample.

    Args:
        time_mask_param: the widest span.
        iid_masks: a span of its own for each channel.
        p: the span is at most this fraction of the frames.
    """

    def __init__(self, time_mask_param: int, iid_masks: bool = False, p: float = 1.0):
        super().__init__(time_mask_param=time_mask_param, iid_masks=iid_masks, p=p)


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
