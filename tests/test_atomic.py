"""Local writes that appear complete or not at all (sparkml_par.io.local_files)."""

from __future__ import annotations

import pytest

from sparkml_par.io import local_files


def test_a_file_appears_only_when_its_block_ends(tmp_path):
    path = tmp_path / "sub" / "plot.png"
    with local_files.atomic_path(path) as temp:
        assert temp.parent == path.parent and temp.suffix == ".png" and temp.name.startswith(".")
        temp.write_bytes(b"new")
        assert not path.exists()
    assert path.read_bytes() == b"new" and [p.name for p in path.parent.iterdir()] == ["plot.png"]


def test_a_failed_write_keeps_the_old_file_and_leaves_nothing_beside_it(tmp_path):
    path = tmp_path / "metrics.jsonl"
    local_files.write_text(path, "old\n")
    with pytest.raises(RuntimeError, match="disk full"):
        with local_files.atomic_path(path) as temp:
            temp.write_text("half")
            raise RuntimeError("disk full")
    assert path.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["metrics.jsonl"]


def test_the_next_run_removes_the_copy_a_killed_run_left_of_its_state(tmp_path):
    from sparkml_par.pipeline import RunState

    (tmp_path / "stages.json").write_text('{"prepare": {"fingerprint": "f", "finished": true}}')
    # What a run killed between writing its state's temporary copy and renaming it leaves behind.
    (tmp_path / ".stages.tmp-1a2b3c4d.json").write_text('{"prepare": {"fingerprint": "f", "fini')
    (tmp_path / ".report.tmp-1a2b3c4d.json").write_text("another file's copy")
    state = RunState(tmp_path)
    assert state.finished("prepare")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".report.tmp-1a2b3c4d.json", "stages.json"]


def test_a_directory_is_replaced_and_the_old_one_deleted(tmp_path):
    target, staging = tmp_path / "model", tmp_path / ".model-staging"
    target.mkdir()
    (target / "weights.pt").write_text("old")
    staging.mkdir()
    (staging / "weights.pt").write_text("new")
    local_files.replace_directory(staging, target)
    assert (target / "weights.pt").read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["model"]


def test_a_failed_directory_rename_puts_the_old_one_back(tmp_path):
    target = tmp_path / "model"
    target.mkdir()
    (target / "weights.pt").write_text("old")
    with pytest.raises(FileNotFoundError):
        local_files.replace_directory(tmp_path / "vanished-staging", target)
    assert (target / "weights.pt").read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["model"]
