"""Where `gpux run NAME SOURCE --on ray` writes its answers: JSON lines (stdout, or a .jsonl file, appended and
flushed as answers come back), or Parquet (.parquet, written whole at the end); what a resumed run keeps."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, TextIO, TypedDict

from gpux.errors import UsageError

SUFFIXES = (".jsonl", ".json", ".parquet")
COLUMNS = ("file", "provider", "answers", "error")  # Parquet: answers as JSON text, error empty where answered


class Row(TypedDict):
    """One file in a Parquet output (COLUMNS): its answers as JSON text, or its error."""

    file: str
    provider: str | None
    error: str | None
    answers: str | None


class Answers:
    """The output: `write` one JSON line per file, `close` at the end. `answered` are the files a resumed run
    skips (answered in an earlier run; files recorded with an error are answered again)."""

    def __init__(self, path: str | None, resume: bool) -> None:
        self.path = Path(path) if path else None
        self.parquet = bool(path) and str(path).endswith(".parquet")
        self.rows: list[Row] = []
        self.count = 0
        self.errors = 0
        check_output(path, resume)
        kept = self._kept() if resume else []
        self.answered = {doc["file"] for doc in kept}
        self.stream: TextIO | None = None
        if self.parquet:
            self.rows = [_row(doc) for doc in kept]
        elif self.path is not None:
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_text("".join(json.dumps(doc) + "\n" for doc in kept), encoding="utf-8")
            tmp.replace(self.path)  # errors and a line cut short by a crash dropped, the answers kept
            self.stream = self.path.open("a", encoding="utf-8")
        else:
            self.stream = sys.stdout

    def _kept(self) -> list[dict[str, Any]]:
        """The answered documents of an earlier output (none where it does not exist yet)."""
        assert self.path is not None
        if not self.path.exists():
            return []
        if self.parquet:
            import pyarrow.parquet as pq

            docs = [_doc(r) for r in pq.read_table(self.path).to_pylist()]
        else:
            docs = []
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    docs.append(json.loads(line))
                except ValueError:  # the last line of a run that was killed while writing it
                    continue
        return [d for d in docs if isinstance(d, dict) and "file" in d and "error" not in d]

    def write(self, lines: list[str]) -> None:
        self.count += len(lines)
        self.errors += sum("error" in json.loads(line) for line in lines)
        if self.stream is not None:
            self.stream.write("".join(line + "\n" for line in lines))
            self.stream.flush()
        else:
            self.rows += [_row(json.loads(line)) for line in lines]

    def close(self) -> None:
        if self.parquet and self.path is not None:
            import pyarrow as pa
            import pyarrow.parquet as pq

            tmp = self.path.with_name(self.path.name + ".tmp")
            table = pa.Table.from_pylist(self.rows, schema=pa.schema([(c, pa.string()) for c in COLUMNS]))
            pq.write_table(table, tmp)
            tmp.replace(self.path)
        elif self.stream is not None and self.stream is not sys.stdout:
            self.stream.close()


def check_output(path: str | None, resume: bool) -> None:
    """--output and --resume, checked before anything is listed, built or started."""
    if path and not str(path).endswith(SUFFIXES):
        raise UsageError(f"--output {path}: answers are written as JSON lines (*.jsonl) or Parquet (*.parquet)")
    if resume and not path:
        raise UsageError("--resume skips the files an earlier run answered; name its --output file")


def _row(doc: dict[str, Any]) -> Row:
    return {"file": doc["file"], "provider": doc.get("provider"), "error": doc.get("error"),
            "answers": json.dumps(doc["answers"]) if "answers" in doc else None}


def _doc(row: Row) -> dict[str, Any]:
    if row.get("error"):
        return {"file": row["file"], "error": row["error"]}
    return {"file": row["file"], "provider": row["provider"], "answers": json.loads(row["answers"] or "null")}
