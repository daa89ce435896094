"""The synthetic datasets the training and reading benchmarks share: written once into a work directory and
reused while their config is unchanged (never timed)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

DEFAULT_WORKDIR = Path(tempfile.gettempdir()) / "sparkml_par_bench"
# The splits the trainer validates on each epoch are kept small: epoch_time includes validation.
SPLIT = ["data.split.train=0.98", "data.split.validation=0.01", "data.split.test=0.01"]


def prepare_dataset(
    spark, workdir: Path, name: str, rows: int, features: int, classes: int = 10, feature_shape: list[int] | None = None
) -> tuple[str, dict]:
    """(dataset URL, manifest) of a synthetic dataset under workdir/name, written once and then reused."""
    from data_prep.job import prepare
    from data_prep.manifest import read_manifest
    from sparkml_par.config import load_config
    from sparkml_par.contract import MANIFEST
    from sparkml_par.io import hadoop

    cfg = load_config(
        None,
        [
            "data.source=synthetic",
            f"data.synthetic.rows={rows}",
            f"data.synthetic.features={features}",
            f"data.synthetic.classes={classes}",
            f"data.output={workdir / name}",
            "data.mode=overwrite",
            *SPLIT,
        ],
    )
    started = time.perf_counter()
    result = prepare(spark, cfg.data)
    if not result.skipped:
        print(f"  wrote {name}: {rows} rows x {features} features in {time.perf_counter() - started:.0f} s", flush=True)
    url, manifest = result.output, result.manifest
    if feature_shape is not None and manifest["feature_shape"] != feature_shape:
        # The synthetic source only knows flat features; the CNN needs [C, H, W] from the manifest.
        manifest = dict(manifest, feature_shape=feature_shape)
        manifest_url = f"{url}/{MANIFEST}"
        hadoop.write_json(hadoop.HadoopFs(spark, manifest_url), manifest_url, manifest)
    return url, read_manifest(spark, url)


def train_files(url: str, manifest: dict) -> list[str]:
    root = Path(url.removeprefix("file://")) / manifest["splits"]["train"]["path"]
    return sorted(str(root / name) for name in manifest["splits"]["train"]["files"])
