"""Raw bytes, audio and text in, answers out: the declared `preprocess: {bytes|audio|text}` on real files and real
runtimes. Magika's trained content-type model (from its wheel) answers real files as Magika itself does; Silero
VAD's sequence model (from its wheel) gives the same speech probabilities as silero-vad's own code; scipy's test
WAVs and a tokenizer.json built by the `tokenizers` library drive generated ONNX models; bad files, bad rates,
long texts and misdeclared steps give one-line errors."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from gpux.answers.audio import audio_tensor
from gpux.answers.raw import bytes_tensor
from gpux.config.inputs import AudioSteps, BytesSteps
from gpux.errors import InputError

from .conftest import gpux, write
from .trained import ROOT, example_project, package_file

SPEECH = Path(__file__).parent / "data" / "speech_8k.flac"  # espeak-ng: "Voice activity detection finds speech."


def scipy_wav(name: str) -> Path:
    return package_file("scipy", "io", "tests", "data", name)


def json_lines(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def errors(stderr: str) -> list[str]:
    return [x for x in stderr.splitlines() if x.startswith("error:")]


def save_model(path: Path, inputs: list, outputs: list, nodes: list) -> Path:
    import onnx
    from onnx import helper

    path.parent.mkdir(parents=True, exist_ok=True)
    graph = helper.make_graph(nodes, path.stem, inputs, outputs)
    onnx.save(helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


# ---- raw bytes: Magika's trained model ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def magika(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The magika_filetype example: its gpux.yml, the model and labels.txt that make_model.py writes."""
    return example_project("magika_filetype", tmp_path_factory.mktemp("magika_filetype"))


def magika_itself() -> object | None:
    """The magika package's own API, where it imports (its wheel is installed without its dependencies)."""
    try:
        from magika import Magika

        return Magika()
    except Exception:
        return None


def test_magika_answers_real_files_as_magika_does(magika: Path, tmp_path: Path) -> None:
    folder = tmp_path / "files"
    folder.mkdir()
    known = {"code.py": ("python", ROOT / "gpux" / "answers" / "raw.py"),
             "photo.png": ("png", package_file("skimage", "data", "chelsea.png")),
             "schema.json": ("json", ROOT / "schemas" / "gpux.schema.json"),
             "page.md": ("markdown", ROOT / "docs" / "answers.md")}
    for name, (_, src) in known.items():
        shutil.copy(src, folder / name)
    (folder / "padded.py").write_text("\n" * 3000 + (ROOT / "gpux" / "answers" / "raw.py").read_text() + " \n" * 1500)
    r = gpux("run", str(magika), str(folder), "-p", "cpu", "--strict", "--json")
    assert r.returncode == 0, r.stderr
    got = {Path(x["file"]).name: x["answers"]["target_label"] for x in json_lines(r.stdout)}
    assert sorted(got) == sorted([*known, "padded.py"])  # a folder gives every file, whatever its suffix
    for name, (label, _) in known.items():
        assert got[name][0]["label"] == label, (name, got[name])
    assert got["padded.py"][0]["label"] == "python"  # blank lines at both ends, inside the 4096-byte block: stripped
    own = magika_itself()
    if own is not None:  # Magika's own answer for the same files: same type, same score
        for name, answer in got.items():
            result = own.identify_path(folder / name)  # type: ignore[attr-defined]
            assert answer[0]["label"] == str(result.prediction.dl.label), name
            assert answer[0]["score"] == pytest.approx(result.prediction.score, abs=1e-4), name


@pytest.mark.parametrize("data", [b"", b"  \n\t ", b"\x89PNG\r\n" + bytes(range(256)) * 3, b" x " * 2000,
                                  b"\n" * 5000 + b"body" + b"\r\n" * 5000, bytes(range(256)) * 16])
def test_bytes_steps_read_a_file_as_magika_reads_it(data: bytes, tmp_path: Path) -> None:
    steps = BytesSteps(head=1024, tail=1024, block=4096, strip=True, pad=256)
    (tmp_path / "f").write_bytes(data)
    row = bytes_tensor(tmp_path / "f", steps, "int32", "f")
    assert row.shape == (1, 2048) and row.dtype == np.int32
    np.testing.assert_array_equal(row, bytes_tensor(data, steps, "int32", "bytes"))  # bytes or a path: the same
    import importlib.util

    if importlib.util.find_spec("magika") is None:  # installed by `make install`: there it must import and agree
        pytest.skip("magika is not installed (make install adds it)")
    from magika import Magika
    from magika.types.seekable import Seekable

    features = Magika._extract_features_from_seekable(Seekable(io.BytesIO(data)), 1024, 0, 1024, 256, 4096, False)
    np.testing.assert_array_equal(row[0], features.beg + features.end)


def test_bytes_steps_head_tail_and_pad() -> None:
    data = b"  abcdef  "
    assert bytes_tensor(data, BytesSteps(head=4, pad=-1), "int64", "x").tolist() == [[32, 32, 97, 98]]
    # strip works inside the block read: 4 bytes read, 2 left; a block of 8 leaves 4 after stripping
    assert bytes_tensor(data, BytesSteps(head=4, strip=True), "int64", "x").tolist() == [[97, 98, 256, 256]]
    assert bytes_tensor(data, BytesSteps(head=4, strip=True, block=8), "int64", "x").tolist() == [[97, 98, 99, 100]]
    tail = bytes_tensor(data, BytesSteps(tail=12, strip=True, pad=0), "uint8", "x")  # padded at the start
    assert tail.tolist() == [[0, 0, 0, 0, *b"  abcdef"]] and tail.dtype == np.uint8
    both = bytes_tensor(b"xy", BytesSteps(head=3, tail=3, pad=9), "float32", "x")  # short: both ends see it all
    assert both.tolist() == [[120, 121, 9, 9, 120, 121]]
    for source, said in ((ROOT / "no such file", "file not found"), (ROOT / "docs", "a folder, not a file"),
                         (42, "raw-bytes inputs take a path or bytes, not int")):
        with pytest.raises(InputError, match=said):
            bytes_tensor(source, BytesSteps(head=4), "int32", str(source))


# ---- audio: scipy's WAVs through a generated model, Silero VAD ---------------------------------------------------

AUDIO_YML = """\
name: frames
model: {{source: model.onnx}}
inputs:
  x:
    dtype: {dtype}
    shape: [batch, 64]
    preprocess:
      audio: {{rate: 16000, window: 64, hop: 32, {extra}}}
"""


def audio_project(folder: Path, dtype: str = "float32", extra: str = "last: pad") -> Path:
    """x [batch, 64] -> frames (x itself) and power (mean square per row)."""
    from onnx import TensorProto, helper

    t = {"float32": TensorProto.FLOAT, "int16": TensorProto.INT16}[dtype]
    nodes = [helper.make_node("Identity", ["x"], ["frames"]),
             helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["xf", "xf"], ["sq"]),
             helper.make_node("ReduceMean", ["sq"], ["power"], axes=[1], keepdims=0)]
    save_model(folder / "model.onnx", [helper.make_tensor_value_info("x", t, ["batch", 64])],
               [helper.make_tensor_value_info("frames", t, ["batch", 64]),
                helper.make_tensor_value_info("power", TensorProto.FLOAT, ["batch"])], nodes)
    write(folder / "gpux.yml", AUDIO_YML.format(dtype=dtype, extra=extra))
    return folder


def reference_wave(path: Path, rate: int = 16000) -> np.ndarray:
    """The file's samples mixed to mono and resampled, by hand with the same libraries."""
    import soundfile as sf
    import soxr

    samples, sr = sf.read(path, dtype="float32", always_2d=True)
    wave = samples.mean(axis=1)
    return soxr.resample(wave, sr, rate).astype(np.float32) if sr != rate else wave


def test_audio_windows_of_real_wavs(tmp_path: Path) -> None:
    import gpux as api

    stereo = scipy_wav("test-44100Hz-2ch-32bit-float-le.wav")  # 441 frames, 2 channels, 44.1 kHz
    wave = reference_wave(stereo)  # 160 samples at 16 kHz
    with api.load(audio_project(tmp_path), provider="cpu") as session:
        got = session.predict(str(stereo))
        same = session.predict(stereo.read_bytes())
        waveform = session.predict(wave)  # a 1-D waveform at the declared rate
    n = 4  # windows of 64 every 32 over 160 samples: starts 0, 32, 64, 96 (the last padded with zeros)
    padded = np.concatenate([wave, np.zeros(3 * 32 + 64 - wave.size, np.float32)])
    want = np.stack([padded[i * 32:i * 32 + 64] for i in range(n)])
    assert got["frames"].shape == (n, 64) and got["power"].shape == (n,)
    np.testing.assert_allclose(got["frames"], want, atol=1e-6)
    np.testing.assert_allclose(got["power"], (want ** 2).mean(axis=1), rtol=1e-5)
    for other in (same, waveform):
        np.testing.assert_array_equal(other["frames"], got["frames"])


def test_audio_pcm_input_lead_and_drop() -> None:
    wave = reference_wave(scipy_wav("test-44100Hz-le-1ch-4bytes.wav"))  # 4410 frames, 44.1 kHz: 1600 at 16 kHz
    steps = AudioSteps(rate=16000, window=400, hop=160, lead=100, last="drop")
    rows = audio_tensor(wave, steps, "int16", "w")
    assert rows.shape == ((1600 + 100 - 400) // 160 + 1, 400) and rows.dtype == np.int16
    np.testing.assert_array_equal(rows[0, :100], 0)  # the lead
    np.testing.assert_array_equal(rows[0, 100:], np.clip(np.rint(wave[:300] * 32768), -32768, 32767))
    np.testing.assert_array_equal(rows[2, :], np.clip(np.rint(wave[220:620] * 32768), -32768, 32767))
    whole = audio_tensor(wave, AudioSteps(rate=16000), "float32", "w")  # no window: the clip is one row
    np.testing.assert_array_equal(whole, wave[None])


@pytest.mark.parametrize(("file", "extra", "said"), [
    ("test-8000Hz-le-2ch-1byteu.wav", "last: pad, resample: false",
     "an audio file at an unsupported rate: 8000 Hz; the model takes 16000 Hz"),
    ("test-44100Hz-le-1ch-4bytes-early-eof.wav", "last: pad", "truncated: its header promises 17640 bytes"),
    ("test-44100Hz-le-1ch-4bytes-early-eof-no-data.wav", "last: pad", "not a sound file soundfile can read"),
    ("test-8000Hz-le-3ch-5S-36bit.wav", "last: pad", "not a sound file soundfile can read"),
    ("test-8000Hz-le-3ch-5S-24bit.wav", "last: drop", "shorter than one window (64 samples at 16000 Hz)"),
    ("notes.wav", "last: pad", "not a sound file soundfile can read (Format not recognised.)"),
])
def test_bad_audio_is_one_line_naming_the_file(tmp_path: Path, file: str, extra: str, said: str) -> None:
    project = audio_project(tmp_path / "p", extra=extra)
    path = tmp_path / file
    if file == "notes.wav":
        path.write_text("not audio\n" * 20)
    else:
        shutil.copy(scipy_wav(file), path)
    r = gpux("run", str(project), str(path), "-p", "cpu")
    assert r.returncode == 2, r.stderr
    (line,) = errors(r.stderr)
    assert str(path) in line and said in line and "Traceback" not in r.stderr, r.stderr


def test_an_audio_folder_gives_its_sound_files(tmp_path: Path) -> None:
    import soundfile as sf

    folder = tmp_path / "clips"
    folder.mkdir()
    shutil.copy(scipy_wav("test-48000Hz-2ch-64bit-float-le-wavex.wav"), folder / "b.wav")
    data, rate = sf.read(scipy_wav("test-44100Hz-le-1ch-4bytes.wav"))
    sf.write(folder / "a.flac", data, rate)
    (folder / "readme.txt").write_text("not a clip")
    r = gpux("run", str(audio_project(tmp_path / "p", dtype="int16")), str(folder), "-p", "cpu", "--json")
    assert r.returncode == 0, r.stderr
    lines = json_lines(r.stdout)
    assert [Path(x["file"]).name for x in lines] == ["a.flac", "b.wav"]
    frames = np.array(lines[0]["answers"]["frames"])
    assert frames.shape == (49, 64)  # 1600 samples at 16 kHz: windows every 32 while samples remain
    np.testing.assert_allclose(frames.reshape(-1)[:32], np.rint(reference_wave(folder / "a.flac")[:32] * 32768),
                               atol=1)


@pytest.fixture(scope="module")
def vad(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The silero_vad example: its gpux.yml, the sequence model that make_model.py makes stateless."""
    return example_project("silero_vad", tmp_path_factory.mktemp("silero_vad"))


@pytest.mark.slow  # silero-vad's own code imports torch
def test_silero_vad_finds_speech_as_silero_vad_does(vad: Path, tmp_path: Path) -> None:
    import soundfile as sf
    import soxr

    import gpux as api

    speech, rate = sf.read(SPEECH, dtype="float32")  # 8 kHz: resampled to 16 kHz on the way
    clip = tmp_path / "clip.wav"
    sf.write(clip, np.concatenate([np.zeros(rate, np.float32), speech]), rate)
    with api.load(vad, provider="cpu") as session:
        probs = session.predict(str(clip))["speech_probs"]
    silence, talk = probs[:25], probs[32:]  # 1 s of silence (31.25 frames of 32 ms), then speech
    assert probs.shape == (int(np.ceil((rate + speech.size) * 2 / 512)),)
    assert silence.max() < 0.2 and talk.mean() > 0.8, probs.round(2)
    r = gpux("run", str(vad), str(clip), "-p", "cpu", "--json")
    assert r.returncode == 0, r.stderr
    np.testing.assert_allclose(json_lines(r.stdout)[0]["answers"]["speech_probs"], probs, atol=1e-6)
    silero = pytest.importorskip("silero_vad.sequence_vad")
    model = package_file("silero_vad", "data", "silero_vad_16k_sequence.onnx")
    wave = soxr.resample(sf.read(clip, dtype="float32")[0], rate, 16000).astype(np.float32)
    own = silero.SileroVADSequence(str(model)).audio_forward(wave)  # frames cut and run by silero-vad itself
    np.testing.assert_allclose(probs, own, atol=1e-5)


# ---- text: a tokenizer.json built here, a generated model taking ids, mask and type ids -------------------------

CORPUS = ["the quick brown fox jumps over the lazy dog", "a tokenizer turns text into ids",
          "gpux runs models declared in gpux.yml", "every word here is in the vocabulary"]
TEXT_YML = """\
name: echo
model: {{source: model.onnx}}
inputs:
  input_ids:
    dtype: int64
    shape: [batch, {length}]
    preprocess:
      text: {{tokenizer: tokenizer.json, max_length: 12, truncation: {truncation}, mask: attention_mask,
             type_ids: token_type_ids}}
  attention_mask: {{dtype: int64, shape: [batch, {length}]}}
  token_type_ids: {{dtype: int64, shape: [batch, {length}]}}
"""


def make_tokenizer(path: Path) -> Path:
    """A word-level tokenizer trained on CORPUS: lower-cased, [CLS] text [SEP], padding with [PAD] (id 3)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(CORPUS, trainers.WordLevelTrainer(special_tokens=["[UNK]", "[CLS]", "[SEP]", "[PAD]"]))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                       special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    tok.enable_padding(pad_id=tok.token_to_id("[PAD]"), pad_token="[PAD]")
    tok.save(str(path))
    return path


def text_project(folder: Path, length: int | str = 12, truncation: str = "error") -> Path:
    """input_ids, attention_mask, token_type_ids int64 -> kept (ids * mask), tokens (mask summed), types."""
    from onnx import TensorProto, helper

    dims = ["batch", length]
    ins = [helper.make_tensor_value_info(n, TensorProto.INT64, dims)
           for n in ("input_ids", "attention_mask", "token_type_ids")]
    outs = [helper.make_tensor_value_info("kept", TensorProto.INT64, dims),
            helper.make_tensor_value_info("tokens", TensorProto.INT64, ["batch"]),
            helper.make_tensor_value_info("types", TensorProto.INT64, dims)]
    nodes = [helper.make_node("Constant", [], ["axis"], value=helper.make_tensor("a", TensorProto.INT64, [1], [1])),
             helper.make_node("Mul", ["input_ids", "attention_mask"], ["kept"]),
             helper.make_node("ReduceSum", ["attention_mask", "axis"], ["tokens"], keepdims=0),
             helper.make_node("Identity", ["token_type_ids"], ["types"])]
    save_model(folder / "model.onnx", ins, outs, nodes)
    make_tokenizer(folder / "tokenizer.json")
    write(folder / "gpux.yml", TEXT_YML.format(length=length, truncation=truncation))
    return folder


def test_text_round_trips_through_the_model(tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    import gpux as api

    project = text_project(tmp_path)
    tok = Tokenizer.from_file(str(project / "tokenizer.json"))
    text = "The quick brown fox jumps over the lazy dog"
    (tmp_path / "fox.txt").write_text(text + "\n")
    with api.load(project, provider="cpu") as session:
        answer = session.predict(text)
        from_file = session.predict(tmp_path / "fox.txt")  # a path is a file to read; a str is the text
        listed = session.predict(["a tokenizer", text.encode()])
    ids = answer["kept"]
    assert ids.shape == (12,) and int(answer["tokens"]) == 11  # [CLS] 9 words [SEP], one pad
    assert tok.decode(ids.tolist(), skip_special_tokens=True) == text.lower()  # the ids decode back to the text
    assert ids[0] == tok.token_to_id("[CLS]") and ids[10] == tok.token_to_id("[SEP]") and ids[11] == 0  # masked
    assert answer["types"].tolist() == [0] * 12
    np.testing.assert_array_equal(from_file["kept"], ids)
    assert int(listed[0]["tokens"]) == 4 and listed[1]["kept"].tolist() == ids.tolist()


def test_text_padding_uses_the_tokenizers_pad_token(tmp_path: Path) -> None:
    from gpux.answers.text import text_feeds
    from gpux.config.inputs import TextSteps

    project = text_project(tmp_path)
    steps = TextSteps(tokenizer="tokenizer.json", max_length=8, mask="m")
    feeds = text_feeds("lazy dog", steps, project / "tokenizer.json", "ids", "t")
    assert feeds["ids"].tolist() == [[1, *[int(i) for i in feeds["ids"][0, 1:3]], 2, 3, 3, 3, 3]]  # [PAD] is 3
    assert feeds["m"].tolist() == [[1, 1, 1, 1, 0, 0, 0, 0]] and set(feeds) == {"ids", "m"}
    longest = text_feeds("lazy dog", steps.model_copy(update={"padding": "longest"}), project / "tokenizer.json",
                         "ids", "t")
    assert longest["ids"].shape == (1, 4) and longest["m"].tolist() == [[1, 1, 1, 1]]


def test_a_long_text_is_refused_or_truncated_as_declared(tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    long = tmp_path / "long.txt"
    long.write_text(" ".join(CORPUS))  # 30 tokens (gpux.yml is three), 32 with [CLS] and [SEP]
    r = gpux("run", str(text_project(tmp_path / "strict")), str(long), "-p", "cpu")
    assert r.returncode == 2, r.stderr
    (line,) = errors(r.stderr)
    assert f"{long}: 32 tokens, longer than max_length 12" in line and "truncation: warn" in line, r.stderr
    r = gpux("run", str(text_project(tmp_path / "warn", truncation="warn")), str(long), "-p", "cpu", "--json")
    assert r.returncode == 0, r.stderr
    assert f"warning: {long}: 32 tokens, longer than max_length 12: truncated" in r.stderr
    (answer,) = json_lines(r.stdout)
    tok = Tokenizer.from_file(str(tmp_path / "warn" / "tokenizer.json"))
    kept = answer["answers"]["kept"]
    assert kept[-1] == tok.token_to_id("[SEP]")  # truncated with its special tokens kept
    assert tok.decode(kept, skip_special_tokens=True) == " ".join(" ".join(CORPUS).split()[:10])
    import gpux as api

    with api.load(tmp_path / "warn", provider="cpu") as session, warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        session.predict(" ".join(CORPUS))
    assert any("32 tokens, longer than max_length 12: truncated" in str(w.message) for w in seen)


def test_a_text_folder_gives_its_txt_files_and_bad_text_is_one_line(tmp_path: Path) -> None:
    project = text_project(tmp_path / "p")
    folder = tmp_path / "texts"
    folder.mkdir()
    (folder / "b.txt").write_text("lazy dog")
    (folder / "a.txt").write_text("quick fox")
    (folder / "image.png").write_bytes(b"\x89PNG")
    r = gpux("run", str(project), str(folder), "-p", "cpu", "--json")
    assert r.returncode == 0, r.stderr
    assert [(Path(x["file"]).name, x["answers"]["tokens"]) for x in json_lines(r.stdout)] == [("a.txt", 4),
                                                                                             ("b.txt", 4)]
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("café au lait".encode("latin-1"))
    r = gpux("run", str(project), str(bad), "-p", "cpu")
    assert r.returncode == 2 and errors(r.stderr) == [f"error: {bad}: not UTF-8 text (byte 3: invalid "
                                                      "continuation byte)"], r.stderr


def test_a_text_given_as_the_argument_answers_as_its_file(tmp_path: Path) -> None:
    """`gpux run NAME "a text"`: an argument that names no file and looks like no path is the text itself, its JSON
    line says so ("text", no "file"); a path-looking one that does not exist is still 'file not found'."""
    project = text_project(tmp_path / "p")
    text = "Where is the lazy dog?"  # a glob character: still the text
    (tmp_path / "dog.txt").write_text(text)
    r = gpux("run", str(project), text, str(tmp_path / "dog.txt"), "quick fox", "-p", "cpu", "--json")
    assert r.returncode == 0, r.stderr
    literal, from_file, other = json_lines(r.stdout)
    assert literal == {"text": text, "provider": "cpu", "answers": from_file["answers"]}
    assert from_file["file"] == str(tmp_path / "dog.txt") and other["text"] == "quick fox"
    assert other["answers"]["tokens"] == 4 and other["answers"]["kept"] != literal["answers"]["kept"]
    r = gpux("run", str(project), "the lazy dog", "notes.txt", "-p", "cpu", cwd=tmp_path)
    assert r.returncode == 2 and errors(r.stderr) == [
        "error: notes.txt: file not found → check the path (an argument is the text itself only where it names no "
        "file or folder, has no / and does not end in .txt; else write the text into a .txt file)"], r.stderr


def test_which_arguments_are_the_text_itself(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpux.answers.steps import Text, sources

    monkeypatch.chdir(tmp_path)
    (tmp_path / "lazy dog").write_text("the lazy dog")  # an existing file is read, whatever its name
    (tmp_path / "texts").mkdir()
    (tmp_path / "texts" / "a.txt").write_text("a")
    assert sources(["a good film", "lazy dog", "texts", "why?", "x" * 5000], "text") == [
        Text("a good film"), "lazy dog", str(Path("texts") / "a.txt"), Text("why?"), Text("x" * 5000)]
    for path_like in ("missing.txt", "sub/missing", "@list", "*.txt"):
        with pytest.raises(InputError):
            sources([path_like], "text")
    with pytest.raises(InputError, match=r"^a good film: file not found$"):
        sources(["a good film"], "image")  # only a text input takes the text itself


# ---- misdeclared steps, missing extras ----------------------------------------------------------------------------

def variant(folder: Path, old: str, new: str) -> Path:
    text = (folder / "gpux.yml").read_text()
    assert old in text
    (folder / "gpux.yml").write_text(text.replace(old, new))
    return folder / "gpux.yml"


@pytest.mark.parametrize(("kind", "old", "new", "said"), [
    ("audio", "      audio: {", "      text: {tokenizer: t.json, max_length: 64}\n      audio: {",
     "gpux.yml:8:7 inputs.x.preprocess: expected exactly one of image, bytes, audio, text, python; "
     "got audio, text"),
    ("audio", "rate: 16000", "rat: 16000", "inputs.x.preprocess.audio.rat: unknown field (did you mean 'rate'?)"),
    ("audio", "window: 64, hop: 32", "hop: 32", "inputs.x.preprocess.audio.hop: hop without window"),
    ("audio", "window: 64", "window: 100", "window gives rows of 100, shape [batch, 64] takes 64"),
    ("audio", "dtype: float32", "dtype: uint8", "audio samples go into a float, int16 or int32 input, not uint8"),
    ("text", "mask: attention_mask", "mask: attn",
     "inputs.input_ids.preprocess.text.mask: 'attn' is not another input (inputs: attention_mask, token_type_ids)"),
    ("text", "truncation: error", "truncation: cut", "inputs.input_ids.preprocess.text.truncation:"),
    ("text", "type_ids: token_type_ids", "type_ids: attention_mask",
     "text.type_ids: mask and type_ids both name 'attention_mask'; each goes to its own input"),
    ("text", "max_length: 12,", "max_length: 12, padding: longest,",
     "padding longest gives each text its own length; shape [batch, 12] fixes 12: declare padding: max_length"),
    ("text", "  attention_mask: {dtype: int64,", "  attention_mask: {dtype: float32,",
     "'attention_mask' is float32; mask needs an integer input"),
])
def test_misdeclared_steps_are_errors_at_their_line(tmp_path: Path, kind: str, old: str, new: str,
                                                   said: str) -> None:
    project = audio_project(tmp_path) if kind == "audio" else text_project(tmp_path)
    r = gpux("validate", str(variant(project, old, new)))
    assert r.returncode == 3 and said in r.stderr and "gpux.yml:" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_what_only_the_model_or_the_tokenizer_tells_is_found_before_a_build(magika: Path, tmp_path: Path) -> None:
    folder = tmp_path / "m"
    shutil.copytree(magika, folder, ignore=shutil.ignore_patterns(".gpux"))
    yml = variant(folder, "    shape: [batch, 2048]\n", "")
    variant(folder, "head: 1024, tail: 1024", "head: 512, tail: 512")
    r = gpux("run", str(folder), str(yml), "-p", "cpu")
    assert r.returncode == 3, r.stderr
    assert "inputs.bytes.preprocess.bytes: head + tail gives rows of 1024, shape [unk__214, 2048] takes 2048 " \
        "(in the model)" in r.stderr, r.stderr
    text = text_project(tmp_path / "t")
    (text / "tokenizer.json").unlink()
    r = gpux("run", str(text), str(yml), "-p", "cpu")
    assert r.returncode == 3 and "inputs.input_ids.preprocess.text.tokenizer: file not found: tokenizer.json" in \
        r.stderr, r.stderr  # a file gpux.yml names (config.files): missing is found when it is read
    (text / "tokenizer.json").write_text("{}")
    r = gpux("run", str(text), str(yml), "-p", "cpu")
    assert r.returncode == 3 and "not a tokenizer.json the tokenizers library reads" in r.stderr, r.stderr
    variant(text_project(tmp_path / "u"), ",\n             type_ids: token_type_ids", "")
    r = gpux("run", str(tmp_path / "u"), str(yml), "-p", "cpu")
    assert r.returncode == 2, r.stderr
    assert "a file fills attention_mask, input_ids; echo also takes token_type_ids" in r.stderr, r.stderr
    assert not (folder / ".gpux").exists() and not (tmp_path / "u" / ".gpux").exists()


BLOCK = """
import sys, importlib.abc
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == sys.argv[1]:
            raise ImportError("blocked: " + name)
sys.meta_path.insert(0, Block())
from gpux.cli.main import main
main(sys.argv[2:])
"""


@pytest.mark.parametrize(("module", "extra"), [("soundfile", "audio"), ("tokenizers", "text")])
def test_without_the_library_the_error_names_the_extra(tmp_path: Path, module: str, extra: str) -> None:
    project = audio_project(tmp_path / "p") if extra == "audio" else text_project(tmp_path / "p")
    clip = tmp_path / "clip.wav"
    shutil.copy(scipy_wav("test-44100Hz-le-1ch-4bytes.wav"), clip)
    r = subprocess.run([sys.executable, "-c", BLOCK, module, "run", str(project), str(clip), "-p", "cpu"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 4, r.stderr
    (line,) = errors(r.stderr)
    assert f"{module} is not installed" in line and f"pip install 'gpux-ml[{extra}]'" in line, r.stderr
