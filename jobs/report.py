"""spark-submit entry of the report: the HTML page of a run, built from the outputs of its stages.

    spark-submit --master yarn --py-files dist/sparkml_par.zip jobs/report.py \
        --config conf/quickstart.yaml output.run_dir=/shared/runs/2024-06-01 \
        data.output=/shared/runs/2024-06-01/dataset train.output=/shared/runs/2024-06-01/model \
        score.output=/shared/runs/2024-06-01/predictions

(locally: .venv/bin/sparkml-par-submit --master local[2] jobs/report.py --config conf/quickstart.yaml, or
`sparkml-par report conf/quickstart.yaml`). The report starts no Spark work: it reads the stage
outputs on the driver, so they must be local or mounted paths there. It writes
output.run_dir/report/index.html and prints its path. Exits 2 on a user error.
"""

from sparkml_par.cli import exit_with, run_job

if __name__ == "__main__":
    exit_with(run_job("report"))
