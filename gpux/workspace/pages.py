"""`gpux run WORKSPACE IMAGE...`: a pipeline that answers image files. Its first step takes the file through its
declared preprocess; each later step is a `crops:` step, run once per text region an earlier step answered, on
the region cut upright from the image (gpux.answers.crops) through its own image preprocess. A file's answers are
every step's, named MODEL.OUTPUT; a region list that steps crop gets each region's answers of those steps, in
reading order. `--save DIR` draws them on the page (gpux.answers.draw_regions); `gpux serve` answers the same
(gpux.serve.pages)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from gpux import report
from gpux.answers.crops import PageAnswer, PageAnswers, Region, regions_of
from gpux.answers.records import Answer
from gpux.answers.steps import Steps
from gpux.config.workspace import Step
from gpux.errors import ConfigError, Problem, UsageError
from gpux.run.session import Session
from gpux.workspace.project import Models

if TYPE_CHECKING:
    from PIL import Image

    from gpux.answers.pre import ImageSource


class PagesAsked(Protocol):
    """What `gpux run WORKSPACE FILE...` was asked for that a pipeline of pages reads (gpux.run.command.RunRequest has
    it all); the options it does not take are read by name (`refuse_unsupported`)."""

    @property
    def files(self) -> tuple[str, ...]: ...
    @property
    def provider(self) -> str | None: ...
    @property
    def store(self) -> str | None: ...
    @property
    def as_json(self) -> bool: ...
    @property
    def save(self) -> str | None: ...


@dataclass(frozen=True)
class Bound:
    """One step's model, its open session and its declared steps bound to the session's real tensors."""

    step: Step
    session: Session
    steps: Steps


def answer_pages(ms: Models, req: PagesAsked) -> int:
    """Each file through the pipeline; one answer per file, printed as text or one JSON line each."""
    from gpux.answers.draw import save_paths
    from gpux.answers.steps import input_files
    from gpux.run.inuse import holding
    from gpux.workspace.pipeline import close_all, open_sessions, refuse_unsupported
    from gpux.workspace.project import shared_choice

    if ms.workspace is None or not ms.workspace.config.pipeline:
        raise UsageError(f"{ms.place.name}: the workspace has no pipeline: to answer files; name one model's folder")
    refuse_unsupported(req, ("input_json", "input_file", "output", "benchmark", "runs", "warmup", "batch"),
                       "answering files through a pipeline")
    files = input_files(req.files, "image")
    saved = save_paths(files, refuse_drawing(ms, req.save)) if req.save else []
    choice = shared_choice(ms, req.provider)
    with holding(ms.place.name, ms.place.root, req.store, "gpux run"):
        sessions = open_sessions(ms, choice, req.store, report.progress(req.as_json))
        try:
            bound = bind(ms, sessions)
            if not req.as_json:
                for w in choice.warnings:
                    report.warn(w)
                report.info(f"{ms.place.name}: every step on {choice.provider} ({choice.source})")
            for i, file in enumerate(files):
                image = page_image(file, file)
                answers = answer_page(bound, image, file)
                doc = {"file": file, "workspace": ms.place.name, "provider": choice.provider, "answers": answers}
                if saved:
                    doc["saved"] = str(save_page(image, answers, bound, saved[i]))
                shown = page_lines(file, answers, bound) + (f"\n  saved: {doc['saved']}" if saved else "")
                print(json.dumps(doc) if req.as_json else shown, flush=True)
        finally:
            close_all(sessions)
    return 0


def bind(ms: Models, sessions: dict[str, Session]) -> list[Bound]:
    """The steps bound to their models, checked: the first takes one image file, every later one crops text
    regions an earlier step answers. A ConfigError names the step otherwise."""
    assert ms.workspace is not None
    path = str(ms.workspace.path)
    out: list[Bound] = []
    for i, step in enumerate(ms.workspace.config.pipeline):
        s = sessions[step.model]
        steps = Steps.of(ms.models[step.model], s.inputs, s.outputs)
        b = Bound(step, s, steps)
        where, why = (f"pipeline.{i}", _first_problem(b)) if i == 0 else (f"pipeline.{i}.crops", _crop_problem(b, out))
        if why:
            raise ConfigError([Problem(path, 0, 0, where, why)])
        out.append(b)
    return out


def _first_problem(b: Bound) -> str | None:
    if b.step.crops is not None:
        return "the first step takes the image file; crops: reads regions of an earlier step"
    if b.steps.kind != "image":
        return f"{b.step.model!r} takes no image files (no preprocess: image on its one input)"
    return None


def _crop_problem(b: Bound, earlier: list[Bound]) -> str | None:
    if b.step.crops is None:
        return "a pipeline run on image files chains its later steps by crops: (MODEL.OUTPUT of text regions)"
    if b.steps.kind != "image":
        return f"{b.step.model!r} takes no image crops (no preprocess: image on its one input)"
    model, _, output = b.step.crops.partition(".")
    found = next((e for e in earlier if e.step.model == model), None)
    kind = found.steps.kinds.get(output) if found else None
    if kind is None or kind.key != "text_boxes":
        return f"{b.step.crops!r} answers no text regions (an output of {model!r} with postprocess: text_boxes)"
    return None


def answer_page(bound: list[Bound], image: Image.Image, name: str) -> PageAnswers:
    """One image's answers (`image`: as `page_image` decodes it; `name` what messages call it): the first step's
    on the image, then each crops step's on every region it reads."""
    first, *later = bound
    feeds, placement = first.steps.feeds(image, name)
    outputs = first.session.run(feeds)
    answers: PageAnswers = {f"{first.step.model}.{k}": _plain(v)
                            for k, v in first.steps.file_answers(outputs, placement).items()}
    rgb = image.convert("RGB") if later else image  # (no crops step: unused)
    for b in later:
        assert b.step.crops is not None
        regions = answers[b.step.crops] = _ordered(regions_of(answers, b.step.crops))
        for j, region in enumerate(regions):
            from gpux.answers.crops import upright_crop

            crop_feeds, at = b.steps.feeds(upright_crop(rgb, region["box"]), f"{name} region {j}")
            got = b.steps.answers(b.session.run(crop_feeds), at)
            region.setdefault("answers", {}).update({f"{b.step.model}.{k}": _plain(v) for k, v in got.items()})
    return answers


def _ordered(regions: list[Region]) -> list[Region]:
    from gpux.answers.crops import reading_order

    return reading_order([r.copy() for r in regions])  # copies: a region gains its answers


def page_image(source: ImageSource, name: str) -> Image.Image:
    """The image of a file (a path or its bytes), decoded and upright (its EXIF turn applied), in its own mode:
    what the first step's preprocess reads and the pixels the regions' corners are in. An InputError names `name`."""
    from gpux.answers.pre import open_image
    from gpux.errors import InputError
    from gpux.optional import require

    ops = require("PIL.ImageOps", "images")
    try:
        image: Image.Image = ops.exif_transpose(open_image(source, name))
        image.load()
    except (OSError, SyntaxError, ValueError) as exc:
        raise InputError(f"{name}: cannot decode the image: {exc}") from exc
    return image


def refuse_drawing(ms: Models, folder: str) -> str:
    """`--save FOLDER`, refused where the pipeline answers nothing to draw: its first step declares no postprocess."""
    assert ms.workspace is not None
    first = ms.workspace.config.pipeline[0].model
    if not any(o.postprocess for o in (ms.models[first].config.outputs or {}).values()):
        raise UsageError(f"--save {folder}: {first!r}, the pipeline's first step, declares no postprocess for its "
                         "outputs, so there is nothing to draw",
                         hint="declare postprocess: (boxes, topk, text_boxes; docs/answers.md)")
    return folder


def save_page(image: Image.Image, answers: PageAnswers, bound: list[Bound], path: Path) -> Path:
    """The page with every step's answers drawn (gpux.answers.draw_regions), written to `path`."""
    from gpux.answers.draw import write_picture
    from gpux.answers.draw_regions import drawn_page

    kinds = {f"{b.step.model}.{k}": v for b in bound for k, v in b.steps.kinds.items()}
    blocks = {f"{b.step.model}.{k}": v for b in bound for k, v in b.steps.blocks.items()}
    cropped = {b.step.crops for b in bound if b.step.crops}
    return write_picture(drawn_page(image.convert("RGB"), answers, cropped, kinds, blocks), path)


def _plain(value: Answer) -> Answer:
    tolist = getattr(value, "tolist", None)  # an array (or a numpy scalar) as its plain values
    return tolist() if tolist is not None else value


def page_lines(file: str, answers: PageAnswers, bound: list[Bound]) -> str:
    """`file:` then each answer as its kind writes it; a cropped region: its corners and score, then its own
    answers indented."""
    from gpux.answers.lines import answer_lines

    kinds = {f"{b.step.model}.{k}": v for b in bound for k, v in b.steps.kinds.items()}
    cropped = {b.step.crops for b in bound if b.step.crops}

    def written(name: str, answer: PageAnswer, indent: str = "") -> list[str]:
        return [indent + line for line in answer_lines(kinds.get(name), name, answer)]

    lines = [f"{file}:"]
    for name, answer in answers.items():
        if name not in cropped:
            lines += written(name, answer)
            continue
        regions = regions_of(answers, name)
        lines.append(f"  {name}: {len(regions)} region{'s' if len(regions) != 1 else ''}")
        for r in regions:
            lines.append(f"    {r['score']:.3f} " + " ".join(f"({x:.0f},{y:.0f})" for x, y in r["box"]))
            lines += [line for k, a in r.get("answers", {}).items() for line in written(k, a, "    ")]
    return "\n".join(lines)


__all__ = ["Bound", "PagesAsked", "answer_page", "answer_pages", "bind", "page_image", "save_page"]
