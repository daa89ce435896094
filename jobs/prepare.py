"""spark-submit entry of the prepare stage: ingest, validate, profile, featurize, split, write.

    spark-submit --master yarn --py-files dist/sparkml_par.zip jobs/prepare.py \
        --config conf/tabular.yaml data.output=hdfs:///datasets/tabular data.mode=overwrite

(locally: .venv/bin/sparkml-par-submit --master local[2] jobs/prepare.py --config conf/tabular.yaml). The session
spark-submit created is reused; spark.master in the config is then ignored. Exits 2 on a user error.
"""

from sparkml_par.cli import exit_with, run_job

if __name__ == "__main__":
    exit_with(run_job("prepare"))
