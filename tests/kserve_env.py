"""Test tooling: a virtualenv holding the KServe SDK's clients (the `kserve` distribution) to call `gpux serve`
with. kserve pins psutil<6 and python-dateutil<3, which the locked set (constraints.txt) does not meet, so it
cannot share the project's environment nor be pinned in constraints.txt: the pin lives here. The venv holds
kserve and what it pulls, nothing of gpux; it is created once under the test cache, keyed by the pin."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .ort_gpu_env import cache_dir, locked

KSERVE = "kserve==0.21.0"  # not in constraints.txt: its psutil<6 and python-dateutil<3 conflict with the lock


class Unavailable(Exception):
    """The venv cannot be created because the package index cannot be reached (an offline machine)."""


def kserve_python() -> Path:
    """Create (once) and return the python of a venv holding KSERVE. Raises Unavailable where pip cannot reach
    the package index, CalledProcessError where it can and the install still fails."""
    venv = cache_dir() / f"venv-{KSERVE.replace('==', '-')}"
    python, stamp = venv / "bin" / "python", venv / ".ready"
    with locked(venv.with_name(venv.name + ".lock")):
        if stamp.is_file():
            return python
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        pip = [str(python), "-m", "pip", "--disable-pip-version-check"]
        found = subprocess.run([*pip, "download", "-q", "--no-deps", "-d", str(venv / "probe"), KSERVE],
                               capture_output=True, text=True)
        if found.returncode != 0:
            lines = found.stderr.strip().splitlines()
            raise Unavailable(f"{KSERVE} cannot be fetched from the package index: "
                              f"{lines[-1] if lines else 'no reason'}")
        subprocess.run([*pip, "install", "-q", KSERVE], check=True)
        stamp.write_text(KSERVE)
    return python
