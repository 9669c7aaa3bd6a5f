"""What a `gpux package --serve` image adds: the serve extra's requirements, ports, entry point and healthcheck."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ServeImage:
    """The ports the image's `gpux serve` listens on (all interfaces of the container; publish them with -p)."""

    http_port: int
    grpc_port: int | None

    def dockerfile_lines(self, model_dir: str) -> list[str]:
        ports = [str(self.http_port)] + ([str(self.grpc_port)] if self.grpc_port is not None else [])
        ready = f"http://127.0.0.1:{self.http_port}/v2/health/ready"
        probe = f"import urllib.request; urllib.request.urlopen({ready!r}, timeout=3)"
        argv = ["gpux", "serve", model_dir, "--host", "0.0.0.0", "--port", str(self.http_port)]
        argv += ["--grpc-port", str(self.grpc_port)] if self.grpc_port is not None else ["--no-grpc"]
        return ["EXPOSE " + " ".join(ports),
                "HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 CMD "
                + json.dumps(["python3", "-c", probe]),
                "ENTRYPOINT " + json.dumps(argv)]

    def publish_flags(self) -> list[str]:
        ports = [self.http_port] + ([self.grpc_port] if self.grpc_port is not None else [])
        return [flag for p in ports for flag in ("-p", f"127.0.0.1:{p}:{p}")]


def serve_requirements() -> list[str]:
    """The `serve` extra of gpux: from pyproject.toml in a source checkout, else the installed metadata."""
    import tomllib
    from importlib import metadata

    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"  # the checkout root
    with contextlib.suppress(OSError, ValueError, KeyError):
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
        if data.get("name") == "gpux-ml":
            return list(data["optional-dependencies"]["serve"])
    try:
        return [r.split(";")[0].strip() for r in metadata.requires("gpux-ml") or [] if 'extra == "serve"' in r]
    except metadata.PackageNotFoundError:
        return []
