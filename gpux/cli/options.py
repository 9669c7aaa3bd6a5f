"""Options several command modules share (click only: `gpux --help` imports nothing heavier)."""

from __future__ import annotations

import click

from gpux.providers import BUILTIN_ROWS

PROVIDER_HELP = f"auto, one of {', '.join(BUILTIN_ROWS)} (or an installed plugin's), or a comma list"
JSON = click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
REPORT = click.option("--report", type=click.Path(dir_okay=False), default=None, metavar="FILE.html",
                      help="Also write one self-contained HTML page: charts of latency and speedup, accuracy, "
                           "the machine and this command line (needs matplotlib: pip install 'gpux-ml[report]').")
STORE = click.option("--store", type=click.Path(file_okay=False), default=None,
                     help="Artifact store (default: .gpux/ beside gpux.yml, or $GPUX_STORE).")


def complete_provider(_ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[str]:
    """Shell completion of --provider: auto, all and every provider, plugins' included (the part after the last
    comma)."""
    from gpux.providers import registry

    head, _, tail = incomplete.rpartition(",")
    return [f"{head}," * bool(head) + p for p in ("auto", "all", *registry()) if p.startswith(tail)]


PROVIDER = click.option("--provider", "-p", default=None, shell_complete=complete_provider,
                        help=f"Provider: {PROVIDER_HELP}. Overrides $GPUX_PROVIDER, `gpux use` and runtime.backend.")
STRICT = click.option("--strict", is_flag=True, help="Never fall back: exit 4 if the provider cannot run.")
