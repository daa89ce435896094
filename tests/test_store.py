"""sparkml_par.io.store on the three kinds of URL it is given: a plain path, file://, and s3:// (a real S3 server)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pyarrow.fs as pafs
import pytest
import torch
from s3_server import refusing_server

from sparkml_par.config import load_config
from sparkml_par.contract import COMPLETE_MARKER
from sparkml_par.errors import SparkmlParError
from sparkml_par.io.store import Store, local_file, require_complete
from sparkml_par.models.registry import build_from_spec, model_spec
from sparkml_par.pipeline import check_outputs
from sparkml_par.train.artifact import load_model_artifact, write_model_artifact
from sparkml_par.train.checkpoint import load_latest_checkpoint, newest_checkpoint, write_checkpoint_atomically


@pytest.fixture(params=["plain", "file", "s3"])
def root(request, tmp_path) -> str:
    """A directory URL of each kind, empty."""
    if request.param == "plain":
        return str(tmp_path / "out")
    if request.param == "file":
        return f"file://{tmp_path}/out"
    return f"{request.getfixturevalue('bucket')}/out"


def test_files_round_trip_and_list(root):
    store = Store(root)
    assert not store.exists() and store.names() == []
    store.write_text("a.json", "{}")
    store.write_bytes("sub/b.bin", b"\x00\x01")
    store.write_text("a.json", '{"again": 1}')
    assert store.read_text("a.json") == '{"again": 1}'
    assert store.read_bytes("sub/b.bin") == b"\x00\x01"
    assert store.names() == ["a.json"] and store.names("sub") == ["b.bin"]
    with local_file(f"{root}/a.json") as path:
        assert path.read_text() == '{"again": 1}'
    store.delete("a.json")
    assert not store.exists("a.json") and store.exists("sub/b.bin")
    store.delete_all()
    assert not store.exists()


def test_checkpoints_are_written_pruned_and_resumed(root):
    fingerprint = {"model": "m"}
    for epoch in (1, 2, 3):
        write_checkpoint_atomically(root, epoch, {"fingerprint": fingerprint, "w": torch.full((3,), epoch)}, keep=2)
    assert Store(root).names() == ["checkpoint-00002.pt", "checkpoint-00003.pt"]
    assert newest_checkpoint(root) == f"{Store(root).url}/checkpoint-00003.pt"
    state = load_latest_checkpoint(root, fingerprint)
    assert state["epoch"] == 3 and state["w"].tolist() == [3.0, 3.0, 3.0]


def test_step_checkpoints_sort_between_the_epochs_they_fall_in(root):
    fingerprint = {"model": "m"}
    for epoch, position in ((1, 0), (1, 10), (1, 20), (2, 0), (2, 5)):
        state = {"fingerprint": fingerprint, "w": torch.full((1,), 10.0 * epoch + position)}
        write_checkpoint_atomically(root, epoch, state, keep=3, position=position)
    assert Store(root).names() == ["checkpoint-00001-000020.pt", "checkpoint-00002-000005.pt", "checkpoint-00002.pt"]
    assert newest_checkpoint(root) == f"{Store(root).url}/checkpoint-00002-000005.pt"
    state = load_latest_checkpoint(root, fingerprint)
    assert (state["epoch"], state["position"], state["w"].item()) == (2, 5, 25.0)
    assert state["url"] == f"{Store(root).url}/checkpoint-00002-000005.pt"
    # A run that restarted from the end of epoch 1 drops what a later position held.
    write_checkpoint_atomically(root, 1, {"fingerprint": fingerprint}, keep=3, position=20)
    assert Store(root).names() == ["checkpoint-00001-000020.pt"]


def _artifact(root: str, value: float) -> str:
    spec = model_spec("mlp", {"hidden": [4]}, input_shape=[3], num_outputs=2)
    model = build_from_spec(spec)
    state = {name: torch.full_like(tensor, value) for name, tensor in model.state_dict().items()}
    return write_model_artifact(f"{root}/model", state, {"spec": spec}, {"test": {}}, "train: {}\n")


def test_an_artifact_is_published_whole_and_loaded_from_where_it_is(root):
    first = _artifact(root, 1.0)
    model, description = load_model_artifact(first)
    assert all(bool((p == 1.0).all()) for p in model.state_dict().values())
    second = _artifact(root, 2.0)
    assert second == first
    model, _ = load_model_artifact(second)
    assert all(bool((p == 2.0).all()) for p in model.state_dict().values())
    assert Store(first).exists(COMPLETE_MARKER)


def test_an_object_store_artifact_without_its_marker_is_refused(bucket):
    url = _artifact(bucket, 1.0)
    Store(url).delete(COMPLETE_MARKER)
    with pytest.raises(SparkmlParError, match=r"model artifact 's3://.*/model' is incomplete \(no _COMPLETE marker\)"):
        load_model_artifact(url)
    with pytest.raises(SparkmlParError, match="is incomplete"):
        require_complete(Store(url), "model artifact", "re-run training")


WRITER = """
import sys, torch
from sparkml_par.train.checkpoint import write_checkpoint_atomically
from sparkml_par.io.store import Store, publish_directory
from pathlib import Path
what, url, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
if what == "checkpoint":
    write_checkpoint_atomically(url, 2, {"fingerprint": {"model": "m"}, "w": torch.ones(size)}, keep=3)
else:
    staging = Path(sys.argv[4])
    staging.mkdir()
    (staging / "model.json").write_text("{}")  # uploaded whole before the weights, whose upload is killed
    (staging / "weights.pt").write_bytes(b"x" * size)
    publish_directory(staging, Store(url))
"""


def _killed_mid_upload(s3, bucket: str, *args: str, ready=lambda: True) -> None:
    """Runs WRITER until the S3 server holds a multipart upload in progress (and ready() holds), then
    SIGKILLs it."""
    writer = subprocess.Popen([sys.executable, "-c", WRITER, *args])
    deadline = time.monotonic() + 120
    while s3.uploads_in_progress(bucket) == 0 or not ready():
        assert writer.poll() is None, f"the writer ended ({writer.returncode}) before its upload was seen"
        assert time.monotonic() < deadline, "no upload started within 120 s"
        time.sleep(0.02)
    writer.send_signal(signal.SIGKILL)
    writer.wait()


def test_a_checkpoint_upload_killed_midway_leaves_the_previous_checkpoint(s3, bucket):
    url = f"{bucket}/run/checkpoints"
    write_checkpoint_atomically(url, 1, {"fingerprint": {"model": "m"}, "w": torch.zeros(3)}, keep=3)
    _killed_mid_upload(s3, bucket, "checkpoint", url, str(50_000_000))
    assert Store(url).names() == ["checkpoint-00001.pt"]
    assert load_latest_checkpoint(url, {"model": "m"})["epoch"] == 1


def test_an_artifact_publish_killed_midway_leaves_the_previous_artifact(s3, bucket, tmp_path):
    url = _artifact(bucket, 1.0)

    def in_bucket() -> list[str]:
        return [info.base_name for info in Store(bucket).fs.get_file_info(pafs.FileSelector(bucket[5:]))]

    def staged_one_file() -> bool:  # model.json is in the staging prefix: the weights' upload is under way
        return any(".tmp-" in name for name in in_bucket())

    _killed_mid_upload(s3, bucket, "artifact", url, str(200_000_000), str(tmp_path / "staging"), ready=staged_one_file)
    model, _ = load_model_artifact(url)
    assert all(bool((p == 1.0).all()) for p in model.state_dict().values())
    assert staged_one_file()
    _artifact(bucket, 3.0)  # the next publish clears what the killed one left
    assert in_bucket() == ["model"]


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        ("train.output", "nosuchscheme://x/model", "no filesystem for URLs starting nosuchscheme://"),
        ("train.output", "s3://no-such-bucket-anywhere/model", "the bucket 'no-such-bucket-anywhere' does not exist"),
        ("tune.output", "s3://no-such-bucket-anywhere/tune", "cannot write to tune.output 's3://no-such-bucket-any"),
    ],
)
def test_a_bad_output_url_is_one_clear_error_before_any_work(tmp_path, setting, value, message):
    overrides = [f"output.run_dir={tmp_path}/run", f"{setting}={value}"]
    if setting == "tune.output":
        overrides.append("tune.space={train.lr: {type: loguniform, low: 1.0e-3, high: 1.0e-1}}")
    with pytest.raises(SparkmlParError, match=message.replace("(", r"\(").replace(".", r"\.")):
        check_outputs(load_config(None, overrides))
    assert not (tmp_path / "run").exists()


def test_a_write_the_store_refuses_names_the_url_and_the_credentials(monkeypatch):
    with refusing_server() as endpoint:
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "unknown-to-the-server")
        with pytest.raises(SparkmlParError) as refused:
            Store("s3://refused-bucket/model").check_writable("train.output")
    message = str(refused.value)
    assert message.startswith("cannot write to train.output 's3://refused-bucket/model': ")
    assert "ACCESS_DENIED" in message and "check the credentials the cluster provides" in message
