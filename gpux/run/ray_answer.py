"""One Ray Data actor of `gpux run NAME SOURCE --on ray`: opens the model once, as `gpux run` does (selection,
fallback, the verified artifact from the store), and answers each batch of files handed to it through the declared
steps and `answers.many.answer_many`, one JSON document per file, a file that fails recorded as its error."""

from __future__ import annotations

import json
import os
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpux.errors import Failure, classify

if TYPE_CHECKING:
    import numpy as np

    from gpux.answers.decoding import Where
    from gpux.arrays import Feeds

    Decoded = tuple[Feeds, Where | None]  # a file's feeds and where its input sits in them (an image's, a text's)


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

    def __call__(self, rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:  # Ray Data's batch: columns
        import numpy as np

        files = [str(f) for f in rows["file"]]
        pending = [self.pool.submit(self._decode, f) for f in files]  # decoded ahead while the model runs
        lines = [""] * len(files)
        start = 0
        while start < len(files):
            start = self._answer_from(files, pending, lines, start)
        return {"index": rows["index"], "line": np.array(lines, dtype=object)}

    def _decode(self, file: str) -> Decoded | str:
        """The file's (feeds, placement), or its error as one line."""
        from pathlib import Path

        try:
            source: Any = read_uri(file) if "://" in file else Path(file)
            return self.steps.feeds(source, file)
        except Exception as exc:  # a file that fails is recorded, the others go on; a gpux bug stops the run
            if classify(exc) is Failure.BUG:
                raise
            return error_text(exc)

    def _answer_from(self, files: list[str], pending: list[Future[Any]], lines: list[str], start: int) -> int:
        """Files from `start` on answered in batches, as `gpux run` batches them, into `lines`; where to go on: past
        a file that could not be decoded (its error recorded), else the end. Where an inference fails, each file
        not yet answered is run alone, so that only a file that fails is recorded as an error."""
        from gpux.answers.many import answer_many

        picked = list(range(start, len(files)))

        def decoded(j: int) -> Decoded:
            got = pending[picked[j]].result()
            if isinstance(got, str):
                raise _Unread(picked[j], got)
            return got

        try:
            for j, answers in answer_many(self.session, self.steps, picked, decoded, batch=self.batch, workers=0):
                lines[picked[j]] = self._line(files[picked[j]], answers)
        except _Unread as unread:
            lines[unread.index] = json.dumps({"file": files[unread.index], "error": unread.text})
            return unread.index + 1
        except Exception as exc:  # an inference failed: each file alone, so only those that fail are recorded
            if classify(exc) is Failure.BUG:
                raise
            for i in picked:
                lines[i] = lines[i] or self._alone(files[i], pending[i].result())
        return len(files)

    def _alone(self, file: str, decoded: Decoded | str) -> str:
        if isinstance(decoded, str):
            return json.dumps({"file": file, "error": decoded})
        try:
            outputs = dict(zip(self.session.output_names, self.session.run_feeds(decoded[0]), strict=True))
            return self._line(file, self.steps.file_answers(outputs, decoded[1]))
        except Exception as exc:  # this file's inference fails: recorded as its error (a gpux bug stops the run)
            if classify(exc) is Failure.BUG:
                raise
            return json.dumps({"file": file, "error": error_text(exc)})

    def _line(self, file: str, answers: dict[str, Any]) -> str:
        plain = {k: v.tolist() if hasattr(v, "tolist") else v for k, v in answers.items()}
        return json.dumps({"file": file, "provider": self.session.provider, "answers": plain})


class _Unread(Exception):
    """A file that could not be read or decoded, where answer_many comes to it."""

    def __init__(self, index: int, text: str) -> None:
        super().__init__(text)
        self.index, self.text = index, text


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
