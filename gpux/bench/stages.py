"""The pre-processing / inference / post-processing split of `gpux run NAME --benchmark` for a project that declares
steps (docs/answers.md): every measured call takes one image (or, with postprocess only, the seeded tensors) through
the declared preprocess, the model and the declared postprocess, as `gpux run NAME FILE` does, and clocks each stage
on the way. The protocol times the whole call (warm-up, least count and duration, percentiles), so end to end is
at least the sum of the stages call by call, and each stage is summarized over the same measured calls."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any

from gpux.arrays import Feeds, Outputs
from gpux.bench import protocol as bench
from gpux.bench.records import Figures, Pipelined, Row, Said
from gpux.errors import InputError

STAGES = ("preprocess", "inference", "postprocess")
NOISE_SEED = 0


def check_files(project: Any, files: tuple[str, ...], store: str | None, tensors_asked: list[str]) -> list[str]:
    """The files of `--benchmark FILE...` (a folder: its files of the declared kind), checked as `gpux run NAME FILE`
    checks them, before anything is built: they exist, and the model takes files."""
    from gpux.answers.steps import Steps, file_kind, input_files
    from gpux.errors import UsageError
    from gpux.model.io import interface

    if tensors_asked:
        raise UsageError(f"{', '.join(tensors_asked)} and files both given: the files run through the declared"
                         " preprocess, one file per call; pass one kind of input")
    found = input_files(list(files), file_kind(project))
    inputs, outputs = interface(project, store)
    Steps.of(project, inputs, outputs).file_input(found[0])
    return found


@dataclass(frozen=True)
class Inputs:
    """What the measured calls answer: items (file paths, or an encoded image) taken in turn, or None where no input
    declares preprocess or no file is given for a kind gpux cannot generate (the row's seeded tensors are used);
    `said` tells which, for the output."""

    items: list[Any] | None  # paths or encoded bytes
    said: Said


def stage_inputs(steps: Any, files: list[str], sizes: dict[str, int]) -> Inputs:
    """The files given, else one generated image of the image input's declared height and width (seeded noise,
    PNG-encoded in memory, so each call decodes it as it would a file); tensors where no image is taken."""
    from pathlib import Path

    if not steps.pre:
        return Inputs(None, {"kind": "tensors", "note": "seeded tensors of the declared shapes (no preprocess)"})
    if files:  # paths, so that a text input reads the file rather than taking its name as the text
        return Inputs([Path(f) for f in files], {"kind": "files", "files": list(files)})
    if not steps.images:
        return Inputs(None, {"kind": "tensors", "note": f"seeded tensors of the declared shapes: pass {steps.kind} "
                             "files to time the preprocess too"})
    _, spec, tensor = steps.file_input("the generated image")
    image_steps = spec.image
    h, w = declared_size(tensor, image_steps.layout, sizes)
    return Inputs([noise_png(h, w)], {"kind": "generated", "size": [h, w], "note": (
        f"a generated {w}x{h} image (seeded noise, PNG in memory, decoded each call); pass image files to measure "
        "on yours")})


def declared_size(tensor: Any, layout: str, sizes: dict[str, int]) -> tuple[int, int]:
    """Height and width of an image input's declared shape (symbolic dims from the benchmark's sizes, else 224)."""
    shape = tuple(tensor.shape or ())
    hw = shape[2:4] if layout == "nchw" else shape[1:3]
    if len(hw) != 2:
        return 224, 224
    h, w = (d if isinstance(d, int) else sizes.get(str(d), 224) for d in hw)
    return h, w


def noise_png(height: int, width: int) -> bytes:
    import io

    import numpy as np

    from gpux.optional import require

    image_mod = require("PIL.Image", "images")
    pixels = np.random.default_rng(NOISE_SEED).integers(0, 256, (height, width, 3), dtype=np.uint8)
    buf = io.BytesIO()
    image_mod.fromarray(pixels).save(buf, format="PNG")
    return buf.getvalue()


@dataclass(kw_only=True)
class Split:
    """A zero-argument call for the protocol: the next item's preprocess, inference, postprocess, each clocked.
    Safe to share between workers (list appends and the item counter are atomic)."""

    session: Any
    steps: Any
    inputs: Inputs
    feeds: Feeds  # the tensors where no item is preprocessed
    infer: Any = None  # Session.prepared(): the hot path, set by first()
    times: dict[str, list[int]] = field(default_factory=lambda: {s: [] for s in STAGES})
    _turn: Any = field(default_factory=itertools.count)

    def pre(self) -> tuple[Feeds, Any]:
        from gpux.answers.steps import describe

        if self.inputs.items is None:
            return self.feeds, None
        items = self.inputs.items
        item = items[next(self._turn) % len(items)]
        return self.steps.feeds(item, "the generated image" if isinstance(item, bytes) else describe(item))

    def post(self, values: Outputs, placement: Any) -> Any:
        if not self.steps.post:
            return None
        outputs = dict(zip(self.session.output_names, values, strict=True))
        if self.inputs.items is not None:
            return self.steps.file_answers(outputs, placement)
        return [self.steps.answers(outputs, None, r) for r in range(self.steps.rows(outputs))]

    def first(self) -> tuple[Feeds, float]:
        """One call through every stage, untimed but for the inference: the first inference of the row (its
        shapes checked, the usual fallback on failure). Returns the feeds it ran and the inference's seconds."""
        self.infer = self.session.prepared()
        feeds, placement = self.pre()
        started = time.perf_counter()
        values = self.infer(feeds)
        took = time.perf_counter() - started
        self.post(values, placement)
        return feeds, took

    def __call__(self) -> None:
        clock = time.perf_counter_ns
        t0 = clock()
        feeds, placement = self.pre()
        t1 = clock()
        values = self.infer(feeds)
        t2 = clock()
        self.post(values, placement)
        t3 = clock()
        self.times["preprocess"].append(t1 - t0)
        self.times["inference"].append(t2 - t1)
        self.times["postprocess"].append(t3 - t2)

    def pipelined(self, seconds: float = 1.0) -> Pipelined | None:
        """Files per second the way `gpux run NAME FOLDER` answers them (decoded ahead in threads, batched where
        the batch dimension is free: gpux.answers.many), over the files in turn for at least `seconds`."""
        from gpux.answers.many import answer_many, batch_size

        items = self.inputs.items
        if not items or len(items) < 2:
            return None
        batch = batch_size(self.steps, None)
        done, started = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - started) < seconds or not done:
            done += sum(1 for _ in answer_many(self.session, self.steps, items,
                                               lambda i: self.steps.feeds(items[i], str(i)), batch=batch))
        return {"files_per_s": done / elapsed, "files": done, "batch": batch}

    def summary(self, m: bench.Measurement, e2e: Figures | None) -> Row:
        """What the row adds: each stage's statistics over the measured calls (warm-up left out), end to end
        (the row's own stats), the stages' raw timings, and the inputs measured."""
        n = len(m.latencies_s)
        declared = {"preprocess": self.inputs.items is not None, "inference": True,
                    "postprocess": bool(self.steps.post)}
        stages: dict[str, Figures | None] = {}
        raw: dict[str, list[float]] = {}
        for stage in STAGES:
            xs = [x / 1e9 for x in self.times[stage][-n:]] if declared[stage] else None
            if not xs:
                stages[stage] = None
                continue
            stats = bench.summarize(xs, m.wall_s)
            stats["throughput"] = None  # a stage alone has no measured window; end to end has
            stages[stage] = stats
            raw[stage] = [round(x * 1e3, 6) for x in xs]
        stages["end_to_end"] = e2e
        return {"stages": stages, "stage_latencies_ms": raw, "inputs": self.inputs.said, "pipelined": self.pipelined()}


def open_split(session: Any, project: Any, files: list[str], sizes: dict[str, int], feeds: Feeds) -> Split:
    """The split call for an opened session (its steps bound to the model's real inputs and outputs)."""
    from gpux.answers.steps import Steps

    steps = Steps.of(project, session.inputs, session.outputs)
    if files and not steps.pre:
        raise InputError(f"{files[0]}: {project.name} declares no preprocess for its inputs, so it takes tensors only")
    return Split(session=session, steps=steps, inputs=stage_inputs(steps, files, sizes), feeds=feeds)


def speed_line(row: Row) -> str | None:
    """Ultralytics' predict speed line for a row with stages: medians per image, end to end beside them."""
    stages, stats = row.get("stages"), row.get("stats")
    if not stages or not stats:
        return None
    words = {"preprocess": "pre-process", "inference": "inference", "postprocess": "post-process"}
    parts = [f"{stage['p50'] * 1e3:.2f} ms {words[s]}" for s in STAGES if (stage := stages.get(s))]
    shapes = " ".join(f"{list(v)}" for v in (row.get("shapes") or {}).values())
    per = "image" if stages.get("preprocess") else "call"
    many = row.get("pipelined")
    overlap = f"; files at once: {many['files_per_s']:.1f} files/s (decoded in threads, batch {many['batch']})" \
        if many else ""
    return (f"{row['provider']} {row['precision']}: speed {', '.join(parts)}, "
            f"{stats['p50'] * 1e3:.2f} ms end to end per {per} (medians) at shape {shapes}{overlap}")


def inputs_line(row: Row) -> str:
    """Which inputs the stages were measured on."""
    said = row.get("inputs") or {}
    if said.get("kind") == "files":
        files = said["files"]
        more = f" and {len(files) - 3} more" if len(files) > 3 else ""
        return f"inputs: {', '.join(files[:3])}{more}{', in turn' if len(files) > 1 else ''}"
    return f"inputs: {said.get('note', '-')}"
