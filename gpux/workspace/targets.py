"""The target a command names, a project or a workspace, told apart and opened once and handed to its work: the
entry points of `gpux build` and `gpux run` below the command line, which parses, calls one of them and renders."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from gpux import report

if TYPE_CHECKING:
    from gpux.artifacts.project import BuildRequest
    from gpux.run.command import RunRequest


def build_target(req: BuildRequest) -> tuple[object, Callable[[], None]]:
    """An unchanged build replayed from its record (without loading the config models; a workspace never is), else
    the target opened: a workspace's build, or the project's (`artifacts.project.build_project`); the report
    document (what --json prints) and what shows it as text."""
    from gpux.artifacts import unchanged

    request: unchanged.Asked = {"provider": req.provider, "strict": req.strict, "verify": req.verify,
                                "store": req.store, "shapes": req.shapes}
    replayed = None if req.force or req.dry_run else unchanged.replay(req.path, request)
    if replayed is not None:
        return replayed, functools.partial(report.render_build, replayed)
    from gpux.artifacts.project import build_project
    from gpux.workspace.project import open_models

    ms = open_models(req.path, req.store)
    if ms.workspace is not None:
        from gpux.workspace.commands import build_workspace

        return build_workspace(ms, req.provider, req.store, req.as_json, dry_run=req.dry_run, force=req.force,
                               verify=req.verify, strict=req.strict, shapes=req.shapes)
    return build_project(ms.project, req, request)


def run_target(req: RunRequest) -> int:
    """`gpux run`: the target told apart and opened once; a workspace runs its pipeline (or answers its pages),
    a project answers files (here, or on Ray with --on), is benchmarked, or runs once on given inputs."""
    from gpux.run.inuse import holding
    from gpux.workspace.pipeline import run_workspace
    from gpux.workspace.project import open_models

    if req.save and not req.files:
        from gpux.errors import UsageError

        raise UsageError(f"--save {req.save} draws the answers of image files; pass FILES (gpux run NAME FILE...)")
    ms = open_models(req.target, req.store)  # the target is told apart and opened once
    if ms.workspace is not None and req.files:
        from gpux.workspace.pages import answer_pages

        return answer_pages(ms, req)
    if ms.workspace is not None:
        return run_workspace(ms, req)
    if req.report:  # before minutes of measuring
        from gpux.bench.report_html import check_report_path
        from gpux.errors import UsageError

        if not req.benchmark:
            raise UsageError(f"--report {req.report} draws a benchmark; add --benchmark (or use gpux tune --report)")
        check_report_path(req.report)
    project = ms.project
    if req.on == "local" and (req.resume or req.actor_cpus is not None or req.actor_gpus is not None):
        from gpux.errors import UsageError

        raise UsageError("--resume, --actor-cpus and --actor-gpus go with --on ray")
    from gpux.run.command import refuse_unread

    refuse_unread(req)
    if req.on != "local":
        from gpux.run.files import answer_elsewhere

        return answer_elsewhere(project, req)
    if req.files and not req.benchmark:
        from gpux.run.files import answer_files

        return answer_files(project, req)
    if req.benchmark:
        from gpux.bench.command import BenchmarkRequest, benchmark_command

        asked = BenchmarkRequest(**{f.name: getattr(req, f.name) for f in dataclasses.fields(BenchmarkRequest)})
        with holding(project.name, project.root, req.store, "gpux run --benchmark"):
            return benchmark_command(project, asked)
    from gpux.run.command import run_once

    return run_once(project, req)


__all__ = ["build_target", "run_target"]
