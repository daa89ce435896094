"""Batch inference: a model artifact scores a DataFrame or a dataset in Spark's Python workers (mapInArrow).

`score(spark, df_or_path, model_dir)` is the notebook API (a lazy DataFrame of predictions);
`score_job(spark, cfg)` writes them as Parquet with evaluation metrics; `run(cfg)` is
`sparkml-par score`. One module per concern: predictor (the model in one process), arrow_predict (the same
predictor inside Spark), inputs (what can be scored and its checks), metrics (Spark-side
evaluation), publish (atomic output), score (the API and the job).
"""

from sparkml_par.infer.score import ScoreResult, score, score_job

__all__ = ["ScoreResult", "score", "score_job"]
