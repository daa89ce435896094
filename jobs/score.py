"""spark-submit entry of the score job: a model artifact scores a dataset or table in Spark (mapInArrow).

    spark-submit --master yarn --py-files dist/sparkml_par.zip jobs/score.py \
        --config conf/quickstart.yaml score.model=/dbfs/models/digits/model \
        score.input=hdfs:///datasets/digits/test score.output=hdfs:///predictions/digits

(locally: .venv/bin/sparkml-par-submit --master local[2] jobs/score.py --config conf/quickstart.yaml). Without
score.input the model's own test split is scored; without score.model, train.output/model is used.
The session spark-submit created is reused; spark.master in the config is then ignored. Exits 2 on a
user error (missing model, input or columns, incompatible schema).
"""

from sparkml_par.cli import exit_with, run_job

if __name__ == "__main__":
    exit_with(run_job("score"))
