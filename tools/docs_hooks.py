"""mkdocs hooks (mkdocs.yml `hooks:`): the pages that must not drift are generated at build time.

- `index.md`: the README, its `docs/X.md` links made site links;
- `reference/config.md`: every gpux.yml field, from the JSON Schema gpux itself generates (`gpux schema`);
- `reference/cli.md`: every command and option, from the click commands.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    pages = {"index.md": readme(), "reference/config.md": config_reference(), "reference/cli.md": cli_reference()}
    for path, text in pages.items():
        files.append(File.generated(config, path, content=text))
    return files


def readme() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    text = re.sub(r"\]\(docs/([^)]+)\)", r"](\1)", text)
    return re.sub(r"(?<![\w/.(\[])docs/([\w-]+\.md)", r"[\1](\1)", text)


# --- the config reference --------------------------------------------------------------------------------------

def _type(prop: dict[str, Any]) -> str:
    if "$ref" in prop:
        name = prop["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "anyOf" in prop:
        return " or ".join(dict.fromkeys(_type(p) for p in prop["anyOf"] if p.get("type") != "null"))
    if "enum" in prop:
        return " \\| ".join(f"`{v}`" for v in prop["enum"])
    if "const" in prop:
        return f"`{prop['const']}`"
    kind = prop.get("type", "any")
    if kind == "array" and "items" in prop:
        return f"list of {_type(prop['items'])}"
    if kind == "object" and isinstance(prop.get("additionalProperties"), dict):
        return f"map of {_type(prop['additionalProperties'])}"
    return str(kind)


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(model: dict[str, Any], required: set[str]) -> list[str]:
    rows = ["| field | type | default | description |", "|---|---|---|---|"]
    for key, prop in model.get("properties", {}).items():
        default = "required" if key in required else (f"`{json.dumps(prop['default'])}`" if "default" in prop
                                                       else "")
        rows.append(f"| `{key}` | {_cell(_type(prop))} | {_cell(default)} | {_cell(prop.get('description', ''))} |")
    return rows


def config_reference() -> str:
    from gpux.cli.validate import schema_text

    schema = json.loads(schema_text())
    lines = ["# gpux.yml reference", "",
             "Generated from the JSON Schema (`gpux schema`, `schemas/gpux.schema.json`) when the site is built; "
             "the guide is [config.md](../config.md).", "", "## gpux.yml", "",
             *_table(schema, set(schema.get("required", [])))]
    for name, model in schema.get("$defs", {}).items():
        lines += ["", f"## {name}", ""]
        if model.get("description"):
            lines += [_cell(model["description"]), ""]
        if "properties" in model:
            lines += _table(model, set(model.get("required", [])))
        else:
            lines.append(f"One of: {_cell(_type(model))}")
    return "\n".join(lines) + "\n"


# --- the CLI reference -----------------------------------------------------------------------------------------

def _commands(group: Any, prefix: str) -> list[tuple[str, Any]]:
    import click

    out = []
    for name, cmd in sorted(group.commands.items()):
        path = f"{prefix} {name}"
        out.append((path, cmd))
        if isinstance(cmd, click.Group):
            out += _commands(cmd, path)
    return out


def cli_reference() -> str:
    import click

    from gpux.cli.main import cli

    lines = ["# CLI reference", "", "Generated from the commands themselves when the site is built; exit codes, "
             "`--json` and provider choice: [cli.md](../cli.md).", ""]
    for path, cmd in _commands(cli, "gpux"):
        ctx = click.Context(cmd, info_name=path)
        lines += [f"## `{path}`", "", "```text", cmd.get_usage(ctx), "```", "",
                  _cell(cmd.help or "").replace("\b", "").strip(), ""]
        params = [p for p in cmd.get_params(ctx) if isinstance(p, click.Option) and not p.hidden]
        if params:
            lines += ["| option | description |", "|---|---|"]
            for p in params:
                names = ", ".join(f"`{o}`" for o in [*p.opts, *p.secondary_opts])
                default = f" (default: `{p.default}`)" if p.show_default and p.default not in (None, False) else ""
                lines.append(f"| {names} | {_cell(p.help or '')}{default} |")
            lines.append("")
    return "\n".join(lines) + "\n"
