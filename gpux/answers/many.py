"""Many files at once: decoded ahead in threads (Pillow, soundfile and numpy release the GIL) while the model runs,
files of one shape stacked into the model's batch dimension where it has one, answers given back in input order,
the same as one file at a time."""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeAlias

from gpux.answers.records import Answers
from gpux.arrays import Array, Feeds, Named

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from gpux.answers.decoding import Where
    from gpux.answers.pre import ImageSource
    from gpux.model.tensor import Tensor

# One item a file input is given (gpux.answers.steps.Steps.feeds): an image (a path, bytes, a PIL image, an HxWxC
# array), raw bytes (a path or bytes), audio (a path, bytes, a 1-D waveform), text (a str, a path or bytes), a
# ready tensor of the input's rank; or a dict of tensors by input name
Item: TypeAlias = "ImageSource | dict[str, ArrayLike]"

BATCH = 8  # files per inference where the model's batch dimension is free: what a hand-written loop would use


class Infers(Protocol):
    """What answers are run on (a gpux Session): its output names, and one inference of feeds, the outputs in
    that order."""

    @property
    def output_names(self) -> Sequence[str]: ...

    def run_feeds(self, feeds: Feeds) -> Sequence[Array]: ...


class Answering(Protocol):
    """What many files are answered through (gpux.answers.steps.Steps): the kind of file its input takes, the
    model's inputs, and the answers of outputs (a batch row's, or a file's)."""

    @property
    def kind(self) -> str | None: ...

    @property
    def inputs(self) -> Mapping[str, Tensor]: ...

    def rows(self, outputs: Named) -> int: ...

    def answers(self, outputs: Named, placement: Where | None, row: int = 0) -> Answers: ...

    def file_answers(self, outputs: Named, placement: Where | None) -> Answers: ...


@dataclass(frozen=True)
class Decoded:
    """One item through the declared preprocess: its feeds and where its image was placed."""

    index: int
    feeds: Feeds
    placement: Where | None


def batch_size(steps: Answering, asked: int | None) -> int:
    """Files per inference: `asked`, else BATCH where every input's first dimension is symbolic and a file is one
    row (an image or raw bytes), else 1."""
    if asked is not None:
        return asked
    rows_of_one = steps.kind in ("image", "bytes")
    free = all(t.shape and isinstance(t.shape[0], str) for t in steps.inputs.values())
    return BATCH if rows_of_one and free else 1


def answer_many(session: Infers, steps: Answering, items: Sequence[object],
                decode: Callable[[int], tuple[Feeds, Where | None]], *, batch: int = 1, workers: int | None = None
                ) -> Iterator[tuple[int, Answers]]:
    """(index, answers) for every item, in order. `decode(i)` is item i's (feeds, placement); it runs in `workers`
    threads (None: one per core; 0: in the calling thread, one item at a time) at most a few batches ahead.
    Consecutive items of one shape are run as one batch of up to `batch` rows; a decoding error is raised where
    its item comes, after the answers before it."""
    threads = (os.cpu_count() or 1) if workers is None else workers
    ahead = max(batch * 2, threads * 2) if threads else 1
    with ThreadPoolExecutor(threads) if threads else _Inline() as pool:
        pending: deque[Future[Decoded]] = deque()
        queued = 0

        def top_up() -> None:
            nonlocal queued
            while queued < len(items) and len(pending) < ahead:
                pending.append(pool.submit(_decoded, decode, queued))
                queued += 1

        group: list[Decoded] = []
        top_up()
        while pending:
            try:
                item = pending.popleft().result()
            except BaseException:  # whatever decoding raised (the item's error, an interrupt) goes on as it came,
                yield from _run(session, steps, group)  # once the items before the one that failed are answered
                raise
            top_up()
            if group and (len(group) >= batch or _shapes(group[0]) != _shapes(item)):
                yield from _run(session, steps, group)
                group = []
            group.append(item)
        if group:
            yield from _run(session, steps, group)


class _Inline:
    """An executor that runs each call when it is submitted, in the calling thread."""

    def __enter__(self) -> _Inline:
        return self

    def __exit__(self, *_exc: object) -> None:
        return None

    def submit(self, fn: Callable[..., Decoded], *args: object) -> Future[Decoded]:
        done: Future[Decoded] = Future()
        try:
            done.set_result(fn(*args))
        except BaseException as exc:  # re-raised by result(), where the item comes, as from a thread
            done.set_exception(exc)
        return done


def _decoded(decode: Callable[[int], tuple[Feeds, Where | None]], index: int) -> Decoded:
    feeds, placement = decode(index)
    return Decoded(index, feeds, placement)


def _shapes(item: Decoded) -> tuple[tuple[str, object, object], ...]:
    return tuple((k, getattr(v, "shape", None), getattr(v, "dtype", None)) for k, v in item.feeds.items())


def _run(session: Infers, steps: Answering, group: list[Decoded]) -> Iterator[tuple[int, Answers]]:
    """One inference for the group (rows stacked), each item's answers from its row; where an output does not
    have one row per item, or an item is not one row, each item is run on its own."""
    import numpy as np

    rows = [len(v) if getattr(v, "ndim", 0) else 0 for d in group for v in d.feeds.values()]
    if len(group) > 1 and all(r == 1 for r in rows):
        feeds = {k: np.concatenate([d.feeds[k] for d in group]) for k in group[0].feeds}
        outputs = dict(zip(session.output_names, session.run_feeds(feeds), strict=True))
        if all(getattr(a, "ndim", 0) for a in outputs.values()) and steps.rows(outputs) == len(group):
            for r, d in enumerate(group):
                yield d.index, steps.answers(outputs, d.placement, r)
            return
    for d in group:
        outputs = dict(zip(session.output_names, session.run_feeds(d.feeds), strict=True))
        yield d.index, steps.file_answers(outputs, d.placement)
