"""spark-submit entry of the train stage: N Horovod ranks in one barrier stage train on the dataset.

    spark-submit --master spark://head:7077 --conf spark.executor.cores=4 --py-files dist/sparkml_par.zip \
        jobs/train.py --config conf/quickstart.yaml train.num_proc=8 train.output=/shared/models/digits

(locally: .venv/bin/sparkml-par-submit --master local[2] jobs/train.py --config conf/quickstart.yaml).
train.output must be a directory the driver and the rank-0 executor share. Exits 2 on a user error,
1 on any other failure.
"""

from sparkml_par.cli import exit_with, run_job

if __name__ == "__main__":
    exit_with(run_job("train"))
