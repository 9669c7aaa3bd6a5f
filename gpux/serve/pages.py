"""A workspace's pipeline of `crops:` steps served as one model (gpux.workspace.pages): its first step's image input
takes encoded images as BYTES, one per element, decoded upright off the event loop under the server's image limits
(serve/steps.py, serve/memory.py); each image runs through every step, and each of the first step's outputs comes
back as BYTES, one JSON text per image: the answers `gpux run WORKSPACE IMAGE --json` gives under that name (each
text region's box in the image's pixels and score, with its regions' own answers, in reading order)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from gpux.arrays import Feeds, Named
from gpux.model.io import Tensor
from gpux.serve.opened import Opened, RunNamed, closing

if TYPE_CHECKING:
    from gpux.answers.pre import Placement
    from gpux.config.kinds import AnswerKind
    from gpux.run.session import Session
    from gpux.workspace.pages import Bound
    from gpux.workspace.project import Choice, Models


@dataclass(frozen=True)
class PageSteps:
    """What serving files reads of a model's steps (serve/steps.py `Answering`), for a page pipeline: an image
    decoded as `gpux run` decodes it, and each output's answer already JSON (the pipeline's run writes it)."""

    input: str
    names: tuple[str, ...]  # the answered outputs: the first step's, as MODEL.OUTPUT
    kind: str = "image"
    post: Mapping[str, Any] = field(default_factory=dict)
    kinds: Mapping[str, AnswerKind] = field(default_factory=dict)  # none: the answers travel as the run wrote them

    @classmethod
    def of(cls, input_name: str, names: Sequence[str]) -> PageSteps:
        from gpux.config.steps import Postprocess

        return cls(input_name, tuple(names), post={n: (Postprocess(), None) for n in names})  # one row per image

    def feeds(self, item: Any, name: str) -> tuple[Feeds, Placement | None]:
        """One encoded image decoded upright (an InputError naming `name` where it is not an image)."""
        from gpux.workspace.pages import page_image

        images = np.empty(1, dtype=object)  # the image itself, not its pixels
        images[0] = page_image(item, name)
        return {self.input: images}, None

    def answers(self, outputs: Named, placement: Placement | None, row: int = 0,
                only: Sequence[str] | None = None) -> Any:
        return {n: json.loads(outputs[n][row]) for n in self.names if only is None or n in only}

    def rows(self, outputs: Named) -> int:
        return min((len(a) for a in outputs.values()), default=1)


def open_pages(ms: Models, choice: Choice, store: str | None, instances: int) -> Opened:
    """The pipeline's sessions opened `instances` times on the workspace's provider and bound as `gpux run` binds
    them (a misplaced step is the ConfigError it is there); one run per instance."""
    from gpux.workspace.pages import bind
    from gpux.workspace.pipeline import open_sessions

    opened: list[list[Bound]] = []
    every: list[Session] = []  # each instance's sessions, closed together
    try:
        for _ in range(instances):
            sessions = open_sessions(ms, choice, store, lambda _m: None)
            every += sessions.values()
            opened.append(bind(ms, sessions))
        return _served(ms, choice, opened, closing(s.close for s in every))
    except BaseException:  # whatever stops it, an interrupt too: the sessions opened are closed, then it goes on
        for s in every:
            s.close()
        raise


def _served(ms: Models, choice: Choice, opened: list[list[Bound]], close: Callable[[], None]) -> Opened:
    """The bound instances as one served model: the first step's file input in, its outputs answered as JSON."""
    first = opened[0][0]
    input_name, _, _ = first.steps.file_input(f"{ms.place.name}: its first step {first.step.model!r}")
    names = [f"{first.step.model}.{n}" for n in first.session.output_names]
    steps = PageSteps.of(input_name, names)
    provider = choice.provider
    return Opened(inputs={input_name: Tensor(input_name, "string", (None,))},
                  outputs={n: Tensor(n, "string", (None,)) for n in names}, provider=provider,
                  runs_on=first.session.used, labels={}, steps=steps, files=input_name,
                  runs=tuple(_run(bound, steps) for bound in opened), one_by_one=True,
                  report={"pipeline": [b.step.model for b in opened[0]], "provider": provider},
                  warmup=steps.feeds(_warmup_png(), "the warm-up image")[0], close=close)


def _run(bound: list[Bound], steps: PageSteps) -> RunNamed:
    """One instance's run: each decoded image through the pipeline, each answer as its JSON text."""
    from gpux.workspace.pages import answer_page

    def run(feeds: Feeds) -> Named:
        images = feeds[steps.input].reshape(-1)
        out = {n: np.empty(len(images), dtype=object) for n in steps.names}
        for i, image in enumerate(images):
            answers = answer_page(bound, image, f"the image sent to '{steps.input}'")
            for n in steps.names:
                out[n][i] = json.dumps(answers[n], separators=(",", ":")).encode()
        return out

    return run


def _warmup_png() -> bytes:
    """A line of dark text on white, as a PNG (what a page holds): the crops steps run at warm-up too."""
    import io

    from gpux.optional import require

    image_mod, draw_mod, font_mod = (require(m, "images") for m in ("PIL.Image", "PIL.ImageDraw", "PIL.ImageFont"))
    image = image_mod.new("RGB", (320, 64), (255, 255, 255))
    draw_mod.Draw(image).text((10, 16), "gpux serve", fill=(0, 0, 0), font=font_mod.load_default(size=28))
    data = io.BytesIO()
    image.save(data, format="PNG")
    return data.getvalue()


__all__ = ["PageSteps", "open_pages"]
