"""Generate the ``silero_vad`` example: Silero VAD's sequence model (16 kHz voice activity), copied from the
``silero-vad`` wheel with its LSTM state made internal.

``silero-vad`` ships ``data/silero_vad_16k_sequence.onnx``: input float32 [frames, 576] (each frame: the 64 samples
before it, then its 512 new ones), h and c float32 [1, 1, 128] (the LSTM state at the first frame) -> speech_probs
float32 [frames] (one speech probability per 32 ms frame), hn and cn. A clip starts from a zero state, so h and c
become zero constants here and hn, cn are dropped: the model then takes the frames alone, which is what gpux.yml's
audio windows give it (window 576, hop 512, 64 zeros before the clip). ``make install`` puts the wheel in the venv;
nothing is downloaded. Writes ``model.onnx``. Then ``gpux run . speech.wav`` answers a probability per frame.
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

HERE = Path(__file__).resolve().parent
STATE = ("h", "c")


class Missing(Exception):
    """The package this example copies its model from is not installed."""


def source() -> Path:
    spec = importlib.util.find_spec("silero_vad")
    if spec is None or not spec.submodule_search_locations:
        raise Missing("silero-vad is not installed (make install puts it in the venv)")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "silero_vad_16k_sequence.onnx"
    if not path.is_file():
        raise Missing(f"{path} is missing from the installed silero-vad")
    return path


def export(path: Path) -> Path:
    """The sequence model with h and c as zero initializers and speech_probs its only output."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(source()))
    graph = model.graph
    for name in STATE:
        (tensor,) = [i for i in graph.input if i.name == name]
        dims = [d.dim_value for d in tensor.type.tensor_type.shape.dim]
        graph.initializer.append(numpy_helper.from_array(np.zeros(dims, np.float32), name))
        graph.input.remove(tensor)
    for out in [o for o in graph.output if o.name != "speech_probs"]:
        graph.output.remove(out)
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="folder to write model.onnx into")
    out = parser.parse_args().out
    try:
        export(out / "model.onnx")
    except Missing as exc:
        raise SystemExit(f"error: {exc}") from None
    print(f"wrote {out / 'model.onnx'}")


if __name__ == "__main__":
    main()
