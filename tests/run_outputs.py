"""The overrides that put every output of a run under one directory, as the command-line tests pass them."""

from __future__ import annotations

from pathlib import Path


def outputs_under(root: Path) -> list[str]:
    """output.run_dir, data.output, train.output, score.output and tune.output, all inside root."""
    return [
        f"output.run_dir={root}",
        f"data.output={root}/dataset",
        f"train.output={root}/model",
        f"score.output={root}/predictions",
        f"tune.output={root}/tune",
    ]
