"""One Ray Data actor of `gpux run NAME SOURCE --on ray`: opens the model once, as `gpux run` does (selection,
fallback, the verified artifact from the store), and answers each batch of files handed to it through the declared
steps and `answers.many.answer_many`, one JSON document per file, a file that fails recorded as its error."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, kw_only=True)
class ActorSpec:
    """What an actor needs to open the model: its gpux.yml, the store, the provider request, files per inference."""

    config: str
    store: str | None = None
    provider: str | None = None
    strict: bool = False
    batch: int | None = None


class FileAnswerer:
    """The callable class Ray Data runs in each actor: `{"index", "file"}` rows in, `{"index", "line"}` out, where
    a line is the file's `gpux run --json` document (or `{"file", "error"}`)."""

    def __init__(self, spec: ActorSpec) -> None:
        from gpux.answers.many import batch_size
        from gpux.answers.steps import Steps
        from gpux.config.locate import open_project
        from gpux.model.io import interface
        from gpux.run.session import load

        project = open_project(spec.config)
        inputs, outputs = interface(project, spec.store)
        self.steps = Steps.of(project, inputs, outputs)
        self.session = load(project, spec.provider, strict=spec.strict, store_dir=spec.store,
                            provider_source="--provider")
        self.batch = batch_size(self.steps, spec.batch)
        self.pool = ThreadPoolExecutor(os.cpu_count() or 1)  # Pillow, soundfile and numpy release the GIL

    def __call__(self, rows: dict[str, Any]) -> dict[str, Any]:
        import numpy as np

        files = [str(f) for f in rows["file"]]
        decoded = list(self.pool.map(self._decode, files))
        lines: list[str] = [json.dumps({"file": f, "error": d}) if isinstance(d, str) else "" for f, d in
                            zip(files, decoded, strict=True)]
        good = [i for i, d in enumerate(decoded) if not isinstance(d, str)]
        for i, line in self._answered(files, decoded, good):
            lines[i] = line
        return {"index": rows["index"], "line": np.array(lines, dtype=object)}

    def _decode(self, file: str) -> tuple[dict[str, Any], Any] | str:
        """The file's (feeds, placement), or its error as one line."""
        from pathlib import Path

        try:
            source: Any = read_uri(file) if "://" in file else Path(file)
            return self.steps.feeds(source, file)
        except Exception as exc:  # a file that fails is recorded, the others go on
            return error_text(exc)

    def _answered(self, files: list[str], decoded: list[Any], good: list[int]) -> list[tuple[int, str]]:
        """(position, line) of each decoded file: batched as `gpux run` batches; where a batch's inference fails,
        each of its files is run alone so that only the file that fails is recorded as an error."""
        from gpux.answers.many import answer_many

        def answered(picked: list[int], batch: int) -> list[tuple[int, str]]:
            found = answer_many(self.session, self.steps, picked, lambda j: decoded[picked[j]], batch=batch,
                                workers=0)
            return [(picked[j], self._line(files[picked[j]], answers)) for j, answers in found]

        try:
            return answered(good, self.batch)
        except Exception:  # one file of the batch failed: find which
            out: list[tuple[int, str]] = []
            for i in good:
                try:
                    out += answered([i], 1)
                except Exception as exc:  # that file alone
                    out.append((i, json.dumps({"file": files[i], "error": error_text(exc)})))
            return out

    def _line(self, file: str, answers: dict[str, Any]) -> str:
        plain = {k: v.tolist() if hasattr(v, "tolist") else v for k, v in answers.items()}
        return json.dumps({"file": file, "provider": self.session.provider, "answers": plain})


def read_uri(uri: str) -> bytes:
    """A file named by a URI (s3://, gs://, hdfs://, file://), read through pyarrow's filesystems."""
    from pyarrow import fs

    filesystem, path = fs.FileSystem.from_uri(uri)
    with filesystem.open_input_stream(path) as stream:
        return bytes(stream.read())


def error_text(exc: BaseException) -> str:
    """A file's error in one line: gpux's own message, else `Type: first line`."""
    from gpux.errors import GpuxError, first_line

    return exc.lines()[0] if isinstance(exc, GpuxError) else first_line(exc)
