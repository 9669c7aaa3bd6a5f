"""`gpux run NAME FILE...`: each file (a folder: its files of the input's kind) through the declared preprocess,
the model and the declared postprocess; one answer per file, printed as text or one JSON line each."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpux import report
from gpux.arrays import Feeds

if TYPE_CHECKING:
    from gpux.config.load import Project
    from gpux.run.command import RunRequest


def answer_files(project: Project, req: RunRequest) -> int:
    """Files are found before anything is built or loaded; a file that cannot be read stops the run (exit 2)."""
    import time

    from gpux.answers.many import answer_many, batch_size
    from gpux.answers.steps import Steps, file_kind, sources
    from gpux.model.io import interface
    from gpux.run.inuse import holding
    from gpux.run.session import load

    files = sources(req.files, file_kind(project))  # a text project's argument may be the text itself
    inputs, outputs = interface(project, req.store)
    steps = Steps.of(project, inputs, outputs)  # what the model's real shapes say of the steps, before any build
    names = [_name(f) for f in files]  # a file's path; a Text only where the input takes text
    steps.file_input(names[0])
    saved = _save_paths(project, steps, names, req.save)
    with holding(project.name, project.root, req.store, "gpux run"), \
            load(project, req.provider, strict=req.strict, store_dir=req.store, log=report.progress(req.as_json),
                 placement=req.placement, provider_source="--provider") as session:
        text = steps.kind == "text"  # its decoding warns (a truncated text): one at a time, in this thread
        decode = (lambda i: _feeds(steps, files[i])) if text else (lambda i: steps.feeds(Path(names[i]), names[i]))
        started = time.perf_counter()
        for i, found in answer_many(session, steps, files, decode, batch=batch_size(steps, req.batch),
                                    workers=0 if text else None):
            if not req.as_json and i == 0:  # after the first inference: the provider that answered it
                for w in session.warnings:
                    report.warn(w)
                for line in report.provider_lines(session.report()):
                    (report.warn if line.startswith("skipped ") else report.info)(line)
            file = files[i]
            answers = {k: _plain(v) for k, v in found.items()}
            doc = {**_said(file), "provider": session.provider, "answers": answers}
            if saved:
                from gpux.answers.draw import save_drawn

                doc["saved"] = str(save_drawn(names[i], answers, saved[names[i]], steps.kinds, steps.blocks))
            if req.as_json:
                print(json.dumps(doc), flush=True)
            else:
                shown = format_answers(_label(file), answers, steps.kinds)
                print(shown + (f"\n  saved: {doc['saved']}" if saved else ""), flush=True)
        if len(files) > 1:
            seconds = time.perf_counter() - started
            kind = "files" if all(isinstance(f, str) for f in files) else "inputs"
            report.info(f"{len(files)} {kind} in {seconds:.2f}s ({len(files) / seconds:.1f} {kind}/s)")
    return 0


def answer_elsewhere(project: Project, req: RunRequest) -> int:
    """`--on ray[...]`: the files answered on Ray Data (gpux.run.ray_batch); options that mean nothing there
    are refused."""
    from gpux.errors import UsageError

    if not req.files:
        raise UsageError(f"--on {req.on} answers files; pass them (gpux run NAME FOLDER --on {req.on})")
    given = [f"--{k}" for k, v in (("save", req.save), ("benchmark", req.benchmark)) if v]  # the rest: READ_BY
    if given:
        raise UsageError(f"{', '.join(given)} cannot go with --on {req.on}; it answers files")
    from gpux.run.ray_batch import BatchRequest, answer_on_ray

    return answer_on_ray(project, BatchRequest(
        sources=tuple(req.files), on=req.on, output=req.output, resume=req.resume, provider=req.provider,
        strict=req.strict, store=req.store, batch=req.batch, concurrency=req.concurrency, num_cpus=req.actor_cpus,
        num_gpus=req.actor_gpus, quiet=req.as_json))


def _save_paths(project: Any, steps: Any, files: list[str], folder: str | None) -> dict[str, Path]:
    """Where --save writes each file's drawing; refused where no output answers anything to draw."""
    from gpux.answers.draw import save_paths
    from gpux.errors import UsageError

    if not folder:
        return {}
    if steps.kind != "image":
        raise UsageError(f"--save {folder}: {project.name} takes {steps.kind} files; --save draws answers on images")
    if not steps.post:
        raise UsageError(f"--save {folder}: {project.name} declares no postprocess for its outputs, so there is "
                         "nothing to draw", hint="declare postprocess: (boxes, topk or ctc; docs/answers.md)")
    return dict(zip(files, save_paths(files, folder), strict=True))


def _name(source: Any) -> str:
    """A source as messages name it: its path, or `text "..."`."""
    return source if isinstance(source, str) else source.name


def _said(source: Any) -> dict[str, str]:
    """What a JSON line says it answers: {"file": PATH}, or {"text": TEXT} for a text given as an argument."""
    return {"file": source} if isinstance(source, str) else {"text": source.text}


def _label(source: Any) -> str:
    """The printed answers' heading: the path, or the text quoted."""
    return source if isinstance(source, str) else json.dumps(source.text, ensure_ascii=False)


def _feeds(steps: Any, source: Any) -> tuple[Feeds, Any]:
    """One text's feeds: a path is read as a file, not as the text; a Text is the text. Warnings (a truncated
    text) printed."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = steps.feeds(Path(source), source) if isinstance(source, str) else steps.feeds(source.text, source.name)
    for w in caught:
        report.warn(str(w.message))
    return out


def _plain(value: Any) -> Any:
    return value.tolist() if hasattr(value, "tolist") else value


def format_answers(file: str, answers: dict[str, Any], kinds: Mapping[str, Any]) -> str:
    """`file:` then each output's lines as its kind writes them (gpux.config.kinds), a passthrough output's values."""
    from gpux.answers.lines import answer_lines

    return "\n".join([f"{file}:", *(line for name, answer in answers.items()
                                    for line in answer_lines(kinds.get(name), name, answer))])
