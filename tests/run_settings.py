"""The overrides the whole-run tests pass: a tiny synthetic job, and every output of a run under one directory."""

from __future__ import annotations

from pathlib import Path


def tiny_job(rows: int, epochs: int) -> list[str]:
    """A synthetic 3-class dataset of 8 features in 2 shards, a small MLP trained on 2 ranks."""
    return [
        "data.source=synthetic",
        f"data.synthetic.rows={rows}",
        "data.synthetic.features=8",
        "data.synthetic.classes=3",
        "data.max_shards=2",
        "train.model=mlp",
        f"train.epochs={epochs}",
        "train.batch_size=32",
        "train.num_proc=2",
    ]


def outputs_under(root: Path) -> list[str]:
    """output.run_dir, data.output, train.output, score.output and tune.output, all inside root."""
    return [
        f"output.run_dir={root}",
        f"data.output={root}/dataset",
        f"train.output={root}/model",
        f"score.output={root}/predictions",
        f"tune.output={root}/tune",
    ]


def small_mlp() -> list[str]:
    """A one-hidden-layer MLP trained on 2 ranks: how the real-data tests train."""
    return [
        "train.model=mlp",
        "train.model_args={hidden: [32]}",
        "train.lr=0.01",
        "train.batch_size=32",
        "train.num_proc=2",
    ]
