"""Generate the ``magika_filetype`` example: Google's Magika content-type model, copied from the ``magika`` wheel.

``magika`` ships ``models/standard_v3_3/model.onnx`` (bytes int32 [batch, 2048]: a file's first and last 1024 bytes,
padded with 256 -> target_label float32 [batch, 214]: one probability per content type) and ``config.min.json`` (how
the bytes are read, the 214 type names); ``make install`` puts it in the venv, nothing is downloaded. Writes
``model.onnx`` and ``labels.txt`` (the type names, one per line), after checking that the config still reads files
the way gpux.yml declares. Then ``gpux run . FILE`` answers the file's type.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MODEL = ("models", "standard_v3_3")
# gpux.yml's preprocess, in the config's words: a change in the wheel is refused rather than run misread
DECLARED = {"beg_size": 1024, "mid_size": 0, "end_size": 1024, "block_size": 4096, "padding_token": 256,
            "use_inputs_at_offsets": False}


class Missing(Exception):
    """The package this example copies its model from is not installed, or reads files otherwise."""


def folder() -> Path:
    spec = importlib.util.find_spec("magika")
    if spec is None or not spec.submodule_search_locations:
        raise Missing("magika is not installed (make install puts it in the venv)")
    path = Path(next(iter(spec.submodule_search_locations))).joinpath(*MODEL)
    if not (path / "model.onnx").is_file() or not (path / "config.min.json").is_file():
        raise Missing(f"{path} lacks model.onnx or config.min.json in the installed magika")
    return path


def config() -> dict[str, Any]:
    """The model's config; Missing where it reads files otherwise than gpux.yml declares."""
    cfg = json.loads((folder() / "config.min.json").read_text())
    changed = {k: cfg.get(k) for k, v in DECLARED.items() if cfg.get(k) != v}
    if changed:
        raise Missing(f"magika's config reads files otherwise than gpux.yml declares: {changed}")
    return cfg


def export(path: Path) -> Path:
    """The model at `path`, labels.txt beside it."""
    labels = config()["target_labels_space"]
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(folder() / "model.onnx", path)
    (path.parent / "labels.txt").write_text("\n".join(labels) + "\n")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="folder to write model.onnx and labels.txt into")
    out = parser.parse_args().out
    try:
        export(out / "model.onnx")
    except Missing as exc:
        raise SystemExit(f"error: {exc}") from None
    print(f"wrote {out / 'model.onnx'} and {out / 'labels.txt'}")


if __name__ == "__main__":
    main()
