"""spark-submit entry of the whole pipeline: prepare -> tune -> train -> score -> report.

    spark-submit --master spark://head:7077 --py-files dist/sparkml_par.zip \
        jobs/pipeline.py --config conf/quickstart.yaml output.run_dir=/shared/runs/nightly

(locally: .venv/bin/sparkml-par-submit --master local[2] jobs/pipeline.py --config conf/quickstart.yaml). The project
must be importable on the executors: install it there (`pip install .` into the executors' Python), or
ship it with `--py-files` (a zip of sparkml_par/ and data_prep/). Exits 2 on a user error.
"""

from sparkml_par.cli import exit_with, run_job

if __name__ == "__main__":
    exit_with(run_job("run"))
