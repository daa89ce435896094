"""Model parallelism: a model cut into consecutive stages run as a micro-batch pipeline (`staged.StagedModel`).

The module is not called pipeline: `sparkml_par.pipeline` is the stage runner, and Spark ML has its own
PipelineModel (the fitted feature pipeline in data_prep).
"""
