"""`Session.run(dict)` skips its checks for a signature it has already checked, and only then: arrays of another
dtype, layout or shape, lists and unknown names still go through the casts and their errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

import gpux
from gpux.errors import InputError


def test_run_dict_takes_the_native_path_only_for_checked_signatures(mlp_project: Path) -> None:
    session = gpux.load(mlp_project, "cpu", strict=True)
    raw = ort.InferenceSession(str(session.build.final.artifact.main), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    want = raw.run(None, {"x": x})[0]
    assert session._native is None
    np.testing.assert_allclose(session.run({"x": x})["probs"], want, rtol=1e-6)
    np.testing.assert_allclose(session.run({"x": x})["probs"], want, rtol=1e-6)
    assert session._native is not None and len(session._seen) == 1, "the second call found the signature"
    calls: list[object] = []
    native = session._native
    session._native = lambda feeds: calls.append(feeds) or native(feeds)
    np.testing.assert_allclose(session.run(x=x.copy())["probs"], want, rtol=1e-6)
    assert len(calls) == 1, "a new array of a checked signature goes straight to the runtime"
    for other in (x.astype(np.float64), np.asfortranarray(x), x.tolist()):  # cast, then the same answer
        np.testing.assert_allclose(session.run({"x": other})["probs"], want, rtol=1e-5)
    assert len(calls) == 1 and len(session._seen) == 1, "other dtypes, layouts and lists are cast, not remembered"
    with pytest.raises(InputError, match="has shape"):
        session.run({"x": np.zeros((3, 5), np.float32)})
    with pytest.raises(InputError, match="no input 'y'"):
        session.run({"x": x, "y": x})
    session.close()
    with pytest.raises(AssertionError):
        session.run({"x": x})


def test_the_prepared_path_remembers_a_bounded_number_of_signatures(mlp_project: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from gpux.model import checked

    monkeypatch.setattr(checked, "KEPT", 2)
    session = gpux.load(mlp_project, "cpu", strict=True)
    checked_calls: list[int] = []
    run_feeds = session.run_feeds
    monkeypatch.setattr(session, "run_feeds", lambda feeds: checked_calls.append(1) or run_feeds(feeds))
    call = session.prepared()
    rows = {n: np.random.default_rng(n).standard_normal((n, 8)).astype(np.float32) for n in (1, 2, 3)}
    for n in (1, 1, 2, 2):
        assert call({"x": rows[n]})[0].shape == (n, 4)
    assert len(checked_calls) == 2, "each signature is checked once while there is room"
    for n in (3, 3, 1):
        assert call({"x": rows[n]})[0].shape == (n, 4)
    assert len(checked_calls) == 4, "past the bound, a new signature is checked on every call; known ones are not"
    with pytest.raises(InputError, match="must already be a float32"):
        call({"x": rows[1].astype(np.float64)})
    session.close()
