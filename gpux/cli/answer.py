"""`gpux run NAME FILE...`: each file (a folder: its images) through the declared preprocess, the model and the
declared postprocess; one answer per file, printed as text or one JSON line each."""

from __future__ import annotations

import json
from typing import Any

from gpux import report


def answer_files(project: Any, req: Any) -> int:
    """Files are found before anything is built or loaded; a file that cannot be read stops the run (exit 2)."""
    from gpux.answers.steps import Steps, image_files
    from gpux.errors import UsageError
    from gpux.model.io import effective_io, load_checked
    from gpux.run.inuse import holding
    from gpux.run.session import load

    given = [f"--{k}" for k, v in (("input", req.input_json), ("file", req.input_file), ("output", req.output)) if v]
    if given:
        raise UsageError(f"{', '.join(given)} and image files both given; pass one kind of input")
    files = image_files(req.files)
    inputs, outputs = effective_io(project, load_checked(project, req.store))
    steps = Steps.of(project, inputs, outputs)  # what the model's real shapes say of the steps, before any build
    steps.image_input(files[0])
    with holding(project.name, project.root, req.store, "gpux run"), \
            load(project, req.provider, strict=req.strict, store_dir=req.store, log=report.progress(req.as_json),
                 placement=req.placement, provider_source="--provider") as session:
        if not req.as_json:
            for w in session.warnings:
                report.warn(w)
            for line in report.provider_lines(session.report()):
                (report.warn if line.startswith("skipped ") else report.info)(line)
        for file in files:
            feeds, placement = steps.feeds(file, file)
            outputs = dict(zip(session.output_names, session.run_feeds(feeds), strict=True))
            answers = {k: _plain(v) for k, v in steps.answers(outputs, placement).items()}
            if req.as_json:
                print(json.dumps({"file": file, "provider": session.provider, "answers": answers}), flush=True)
            else:
                print(format_answers(file, answers), flush=True)
    return 0


def _plain(value: Any) -> Any:
    return value.tolist() if hasattr(value, "tolist") else value


def format_answers(file: str, answers: dict[str, Any]) -> str:
    """`file: output: label score, ...`; boxes one per line; a passthrough output by its shape."""
    lines = [f"{file}:"]
    for name, answer in answers.items():
        if isinstance(answer, list) and answer and isinstance(answer[0], dict) and "box" in answer[0]:
            lines.append(f"  {name}: {len(answer)} box{'es' if len(answer) != 1 else ''}")
            lines += [f"    {a['label']} {a['score']:.3f} [{', '.join(f'{v:.0f}' for v in a['box'])}]" for a in answer]
        elif isinstance(answer, list) and answer and isinstance(answer[0], dict):
            lines.append(f"  {name}: " + ", ".join(f"{a['label']} {a['score']:.4f}" for a in answer))
        elif isinstance(answer, list) and not answer:
            lines.append(f"  {name}: none")
        else:
            import numpy as np

            text = np.array2string(np.asarray(answer), threshold=20, edgeitems=3, precision=5)
            lines.append(f"  {name}: " + text.replace("\n", " "))
    return "\n".join(lines)
