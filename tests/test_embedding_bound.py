"""An embedding's verification counts a rate: the rows whose vector keeps its direction (cosine with the FP32
reference's >= verify's `row_cosine`, default 0.99), held to `min_rows_close` by its one-sided Wilson bound, as
labels, texts and boxes are: a failure names it, too few rows leave the verdict short of it (❎ in `gpux tune
--table`), and a floor the rows show is ✅."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpux.quality.evidence import lower_bound, weigh

from .conftest import gpux, write
from .test_embedding import CONFIG, WEIGHTS


def turned(rows: int, away: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """`rows` seeded vectors and the same, `away` of them turned well away from their reference."""
    rng = np.random.default_rng(3)
    ref = rng.normal(size=(rows, 16))
    got = ref.copy()
    got[:away] += rng.normal(size=(away, 16)) * 2
    return list(ref), list(got)


def test_the_share_of_close_rows_is_a_counted_rate_with_its_bound_and_floor() -> None:
    from gpux.quality.agreement import Runs, add_answers
    from gpux.quality.metrics import Rule, Verification, tolerances

    ref, got = turned(40, 3)
    result = Verification(passed=True, precision="fp32", tolerances=tolerances("fp32"), outputs={"vector": {}},
                          failures=[], samples=1)
    spec = embedding_spec()
    add_answers(result, {"vector": spec}, Runs(["vector"], [[np.stack(ref)]], [[np.stack(got)]]), {}, judged=True)
    record = result.outputs["vector"]["answers"]
    assert record["kind"] == "embedding" and record["rows"] == 40 and record["close"] == pytest.approx(37 / 40)
    assert record["close_at"] == 0.99
    assert result.failures == ["vector: rows whose vector keeps its direction 0.925 < min_rows_close 0.99 (40 rows at "
                               "cosine >= 0.99)"], result.failures
    [rate] = weigh(result.outputs, {"vector": result.tolerances})
    assert (rate["metric"], rate["label"], rate["rows"], rate["agree"]) == \
        ("close", "vectors keeping their direction", 40, 37)
    assert rate["bound"] == pytest.approx(lower_bound(37, 40)) and not rate["shown"] and rate["floor"] == 0.99
    # row_cosine (verify:) is the cosine a row is counted close at; min_rows_close the share's floor
    loose = tolerances("fp32") | {"row_cosine": -1.0, "min_rows_close": 0.9}
    again = Verification(passed=True, precision="fp32", tolerances=loose, outputs={"vector": {}}, failures=[],
                         samples=1)
    add_answers(again, {"vector": spec}, Runs(["vector"], [[np.stack(ref)]], [[np.stack(got)]]),
                {"vector": Rule(loose)}, judged=True)
    assert again.outputs["vector"]["answers"]["close"] == 1.0 and again.outputs["vector"]["answers"]["close_at"] == -1
    assert again.failures == [] and again.passed


def embedding_spec() -> Any:
    from gpux.config.steps import Postprocess

    return Postprocess.model_validate({"embedding": {"normalize": True}})


@pytest.fixture(scope="module")
def embedder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    folder = tmp_path_factory.mktemp("embedder_bound")
    nodes = [helper.make_node("Flatten", ["image"], ["flat"], axis=1),
             helper.make_node("MatMul", ["flat", "w"], ["vector"])]
    graph = helper.make_graph(nodes, "embedder",
                              [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, 8, 8])],
                              [helper.make_tensor_value_info("vector", TensorProto.FLOAT, ["batch", 16])],
                              [numpy_helper.from_array(WEIGHTS, "w")])
    onnx.save(helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", 17)]), folder / "model.onnx")
    write(folder / "gpux.yml", CONFIG.replace("cpu: {precision: fp32}", "cpu: {precision: fp32}\nruntime: {backend: "
                                              "auto}"))
    np.savez(folder / "data.npz", image=np.random.default_rng(1).uniform(0, 1, (30, 1, 3, 8, 8)).astype(np.float32))
    return folder


def cpu_rows(project: Path, code: int) -> list[Any]:
    """The table's rows of the cpu provider (`code`: tune's exit, 1 where no row can be locked)."""
    r = gpux("tune", str(project), "--table", "--providers", "cpu", "--precisions", "fp32", "--seconds", "0.1",
             "--json")
    assert r.returncode == code, r.stderr
    return [row for row in json.loads(r.stdout)["table"] if row["provider"] == "cpu"]


def test_the_table_shows_what_the_judged_rows_show_of_the_embedding_floor(embedder: Path) -> None:
    rows = cpu_rows(embedder, 1)  # 30 rows, none turned: at most 91.7 % shown, short of the 99 % floor
    assert rows and all(row["mark"] == "❎" and row["metric"] == "vectors keeping their direction" for row in rows)
    assert all(row["rows"] == 30 and row["value"] == 1.0 and row["bound"] == pytest.approx(lower_bound(30, 30))
               for row in rows), rows
    assert all("about 238 more are needed for the 99 % floor" in row["detail"] for row in rows), rows
    yml = embedder / "gpux.yml"
    yml.write_text(yml.read_text().replace("verify: {data: data.npz}", "verify: {data: data.npz, min_rows_close: 0.9}"))
    rows = cpu_rows(embedder, 0)  # 30 of 30 show 91.7 %: a floor of 90 % is shown
    assert all(row["mark"] == "✅" and row["floor"] == 0.9 for row in rows), rows
