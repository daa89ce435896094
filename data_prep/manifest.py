"""The dataset's `_manifest.json`, its fingerprint, and the atomic publish of a finished dataset.

A dataset is built in a temporary sibling directory and only renamed into place once complete, with
`_manifest.json` written last: a directory without a manifest is never a dataset. File operations go
through sparkml_par.io.hadoop, so any URL Spark reads works.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from datetime import datetime, timezone
from typing import Any

from sparkml_par.config import DataConfig
from sparkml_par.contract import MANIFEST, MANIFEST_FINGERPRINT, MANIFEST_OWNER
from sparkml_par.errors import SparkmlParError
from sparkml_par.io.hadoop import HadoopFs, qualify_url, replace_directory, write_json

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
# Fields that say where or how to write, not what the dataset holds: they must not change its identity.
_NOT_IN_FINGERPRINT = ("output", "mode")


def fingerprint(cfg: DataConfig, input_fingerprint: str) -> str:
    """Hash of what defines the dataset: the data config (less where it is written) and the input."""
    settings = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in _NOT_IN_FINGERPRINT}
    # Synthetic rows do not depend on how many partitions generate them.
    settings["synthetic"].pop("partitions")
    text = json.dumps({"data": settings, "input": input_fingerprint, "format_version": FORMAT_VERSION}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def hash_parts(parts: Any) -> str:
    """A short stable hash of JSON-serialisable parts (file listings, built-in source parameters)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def read_manifest(spark, dataset_url: str) -> dict[str, Any] | None:
    """The manifest of a published dataset, or None when the directory holds no manifest."""
    url = f"{qualify_url(dataset_url)}/{MANIFEST}"
    fs = HadoopFs(spark, url)
    if not fs.exists(url):
        return None
    return json.loads(fs.read_text(url))


def check_existing_output(
    spark, output_url: str, new_fingerprint: str, mode: str, owner: str | None = None
) -> dict[str, Any] | None:
    """The existing manifest when it matches (a no-op re-run); None when the output may be replaced (absent,
    data.mode=overwrite, or a dataset the same owner wrote); raises when it holds something else."""
    fs = HadoopFs(spark, output_url)
    if not fs.exists(output_url):
        return None
    manifest = read_manifest(spark, output_url)
    if manifest is not None and manifest.get(MANIFEST_FINGERPRINT) == new_fingerprint:
        return manifest
    if mode == "overwrite" or (manifest is not None and owner is not None and manifest.get(MANIFEST_OWNER) == owner):
        return None
    if manifest is None:
        raise SparkmlParError(
            f"data.output {output_url!r} already exists and is not a dataset (no {MANIFEST}); "
            f"choose another data.output, remove it, or set data.mode=overwrite to replace it"
        )
    written_by = manifest.get(MANIFEST_OWNER)
    by = f"the pipeline of run directory {written_by!r}" if written_by else "`sparkml-par prepare` or the notebook API"
    mine = (
        f"; `sparkml-par run` replaces only datasets its own run directory ({owner!r}) wrote, and the "
        f"manifest's {MANIFEST_OWNER!r} field says who wrote this one"
        if owner
        else ""
    )
    raise SparkmlParError(
        f"data.output {output_url!r} already holds a dataset built from a different config or input "
        f"(fingerprint {manifest.get(MANIFEST_FINGERPRINT)!r}, created {manifest.get('created')!r} by {by}; this "
        f"run's fingerprint is {new_fingerprint!r}){mine}; choose another data.output or set data.mode=overwrite"
    )


def publish(spark, staging: str, output_url: str, manifest: dict[str, Any]) -> None:
    """Writes the manifest last, then renames the staging directory onto the output."""
    write_json(HadoopFs(spark, output_url), f"{staging}/{MANIFEST}", manifest)
    replace_directory(spark, staging, output_url, "dataset")
