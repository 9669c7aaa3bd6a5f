"""A reference's and an artifact's arrays side by side: whether the fast path holds (one float type, every value
finite) and dot products summed in float64 whatever the arrays' type."""

from __future__ import annotations

from typing import Any


def finite_pair(a: Any, b: Any) -> bool:
    """Both float32 (or float64) arrays of one type with every value finite: their differences and maxima are exact
    enough in that type (only the dot products need float64), and no NaN/inf needs a mask."""
    import numpy as np

    return a.dtype == b.dtype and a.dtype in (np.float32, np.float64) and bool(np.isfinite(a).all()) and \
        bool(np.isfinite(b).all())


def dot(r: Any, g: Any, rows: bool = False) -> Any:
    """r·g summed in float64 whatever the arrays' type (per row of 2-d arrays with `rows`)."""
    import numpy as np

    return np.einsum("ij,ij->i", r, g, dtype=np.float64) if rows else float(np.einsum("i,i->", r, g, dtype=np.float64))
