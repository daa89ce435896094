"""spark-submit entry of the score job: parse arguments, build the session, call sparkml_par.infer.

    spark-submit --master yarn --py-files dist/sparkml_par.zip jobs/score.py \
        --config conf/quickstart.yaml score.model=/dbfs/models/digits/model \
        score.input=hdfs:///datasets/digits/test score.output=hdfs:///predictions/digits

(locally: .venv/bin/sparkml-par-submit --master local[2] jobs/score.py --config conf/quickstart.yaml). Without
score.input the model's own test split is scored; without score.model, train.output/model is used.
The session spark-submit created is reused; spark.master in the config is then ignored. Exits 2 on a
user error (missing model, input or columns, incompatible schema).
"""

from __future__ import annotations

import argparse
import sys

from sparkml_par.config import load_config
from sparkml_par.errors import SparkmlParError
from sparkml_par.logs import setup_logging


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Score a dataset or Parquet input with a model artifact.")
    parser.add_argument("--config", required=True, help="YAML config file, e.g. conf/quickstart.yaml")
    parser.add_argument("overrides", nargs="*", help="section.key=value settings, e.g. score.output=runs/preds")
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.config, args.overrides)
        setup_logging(cfg.output.quiet, cfg.output.log_format)
        from sparkml_par.infer.score import run

        return run(cfg)
    except SparkmlParError as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
