"""The audio transforms, one class each, generated from their C++ schemas by
``make generate`` (``python -m nostall._schema --write``): do not edit.
"""

from __future__ import annotations

import os
from typing import Sequence

from ._transform import AudioTransform


class Decode(AudioTransform):
    """How files are decoded; first in the list when given (else the defaults).

    Args:
        mono (bool; default True): mix the channels down to one (their mean); False keeps them.
        sample_rate (int | None; default None, in [1, 768000]): the rate every file has; a file
            at another rate is an error naming it. None: any rate (a later Resample fixes it).
        channels (int | None; default None, in [1, 64]): with mono=False, the channel count
            every file must have.
        max_seconds (float; default 3600.0, in [0.001, 10000000.0]): decoding more than this
            much of one file is an error naming it (a 6-hour file given to a pipeline with no
            crop).
    """

    def __init__(
            self,
            mono: bool = True,
            sample_rate: int | None = None,
            channels: int | None = None,
            max_seconds: float = 3600.0,
    ):
        super().__init__(
            mono=mono,
            sample_rate=sample_rate,
            channels=channels,
            max_seconds=max_seconds,
        )


class Resample(AudioTransform):
    """torchaudio.transforms.Resample: band-limited sinc interpolation.

    Args:
        new_freq (int; required, in [1, 768000]): the rate out. (torchaudio's positional order
            is (orig_freq, new_freq); here Resample(16000) is the new rate.)
        orig_freq (int | None; default None, in [1, 768000]): the rate in; None: each file's own
            (one kernel per rate).
        resampling_method (str; default 'sinc_interp_hann', one of 'sinc_interp_hann',
            'sinc_interp_kaiser'): the window of the sinc.
        lowpass_filter_width (int; default 6, in [1, 1024]): the filter's zero crossings on each
            side.
        rolloff (float; default 0.99, in [0.001, 1.0]): the cutoff as a fraction of the lower
            Nyquist rate.
        beta (float | None; default None): the Kaiser window's shape (None: torchaudio's
            14.769656459379492).
    """

    def __init__(
            self,
            new_freq: int,
            orig_freq: int | None = None,
            resampling_method: str = 'sinc_interp_hann',
            lowpass_filter_width: int = 6,
            rolloff: float = 0.99,
            beta: float | None = None,
    ):
        super().__init__(
            new_freq=new_freq,
            orig_freq=orig_freq,
            resampling_method=resampling_method,
            lowpass_filter_width=lowpass_filter_width,
            rolloff=rolloff,
            beta=beta,
        )


class SpeedPerturbation(AudioTransform):
    """torchaudio.transforms.SpeedPerturbation: one of factors per sample. A factor f resamples
    int(f * orig_freq) to orig_freq Hz, as torchaudio's Speed does: the audio plays f times as
    fast.

    Args:
        factors (Sequence[float]; required): the speeds to choose from, uniformly (each in [0.1,
            10]).
        orig_freq (int | None; default None, in [1, 768000]): the rate reaching it; None: the
            rate the list fixes there.
    """

    def __init__(self, factors: Sequence[float], orig_freq: int | None = None):
        super().__init__(factors=factors, orig_freq=orig_freq)


class RandomCrop(AudioTransform):
    """A random seconds-long window; shorter audio is padded with zeros at the end.

    Args:
        seconds (float; required, in [0.0001, 100000.0]): the window's length (frames =
            round(seconds * rate)).
    """

    def __init__(self, seconds: float):
        super().__init__(seconds=seconds)


class CenterCrop(AudioTransform):
    """The middle seconds (validation); shorter audio padded with zeros at the end.

    Args:
        seconds (float; required, in [0.0001, 100000.0]): the window's length.
    """

    def __init__(self, seconds: float):
        super().__init__(seconds=seconds)


class Gain(AudioTransform):
    """Multiplies by 10^(g/20), g drawn uniformly from gain_db (no clamping).

    Args:
        gain_db (float | tuple[float, float]; default (-6.0, 6.0), in [-120.0, 120.0]): a range
            (lo, hi) in dB, or x for (-x, x).
    """

    def __init__(self, gain_db: float | tuple[float, float] = (-6.0, 6.0)):
        super().__init__(gain_db=gain_db)


class TimeShift(AudioTransform):
    """Shifts by a whole number of frames drawn from [-seconds, seconds], filling with zeros.

    Args:
        seconds (float; required, in [0.0, 10000.0]): the largest shift either way.
    """

    def __init__(self, seconds: float):
        super().__init__(seconds=seconds)


class AddNoise(AudioTransform):
    """Mixes in a noise file at an SNR drawn from snr_db (torchaudio.functional.add_noise). The
    noise files are decoded to mono at the rate reaching the transform when the loader is made;
    each sample takes one file and an offset (the noise repeats when shorter), and the scale per
    channel that gives the SNR.

    Args:
        noise (str | os.PathLike | Sequence[str | os.PathLike]; required): an audio file, a
            folder of them, or a list of either.
        snr_db (float | tuple[float, float]; default (5.0, 20.0), in [-100.0, 200.0]): the SNR
            range (lo, hi) in dB.
    """

    def __init__(
            self,
            noise: str | os.PathLike | Sequence[str | os.PathLike],
            snr_db: float | tuple[float, float] = (5.0, 20.0),
    ):
        super().__init__(noise=noise, snr_db=snr_db)


class Spectrogram(AudioTransform):
    """torchaudio.transforms.Spectrogram (a periodic Hann window; power 2 by default).

    Args:
        n_fft (int; default 400, in [2, 65536]): FFT size.
        win_length (int | None; default None, in [1, 65536]): window length (None: n_fft).
        hop_length (int | None; default None, in [1, 1048576]): hop (None: win_length // 2).
        pad (int; default 0, in [0, 1048576]): zeros added to both sides first.
        power (float; default 2.0, in [1e-06, 100.0]): 2 for power, 1 for magnitude (complex
            output is not batched).
        normalized (bool; default False): divide by the window's L2 norm.
        center (bool; default True): pad n_fft // 2 on both sides (pad_mode).
        pad_mode (str; default 'reflect', one of 'reflect', 'constant'): how center pads.
        onesided (bool; default True): only the n_fft // 2 + 1 non-negative frequencies.
    """

    def __init__(
            self,
            n_fft: int = 400,
            win_length: int | None = None,
            hop_length: int | None = None,
            pad: int = 0,
            power: float = 2.0,
            normalized: bool = False,
            center: bool = True,
            pad_mode: str = 'reflect',
            onesided: bool = True,
    ):
        super().__init__(
            n_fft=n_fft,
            win_length=win_length,
            hop_length=hop_length,
            pad=pad,
            power=power,
            normalized=normalized,
            center=center,
            pad_mode=pad_mode,
            onesided=onesided,
        )


class MelSpectrogram(AudioTransform):
    """torchaudio.transforms.MelSpectrogram: a Spectrogram through a mel filter bank.

    Args:
        sample_rate (int | None; default None, in [1, 768000]): the audio's rate (None: the rate
            the list fixes there; given, it must agree).
        n_fft (int; default 400, in [2, 65536]): FFT size.
        win_length (int | None; default None, in [1, 65536]): window length (None: n_fft).
        hop_length (int | None; default None, in [1, 1048576]): hop (None: win_length // 2).
        f_min (float; default 0.0, in [0.0, inf]): lowest frequency.
        f_max (float | None; default None, in [0.0, inf]): highest frequency (None: sample_rate
            // 2).
        pad (int; default 0, in [0, 1048576]): zeros added to both sides first.
        n_mels (int; default 128, in [1, 4096]): mel bands.
        power (float; default 2.0, in [1e-06, 100.0]): 2 for power, 1 for magnitude.
        normalized (bool; default False): divide by the window's L2 norm.
        center (bool; default True): pad n_fft // 2 on both sides (pad_mode).
        pad_mode (str; default 'reflect', one of 'reflect', 'constant'): how center pads.
        onesided (bool; default True): only the n_fft // 2 + 1 non-negative frequencies.
        norm (str | None; default None, one of 'slaney'): None or "slaney" (area normalisation
            of the bands).
        mel_scale (str; default 'htk', one of 'htk', 'slaney'): "htk" or "slaney".
    """

    def __init__(
            self,
            sample_rate: int | None = None,
            n_fft: int = 400,
            win_length: int | None = None,
            hop_length: int | None = None,
            f_min: float = 0.0,
            f_max: float | None = None,
            pad: int = 0,
            n_mels: int = 128,
            power: float = 2.0,
            normalized: bool = False,
            center: bool = True,
            pad_mode: str = 'reflect',
            onesided: bool = True,
            norm: str | None = None,
            mel_scale: str = 'htk',
    ):
        super().__init__(
            sample_rate=sample_rate,
            n_fft=n_fft,
            win_length=win_length,
            hop_length=hop_length,
            f_min=f_min,
            f_max=f_max,
            pad=pad,
            n_mels=n_mels,
            power=power,
            normalized=normalized,
            center=center,
            pad_mode=pad_mode,
            onesided=onesided,
            norm=norm,
            mel_scale=mel_scale,
        )


class MFCC(AudioTransform):
    """torchaudio.transforms.MFCC: log mel energies (in dB, floored 80 dB below the sample's peak,
    or log(x + 1e-6) with log_mels) through a DCT-II.

    Args:
        sample_rate (int | None; default None, in [1, 768000]): the audio's rate (None: the rate
            the list fixes there).
        n_mfcc (int; default 40, in [1, 4096]): coefficients kept.
        dct_type (int; default 2, in [2, 2]): 2 (the only one torchaudio has).
        norm (str | None; default 'ortho', one of 'ortho'): "ortho" or None.
        log_mels (bool; default False): natural log instead of dB.
        melkwargs (dict | None; default None): MelSpectrogram's arguments (n_fft, hop_length,
            n_mels, ...).
    """

    def __init__(
            self,
            sample_rate: int | None = None,
            n_mfcc: int = 40,
            dct_type: int = 2,
            norm: str | None = 'ortho',
            log_mels: bool = False,
            melkwargs: dict | None = None,
    ):
        super().__init__(
            sample_rate=sample_rate,
            n_mfcc=n_mfcc,
            dct_type=dct_type,
            norm=norm,
            log_mels=log_mels,
            melkwargs=melkwargs,
        )


class AmplitudeToDB(AudioTransform):
    """torchaudio.transforms.AmplitudeToDB (ref 1, amin 1e-10).

    Args:
        stype (str; default 'power', one of 'power', 'magnitude'): "power" (10 log10) or
            "magnitude" (20 log10).
        top_db (float | None; default None, in [0.0, inf]): floor each sample at its maximum
            less this (None: no floor).
    """

    def __init__(self, stype: str = 'power', top_db: float | None = None):
        super().__init__(stype=stype, top_db=top_db)


class FrequencyMasking(AudioTransform):
    """torchaudio.transforms.FrequencyMasking (SpecAugment): one band of up to freq_mask_param bins
    set to 0, per sample.

    Args:
        freq_mask_param (int; required, in [0, 1048576]): the widest band (the width is drawn in
            [0, param)).
        iid_masks (bool; default False): a band of its own for each channel.
    """

    def __init__(self, freq_mask_param: int, iid_masks: bool = False):
        super().__init__(freq_mask_param=freq_mask_param, iid_masks=iid_masks)


class TimeMasking(AudioTransform):
    """torchaudio.transforms.TimeMasking (SpecAugment): one span of up to time_mask_param frames
    set to 0, per sample.

    Args:
        time_mask_param (int; required, in [0, 1048576]): the widest span.
        iid_masks (bool; default False): a span of its own for each channel.
        p (float; default 1.0, in [0.0, 1.0]): the span is at most this fraction of the frames.
    """

    def __init__(self, time_mask_param: int, iid_masks: bool = False, p: float = 1.0):
        super().__init__(time_mask_param=time_mask_param, iid_masks=iid_masks, p=p)


__all__ = ['Decode', 'Resample', 'SpeedPerturbation', 'RandomCrop', 'CenterCrop', 'Gain',
'TimeShift', 'AddNoise', 'Spectrogram', 'MelSpectrogram', 'MFCC', 'AmplitudeToDB',
'FrequencyMasking', 'TimeMasking']
