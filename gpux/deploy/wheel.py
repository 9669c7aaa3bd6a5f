"""The wheel of gpux itself, written from the running package: images need neither a source tree nor PyPI."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import zipfile
from pathlib import Path

from gpux.version import __version__

PACKAGE = Path(__file__).resolve().parents[1]  # the gpux folder this module lies in


def wheel_name() -> str:
    return f"gpux_ml-{__version__}-py3-none-any.whl"


def wheel_requirements() -> list[str]:
    """gpux's own dependencies: from pyproject.toml in a source checkout, else the installed metadata."""
    import tomllib
    from importlib import metadata

    pyproject = PACKAGE.parent / "pyproject.toml"
    with contextlib.suppress(OSError, ValueError, KeyError):
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
        if data.get("name") == "gpux-ml":
            return list(data.get("dependencies", []))
    try:
        return [r for r in metadata.requires("gpux-ml") or [] if "extra ==" not in r]
    except metadata.PackageNotFoundError:
        return []


def write_wheel(dest: Path) -> Path:
    """A pure-Python wheel of the running gpux package (fixed timestamps: same bytes, same image layer)."""
    dist_info = f"gpux_ml-{__version__}.dist-info"
    files = {f"gpux/{p.relative_to(PACKAGE).as_posix()}": p.read_bytes() for p in sorted(PACKAGE.rglob("*"))
             if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo")}
    meta = ["Metadata-Version: 2.1", "Name: gpux-ml", f"Version: {__version__}", "Requires-Python: >=3.11",
            *(f"Requires-Dist: {r}" for r in wheel_requirements())]
    files[f"{dist_info}/METADATA"] = ("\n".join(meta) + "\n").encode()
    files[f"{dist_info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: gpux\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files[f"{dist_info}/entry_points.txt"] = b"[console_scripts]\ngpux = gpux.cli.main:main\n"
    record = [f"{name},sha256={_b64(hashlib.sha256(data).digest())},{len(data)}" for name, data in files.items()]
    files[f"{dist_info}/RECORD"] = ("\n".join([*record, f"{dist_info}/RECORD,,"]) + "\n").encode()
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / wheel_name()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            zf.writestr(info, data, zipfile.ZIP_DEFLATED)
    return out


def _b64(digest: bytes) -> str:
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()

