"""gpux.yml's `serve:` block as the server reads it."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True, kw_only=True)
class Settings:
    """gpux.yml's `serve:` block as the server reads it: plain values (a model opened from its record,
    gpux/serve/record.py, has no config)."""

    host: str
    http_port: int
    grpc_port: int | None
    max_batch_size: int
    max_queue_delay_us: int
    instances: int
    max_body_bytes: int
    max_tensor_elements: int
    request_timeout_s: float
    header_timeout_s: float
    body_timeout_s: float
    keep_alive_s: int
    max_connections: int
    max_header_bytes: int
    max_files: int
    max_image_pixels: int
    max_decoded_bytes: int

    @classmethod
    def of(cls, values: dict[str, Any]) -> Settings:
        return cls(**{f.name: values[f.name] for f in fields(cls)})
