"""The Spark runtime the stages share: the one session builder and its driver JVM's options (`session`), the
JVM's class-data archive (`class_archive`), what the project's functions do in a Python worker
(`python_worker`) and named, cancellable Spark jobs (`spark_jobs`)."""
