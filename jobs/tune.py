"""spark-submit entry of the tune stage: a hyperparameter search whose trials run as Spark tasks.

    spark-submit --master spark://head:7077 --conf spark.executor.cores=4 --py-files dist/sparkml_par.zip \
        jobs/tune.py --config conf/tune.yaml tune.trials=32 tune.parallelism=8 tune.output=/shared/tune/digits

(locally: .venv/bin/sparkml-par-submit --master local[2] jobs/tune.py --config conf/tune.yaml). tune.output must be a
directory the driver and the executors share; running the job again with it continues the search.
Exits 2 on a user error (or when no trial completed), 1 on any other failure.
"""

from sparkml_par.cli import exit_with, run_job

if __name__ == "__main__":
    exit_with(run_job("tune"))
