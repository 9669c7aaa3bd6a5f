"""The build engine on real ONNX Runtime: cache keys, atomic publish under SIGKILL, concurrency, variants."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import gpux
from gpux.artifacts import store
from gpux.artifacts.build import build
from gpux.config.load import load_config
from gpux.errors import VerificationFailed

from .conftest import ROOT, make_mlp, rewrite_in_place, write
from .conftest import gpux as cli


def built(project_dir: Path, provider: str = "cpu", **kw):
    return build(load_config(project_dir), provider, **kw).final


def edit(project_dir: Path, old: str, new: str) -> None:
    p = project_dir / "gpux.yml"
    text = p.read_text()
    assert old in text
    p.write_text(text.replace(old, new))


def test_cache_hit_and_miss_matrix(mlp_project: Path) -> None:
    first = built(mlp_project)
    assert not first.cached
    assert built(mlp_project).cached, "unchanged → nothing rebuilt"

    # an option of the provider
    edit(mlp_project, "backend: cpu", "backend: cpu\nproviders:\n  cpu: {optimization: extended}")
    opt = built(mlp_project)
    assert not opt.cached and opt.artifact.dir != first.artifact.dir
    assert opt.artifact.manifest["key_parts"]["device"]["cpu"], "extended output is machine-specific"
    edit(mlp_project, "{optimization: extended}", "{optimization: basic}")
    assert built(mlp_project).cached, "back to the first options → the first artifact"

    # precision
    edit(mlp_project, "{optimization: basic}", "{optimization: basic, precision: fp16}")
    fp16 = built(mlp_project)
    assert not fp16.cached and fp16.target.precision == "fp16"
    edit(mlp_project, "precision: fp16", "precision: fp32")

    # declared input shapes and verification settings
    edit(mlp_project, "version: 1.0.0", "version: 1.0.0\nverify: {samples: 2}")
    assert not built(mlp_project).cached

    # --force
    again = build(load_config(mlp_project), "cpu", force=True).final
    assert not again.cached and again.reason == "--force"

    # the runtime's version: simulate an upgrade by changing what the manifest recorded
    manifest_path = again.artifact.dir / "manifest.json"
    m = json.loads(manifest_path.read_text())
    m["key_parts"]["versions"]["onnxruntime"] = "onnxruntime 0.0.1"
    manifest_path.write_text(json.dumps(m))
    stale = built(mlp_project)
    assert not stale.cached and stale.reason == "manifest does not match this environment"

    # the model's bytes
    make_mlp(mlp_project / "model.onnx", seed=7)
    changed = built(mlp_project)
    assert not changed.cached
    assert changed.artifact.manifest["key_parts"]["input"] != stale.artifact.manifest["key_parts"]["input"]


def test_a_manifest_written_with_step_is_still_read(mlp_project: Path) -> None:
    """Manifests name the target's kind of artifact "kind" (and "step", as an install from before reads it); a
    store whose manifests say only "step" keeps working: the artifact is found in the cache and opened."""
    art = built(mlp_project).artifact
    m = json.loads((art.dir / "manifest.json").read_text())
    assert m["target"]["kind"] == m["target"]["step"] == "optimize"
    del m["target"]["kind"]
    (art.dir / "manifest.json").write_text(json.dumps(m))
    again = built(mlp_project)
    assert again.cached and again.artifact.dir == art.dir and again.artifact.kind == "optimize"
    session = gpux.load(mlp_project, provider="cpu")
    try:
        assert session.run({"x": np.ones((1, 8), np.float32)})
    finally:
        session.close()


def test_damaged_artifact_is_never_loaded(mlp_project: Path) -> None:
    art = built(mlp_project).artifact
    data = bytearray(art.main.read_bytes())
    data[-10] ^= 0xFF
    st = art.main.stat()
    art.main.write_bytes(bytes(data))
    os.utime(art.main, ns=(st.st_atime_ns, st.st_mtime_ns))  # same size and mtime: the ctime tells, then the hash
    assert "sha256" in (store.check(art, full=False) or "")
    assert "sha256" in (store.check(art, full=True) or "")
    with gpux.load(mlp_project) as s:  # run re-hashes, sees the damage and rebuilds
        s.run({"x": np.zeros((1, 8), np.float32)})
        assert not s.build.final.cached
    assert store.check(store.read_manifest(art.dir), full=True) is None
    r = cli("cache", "verify", str(mlp_project))
    assert r.returncode == 0, r.stdout + r.stderr


def test_verification_failure_is_readable_and_publishes_nothing(mlp_project: Path) -> None:
    edit(mlp_project, "backend: cpu", "backend: cpu\nproviders:\n  cpu: {precision: fp16}\n"
                                      "verify: {min_cosine: 1.0, atol: 1.0e-9}")
    with pytest.raises(VerificationFailed) as info:
        built(mlp_project)
    assert "failed verification against the FP32 reference" in info.value.message
    assert "cosine" in info.value.message and "outside atol" in info.value.message
    assert not list((mlp_project / ".gpux" / "tiny-mlp").glob("onnx-int8*")), "nothing published"
    r = cli("build", str(mlp_project))
    assert r.returncode == 1 and "min_cosine 1.0" in r.stderr and "Traceback" not in r.stderr
    ok = cli("build", str(mlp_project), "--no-verify", "--json")
    assert ok.returncode == 0
    assert json.loads(ok.stdout)["targets"][0]["verification"] == {"status": "skipped", "skipped": "--no-verify"}


@pytest.fixture
def examples(tmp_path: Path) -> dict[str, Path]:
    """The mlp and multi-input examples, copied with their generated models."""
    out = {}
    for name in ("mlp", "multi_input"):
        src = ROOT / "examples" / name
        dst = tmp_path / name
        dst.mkdir()
        (dst / "gpux.yml").write_text((src / "gpux.yml").read_text())
        subprocess.run([sys.executable, str(src / "make_model.py"), str(dst / "model.onnx")], check=True,
                       capture_output=True)
        out[name] = dst
    return out


@pytest.mark.parametrize("name", ["mlp", "multi_input"])
def test_fp16_and_int8_variants_are_smaller_and_verified(examples: dict[str, Path], name: str) -> None:
    sizes = {}
    for precision, quant in (("fp32", None), ("fp16", None), ("int8", "dynamic"), ("int8", "static")):
        block = f"{{precision: {precision}" + (f", quantization: {quant}}}" if quant else "}")
        p = examples[name] / "gpux.yml"
        p.write_text(p.read_text().replace("cpu: {optimization: basic, precision: fp32}", f"cpu: {block}"))
        final = built(examples[name])
        v = final.artifact.manifest["verification"]
        assert v["passed"], v["failures"]
        sizes[final.target.id] = final.artifact.size()
        p.write_text(p.read_text().replace(f"cpu: {block}", "cpu: {optimization: basic, precision: fp32}"))
    fp32 = sizes["onnx-fp32-basic"]
    assert sizes["onnx-fp16-basic"] < fp32
    assert sizes["onnx-int8-dynamic-basic"] < fp32 and sizes["onnx-int8-static-basic"] < fp32


def test_static_int8_calibrates_on_declared_data(examples: dict[str, Path]) -> None:
    proj = examples["mlp"]
    rng = np.random.default_rng(3)
    np.savez(proj / "calib.npz", x=rng.standard_normal((32, 1, 64)).astype(np.float32))
    p = proj / "gpux.yml"
    p.write_text(p.read_text().replace("cpu: {optimization: basic, precision: fp32}",
                                       "cpu: {precision: int8, quantization: static, calibration: calib.npz}"))
    logs: list[str] = []
    first = build(load_config(proj), "cpu", log=logs.append).final
    assert not any("seeded random" in m for m in logs)
    np.savez(proj / "calib.npz", x=rng.standard_normal((32, 1, 64)).astype(np.float32))
    assert built(proj).key != first.key, "new calibration data → new artifact"


def test_dry_run_prints_the_plan_without_building(mlp_project: Path) -> None:
    r = cli("build", str(mlp_project), "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    [target] = doc["targets"]
    assert target["id"] == "onnx-fp32-basic" and target["options"]["optimization"] == "basic"
    assert target["key_parts"]["versions"]["onnxruntime"]
    assert not (mlp_project / ".gpux" / "tiny-mlp").exists()


def big_mlp_project(tmp_path: Path) -> Path:
    make_mlp(tmp_path / "model.onnx", features=512, hidden=2048, classes=512)
    write(tmp_path / "gpux.yml", """\
        name: big
        model: {source: model.onnx}
        runtime: {backend: cpu}
        providers: {cpu: {precision: int8}}
        """)
    return tmp_path


def trusted_artifacts(root: Path) -> list[store.Artifact]:
    """What a later run would trust: folders with a valid manifest."""
    return [a for a in store.artifacts(root) if a is not None]


def test_sigkill_during_builds_never_leaves_a_trusted_half_artifact(tmp_path: Path) -> None:
    proj = big_mlp_project(tmp_path)
    rng = random.Random(42)
    killed = 0
    for _ in range(20):
        p = subprocess.Popen([sys.executable, "-m", "gpux", "build", str(proj), "--force"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.3, 2.5))
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            killed += 1
        p.wait()
        for art in trusted_artifacts(proj / ".gpux"):
            assert store.check(art, full=True) is None, f"trusted but damaged: {art.dir}"
    assert killed >= 10, "the kills must land during builds"
    r = cli("build", str(proj), "--json")
    assert r.returncode == 0, r.stderr
    r = cli("run", str(proj), "--input", json.dumps({"x": [[0.1] * 512]}), "--json")
    assert r.returncode == 0, r.stderr
    cli("cache", "prune", str(proj))
    assert not list((proj / ".gpux" / ".tmp").glob("*")), "prune removes half-built leftovers"


def test_concurrent_builds_leave_one_consistent_artifact_set(tmp_path: Path) -> None:
    proj = big_mlp_project(tmp_path)
    procs = [subprocess.Popen([sys.executable, "-m", "gpux", "build", str(proj), "--json"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], [e for _, e in outs]
    paths = {json.loads(o)["targets"][0]["path"] for o, _ in outs}
    assert len(paths) == 1
    arts = trusted_artifacts(proj / ".gpux")
    assert len(arts) == 1 and store.check(arts[0], full=True) is None
    built_fresh = [json.loads(o)["targets"][0]["cached"] for o, _ in outs].count(False)
    assert built_fresh == 1, "one process builds, the others wait and reuse"


BLOCK = """
import sys, importlib.abc
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"pydantic", "onnx", "onnxruntime", "numpy", "yaml"}:
            raise ImportError("blocked: " + name)
sys.meta_path.insert(0, Block())
from gpux.cli.main import main
main(sys.argv[1:])
"""


def blocked_build(*args: str, env: dict[str, str] | None = None,
                  cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", BLOCK, "build", *args], capture_output=True, text=True, timeout=120,
                          env=None if env is None else {**os.environ, **env}, cwd=cwd)


def test_unchanged_build_is_answered_without_loading_anything_heavy(mlp_project: Path) -> None:
    first = cli("build", str(mlp_project), "--json")
    assert first.returncode == 0, first.stderr
    noop = blocked_build(str(mlp_project), "--json")
    assert noop.returncode == 0, noop.stderr
    doc = json.loads(noop.stdout)
    assert doc["targets"][0]["cached"] is True
    assert doc["targets"][0]["path"] == json.loads(first.stdout)["targets"][0]["path"]
    text = blocked_build(str(mlp_project))
    assert text.returncode == 0 and "onnx-fp32-basic: cached" in text.stdout


@pytest.mark.parametrize("change", ["model", "config", "artifact", "flag"])
def test_any_change_takes_the_full_path(mlp_project: Path, change: str) -> None:
    assert cli("build", str(mlp_project)).returncode == 0
    args = [str(mlp_project)]
    if change == "model":
        os.utime(mlp_project / "model.onnx")
    elif change == "config":
        edit(mlp_project, "version: 1.0.0", "version: 1.0.1")
    elif change == "artifact":
        art = next((mlp_project / ".gpux" / "tiny-mlp").glob("onnx-*/model.onnx"))
        os.utime(art)
    else:
        args.append("--no-verify")
    r = blocked_build(*args)
    assert r.returncode != 0 and "blocked" in r.stderr, "the full build must run (and here it cannot)"
    assert cli("build", *args).returncode == 0


@pytest.mark.parametrize("rewritten", ["model", "verify data", "calibration data"])
def test_a_file_rewritten_in_place_with_its_size_and_mtime_is_read_again(
        mlp_project: Path, tmp_path_factory: pytest.TempPathFactory, rewritten: str) -> None:
    """A retrained model (or new verify or calibration data) written over the old file, same size, mtime set back:
    the next build rebuilds and `gpux run` answers with the new weights."""
    import onnxruntime as ort

    edit(mlp_project, "version: 1.0.0", "version: 1.0.0\nverify: {data: v.npz}")
    np.savez(mlp_project / "v.npz", x=np.ones((2, 8), np.float32))
    if rewritten == "calibration data":
        edit(mlp_project, "backend: cpu", "backend: cpu\nproviders:\n  cpu: {precision: int8, quantization: static, "
             "calibration: cal.npz}")
        np.savez(mlp_project / "cal.npz", x=np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32))
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(1, 8)
    first = cli("build", str(mlp_project), "--json")
    assert first.returncode == 0, first.stderr
    assert json.loads(cli("build", str(mlp_project), "--json").stdout)["targets"][0]["cached"]
    elsewhere = tmp_path_factory.mktemp("new")  # not in the project's folder, whose mtime would tell
    if rewritten == "model":
        make_mlp(elsewhere / "retrained.onnx", seed=5)
        rewrite_in_place(mlp_project / "model.onnx", (elsewhere / "retrained.onnx").read_bytes())
    elif rewritten == "verify data":
        np.savez(elsewhere / "v.npz", x=np.zeros((2, 8), np.float32))
        rewrite_in_place(mlp_project / "v.npz", (elsewhere / "v.npz").read_bytes())
    else:
        np.savez(elsewhere / "cal.npz", x=np.random.default_rng(1).standard_normal((8, 8)).astype(np.float32))
        rewrite_in_place(mlp_project / "cal.npz", (elsewhere / "cal.npz").read_bytes())
    again = cli("build", str(mlp_project), "--json")
    assert again.returncode == 0, again.stderr
    [target] = json.loads(again.stdout)["targets"]
    assert not target["cached"] and target["path"] != json.loads(first.stdout)["targets"][0]["path"]
    ran = cli("run", str(mlp_project), "--input", json.dumps({"x": x.tolist()}), "--json")
    assert ran.returncode == 0, ran.stderr
    got = np.asarray(json.loads(ran.stdout)["outputs"]["probs"]["data"], np.float32)
    want = ort.InferenceSession(str(mlp_project / "model.onnx")).run(None, {"x": x})[0]
    int8 = rewritten == "calibration data"  # answers within int8's rounding of the fp32 model's
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=0.05 if int8 else 0)


def test_a_distribution_installed_or_upgraded_takes_the_full_path(mlp_project: Path, tmp_path: Path) -> None:
    """Any distribution Python can import from counts (a provider plugin can change what a build makes), not a
    fixed list, wherever it is installed (here a PYTHONPATH folder, as `pip install --target` makes)."""
    site = tmp_path / "plugins"
    (site / "gpux_toy_plugin-1.0.dist-info").mkdir(parents=True)
    env = {"PYTHONPATH": str(site)}
    assert cli("build", str(mlp_project)).returncode == 0
    r = blocked_build(str(mlp_project), env=env)
    assert r.returncode != 0 and "blocked" in r.stderr, "a new distribution: the full build must run"
    assert subprocess.run([sys.executable, "-m", "gpux", "build", str(mlp_project)], env={**os.environ, **env},
                          capture_output=True, timeout=300).returncode == 0
    assert blocked_build(str(mlp_project), env=env).returncode == 0, "unchanged: replayed"
    (site / "gpux_toy_plugin-1.0.dist-info").rename(site / "gpux_toy_plugin-1.1.dist-info")
    r = blocked_build(str(mlp_project), env=env)
    assert r.returncode != 0 and "blocked" in r.stderr, "an upgraded distribution: the full build must run"
    relative = {"PYTHONPATH": "plugins/"}  # the same folder, named relative to the current directory
    assert subprocess.run([sys.executable, "-m", "gpux", "build", str(mlp_project)], env={**os.environ, **relative},
                          cwd=tmp_path, capture_output=True, timeout=300).returncode == 0
    assert blocked_build(str(mlp_project), env=relative, cwd=tmp_path).returncode == 0, "unchanged: replayed"
    (site / "gpux_toy_plugin-1.1.dist-info").rename(site / "gpux_toy_plugin-1.2.dist-info")
    r = blocked_build(str(mlp_project), env=relative, cwd=tmp_path)
    assert r.returncode != 0 and "blocked" in r.stderr, "a PYTHONPATH folder named relatively counts too"


def test_a_model_changed_while_the_build_hashes_it_is_not_replayed(mlp_project: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """What a build read is taken before it hashes anything: a model rewritten just after it was hashed makes
    the next build take the full path (its record must not vouch for the new bytes)."""
    from gpux.artifacts import plan as planning
    from gpux.cli.build import BuildRequest, build_command

    digest = planning.digest_files

    def digest_then_rewrite(*args: object, **kw: object) -> str:
        out = digest(*args, **kw)  # type: ignore[arg-type]
        make_mlp(mlp_project / "model.onnx", seed=7)
        return out

    monkeypatch.setattr(planning, "digest_files", digest_then_rewrite)
    assert build_command(BuildRequest(path=str(mlp_project), provider="cpu")) == 0
    monkeypatch.undo()
    r = blocked_build(str(mlp_project), "--provider", "cpu")
    assert r.returncode != 0 and "blocked" in r.stderr, "the full build must run (and here it cannot)"


def test_a_model_link_pointed_elsewhere_takes_the_full_path(mlp_project: Path) -> None:
    (mlp_project / "models").mkdir()
    (mlp_project / "model.onnx").rename(mlp_project / "models" / "a.onnx")
    make_mlp(mlp_project / "models" / "b.onnx", seed=7)
    (mlp_project / "model.onnx").symlink_to("models/a.onnx")
    assert cli("build", str(mlp_project)).returncode == 0
    assert blocked_build(str(mlp_project)).returncode == 0, "unchanged: replayed"
    (mlp_project / "model.onnx").unlink()
    (mlp_project / "model.onnx").symlink_to("models/b.onnx")
    r = blocked_build(str(mlp_project))
    assert r.returncode != 0 and "blocked" in r.stderr, "the full build must run (and here it cannot)"


def test_name_index_holds_absolute_paths(mlp_project: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    assert cli("build", ".", cwd=mlp_project).returncode == 0
    elsewhere = tmp_path_factory.mktemp("other")
    r = cli("run", "tiny-mlp", "--input", json.dumps({"x": [[0.0] * 8]}), "--json", cwd=elsewhere)
    assert r.returncode == 0, r.stderr


def test_no_verify_artifact_is_verified_before_it_is_trusted(mlp_project: Path) -> None:
    edit(mlp_project, "backend: cpu", "backend: cpu\nproviders:\n  cpu: {precision: fp16}\n"
                                      "verify: {min_cosine: 1.0}")
    assert cli("build", str(mlp_project), "--no-verify").returncode == 0
    again = cli("build", str(mlp_project))
    assert again.returncode == 1 and "failed verification" in again.stderr


def test_new_calibration_file_in_a_folder_takes_the_full_path(mlp_project: Path) -> None:
    calib = mlp_project / "calib"
    calib.mkdir()
    np.save(calib / "a.npy", np.ones((4, 1, 8), np.float32))
    edit(mlp_project, "backend: cpu", "backend: cpu\nproviders:\n  cpu: {precision: int8, quantization: static, "
                                      "calibration: calib}")
    assert cli("build", str(mlp_project), "--no-verify").returncode == 0
    assert blocked_build(str(mlp_project), "--no-verify").returncode == 0, "unchanged: replayed"
    np.save(calib / "b.npy", np.zeros((4, 1, 8), np.float32))
    r = blocked_build(str(mlp_project), "--no-verify")
    assert r.returncode != 0 and "blocked" in r.stderr


def test_bare_model_build_does_not_take_the_project_name(mlp_project: Path) -> None:
    assert cli("build", str(mlp_project), "--json").returncode == 0
    assert cli("build", str(mlp_project / "model.onnx"), "-p", "cpu").returncode == 0
    doc = json.loads(cli("build", str(mlp_project), "--json").stdout)
    assert doc["name"] == "tiny-mlp"


def test_a_damaged_manifest_is_not_an_artifact(mlp_project: Path) -> None:
    art = built(mlp_project).artifact
    (art.dir / "manifest.json").write_text('{"schema": 1, "files": {}}')
    for args in (("cache", "ls"), ("cache", "verify"), ("inspect",)):
        r = cli(*args, str(mlp_project))
        assert r.returncode == 0, (args, r.stderr)
    cli("cache", "prune", str(mlp_project))
    assert not art.dir.exists()


def test_prune_removes_superseded_artifacts_and_keeps_current(mlp_project: Path) -> None:
    old = built(mlp_project).artifact.dir
    edit(mlp_project, "version: 1.0.0", "version: 1.0.0\nverify: {samples: 2}")
    new = built(mlp_project).artifact.dir
    assert old != new and old.exists()
    r = cli("cache", "prune", str(mlp_project), "--json")
    assert r.returncode == 0, r.stderr
    assert not old.exists() and new.exists()
    assert str(old) in json.loads(r.stdout)["removed"]


def test_prune_keeps_the_current_artifact_of_a_model_in_a_subfolder(mlp_project: Path) -> None:
    (mlp_project / "sub").mkdir()
    (mlp_project / "model.onnx").rename(mlp_project / "sub" / "model.onnx")
    edit(mlp_project, "source: model.onnx", "source: sub/model.onnx")
    art = built(mlp_project).artifact.dir
    r = cli("cache", "prune", str(mlp_project), "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["removed"] == [] and art.exists(), r.stdout


def test_input_mistakes_are_reported_before_any_build(mlp_project: Path, tmp_path: Path) -> None:
    r = cli("run", str(mlp_project), "--input", json.dumps({"x": [[0.0] * 7]}))
    assert r.returncode == 2 and "dim 1 must be 8" in r.stderr
    assert not (mlp_project / ".gpux" / "tiny-mlp").exists(), "nothing was built for bad data"
    r = cli("run", str(mlp_project), "--input", "{}", "--file", "x.npz")
    assert r.returncode == 2 and "pass one" in r.stderr
    r = cli("run", str(mlp_project), "--input", json.dumps({"x": [[float("nan")] * 8]}), "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["outputs"]["probs"]["data"][0][0] is None
