"""spark-submit entry of the prepare job: parse arguments, build the session, call data_prep.

    spark-submit --master yarn --py-files dist/sparkml_par.zip jobs/prepare.py \
        --config conf/tabular.yaml data.output=hdfs:///datasets/tabular data.mode=overwrite

(locally: spark-submit --master local[2] jobs/prepare.py --config conf/tabular.yaml). The session
spark-submit created is reused; spark.master in the config is then ignored. Exits 2 on a user error.
"""

from __future__ import annotations

import argparse
import sys

from sparkml_par.config import load_config
from sparkml_par.errors import SparkmlParError
from sparkml_par.logs import setup_logging


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build a sharded petastorm dataset from raw data.")
    parser.add_argument("--config", required=True, help="YAML config file, e.g. conf/tabular.yaml")
    parser.add_argument("overrides", nargs="*", help="section.key=value settings, e.g. data.mode=overwrite")
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.config, args.overrides)
        setup_logging(cfg.output.quiet, cfg.output.log_format)
        from data_prep.job import run

        return run(cfg)
    except SparkmlParError as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
