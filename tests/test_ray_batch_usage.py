"""`gpux run --on ray`'s user errors, one line each and exit 2 before Ray starts; sources as globs and @list files
(which `gpux run NAME FILES` reads the same way)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpux.answers.steps import input_files
from gpux.errors import InputError

from .conftest import gpux


@pytest.mark.parametrize(("args", "message"), [
    (["--on", "spark"], "--on spark: expected local, ray, ray://HOST:PORT (Ray Client) or ray:ADDRESS"),
    (["--on", "ray", "--resume"], "--resume skips the files an earlier run answered; name its --output file"),
    (["--on", "ray", "-o", "answers.csv"], "--output answers.csv: answers are written as JSON lines (*.jsonl) or "
                                           "Parquet (*.parquet)"),
    (["--resume"], "--resume, --actor-cpus and --actor-gpus go with --on ray"),
    (["--on", "ray", "--save", "drawn"], "--save cannot go with --on ray; it answers files"),
    (["--on", "ray"], "declares no preprocess for its inputs"),
])
def test_user_errors_are_one_line_and_exit_2(mlp_project: Path, tmp_path: Path, args: list[str],
                                             message: str) -> None:
    photo = tmp_path / "a.jpg"
    photo.write_bytes(b"\xff\xd8")
    r = gpux("run", str(mlp_project), str(photo), *args, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr and "Traceback" not in r.stderr
    assert len([x for x in r.stderr.splitlines() if x.startswith("error:")]) == 1


def test_no_files_with_on_ray(mlp_project: Path) -> None:
    r = gpux("run", str(mlp_project), "--on", "ray")
    assert r.returncode == 2 and "--on ray answers files; pass them" in r.stderr


def test_globs_and_list_files_name_files_in_order(tmp_path: Path) -> None:
    for name in ("b.jpg", "a.jpg", "c.png", "notes.txt"):
        (tmp_path / name).write_bytes(b"x")
    listed = tmp_path / "list.txt"
    listed.write_text(f"# the ones to answer\n{tmp_path / 'c.png'}\n\n{tmp_path / 'a.jpg'}\n")
    got = input_files([str(tmp_path / "*.jpg"), f"@{listed}"], "image")
    assert got == [str(tmp_path / "a.jpg"), str(tmp_path / "b.jpg"), str(tmp_path / "c.png"), str(tmp_path / "a.jpg")]
    with pytest.raises(InputError, match=r"\*\.gif: no file matches this pattern"):
        input_files([str(tmp_path / "*.gif")], "image")
    with pytest.raises(InputError, match=r"@missing\.txt: cannot read the list of files"):
        input_files(["@missing.txt"], "image")


def test_actors_and_their_resources_come_from_the_flags_the_batch_block_or_the_provider(mlp_project: Path) -> None:
    from gpux.config.load import load_config
    from gpux.run.ray_batch import BatchRequest, actor_resources, concurrency

    plain = load_config(mlp_project)
    asked = BatchRequest(sources=("x",))
    assert actor_resources(plain, "cpu", asked) == {"num_cpus": 1.0, "num_gpus": 0.0}
    assert actor_resources(plain, "cuda", asked) == {"num_cpus": 1.0, "num_gpus": 1.0}, "a GPU provider asks for one"
    cluster = {"CPU": 6.0, "GPU": 2.0}
    assert concurrency(plain, asked, {"num_cpus": 1.0, "num_gpus": 0.0}, cluster) == 6
    assert concurrency(plain, asked, {"num_cpus": 1.0, "num_gpus": 1.0}, cluster) == 2
    yml = mlp_project / "gpux.yml"
    yml.write_text(yml.read_text() + "deploy:\n  ray:\n    batch: {concurrency: 3, num_cpus: 2, num_gpus: 0.5}\n")
    declared = load_config(mlp_project)
    assert actor_resources(declared, "cuda", asked) == {"num_cpus": 2.0, "num_gpus": 0.5}
    assert concurrency(declared, asked, {"num_cpus": 2.0, "num_gpus": 0.5}, cluster) == 3
    flags = BatchRequest(sources=("x",), concurrency=5, num_cpus=0.5, num_gpus=0)
    assert actor_resources(declared, "cuda", flags) == {"num_cpus": 0.5, "num_gpus": 0}
    assert concurrency(declared, flags, {"num_cpus": 0.5, "num_gpus": 0}, cluster) == 5


def test_a_batch_block_with_a_bad_value_is_one_line_at_its_place(mlp_project: Path) -> None:
    yml = mlp_project / "gpux.yml"
    yml.write_text(yml.read_text() + "deploy:\n  ray:\n    batch: {concurency: 3}\n")
    r = gpux("validate", str(mlp_project))
    assert r.returncode == 3 and "deploy.ray.batch.concurency" in r.stderr and "Traceback" not in r.stderr
