"""`gpux run NAME SOURCE --on ray` on a real local Ray cluster of two nodes (a head and a second node, one CPU
each, both on 127.0.0.1): trained MobileNetV2 over real photos, answers compared file by file with `gpux run NAME
FOLDER`; a bad file recorded, not fatal; an actor killed mid-run loses and doubles nothing; --resume skips what an
earlier run answered; `gpux deploy ray` joins the same cluster with a replica on each node."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from .conftest import gpux
from .trained import mobilenet_v2_example, photos, prebuilt

pytest.importorskip("pyarrow", reason="Ray Data needs pyarrow and pandas: pip install 'gpux-ml[ray]'")
pytest.importorskip("pandas", reason="Ray Data needs pyarrow and pandas: pip install 'gpux-ml[ray]'")
pytestmark = pytest.mark.slow

ACTOR = "FileAnswerer"  # in the process title of each Ray Data actor


def make_photos(folder: Path, n: int) -> Path:
    """`n` JPEGs cut from skimage's real photos (crops at seeded places, every other one mirrored)."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    sources, rng = photos(), np.random.default_rng(0)
    for i in range(n):
        im = Image.fromarray(sources[i % len(sources)]).convert("RGB")
        w, h = im.size
        cw, ch = int(w * rng.uniform(0.6, 1.0)), int(h * rng.uniform(0.6, 1.0))
        x, y = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
        im = im.crop((x, y, x + cw, y + ch)).resize((320, 240))
        (im.transpose(Image.Transpose.FLIP_LEFT_RIGHT) if i % 2 else im).save(folder / f"p{i:03d}.jpg", quality=90)
    return folder


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A head and a second node, one CPU each, Ray's node IP set to 127.0.0.1; the example's model, built."""
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    # a driver resolves 127.0.0.1 in an address to this machine's outward IP unless Ray keeps to loopback
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    from ray.cluster_utils import Cluster

    # built for openvino, what auto runs here, once per session (deploy: is not the build's)
    root = prebuilt(mobilenet_v2_example(tmp_path_factory.mktemp("mobilenet")), "openvino")
    yml = root / "gpux.yml"
    yml.write_text(yml.read_text() + "deploy:\n  ray:\n    batch: {files_per_call: 4}\n")
    folder = make_photos(tmp_path_factory.mktemp("photos") / "in", 36)
    local = gpux("run", str(root), str(folder), "--json", timeout=900)
    assert local.returncode == 0, local.stderr
    node = {"num_cpus": 1, "node_ip_address": "127.0.0.1", "include_dashboard": False}
    c = Cluster(initialize_head=True, head_node_args=node)
    forget_address()
    try:
        c.add_node(num_cpus=1, node_ip_address="127.0.0.1")
        c.wait_for_nodes()
        yield {"root": root, "folder": folder, "address": c.address, "cluster": c,
               "local": {d["file"]: d for d in map(json.loads, local.stdout.splitlines())}}
    finally:
        c.shutdown()


def built_artifacts(root: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in (root / ".gpux").rglob("manifest.json")}


def forget_address() -> None:
    """Cluster records its address in /tmp/ray/ray_current_cluster, where any plain `ray.init()` on this machine
    (another test's local Ray) would join it; the drivers here name the address instead."""
    from ray._common.utils import reset_ray_address

    reset_ray_address()


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def same_answers(got: dict[str, Any], want: dict[str, Any]) -> None:
    (g,), (w,) = got["answers"].values(), want["answers"].values()
    assert [a["label"] for a in g] == [a["label"] for a in w], got["file"]
    np.testing.assert_allclose([a["score"] for a in g], [a["score"] for a in w], rtol=1e-5, atol=1e-6)
    assert got["provider"] == want["provider"]


def on_ray(c: dict[str, Any], *args: str) -> list[str]:
    return [sys.executable, "-m", "gpux", "run", str(c["root"]), *args, "--on", f"ray:{c['address']}"]


def test_two_nodes_answer_like_gpux_run_and_record_a_bad_file(cluster: dict[str, Any], tmp_path: Path) -> None:
    import ray

    bad = tmp_path / "broken.jpg"
    bad.write_bytes(b"not a jpeg at all")
    files = list(cluster["local"])
    files[5:5] = [str(bad)]  # inside a call of 4 files, between two that are answered
    listed = tmp_path / "files.txt"
    listed.write_text("\n".join(files))
    out = tmp_path / "answers.jsonl"
    built = built_artifacts(cluster["root"])
    r = subprocess.run(on_ray(cluster, f"@{listed}", "-o", str(out)), capture_output=True, text=True, timeout=900)
    assert built and built_artifacts(cluster["root"]) == built, "the actors opened what `gpux run` built"
    assert r.returncode == 1, r.stderr  # a file recorded with an error: exit 1, the job done
    assert "37 files: 36 answered, 1 failed" in r.stderr and "2 actor(s) of 1 CPU" in r.stderr
    docs = lines(out)
    assert [d["file"] for d in docs] == files, "input order, every file once"
    for d in docs[:5] + docs[6:]:
        same_answers(d, cluster["local"][d["file"]])
    assert "broken.jpg" in docs[5]["error"] and "answers" not in docs[5]
    ray.init(address=cluster["address"])
    try:
        assert len([n for n in ray.nodes() if n["Alive"]]) == 2
    finally:
        ray.shutdown()


def actor_pids() -> list[int]:
    """Processes of this machine whose title names the batch actor (Ray sets `ray::MapWorker(...FileAnswerer)`)."""
    found = []
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and ACTOR in (p / "cmdline").read_bytes().decode(errors="replace"):
                found.append(int(p.name))
        except OSError:
            continue
    return found


def test_an_actor_killed_mid_run_loses_and_doubles_nothing(cluster: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "answers.jsonl"
    before = set(actor_pids())  # an earlier job's actors, if any still exit
    proc = subprocess.Popen(on_ray(cluster, str(cluster["folder"]), "-o", str(out)), stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 600
        while not (out.exists() and len(out.read_text().splitlines()) >= 4) and proc.poll() is None:
            assert time.monotonic() < deadline, "no answers came back"
            time.sleep(0.2)
        assert proc.poll() is None, "the run ended before an actor could be killed"
        victims = [p for p in actor_pids() if p not in before]
        assert len(victims) == 2, victims
        os.kill(victims[0], signal.SIGKILL)
        _, err = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    docs = lines(out)
    assert [d["file"] for d in docs] == list(cluster["local"]), "every file once, in order"
    for d in docs:
        same_answers(d, cluster["local"][d["file"]])


def test_resume_skips_what_was_answered_and_retries_errors(cluster: dict[str, Any], tmp_path: Path) -> None:
    local = cluster["local"]
    files = list(local)
    out = tmp_path / "answers.jsonl"
    kept = [json.dumps(local[f]) for f in files[:10]] + [json.dumps({"file": files[10], "error": "it failed"})]
    out.write_text("\n".join(kept) + "\n" + json.dumps(local[files[11]])[:40])  # a line cut short by a crash
    r = subprocess.run(on_ray(cluster, str(cluster["folder"]), "-o", str(out), "--resume", "--concurrency", "1"),
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    assert "36 files: 26 answered, 0 failed, 10 answered before (--resume)" in r.stderr
    docs = lines(out)
    assert sorted(d["file"] for d in docs) == sorted(files) and [d["file"] for d in docs[:10]] == files[:10]
    for d in docs:
        same_answers(d, local[d["file"]])
    again = subprocess.run(on_ray(cluster, str(cluster["folder"]), "-o", str(out), "--resume"), capture_output=True,
                           text=True, timeout=900)
    assert again.returncode == 0 and "36 answered before" in again.stderr and lines(out) == docs


def test_parquet_keeps_the_same_answers(cluster: dict[str, Any], tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    files = list(cluster["local"])[:6]
    out = tmp_path / "answers.parquet"
    r = subprocess.run(on_ray(cluster, *files, "-o", str(out)), capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    rows = pq.read_table(out).to_pylist()
    assert [row["file"] for row in rows] == files and all(row["error"] is None for row in rows)
    for row in rows:
        same_answers({**row, "answers": json.loads(row["answers"])}, cluster["local"][row["file"]])
    more = list(cluster["local"])[:8]
    again = subprocess.run(on_ray(cluster, *more, "-o", str(out), "--resume"), capture_output=True, text=True,
                           timeout=900)
    assert again.returncode == 0 and "8 files: 2 answered, 0 failed, 6 answered before" in again.stderr
    assert [row["file"] for row in pq.read_table(out).to_pylist()] == more


def test_a_uri_prefix_is_listed_and_read_through_pyarrow(cluster: dict[str, Any], tmp_path: Path) -> None:
    """file:// stands for the object stores (s3://, gs://) pyarrow reads the same way where their support is in."""
    import shutil

    picked = list(cluster["local"])[:4]
    for f in picked:
        shutil.copy(f, tmp_path)
    r = subprocess.run(on_ray(cluster, f"file://{tmp_path}/", "--json"), capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    docs = [json.loads(line) for line in r.stdout.splitlines()]
    assert [d["file"] for d in docs] == [f"file://{tmp_path / Path(f).name}" for f in picked]
    for d, f in zip(docs, picked, strict=True):
        same_answers(d, cluster["local"][f])


def test_actors_that_cannot_open_the_model_stop_the_job_in_one_line(cluster: dict[str, Any], tmp_path: Path) -> None:
    """The driver holds the project it read; each actor reads gpux.yml again, here made invalid after the driver
    read it: the job stops with a GpuxError naming the actor's own error, not a Ray traceback."""
    import shutil

    import ray

    from gpux.config.load import load_config
    from gpux.run.ray_batch import BatchRequest, RayJobFailed, answer_on_ray

    root = tmp_path / "copy"
    shutil.copytree(cluster["root"], root)  # with its store: the driver's build is a cache hit, the actors fail
    project = load_config(root)
    (root / "gpux.yml").write_text((root / "gpux.yml").read_text().replace("topk: 5", "topk: five"))
    ray.init(address=cluster["address"])
    try:
        with pytest.raises(RayJobFailed, match=r"Ray Data stopped after 0 of 3 files: .*topk"):
            answer_on_ray(project, BatchRequest(sources=tuple(list(cluster["local"])[:3]), concurrency=1,
                                                output=str(tmp_path / "a.jsonl")))
    finally:
        ray.shutdown()


def test_gpux_deploy_ray_joins_the_cluster_with_a_replica_on_each_node(cluster: dict[str, Any],
                                                                       tmp_path: Path) -> None:
    """`gpux deploy ray --address` onto the two-node cluster: two replicas of one CPU each (so one on each node)
    answer a photo sent as BYTES by tritonclient as `gpux run` answers it; the application stays after gpux exits."""
    import shutil

    import ray
    import tritonclient.http as th
    from ray import serve

    from .test_deploy_ray import free_port

    root = tmp_path / "served"
    shutil.copytree(cluster["root"], root)
    yml = root / "gpux.yml"
    two = "  ray:\n    num_replicas: 2\n    ray_actor_options: {num_cpus: 1}\n"
    yml.write_text(yml.read_text().replace("  ray:\n", two))
    port = free_port()
    r = gpux("deploy", "ray", str(root), "--address", cluster["address"], "--port", str(port), timeout=900)
    assert r.returncode == 0, r.stderr
    ray.init(address=cluster["address"])
    try:
        app = serve.status().applications["gpux"]
        assert app.deployments["mobilenet-v2"].replica_states.get("RUNNING") == 2
        handle = serve.get_deployment_handle("mobilenet-v2", app_name="gpux")
        assert len({handle.info.remote().result()["pid"] for _ in range(40)}) == 2
        file = next(iter(cluster["local"]))
        x = th.InferInput("x", [1], "BYTES")
        x.set_data_from_numpy(np.array([Path(file).read_bytes()], dtype=object))
        got = th.InferenceServerClient(f"127.0.0.1:{port}").infer("mobilenet-v2", [x]).as_numpy("logits")
        same_answers({"file": file, "provider": cluster["local"][file]["provider"],
                      "answers": {"logits": json.loads(got[0])}}, cluster["local"][file])
    finally:
        serve.shutdown()
        ray.shutdown()
