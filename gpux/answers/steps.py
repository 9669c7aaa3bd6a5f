"""The declared steps of a project bound to its real inputs and outputs: a file (an image, raw bytes, audio,
text; or tensors) in, answers out.

`Steps.of` checks what only the model's real shapes tell (labels per class, the box layout, rows of the input
kinds, the tokenizer file) and raises a ConfigError at the line that declares it; `predict` is what
`Session.predict` and `gpux run NAME FILE` call."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeAlias, TypeGuard

from gpux.answers.audio import AUDIO_SUFFIXES, audio_tensor
from gpux.answers.decoding import Where
from gpux.answers.many import Infers, Item
from gpux.answers.pre import IMAGE_SUFFIXES, image_tensor
from gpux.answers.raw import bytes_tensor
from gpux.answers.records import Answer, Answers
from gpux.answers.text import TEXT_SUFFIXES, text_input, tokenizer
from gpux.arrays import Array, Feeds, Named
from gpux.config.inputs import Preprocess, check_preprocess
from gpux.config.kinds import AnswerKind, kind_of, step
from gpux.config.load import Project
from gpux.config.steps import Block, ImageSteps, Postprocess
from gpux.errors import ConfigError, InputError, Problem
from gpux.model.io import Tensor

Predicted: TypeAlias = "Answers | list[Answers] | list[Answers | list[Answers]]"  # predict's: a file's, rows', a list

SUFFIXES = {"image": IMAGE_SUFFIXES, "audio": AUDIO_SUFFIXES, "text": TEXT_SUFFIXES, "bytes": (),
            "python": ()}  # (): every file


@dataclass(frozen=True)
class Steps:
    project: Project
    inputs: dict[str, Tensor]
    pre: dict[str, tuple[Preprocess, Tensor]]  # inputs with preprocess
    post: dict[str, tuple[Postprocess, list[str] | None]]  # outputs with postprocess, and their labels
    code: dict[tuple[str, str], Callable[..., object]] = field(default_factory=dict)  # (inputs/outputs, name) -> step

    @classmethod
    def of(cls, project: Project, inputs: dict[str, Tensor], outputs: dict[str, Tensor]) -> Steps:
        cfg = project.config
        pre = {n: (s.preprocess, inputs[n]) for n, s in (cfg.inputs or {}).items()
               if s.preprocess is not None and n in inputs}
        post = {n: (s.postprocess, _texts(project, n, s.postprocess) or project.labels_of(n))
                for n, s in (cfg.outputs or {}).items() if s.postprocess is not None and n in outputs}
        problems = [p for n, (spec, labels) in post.items()
                    for p in _misfits(project, n, spec, labels, outputs[n], outputs)]
        problems += [project.problem(("outputs", n, "postprocess", spec.answer[0], _read_field(spec.block, other)),
                                     f"{other!r} is not an output of the model (outputs: {', '.join(outputs)})")
                     for n, (spec, _) in post.items() for other in dict.fromkeys(getattr(spec.block, "reads", ()))
                     if other not in outputs and spec.answer]
        problems += [p for n, (spec, real) in pre.items() for p in _pre_misfits(project, n, spec, real, inputs)]
        code = _functions(project, {("inputs", n): s.python for n, (s, _) in pre.items()} |
                          {("outputs", n): s.python for n, (s, _) in post.items()}, problems)
        if problems:
            raise ConfigError(problems)
        return cls(project, inputs, pre, post, code)

    @property
    def images(self) -> dict[str, tuple[ImageSteps, Tensor]]:
        """The inputs with preprocess: image."""
        return {n: (p.image, t) for n, (p, t) in self.pre.items() if p.image is not None}

    def fixed_size(self, block: Block | None) -> tuple[int, int] | None:
        """(height, width) of the image input a block maps back through (its `image`, else the first), where its
        declared shape fixes them: the size tensors given without a file were made at."""
        images = self.images
        name = getattr(block, "image", None) or next(iter(images), None)
        if name not in images:
            return None
        steps, tensor = images[name]
        shape = tensor.shape or ()
        hw = tuple(shape[2:4] if steps.layout == "nchw" else shape[1:3]) if len(shape) == 4 else ()
        return (hw[0], hw[1]) if len(hw) == 2 and isinstance(hw[0], int) and isinstance(hw[1], int) else None

    @property
    def kinds(self) -> dict[str, AnswerKind]:
        """Each output's kind of answer (gpux.config.kinds), for those that declare one."""
        return {n: k for n, (spec, _) in self.post.items() if (k := kind_of(spec)) is not None}

    @property
    def blocks(self) -> dict[str, Block]:
        """Each output's kind block (its settings under postprocess:), for those that declare a kind."""
        return {n: spec.block for n, (spec, _) in self.post.items() if spec.block is not None}

    @property
    def read(self) -> frozenset[str]:
        """The outputs only a step reads: named by another output's block, with no postprocess of their own."""
        return frozenset(n for spec, _ in self.post.values() for n in getattr(spec.block, "reads", ())
                         if n not in self.post)

    @property
    def kind(self) -> str | None:
        """The kind of file the preprocessed input takes (image, bytes, audio, text), None without one."""
        return next((p.kind for p, _ in self.pre.values()), None)

    def feeds(self, item: Item, name: str) -> tuple[Feeds, Where | None]:
        """The feeds for one item through the declared steps (an image: path, bytes, PIL image, HxWxC array; raw
        bytes: path or bytes; audio: path, bytes or a 1-D waveform; text: a str, a path or bytes), a ready tensor
        of the input's rank, or a dict of tensors (cast to the inputs); and where the item sits in them (an image's
        Placement, a text's Spans, else None)."""
        from gpux.model.inputs import cast, cast_all

        if isinstance(item, dict):
            return cast_all(item, self.inputs, "inputs"), None
        input_name, spec, tensor = self.file_input(name)
        if self._tensor(item):
            return cast_all({input_name: item}, self.inputs, "inputs"), None
        if spec.python is not None:
            from gpux.answers.python import call, file_data

            got = call(self.code["inputs", input_name], spec.python, self.project.root, file_data(item))
            return cast_all(got if isinstance(got, dict) else {input_name: got}, self.inputs, name), None
        if spec.image is not None:  # a tensor that cannot fit the input is the file's, refused before any runtime
            array, placement = image_tensor(item, spec.image, tensor.dtype, name)
            return {input_name: cast(array, tensor, name)}, placement
        if spec.text is not None:  # where its tokens lie in the text: the placement per-token answers read
            feeds, spans = text_input(item, spec.text, self.project.root / spec.text.tokenizer, input_name, name)
            return cast_all(feeds, self.inputs, name), spans
        if spec.bytes is not None:
            feeds = {input_name: bytes_tensor(item, spec.bytes, tensor.dtype, name)}
        else:
            assert spec.audio is not None
            feeds = {input_name: audio_tensor(item, spec.audio, tensor.dtype, name)}
        return cast_all(feeds, self.inputs, name), None

    def ready(self, item: object) -> bool:
        """Whether `item` is tensors already: a dict, or an array of the file input's rank."""
        return isinstance(item, dict) or self._tensor(item)

    def _tensor(self, item: object) -> TypeGuard[Array]:  # an array of the file input's rank
        shape = next((t.shape for _, t in self.pre.values()), None)
        return bool(shape) and hasattr(item, "__array_interface__") and getattr(item, "ndim", 0) == len(shape or ())

    def file_input(self, name: str) -> tuple[str, Preprocess, Tensor]:
        """The one input files go to; the model's other inputs must be filled by its steps (a text's mask and
        type ids). An InputError names `name` otherwise."""
        if not self.pre:
            raise InputError(f"{name}: {self.project.name} declares no preprocess for its inputs, so it takes "
                             "tensors only", hint="add preprocess: to its input (image, bytes, audio or text; "
                             "docs/answers.md), or pass tensors")
        if len(self.pre) != 1:
            raise InputError(f"{name}: a file answers a model with one preprocessed input; {self.project.name} "
                             f"declares {', '.join(self.pre)}", hint="pass a dict of tensors")
        (input_name, (spec, tensor)), = self.pre.items()
        filled = set(self.inputs) if spec.python else {input_name, *(spec.text.routes if spec.text else ())}
        rest = [n for n in self.inputs if n not in filled]
        if rest:
            raise InputError(f"{name}: a file fills {', '.join(sorted(filled))}; {self.project.name} also takes "
                             f"{', '.join(rest)}", hint="pass a dict of tensors")
        return input_name, spec, tensor

    def file_answers(self, outputs: Named, placement: Where | None) -> Answers:
        """A file's answers: its one row's, or for audio every window's (passthrough outputs stacked, answers in
        a list per output)."""
        if self.kind != "audio":
            return self.answers(outputs, placement)
        rows = [self.answers(outputs, None, r) for r in range(self.rows(outputs))]
        return {k: _stacked([r[k] for r in rows]) for k in (rows[0] if rows else {})}

    def rows(self, outputs: Named) -> int:
        """The batch rows the outputs hold (a time-major ctc output's batch is its axis 1)."""
        return min((a.shape[self.post[n][0].batch_axis if n in self.post else 0] for n, a in outputs.items()
                    if getattr(a, "ndim", 0)), default=1)

    def answers(self, outputs: Named, placement: Where | None, row: int = 0,
                only: Sequence[str] | None = None) -> Answers:
        """Each output's answer for one batch row (of those named in `only`, else all but those a step reads that
        declare no postprocess of their own: masks' prototypes, a detector's heads), as its kind decodes it
        (gpux.config.kinds); outputs without postprocess stay arrays, those without a kind of answer their
        activated values."""
        from gpux.answers.decoding import Decoding
        from gpux.answers.kinds import decoder
        from gpux.answers.post import activate

        out: Answers = {}
        for name, arr in outputs.items():
            if (only is not None and name not in only) or (only is None and name in self.read):
                continue
            spec, labels = self.post.get(name, (None, None))
            kind = kind_of(spec)
            if spec is None or kind is None:
                out[name] = arr[row] if spec is None else activate(arr[row], spec.softmax, spec.sigmoid)
                continue
            others = {n: outputs[n][row] for n in getattr(spec.block, "reads", ()) if n in outputs}
            how = Decoding(spec=spec, labels=labels, placement=placement, function=self.code.get(("outputs", name)),
                           root=self.project.root, others=others, size=self.fixed_size(spec.block))
            out[name] = decoder(kind)(arr[:, row] if spec.batch_axis else arr[row], how)
        return out


def _read_field(block: Block | None, name: str) -> str:
    """The field of a block that names an output its step reads."""
    return getattr(block, "read_field", lambda _: "reads")(name)


def _stacked(windows: list[Answer]) -> Answer:
    """An audio output's answers over its windows: arrays (passthrough outputs) stacked, answers as a list."""
    if not all(hasattr(a, "shape") for a in windows):
        return windows
    import numpy as np

    return np.stack([np.asanyarray(a) for a in windows])


def _texts(project: Project, name: str, spec: Postprocess) -> list[str] | None:
    """The text per class index of a kind that names its classes in its own block: a charset (ctc: with the blank
    and the space), a segmentation's labels."""
    key, block = spec.answer or ("", object())
    own = getattr(block, "classes_field", "charset")
    entries = getattr(block, own, None)
    if entries is None:
        return None
    if isinstance(entries, str):
        entries = project.read_lines(("outputs", name, "postprocess", key, own), entries, exact=own == "charset")
    texts: list[str] = block.texts(entries) if hasattr(block, "texts") else [str(e) for e in entries]
    return texts


def _functions(project: Project, named: dict[tuple[str, str], str | None], problems: list[Problem]
               ) -> dict[tuple[str, str], Callable[..., object]]:
    """Each python step's function, imported once; one that cannot be is a problem at its line."""
    from gpux.answers.python import resolve

    out = {}
    for (kind, name), target in named.items():
        if target is None:
            continue
        try:
            out[kind, name] = resolve(project.root, target)
        except ValueError as exc:
            step = "preprocess" if kind == "inputs" else "postprocess"
            problems.append(project.problem((kind, name, step, "python"), str(exc)))
    return out


def _pre_misfits(project: Project, name: str, spec: Preprocess, real: Tensor,
                 inputs: dict[str, Tensor]) -> list[Problem]:
    """Problems of an input's preprocess against the model's real input (its rows, dtype) and its other inputs;
    a text's tokenizer file is read here."""
    at = ("inputs", name, "preprocess")
    wrong = check_preprocess(spec, real.shape, real.dtype)
    if wrong:
        return [project.problem((*at, *wrong[1]), f"{wrong[0]} (in the model)")]
    text = spec.text
    if text is None:
        return []
    missing = [(what, n) for n, what in text.routes.items() if n not in inputs]
    if missing:
        what, n = missing[0]
        return [project.problem((*at, "text", what), f"{n!r} is not an input of the model (inputs: "
                                f"{', '.join(inputs)})")]
    try:
        tokenizer(project.root / text.tokenizer, text)
    except ValueError as exc:
        return [project.problem((*at, "text", "tokenizer"), str(exc))]
    return []


def _misfits(project: Project, name: str, spec: Postprocess, labels: list[str] | None, real: Tensor,
             outputs: dict[str, Tensor]) -> list[Problem]:
    """Problems of an output's postprocess against its real shape, as its kind checks them (a python step reads
    the row as it is; a step that reads other outputs is given them all as `outputs`), else of its labels against
    the class axis."""
    from gpux.answers.shapes import label_problems

    kind = kind_of(spec)
    check = step(kind, "shape") if kind is not None else None
    if check is not None and tuple(getattr(spec.block, "reads", ())):  # a step that reads others sees them too
        return check(project, name, spec, labels, real, outputs=outputs)
    if check is not None:
        return check(project, name, spec, labels, real)
    return label_problems(project, name, spec, labels, real)


def describe(item: object) -> str:
    """How an item is named in messages: its path, else its kind."""
    if isinstance(item, str | os.PathLike):
        return os.fspath(item)
    return "bytes" if isinstance(item, bytes | bytearray | memoryview) else type(item).__name__


def predict(session: Infers, steps: Steps, x: Item | list[Item] | tuple[Item, ...]) -> Predicted:
    """Answers for one item, a list for a list (or tuple) of items; a dict of tensors answers every batch row (a
    list). `session` is a gpux Session (`run_feeds`, `output_names`), `steps` its project's steps bound once."""
    if isinstance(x, list | tuple):
        if steps.kind is None or any(steps.ready(item) for item in x):
            return [_one(session, steps, item) for item in x]
        from gpux.answers.many import answer_many, batch_size

        names = ["text" if isinstance(item, str) and steps.kind == "text" else describe(item) for item in x]
        found = answer_many(session, steps, x, lambda i: steps.feeds(x[i], names[i]), batch=batch_size(steps, None),
                            workers=0 if steps.kind == "text" else None)  # decoded ahead in threads, batched
        return [answers for _, answers in found]
    return _one(session, steps, x)


def _one(session: Infers, steps: Steps, item: Item) -> Answers | list[Answers]:
    feeds, placement = steps.feeds(item, "text" if isinstance(item, str) and steps.kind == "text" else describe(item))
    outputs = dict(zip(session.output_names, session.run_feeds(feeds), strict=True))
    if steps.ready(item):
        return [steps.answers(outputs, None, r) for r in range(steps.rows(outputs))]
    return steps.file_answers(outputs, placement)


def file_kind(project: Project) -> str | None:
    """The kind of file the project's preprocessed input takes (the first one's), None without preprocess."""
    return next((s.preprocess.kind for s in (project.config.inputs or {}).values() if s.preprocess), None)


@dataclass(frozen=True)
class Text:
    """A text given on the command line in place of a file (`gpux run NAME "a sentence"`)."""

    text: str

    @property
    def name(self) -> str:
        """How messages name it: `text "..."`, shortened."""
        import json

        return "text " + json.dumps(self.text if len(self.text) <= 40 else self.text[:39] + "…", ensure_ascii=False)


TEXT_OR_PATH = ("check the path (an argument is the text itself only where it names no file or folder, has no / and "
                "does not end in .txt; else write the text into a .txt file)")


def is_text(arg: str, kind: str | None) -> bool:
    """Whether a command-line argument is the text itself: the input takes text, the argument names no file or
    folder, and it does not look like a path (no / or the OS's separator, no .txt ending, no @FILE list)."""
    if kind != "text" or os.path.lexists(arg) or arg.startswith("@"):
        return False
    return "/" not in arg and os.sep not in arg and not arg.lower().endswith(TEXT_SUFFIXES)


def sources(args: Sequence[str], kind: str | None) -> list[str | Text]:
    """`input_files` of the arguments, in order, where an argument that `is_text` stays as that Text."""
    out: list[str | Text] = []
    paths: list[str] = []
    for arg in [*args, None]:
        if arg is not None and not is_text(arg, kind):
            paths.append(arg)
            continue
        out += input_files(paths, kind, missing=TEXT_OR_PATH if kind == "text" else None) if paths else []
        paths = []
        if arg is not None:
            out.append(Text(arg))
    return out


def input_files(paths: Sequence[str], kind: str | None, missing: str | None = None) -> list[str]:
    """The files named, a folder's files of the kind (images, audio, .txt by suffix; bytes: every file; sorted)
    in its place, a glob's matches (sorted), an @FILE's paths (one a line); a missing path is an error, with
    `missing` as its fix."""
    suffixes = SUFFIXES.get(kind or "image", IMAGE_SUFFIXES)
    out: list[str] = []
    for p in expand_paths(paths):
        path = Path(p)
        if path.is_dir():
            found = sorted(str(f) for f in path.iterdir() if f.is_file() and (not suffixes or
                                                                               f.suffix.lower() in suffixes))
            if not found:
                raise InputError(f"{p}: no {kind or 'image'} files in this folder" +
                                 (f" ({' '.join(suffixes)})" if suffixes else ""))
            out += found
        elif path.is_file():
            out.append(p)
        else:
            raise InputError(f"{p}: file not found", hint=missing)
    return out


def expand_paths(paths: Sequence[str]) -> list[str]:
    """@FILE replaced by its lines (blank lines and # comments skipped), a glob by its sorted matches."""
    import glob

    out: list[str] = []
    for p in paths:
        if p.startswith("@") and not Path(p).exists():
            try:
                lines = Path(p[1:]).read_text(encoding="utf-8").splitlines()
            except (OSError, UnicodeDecodeError) as exc:
                raise InputError(f"{p}: cannot read the list of files: {getattr(exc, 'strerror', None) or exc}") \
                    from exc
            out += [s for s in (x.strip() for x in lines) if s and not s.startswith("#")]
        elif glob.has_magic(p) and not Path(p).exists():
            found = sorted(glob.glob(p))
            if not found:
                raise InputError(f"{p}: no file matches this pattern")
            out += found
        else:
            out.append(p)
    return out
