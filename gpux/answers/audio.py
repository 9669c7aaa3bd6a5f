"""Audio pre-processing: a sound file (or a waveform) becomes [windows, window] samples: decoded with soundfile
(WAV, FLAC, OGG, MP3, AIFF, ...), mixed to mono, resampled to the model's rate with soxr, cut into fixed-length
windows, one batch row each. Float inputs take samples in [-1, 1]; int16 and int32 inputs take PCM values."""

from __future__ import annotations

import io
import math
import os
import re
from typing import Any

from gpux.arrays import Array
from gpux.config.inputs import AudioSteps
from gpux.errors import InputError
from gpux.optional import require

AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".oga", ".opus", ".mp3", ".aiff", ".aif", ".aifc", ".au", ".caf",
                  ".w64", ".rf64")
PCM = {"int16": 2**15, "int32": 2**31}  # integer inputs: full scale of a sample
# libsndfile's log of a WAV/AIFF whose data chunk is shorter than its header says
SHORT_DATA = re.compile(r"^\s*(?:data|SSND)\s*:\s*(\d+)\s*\(should be (\d+)\)", re.M)


def decode(source: Any, name: str) -> tuple[Array, int]:
    """float32 [frames, channels] samples and the sample rate of a path or encoded bytes; one-line errors."""
    sf = require("soundfile", "audio")
    if isinstance(source, bytes | bytearray | memoryview):
        source = io.BytesIO(bytes(source))
    elif not isinstance(source, str | os.PathLike):
        raise InputError(f"{name}: audio inputs take a path, encoded bytes or a 1-D waveform, not "
                         f"{type(source).__name__}")
    elif os.path.isdir(source):
        raise InputError(f"{name}: a folder, not a sound file")
    elif not os.path.exists(source):
        raise InputError(f"{name}: file not found")
    try:
        with sf.SoundFile(source) as f:
            short = [(int(a), int(b)) for a, b in SHORT_DATA.findall(f.extra_info) if int(b) < int(a)]
            if short:
                raise InputError(f"{name}: truncated: its header promises {short[0][0]} bytes of samples, the file "
                                 f"holds {short[0][1]}")
            samples = f.read(dtype="float32", always_2d=True)
            return samples, int(f.samplerate)
    except sf.LibsndfileError as exc:
        raise InputError(f"{name}: not a sound file soundfile can read ({exc.error_string.strip()})",
                         hint="WAV, FLAC, OGG, MP3, AIFF; a truncated or damaged file fails the same way") from exc
    except (OSError, RuntimeError) as exc:
        raise InputError(f"{name}: cannot read the sound file: {exc}") from exc


def mono(source: Any, steps: AudioSteps, name: str) -> Array:
    """1-D float32 samples at the declared rate: a file decoded, its channels averaged, resampled with soxr (or
    refused where resample is off); a 1-D float array is taken as samples at the declared rate already."""
    import numpy as np

    if hasattr(source, "__array_interface__"):
        wave = np.asarray(source)
        if wave.ndim != 1 or wave.dtype.kind != "f":
            raise InputError(f"{name}: a waveform is a 1-D float array of samples in [-1, 1] at {steps.rate} Hz, "
                             f"got {wave.dtype} {list(wave.shape)}")
        return wave.astype(np.float32, copy=False)
    samples, rate = decode(source, name)
    if not samples.size:
        raise InputError(f"{name}: no samples in the sound file")
    wave = samples[:, 0] if samples.shape[1] == 1 else samples.mean(axis=1, dtype=np.float32)
    if rate == steps.rate:
        return wave
    if not steps.resample:
        raise InputError(f"{name}: an audio file at an unsupported rate: {rate} Hz; the model takes {steps.rate} "
                         "Hz", hint=f"resample it to {steps.rate} Hz, or declare resample: true")
    soxr = require("soxr", "audio")
    return soxr.resample(wave, rate, steps.rate).astype(np.float32, copy=False)


def windows(count: int, steps: AudioSteps) -> int:
    """How many windows `count` samples (lead included) give."""
    if steps.window is None:
        return 1
    hop, over = steps.hop or steps.window, count - steps.window
    if over <= 0:
        return 1 if steps.last == "pad" or over == 0 else 0
    return (math.ceil(over / hop) if steps.last == "pad" else over // hop) + 1


def audio_tensor(source: Any, steps: AudioSteps, dtype: str, name: str) -> Array:
    """[windows, window] of `dtype` (the whole clip as one row without a window): each window `hop` samples after
    the one before, the first `lead` zeros before the clip, the last padded with zeros (or dropped)."""
    import numpy as np

    wave = mono(source, steps, name)
    count = steps.lead + wave.size
    n = windows(count, steps)
    if n == 0:
        raise InputError(f"{name}: {wave.size / steps.rate:.3f} s of audio is shorter than one window "
                         f"({steps.window} samples at {steps.rate} Hz)", hint="declare last: pad to pad it")
    width, hop = steps.window or count, steps.hop or steps.window or count
    signal = np.zeros((n - 1) * hop + width, np.float32)
    used = min(wave.size, signal.size - steps.lead)
    signal[steps.lead:steps.lead + used] = wave[:used]
    rows = np.lib.stride_tricks.sliding_window_view(signal, width)[::hop][:n]
    if dtype in PCM:
        full = PCM[dtype]
        return np.clip(np.rint(rows * full), -full, full - 1).astype(dtype)
    try:
        return rows.astype(dtype)
    except TypeError as exc:
        raise InputError(f"{name}: audio inputs of {dtype} are not written by preprocess; declare a float32, "
                         "float16, int16 or int32 input") from exc
