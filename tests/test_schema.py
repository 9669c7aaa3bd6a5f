"""The published JSON Schema is generated from the config models and never drifts from them."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from gpux.cli.validate import schema_text
from gpux.config.schema import GpuxConfig

ROOT = Path(__file__).resolve().parents[1]


def test_published_schema_matches_models() -> None:
    published = (ROOT / "schemas" / "gpux.schema.json").read_text()
    assert published == schema_text(), "schemas/gpux.schema.json is stale: run `make schema`"


def test_every_field_has_a_description() -> None:
    schema = json.loads(schema_text())
    missing = []

    def walk(node: dict, where: str) -> None:
        for name, prop in node.get("properties", {}).items():
            if not prop.get("description"):
                missing.append(f"{where}.{name}")
    walk(schema, "gpux")
    for name, definition in schema.get("$defs", {}).items():
        walk(definition, name)
    assert not missing, missing


def test_schema_rejects_unknown_keys_everywhere() -> None:
    schema = json.loads(schema_text())
    assert schema["additionalProperties"] is False
    for name, definition in schema["$defs"].items():
        if definition.get("type") == "object" and "properties" in definition:
            assert definition.get("additionalProperties") is False, name


def test_examples_carry_the_schema_line() -> None:
    for yml in sorted((ROOT / "examples").glob("*/gpux.yml")):
        first = yml.read_text().splitlines()[0]
        assert first == "# yaml-language-server: $schema=../../schemas/gpux.schema.json", yml
        GpuxConfig.model_validate(yaml.safe_load(yml.read_text()))  # and is valid by the models the schema comes from
