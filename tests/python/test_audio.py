"""Audio: decode, resample, features and augmentations against torchaudio's
documented formulas written here in torch (torchaudio does not install beside
this torch) and librosa, on real speech from espeak-ng; the loader on audio
folders and shards; bad files.

Tolerances (docs/audio.md): spectrogram, mel and MFCC relative error
||ours - ref|| / ||ref|| <= 1e-4 against the formula in float64; resampling
SNR >= 80 dB against torchaudio's kernel in float64; lossless decodes equal
soundfile's to the last bit.
"""

import io
import itertools
import math
import os
import shutil
import subprocess

import numpy as np
import pytest
import soundfile
import torch
import torch.nn.functional as F

import nostall
from nostall import audio, datasets, text
from conftest import cached_data

pytestmark = pytest.mark.skipif(shutil.which("espeak-ng") is None,
                                reason="espeak-ng is installed by `make test` (apt)")


# ------------------------------------------------- torchaudio's formulas
def ta_resample(x, orig, new, lowpass_filter_width=6, rolloff=0.99,
                method="sinc_interp_hann", beta=None):
    """torchaudio.functional.resample (_get_sinc_resample_kernel and
    _apply_sinc_resample_kernel), in float64."""
    x = torch.as_tensor(x, dtype=torch.float64)
    if orig == new:
        return x
    g = math.gcd(orig, new)
    orig, new = orig // g, new // g
    base = min(orig, new) * rolloff
    width = math.ceil(lowpass_filter_width * orig / base)
    idx = torch.arange(-width, width + orig, dtype=torch.float64)[None, None] / orig
    t = torch.arange(0, -new, -1, dtype=torch.float64)[:, None, None] / new + idx
    t *= base
    t = t.clamp_(-lowpass_filter_width, lowpass_filter_width)
    if method == "sinc_interp_hann":
        window = torch.cos(t * math.pi / lowpass_filter_width / 2) ** 2
    else:
        b = torch.tensor(14.769656459379492 if beta is None else float(beta), dtype=torch.float64)
        window = torch.i0(b * torch.sqrt(1 - (t / lowpass_filter_width) ** 2)) / torch.i0(b)
    t *= math.pi
    kernel = torch.where(t == 0, torch.tensor(1.0, dtype=torch.float64), t.sin() / t)
    kernel *= window * (base / orig)
    c, n = x.shape
    y = F.conv1d(F.pad(x, (width, width + orig))[:, None], kernel, stride=orig)
    y = y.transpose(1, 2).reshape(c, -1)
    return y[..., :math.ceil(new * n / orig)]


def ta_spectrogram(x, n_fft=400, win_length=None, hop_length=None, pad=0, power=2.0,
                   normalized=False, center=True, pad_mode="reflect", onesided=True):
    x = torch.as_tensor(x, dtype=torch.float64)
    win = win_length or n_fft
    hop = hop_length or win // 2
    if pad:
        x = F.pad(x, (pad, pad))
    window = torch.hann_window(win, dtype=torch.float64)
    s = torch.stft(x, n_fft, hop, win, window, center=center, pad_mode=pad_mode,
                   normalized=False, onesided=onesided, return_complex=True)
    if normalized:
        s = s / window.pow(2).sum().sqrt()
    return s.abs().pow(power)


def hz_to_mel(f, scale):
    if scale == "htk":
        return 2595.0 * math.log10(1.0 + f / 700.0)
    f_sp, min_hz, logstep = 200.0 / 3, 1000.0, math.log(6.4) / 27.0
    return f / f_sp if f < min_hz else min_hz / f_sp + math.log(f / min_hz) / logstep


def mel_to_hz(m, scale):
    if scale == "htk":
        return 700.0 * (10.0 ** (m / 2595.0) - 1.0)
    f_sp, min_hz, logstep = 200.0 / 3, 1000.0, math.log(6.4) / 27.0
    min_mel = min_hz / f_sp
    return torch.where(m >= min_mel, min_hz * torch.exp(logstep * (m - min_mel)), f_sp * m)


def ta_fbanks(n_freqs, f_min, f_max, n_mels, sr, norm=None, scale="htk"):
    """torchaudio.functional.melscale_fbanks, in float64."""
    all_freqs = torch.linspace(0, sr // 2, n_freqs, dtype=torch.float64)
    m = torch.linspace(hz_to_mel(f_min, scale), hz_to_mel(f_max, scale), n_mels + 2,
                       dtype=torch.float64)
    f_pts = mel_to_hz(m, scale)
    f_diff = f_pts[1:] - f_pts[:-1]
    slopes = f_pts.unsqueeze(0) - all_freqs.unsqueeze(1)
    down = -slopes[:, :-2] / f_diff[:-1]
    up = slopes[:, 2:] / f_diff[1:]
    fb = torch.clamp(torch.min(down, up), min=0)
    if norm == "slaney":
        fb *= (2.0 / (f_pts[2:n_mels + 2] - f_pts[:n_mels])).unsqueeze(0)
    return fb


def ta_db(x, multiplier=10.0, top_db=None):
    x = multiplier * torch.log10(torch.clamp(x, min=1e-10))
    if top_db is not None:
        x = torch.max(x, x.max() - top_db)
    return x


def ta_dct(n_mfcc, n_mels, norm="ortho"):
    n = torch.arange(float(n_mels), dtype=torch.float64)
    k = torch.arange(float(n_mfcc), dtype=torch.float64).unsqueeze(1)
    dct = torch.cos(math.pi / float(n_mels) * (n + 0.5) * k)
    if norm is None:
        dct *= 2.0
    else:
        dct[0] *= 1.0 / math.sqrt(2.0)
        dct *= math.sqrt(2.0 / float(n_mels))
    return dct.t()


def rel_err(ours, ref):
    ours = torch.as_tensor(np.asarray(ours), dtype=torch.float64)
    ref = torch.as_tensor(ref, dtype=torch.float64)
    assert ours.shape == ref.shape, (ours.shape, ref.shape)
    return float((ours - ref).norm() / ref.norm())


def snr_db(ours, ref):
    ours = torch.as_tensor(np.asarray(ours), dtype=torch.float64)
    ref = torch.as_tensor(ref, dtype=torch.float64)
    assert ours.shape == ref.shape, (ours.shape, ref.shape)
    return float(10 * torch.log10(ref.pow(2).sum() / (ours - ref).pow(2).sum()))


# ---------------------------------------------------------------- data
@pytest.fixture(scope="session")
def words(tmp_path_factory):
    """10 words x 2 voices x 2 speeds of espeak-ng speech at 8-48 kHz in all
    five formats (cycled), with background noise."""
    return cached_data(
        datasets.make_spoken_words, words=datasets.SPOKEN_WORDS[:10], voices=2, speeds=(140, 190),
        rates=(8000, 16000, 22050, 44100, 48000), formats=("flac", "wav", "mp3", "ogg", "opus"))


@pytest.fixture(scope="session")
def speech(tmp_path_factory):
    """One 4 s stereo recording of a sentence at 22.05 kHz, as FLAC bytes."""
    raw = subprocess.run(["espeak-ng", "-v", "en-us", "--stdout",
                          "the quick brown fox jumps over the lazy dog, twice over"],
                         check=True, capture_output=True).stdout
    x, rate = soundfile.read(io.BytesIO(raw), dtype="float32")
    x = np.stack([x, 0.5 * np.roll(x, 100)], axis=1)
    buf = io.BytesIO()
    soundfile.write(buf, x, rate, format="FLAC", subtype="PCM_24")
    return buf.getvalue(), x, rate


def encode(x, rate, fmt, subtype):
    buf = io.BytesIO()
    soundfile.write(buf, x, rate, format=fmt, subtype=subtype)
    return buf.getvalue()


# ------------------------------------------------------------- decoding
@pytest.mark.parametrize("fmt,subtype", [("WAV", "PCM_U8"), ("WAV", "PCM_16"), ("WAV", "PCM_24"),
                                         ("WAV", "PCM_32"), ("WAV", "FLOAT"), ("FLAC", "PCM_16"),
                                         ("FLAC", "PCM_24")])
def test_lossless_formats_decode_to_the_samples_soundfile_reads(speech, fmt, subtype):
    _, x, rate = speech
    data = encode(x, rate, fmt, subtype)
    ref, _ = soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True)
    ours = audio.load(data)
    assert ours.shape == (2, len(x))
    np.testing.assert_array_equal(ours, ref.T)
    np.testing.assert_array_equal(audio.load(data, dtype="int16"),
                                  soundfile.read(io.BytesIO(data), dtype="int16", always_2d=True)[0])
    mono = audio.load(data, mono=True)
    np.testing.assert_allclose(mono[0], ref.mean(axis=1), rtol=0, atol=1e-7)
    assert audio.info(data) == {"frames": len(x), "sample_rate": rate, "channels": 2,
                                "format": "WAV" if fmt == "WAV" else "FLAC"}


@pytest.mark.parametrize("fmt,subtype,name", [("MP3", "MPEG_LAYER_III", "MP3"),
                                              ("OGG", "VORBIS", "OGG/VORBIS"),
                                              ("OGG", "OPUS", "OGG/OPUS")])
def test_lossy_formats_decode_close_to_the_source(speech, fmt, subtype, name):
    _, x, rate = speech
    if fmt == "OGG" and subtype == "OPUS":
        x = ta_resample(x.T, rate, 48000).numpy().T.astype(np.float32)
        rate = 48000
    data = encode(x, rate, fmt, subtype)
    info = audio.info(data)
    assert info["format"] == name and info["channels"] == 2 and info["sample_rate"] == rate
    ours = audio.load(data)
    # int16 as soundfile gives it, to one step (floats equal to rounding).
    ref16 = soundfile.read(io.BytesIO(data), dtype="int16", always_2d=True)[0].astype(np.int32)
    ours16 = audio.load(data, dtype="int16").astype(np.int32)
    assert ours16.shape == ref16.shape
    assert np.abs(ours16 - ref16).max() <= 1
    # The codec's delay: align on the cross-correlation peak, then the
    # decoded speech follows the source (a lossy codec, not bit-equal).
    n = min(ours.shape[1], len(x))
    a, b = ours[0, :n], x[:n, 0]
    lag = int(np.argmax(np.correlate(a[:rate], b[:rate // 2], mode="valid")))
    aligned = a[lag:lag + n - 2 * rate // 10]
    ref = b[:len(aligned)]
    assert snr_db(aligned, ref) > 8, f"{name}: the decode does not follow the source"


def test_mp3_decodes_as_soundfile_does_and_a_seek_is_quiet_and_exact(speech, capfd):
    _, x, rate = speech
    data = encode(x, rate, "MP3", "MPEG_LAYER_III")
    ref, _ = soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True)
    whole = audio.load(data)
    assert whole.shape == ref.T.shape and audio.info(data)["frames"] == len(ref)
    np.testing.assert_array_equal(whole, ref.T)
    capfd.readouterr()
    for start in (1000, 3456, 20000, len(ref) - 3000):
        part = audio.load(data, start=start, frames=2000)
        # A seek decodes the frames before it again (the bit reservoir):
        # the same samples, to float rounding.
        np.testing.assert_allclose(part, whole[:, start:start + 2000], rtol=0, atol=1e-6)
    out, err = capfd.readouterr()
    assert err == "" and out == ""  # libmpg123 is quiet


def test_a_seek_decodes_exactly_the_frames_of_a_whole_decode(speech):
    data, x, rate = speech
    whole = audio.load(data)
    for start, n in [(0, 100), (12345, 4000), (len(x) - 500, 500), (len(x) - 10, 100)]:
        part = audio.load(data, start=start, frames=n)
        got = min(n, len(x) - start)
        np.testing.assert_array_equal(part[:, :got], whole[:, start:start + got])
        assert not part[:, got:].any()  # past the end: zeros


# ------------------------------------------------------------ resampling
@pytest.mark.parametrize("orig,new", [(22050, 16000), (44100, 16000), (16000, 8000),
                                      (8000, 48000), (48000, 44100)])
def test_resample_matches_torchaudio_at_over_80_db(speech, orig, new):
    _, x, rate = speech
    src = ta_resample(x.T, rate, orig).numpy().astype(np.float32) if orig != rate else x.T
    data = encode(src.T, orig, "WAV", "FLOAT")
    ours, _ = audio.apply([audio.Decode(mono=False, channels=2), audio.Resample(new)], data)
    ref = ta_resample(src, orig, new)
    assert snr_db(ours, ref) >= 80


@pytest.mark.parametrize("kw", [dict(resampling_method="sinc_interp_kaiser"),
                                dict(resampling_method="sinc_interp_kaiser", beta=8.0),
                                dict(lowpass_filter_width=16, rolloff=0.9)])
def test_resample_options_match_torchaudio(speech, kw):
    data, x, rate = speech
    ours, _ = audio.apply([audio.Resample(16000, **kw)], data)
    method = kw.get("resampling_method", "sinc_interp_hann")
    ref = ta_resample(x.T.mean(axis=0, keepdims=True), rate, 16000, method=method,
                      beta=kw.get("beta"), lowpass_filter_width=kw.get("lowpass_filter_width", 6),
                      rolloff=kw.get("rolloff", 0.99))
    assert snr_db(ours, ref) >= 80


def test_a_crop_after_resample_decodes_only_its_frames_and_equals_the_whole_path(tmp_path):
    # 30 s of speech-like audio at 44.1 kHz as FLAC.
    rng = np.random.default_rng(0)
    x = (0.1 * rng.standard_normal(30 * 44100)).astype(np.float32)
    data = encode(x, 44100, "FLAC", "PCM_16")
    decoded = audio.load(data)
    whole = ta_resample(decoded, 44100, 16000)
    crop = [audio.Resample(16000), audio.RandomCrop(seconds=1.0)]
    for index in range(5):
        ours, params = audio.apply(crop, data, seed=3, index=index)
        start = params["ops"][0]["start"]
        first, end = params["decoded"]
        # About one second (and the filter's reach) of the 30 s is decoded.
        assert 44100 <= end - first <= 44100 + 1000, (first, end)
        assert snr_db(ours, whole[:, start:start + 16000]) >= 80
    # Drawn from (seed, epoch, index): the same again, another epoch differs.
    a = audio.apply(crop, data, seed=3, index=1)[1]["ops"][0]["start"]
    assert a == audio.apply(crop, data, seed=3, index=1)[1]["ops"][0]["start"]
    assert a != audio.apply(crop, data, seed=3, epoch=1, index=1)[1]["ops"][0]["start"]
    assert audio.sample_params(crop, frames=len(x), sample_rate=44100, seed=3, index=1)["ops"] == \
        audio.apply(crop, data, seed=3, index=1)[1]["ops"]


def test_speed_perturbation_is_torchaudios_speed(speech):
    data, x, rate = speech
    mono = x.mean(axis=1, keepdims=True).T
    for index in range(6):
        ours, params = audio.apply([audio.Resample(16000), audio.SpeedPerturbation([0.9, 1.0, 1.1])],
                                   data, index=index)
        f = params["ops"][0]["factor"]
        at16 = ta_resample(mono, rate, 16000)
        ref = ta_resample(at16, int(f * 16000), 16000)
        assert snr_db(ours, ref) >= 80


def test_a_clip_shorter_than_the_crop_is_padded_with_zeros(speech):
    data, x, rate = speech
    ours, params = audio.apply([audio.Resample(8000), audio.RandomCrop(seconds=10.0)], data)
    n = math.ceil(len(x) * 8000 / rate)
    assert ours.shape == (1, 80000)
    assert params["ops"][0]["start"] == 0
    assert np.abs(ours[0, :n]).max() > 0.05 and not ours[0, n:].any()


# --------------------------------------------------------------- features
STFT_CASES = [dict(), dict(n_fft=512, hop_length=128), dict(n_fft=400, win_length=300, hop_length=100),
              dict(power=1.0), dict(normalized=True), dict(center=False), dict(pad_mode="constant"),
              dict(pad=50), dict(n_fft=255)]


@pytest.mark.parametrize("kw", STFT_CASES, ids=[str(k) for k in STFT_CASES])
def test_spectrogram_matches_torch_stft_to_1e_4(speech, kw):
    _, x, rate = speech
    mono = x.T.mean(axis=0, keepdims=True)
    data = encode(mono.T, rate, "WAV", "FLOAT")
    ours, _ = audio.apply([audio.Spectrogram(**kw)], data)
    assert rel_err(ours, ta_spectrogram(mono, **kw)) <= 1e-4


@pytest.mark.parametrize("kw", [dict(), dict(n_mels=64, norm="slaney"), dict(mel_scale="slaney"),
                                dict(mel_scale="slaney", norm="slaney", f_min=20.0, f_max=7600.0),
                                dict(n_fft=1024, hop_length=256, n_mels=80)])
def test_mel_spectrogram_matches_torchaudios_formula_to_1e_4(speech, kw):
    data, x, rate = speech
    ours, _ = audio.apply([audio.Resample(16000), audio.MelSpectrogram(**kw)], data)
    wave = ta_resample(x.T.mean(axis=0, keepdims=True), rate, 16000)
    stft_kw = {k: v for k, v in kw.items() if k in ("n_fft", "hop_length")}
    spec = ta_spectrogram(wave, **stft_kw)
    fb = ta_fbanks(spec.shape[1], kw.get("f_min", 0.0), kw.get("f_max", 8000.0), kw.get("n_mels", 128),
                   16000, kw.get("norm"), kw.get("mel_scale", "htk"))
    ref = (spec.transpose(-1, -2) @ fb).transpose(-1, -2)
    assert rel_err(ours, ref) <= 1e-4


@pytest.mark.parametrize("kw", [dict(), dict(n_mfcc=13, melkwargs={"n_mels": 40, "hop_length": 160}),
                                dict(log_mels=True), dict(norm=None)])
def test_mfcc_matches_torchaudios_formula_to_1e_4(speech, kw):
    data, x, rate = speech
    ours, _ = audio.apply([audio.Resample(16000), audio.MFCC(**kw)], data)
    wave = ta_resample(x.T.mean(axis=0, keepdims=True), rate, 16000)
    mk = kw.get("melkwargs", {})
    spec = ta_spectrogram(wave, hop_length=mk.get("hop_length"))
    n_mels = mk.get("n_mels", 128)
    mel = (spec.transpose(-1, -2) @ ta_fbanks(spec.shape[1], 0.0, 8000.0, n_mels, 16000)).transpose(-1, -2)
    mel = torch.log(mel + 1e-6) if kw.get("log_mels") else ta_db(mel, top_db=80.0)
    ref = (mel.transpose(-1, -2) @ ta_dct(kw.get("n_mfcc", 40), n_mels, kw.get("norm", "ortho"))).transpose(-1, -2)
    assert rel_err(ours, ref) <= 1e-4


@pytest.mark.parametrize("kw", [dict(), dict(top_db=80.0), dict(stype="magnitude", top_db=60.0)])
def test_amplitude_to_db_matches_torchaudio(speech, kw):
    data, x, rate = speech
    power = 1.0 if kw.get("stype") == "magnitude" else 2.0
    ours, _ = audio.apply([audio.Resample(16000), audio.Spectrogram(power=power), audio.AmplitudeToDB(**kw)], data)
    wave = ta_resample(x.T.mean(axis=0, keepdims=True), rate, 16000)
    ref = ta_db(ta_spectrogram(wave, power=power), 20.0 if power == 1.0 else 10.0, kw.get("top_db"))
    assert rel_err(ours, ref) <= 1e-4


def test_mel_spectrogram_matches_librosa_where_it_has_the_same_options(speech):
    librosa = pytest.importorskip("librosa")
    data, x, rate = speech
    mono = x.T.mean(axis=0).astype(np.float32)
    ours, _ = audio.apply([audio.MelSpectrogram(sample_rate=rate, n_fft=1024, hop_length=256, n_mels=80,
                                                pad_mode="constant", norm="slaney", mel_scale="slaney")],
                          encode(mono, rate, "WAV", "FLOAT"))
    # librosa.feature.melspectrogram is, as its source writes it, its mel
    # basis times |stft(y)|**power, the STFT with a periodic Hann window
    # (scipy's "hann", torch.hann_window) over frames centred by padding.
    # Its filters are taken from librosa itself; its STFT from torch.stft, as
    # importing librosa's STFT compiles librosa's numba kernels (~40 s cold).
    basis = librosa.filters.mel(sr=rate, n_fft=1024, n_mels=80, htk=False, norm="slaney")
    power = ta_spectrogram(mono, n_fft=1024, hop_length=256, pad_mode="constant", power=2.0).numpy()
    ref = np.einsum("ft,mf->mt", power, basis)
    assert rel_err(ours[0], ref) <= 1e-4


# ----------------------------------------------------------- augmentation
def test_masks_follow_torchaudios_mask_along_axis(speech):
    data, _, _ = speech
    chain = [audio.Resample(16000), audio.RandomCrop(seconds=2.0), audio.MelSpectrogram(n_mels=64),
             audio.FrequencyMasking(20), audio.TimeMasking(40, p=0.5)]
    plain, _ = audio.apply(chain[:3], data, index=4)
    seen_f, seen_t = set(), set()
    for index in range(40):
        base, _ = audio.apply(chain[:3], data, index=index)
        ours, params = audio.apply(chain, data, index=index)
        (f0, f1), = params["ops"][1]["masks"]
        (t0, t1), = params["ops"][2]["masks"]
        assert 0 <= f1 - f0 < 20 and 0 <= f0 and f1 <= 64
        # p=0.5 caps the width at half the 201 frames: still 40.
        assert 0 <= t1 - t0 < 40 and t1 <= ours.shape[2]
        want = base.copy()
        want[:, f0:f1, :] = 0
        want[:, :, t0:t1] = 0
        np.testing.assert_array_equal(ours, want)
        seen_f.add(f1 - f0)
        seen_t.add(t0)
    assert len(seen_f) > 8 and len(seen_t) > 20  # widths and starts vary


def test_gain_time_shift_and_noise(speech, tmp_path):
    data, x, rate = speech
    base, _ = audio.apply([audio.Resample(16000), audio.CenterCrop(seconds=2.0)], data)
    g, params = audio.apply([audio.Resample(16000), audio.CenterCrop(seconds=2.0), audio.Gain((-6, 6))], data)
    db = params["ops"][1]["gain_db"]
    assert -6 <= db <= 6
    np.testing.assert_allclose(g, base * 10 ** (db / 20), rtol=1e-5, atol=1e-7)
    s, params = audio.apply([audio.Resample(16000), audio.CenterCrop(seconds=2.0), audio.TimeShift(0.25)], data, index=3)
    k = params["ops"][1]["frames"]
    assert abs(k) <= 4000 and k != 0
    np.testing.assert_array_equal(s, np.roll(base, k, axis=1) * (np.arange(32000) >= k if k > 0 else np.arange(32000) < 32000 + k))
    noise = (0.3 * np.random.default_rng(1).standard_normal(16000 * 3)).astype(np.float32)
    soundfile.write(tmp_path / "hum.wav", noise, 16000, subtype="FLOAT")
    n, params = audio.apply([audio.Resample(16000), audio.CenterCrop(seconds=2.0),
                             audio.AddNoise(tmp_path, snr_db=(10, 10))], data)
    added = n - base
    measured = 10 * np.log10((base ** 2).sum() / (added ** 2).sum())
    assert abs(measured - 10.0) < 0.01
    off = params["ops"][1]["offset"]
    np.testing.assert_allclose(added[0] / np.abs(added).max(),
                               np.resize(np.roll(noise, -off), 32000) / np.abs(np.resize(np.roll(noise, -off), 32000)).max(),
                               atol=1e-5)


# ----------------------------------------------------------------- errors
def test_bad_files_get_clear_errors(speech, tmp_path):
    data, x, rate = speech
    jpeg = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + bytes(2000)  # a JPEG's start, named .mp3
    with pytest.raises(nostall.DataError, match="zero bytes"):
        audio.load(b"")
    with pytest.raises(nostall.DataError, match="not an audio file"):
        audio.load(jpeg)
    with pytest.raises(nostall.DataError, match="not an audio file"):
        audio.load(b"RIFF\x10\x00\x00\x00WAVEjunkjunkjunk")
    with pytest.raises(nostall.DataError, match="truncated"):
        audio.load(data[:len(data) // 2])
    # A rate whose kernel to 16 kHz would be 7 * 10^8 taps (gcd 1).
    odd = encode(np.zeros((44101, 1), np.float32), 44101, "WAV", "FLOAT")
    with pytest.raises(nostall.DataError, match="greatest common divisor is 1"):
        audio.apply([audio.Resample(16000)], odd)
    # Six hours of silence: a crop is cheap, a whole decode is refused.
    silence = encode(np.zeros((6 * 3600 * 8000, 1), np.int16), 8000, "FLAC", "PCM_16")
    got, params = audio.apply([audio.Decode(sample_rate=8000), audio.RandomCrop(seconds=1.0)], silence)
    assert got.shape == (1, 8000) and params["decoded"][1] - params["decoded"][0] == 8000
    with pytest.raises(nostall.DataError, match="max_seconds"):
        audio.apply([audio.Spectrogram()], silence)


def test_bad_transform_lists_name_the_transform_and_argument():
    with pytest.raises(ValueError, match=r"audio\[0\] RandomCrop: needs the sample rate"):
        audio.check([audio.RandomCrop(seconds=1.0)])
    with pytest.raises(ValueError, match="comes after the spectrogram"):
        audio.check([audio.Resample(16000), audio.MelSpectrogram(), audio.Resample(8000)])
    # Without a crop: samples of many lengths, bounded by Decode's max_seconds.
    with pytest.raises(ValueError, match=r"give Decode\(max_seconds=...\) the longest you keep"):
        audio.check([audio.Resample(16000)])
    with pytest.raises(ValueError, match="the rate must be known at the end"):
        audio.check([audio.Decode(max_seconds=5)])
    assert audio.check([audio.Decode(max_seconds=10), audio.Resample(16000)])[1] == (1, 160002)
    assert audio.check([audio.Decode(max_seconds=10), audio.Resample(16000), audio.SpeedPerturbation([0.5, 1.0]),
                        audio.MelSpectrogram(n_mels=40)])[1] == (1, 40, 1601)  # 20 s at hop 200
    with pytest.raises(ValueError, match="sample_rate=22050 but the audio reaching it is at 16000"):
        audio.check([audio.Resample(16000), audio.RandomCrop(seconds=1.0), audio.MelSpectrogram(sample_rate=22050)])
    with pytest.raises(ValueError, match="n_mfcc .* cannot exceed n_mels"):
        audio.check([audio.Resample(16000), audio.RandomCrop(seconds=1.0), audio.MFCC(n_mfcc=80, melkwargs={"n_mels": 40})])
    with pytest.raises(ValueError, match="masks a spectrogram"):
        audio.check([audio.Resample(16000), audio.RandomCrop(seconds=1.0), audio.TimeMasking(10)])
    with pytest.raises(ValueError, match="unknown argument 'hop'"):
        nostall._nostall.audio_check('[{"type": "Spectrogram", "hop": 3}]', False)
    with pytest.raises(TypeError, match="run by the loader"):
        audio.Resample(16000)(torch.zeros(10))


# ------------------------------------------------------------ the loader
CHAIN = [audio.Resample(16000), audio.RandomCrop(seconds=1.0), audio.Gain((-6, 6)),
         audio.MelSpectrogram(n_mels=64), audio.AmplitudeToDB(), audio.FrequencyMasking(8),
         audio.TimeMasking(20)]
FIELDS = {"audio": "flac;wav;mp3;ogg;opus", "label": "cls"}


def epoch(loader, epoch=0):
    loader.set_epoch(epoch)
    out = {}
    for b in loader:
        for i, key in enumerate(b["__index__"].tolist()):
            out[loader.key(key)] = (b["audio"][i].clone(), int(b["label"][i]))
    return out


def by_name(batches):
    return {k.split("/")[-1].rsplit(".", 1)[0]: v for k, v in batches.items()}


def test_utterances_of_many_lengths_come_padded_with_their_lengths(tmp_path):
    """Without a crop each clip keeps its length: a batch is padded (zeros) to
    its longest, with `audio_lengths` beside it, waveforms and spectrograms;
    each clip, within its length, is what audio.apply gives for its index;
    a broken file in a batch is skipped (on_error="skip") and the rest close
    up around it."""
    root = datasets.make_spoken_words(tmp_path / "w", words=datasets.SPOKEN_WORDS[:6], voices=2,
                                      speeds=(120, 200), rates=(16000, 22050), formats=("flac", "wav"),
                                      seconds=0.1)
    (root / datasets.SPOKEN_WORDS[0] / "broken.flac").write_bytes(b"fLaC" + bytes(60))
    for chain in ([audio.Decode(max_seconds=4), audio.Resample(16000)],
                  [audio.Decode(max_seconds=4), audio.Resample(16000), audio.MelSpectrogram(n_mels=40)]):
        loader = nostall.Loader(str(root), fields=FIELDS, transforms={"audio": chain}, batch_size=5, shuffle=True,
                                seed=3, on_error="skip", return_indices=True)
        lengths, seen = set(), 0
        for b in loader:
            x, n = b["audio"], b["audio_lengths"]
            assert x.shape[-1] == int(n.max()) and x.shape[0] == len(n) == len(b["label"])
            for i, key in enumerate(b["__index__"].tolist()):
                want, _ = audio.apply(chain, str(root / loader.key(key)), seed=3, index=key)
                assert want.shape[-1] == n[i]
                np.testing.assert_array_equal(x[i, ..., :n[i]].numpy(), want)
                assert not x[i, ..., n[i]:].any()
                lengths.add(int(n[i]))
                seen += 1
        assert seen == 24 and len(lengths) > 12
        assert loader.stats()["skipped"] == 1


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """36 spoken sentences of 1-8 s with their transcripts beside them."""
    return datasets.make_speech_corpus(tmp_path_factory.mktemp("corpus"), count=36, seconds=(1.0, 8.0))


def test_utterances_and_transcripts_from_a_folder_shards_and_hub_parquet_alike(corpus, tmp_path):
    """The same utterances, whole, with their transcripts' ids, from the
    folder (a .txt beside each file), WebDataset shards (flac + txt) and
    Parquet as the Hub publishes LibriSpeech (an Audio and a text column)."""
    tok = text.CharTokenizer()
    chain = [audio.Decode(sample_rate=16000, max_seconds=20), audio.MelSpectrogram(n_mels=40)]
    shards = datasets.folder_to_shards(corpus, tmp_path / "shards", shards=3)
    parquet = datasets.speech_to_parquet(corpus, tmp_path / "parquet", files=2, row_group_size=7)
    got = []
    for source, fields in ((str(corpus), {"audio": "flac", "text": "txt"}),
                           (shards, {"audio": "flac", "text": "txt"}),
                           (parquet, {"audio": "audio", "text": "text"})):
        loader = nostall.Loader(source, fields=fields, transforms={"audio": chain, "text": tok}, batch_size=5,
                                return_indices=True)
        out = {}
        for b in loader:
            ids, id_lengths = b["text"]
            for k, i in enumerate(b["__index__"].tolist()):
                n = int(b["audio_lengths"][k])
                words = tok.decode(ids[k][:id_lengths[k]])
                out[words] = b["audio"][k, ..., :n].clone()
        got.append(out)
    assert len(got[0]) == 36 and got[0].keys() == got[1].keys() == got[2].keys()
    for words, x in got[0].items():
        assert torch.equal(x, got[1][words]) and torch.equal(x, got[2][words])


def test_duration_buckets_over_3_ranks_equal_counts_every_utterance_once_and_resume(corpus):
    """bucketing by duration (max_duration 20 s padded) over 3 ranks: every
    rank the same number of batches, every utterance once (the padding aside)
    with its transcript's ids, no batch over 20 s once padded (but a lone
    utterance), less padding than batches of the plain order; a loader
    resumed mid-epoch gives the rest of the very batches."""
    tok = text.CharTokenizer()
    chain = [audio.Decode(sample_rate=16000, max_seconds=20)]

    def loader(rank, bucketing, **kw):
        return nostall.Loader(str(corpus), fields={"audio": "flac", "text": "txt"},
                              transforms={"audio": chain, "text": tok}, batch_size=16, shuffle=True, seed=7,
                              rank=rank, world_size=3, bucketing=bucketing, return_indices=True, **kw)

    def batches(ld, limit=None):
        out = []
        for b in itertools.islice(ld, limit):
            n = b["audio_lengths"]
            ids, id_lengths = b["text"]
            assert b["audio"].shape[-1] == int(n.max()) and len(id_lengths) == len(n)
            for k, i in enumerate(b["__index__"].tolist()):
                want = (corpus / ld.key(i)).with_suffix(".txt").read_text().strip()
                assert tok.decode(ids[k][:id_lengths[k]]) == want
            out.append((b["__index__"].tolist(), n.tolist()))
        return out

    budget = {"by": "duration", "max_duration": 20.0, "num_buckets": 4}
    ranks = [batches(loader(r, budget)) for r in range(3)]
    assert len({len(r) for r in ranks}) == 1
    seen = [i for r in ranks for idx, _ in r for i in idx]
    assert set(seen) == set(range(36)) and len(seen) - 36 < 2 * 16
    padded = real = 0
    for r in ranks:
        for idx, n in r:
            assert max(n) * len(n) <= 20 * 16000 or len(n) == 1
            padded, real = padded + max(n) * len(n), real + sum(n)
    plain_padded = plain_real = 0
    for r in range(3):
        for b in nostall.Loader(str(corpus), fields={"audio": "flac", "text": "txt"}, transforms={"audio": chain}, batch_size=3,
                                shuffle=True, seed=7, rank=r, world_size=3):
            plain_padded += b["audio"].shape[0] * b["audio"].shape[-1]
            plain_real += int(b["audio_lengths"].sum())
    assert padded / real < plain_padded / plain_real
    first = loader(1, budget)
    head = batches(first, limit=2)
    state = first.state_dict()
    first.close()
    again = loader(1, budget)
    again.load_state_dict(state)
    assert head + batches(again) == ranks[1]


def test_the_loader_batches_every_clip_of_an_audio_folder_and_of_its_shards_alike(words, tmp_path):
    shards = datasets.folder_to_shards(words, tmp_path / "shards", shards=3)
    kw = dict(fields=FIELDS, transforms={"audio": CHAIN}, batch_size=8, shuffle=True, seed=5,
              return_indices=True)
    folder = nostall.Loader(str(words), **kw)
    tars = nostall.Loader(shards, **kw)
    assert folder.sample_shape == (1, 64, 81) and len(folder) == 5
    a, b = by_name(epoch(folder)), by_name(epoch(tars))
    assert len(a) == 40 and a.keys() == b.keys()
    classes = sorted(p.name for p in words.iterdir() if p.is_dir())
    for name, (x, label) in a.items():
        assert classes[label] == name.split("_")[0]
        assert b[name][1] == label
    # A sample's draws come from its dataset index: one shard in the
    # folder's (sorted) order numbers them alike, and gives the same tensors.
    one = nostall.Loader(datasets.folder_to_shards(words, tmp_path / "one", shards=1), **kw)
    c = by_name(epoch(one))
    one.close()
    for name in a:
        torch.testing.assert_close(a[name][0], c[name][0], rtol=0, atol=0)
    # Resumable and deterministic: the same epoch again is the same.
    again = by_name(epoch(nostall.Loader(str(words), **kw)))
    for name in a:
        torch.testing.assert_close(a[name][0], again[name][0], rtol=0, atol=0)
    folder.close()
    tars.close()


def test_cache_and_shared_loader_give_the_local_samples(words, tmp_path):
    kw = dict(fields=FIELDS, transforms={"audio": [audio.Resample(16000), audio.RandomCrop(seconds=1.0)]},
              batch_size=5, seed=2, return_indices=True)
    plain = by_name(epoch(nostall.Loader(str(words), **kw)))
    cache = nostall.Cache(f"audio-test-{os.getpid()}", "64MB")
    try:
        cached = nostall.Loader(str(words), cache=cache, **kw)
        for e in range(2):
            got = by_name(epoch(cached, e))
            assert got.keys() == plain.keys()
            for name in plain:
                torch.testing.assert_close(got[name][0], plain[name][0], rtol=0, atol=0)
        epochs = {e["epoch"]: e for e in cached.stats()["cache"]["epochs"]}
        assert epochs[0]["hits"] == 0 and epochs[1]["hits"] == 40
        cached.close()
    finally:
        cache.remove()


def test_a_bad_clip_is_named_or_skipped(words, tmp_path):
    folder = tmp_path / "bad"
    shutil.copytree(words, folder)
    (folder / "yes" / "broken.mp3").write_bytes(b"\xff\xd8\xff\xe0" + bytes(3000))
    (folder / "no" / "empty.wav").write_bytes(b"")
    kw = dict(fields=FIELDS, transforms={"audio": [audio.Resample(16000), audio.RandomCrop(seconds=1.0)]},
              batch_size=8)
    with pytest.raises(nostall.DataError, match=r"(broken\.mp3|empty\.wav).*(not an audio file|zero bytes)"):
        for _ in nostall.Loader(str(folder), **kw):
            pass
    n = sum(len(b["label"]) for b in nostall.Loader(str(folder), on_error="skip", **kw))
    assert n == 40


def test_an_audio_field_needs_audio_transforms_and_a_length_or_its_bound(words):
    with pytest.raises(ValueError, match="needs the spec's \"audio\" transforms"):
        nostall.Loader(str(words), fields=FIELDS, batch_size=4)
    with pytest.raises(ValueError, match=r"give Decode\(max_seconds=...\) the longest you keep"):
        nostall.Loader(str(words), fields=FIELDS, transforms={"audio": [audio.Resample(16000)]}, batch_size=4)
    with pytest.raises(TypeError, match="need an audio field"):
        nostall.Loader(str(words), transforms=[audio.Resample(16000)], batch_size=4)


def test_a_shared_loader_serves_audio_samples_exactly_once_as_a_loader_of_ones_own(words):
    kw = dict(fields=FIELDS, transforms={"audio": [audio.Resample(16000), audio.RandomCrop(seconds=1.0),
                                                   audio.Spectrogram(n_fft=256)]},
              batch_size=8, shuffle=True, seed=4)
    own = nostall.Loader(str(words), return_indices=True, **kw)
    mine = {}
    for b in own:
        for i, k in enumerate(b["__index__"].tolist()):
            mine[k] = b["audio"][i].clone()
    name = f"audio-shared-{os.getpid()}"
    with nostall.serve(own.spec, name, chunk=8, block=False, verbose=False):
        attached = nostall.Loader.attach(name, 8, return_indices=True)
        seen = {}
        for b in attached:
            x, idx = (b["audio"], b["__index__"]) if isinstance(b, dict) else (b[0], b[2])
            for i, k in enumerate(idx.tolist()):
                assert k not in seen
                seen[k] = x[i].clone()
        attached.close()
    own.close()
    assert sorted(seen) == sorted(mine) == list(range(40))
    for k in mine:
        torch.testing.assert_close(seen[k], mine[k], rtol=0, atol=0)


def test_an_audio_column_of_parquet_shards_gives_the_folders_clips(words, tmp_path):
    """Hugging Face's Audio feature (a struct of bytes and path) in Parquet
    shards: the same tensors as the folder of the same files."""
    import json as _json

    import pyarrow as pa
    import pyarrow.parquet as pq

    classes = sorted(p.name for p in words.iterdir() if p.is_dir())
    files = [(i, f) for i, c in enumerate(classes) for f in sorted((words / c).iterdir()) if f.is_file()]
    audio_col = pa.array([{"bytes": f.read_bytes(), "path": f.name} for _, f in files])
    meta = {b"huggingface": _json.dumps({"info": {"features": {
        "audio": {"_type": "Audio"}, "label": {"_type": "ClassLabel", "names": classes}}}}).encode()}
    for k, part in enumerate((slice(0, 17), slice(17, None))):
        table = pa.table({"audio": audio_col[part], "label": pa.array([i for i, _ in files][part])})
        pq.write_table(table.replace_schema_metadata(meta), tmp_path / f"train-{k:05d}-of-00002.parquet",
                       row_group_size=5, write_page_index=True)
    kw = dict(transforms={"audio": CHAIN}, batch_size=8, shuffle=True, seed=5, return_indices=True)
    folder = epoch(nostall.Loader(str(words), fields=FIELDS, **kw))
    shards = nostall.Loader(str(tmp_path / "train-*.parquet"), fields={"audio": "audio", "label": "label"}, **kw)
    assert shards.classes == classes
    got = epoch(shards)
    assert len(got) == len(folder) == 40
    for (_, (x, lx)), (_, (y, ly)) in zip(sorted(folder.items(), key=lambda kv: kv[0]),
                                          sorted(got.items(), key=lambda kv: int(kv[0].split("[")[1][:-1])
                                                 + (17 if "00001-of" in kv[0] else 0))):
        assert lx == ly
        torch.testing.assert_close(x, y, rtol=0, atol=0)


def test_crops_of_long_files_read_their_part_and_equal_a_whole_read(tmp_path):
    """30 s recordings in every format: the loader reads a crop's part of each
    file (its first bytes, then blocks where the decoder seeks), and gives
    exactly what decoding the whole bytes gives; a file cut short after the
    loader was made is an error naming it."""
    rng = np.random.default_rng(1)
    x = (0.1 * rng.standard_normal(30 * 44100)).astype(np.float32)
    formats = [("flac", "FLAC", "PCM_16"), ("wav", "WAV", "PCM_16"), ("mp3", "MP3", "MPEG_LAYER_III"),
               ("ogg", "OGG", "VORBIS"), ("opus", "OGG", "OPUS")]
    for i, (ext, fmt, subtype) in enumerate(formats):
        (tmp_path / f"c{i % 2}").mkdir(exist_ok=True)
        rate = 48000 if ext == "opus" else 44100
        (tmp_path / f"c{i % 2}" / f"rec.{ext}").write_bytes(encode(x, rate, fmt, subtype))
    files = sorted(p for p in tmp_path.rglob("rec.*"))
    total = sum(p.stat().st_size for p in files)
    assert sum(p.stat().st_size >= 256 << 10 for p in files) >= 3
    ts = [audio.Resample(16000), audio.RandomCrop(seconds=1.0), audio.MelSpectrogram(n_mels=32)]
    loader = nostall.Loader(str(tmp_path), fields=FIELDS, transforms={"audio": ts}, batch_size=5, seed=3,
                            return_indices=True)
    for e in (0, 1):
        got = epoch(loader, e)
        assert len(got) == 5
        for index in range(5):
            data = (tmp_path / loader.key(index)).read_bytes()
            want, _ = audio.apply(ts, data, seed=3, epoch=e, index=index)
            torch.testing.assert_close(got[loader.key(index)][0], torch.as_tensor(want), rtol=0, atol=0)
    read = loader.stats()["stages"]["fetch"]["bytes"]
    assert read < total, (read, total)  # two epochs read less than the files hold once
    flac = tmp_path / "c0" / "rec.flac"
    fresh = nostall.Loader(str(tmp_path), fields=FIELDS, transforms={"audio": ts}, batch_size=5, seed=3)
    with open(flac, "r+b") as f:
        f.truncate(300 << 10)
    with pytest.raises(nostall.DataError, match=r"rec\.flac"):
        for _ in fresh:
            pass


def test_a_truncated_mp3_is_as_long_as_its_frames_not_its_header(tmp_path):
    """An MP3 cut short (a download that stopped) keeps the Xing header's
    count of the whole; its length is the frames there, so it still decodes."""
    rng = np.random.default_rng(2)
    data = encode((0.1 * rng.standard_normal(10 * 16000)).astype(np.float32), 16000, "MP3", "MPEG_LAYER_III")
    cut = data[:len(data) * 6 // 10]
    whole, part = audio.info(data)["frames"], audio.info(cut)["frames"]
    assert 0.5 * whole < part < 0.7 * whole, (whole, part)
    assert audio.load(cut).shape[-1] == part
