"""The prepare job: ingest -> validate -> profile -> split -> featurize -> write, published atomically.

`prepare(spark, cfg.data)` is the notebook API (it uses the caller's session); `run(cfg)` is what
`sparkml-par prepare` and jobs/prepare.py call: it builds the session and prints a summary.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable

from data_prep import featurize
from data_prep import manifest as mf
from data_prep.ingest import Ingested, ingest, input_bytes, input_fingerprint, reading_raw_rows
from data_prep.profile import (
    class_warnings,
    column_statistics,
    content_groups,
    content_hash,
    count_duplicates,
    drop_duplicates,
    profile,
)
from data_prep.split import assign_splits, copy_offsets, numbered_copies
from data_prep.validate import Validated, check_reject_fraction, validate
from data_prep.write import start_workers, write_splits
from sparkml_par.config import Config, DataConfig
from sparkml_par.contract import (
    FEATURES,
    MANIFEST_CATEGORIES,
    MANIFEST_CLASS_COUNTS,
    MANIFEST_CLASS_WARNINGS,
    MANIFEST_CLASSES,
    MANIFEST_CREATED,
    MANIFEST_DATA_CONFIG,
    MANIFEST_DUPLICATES,
    MANIFEST_FEATURE_COLUMN,
    MANIFEST_FEATURE_PIPELINE,
    MANIFEST_FEATURE_SHAPE,
    MANIFEST_FINGERPRINT,
    MANIFEST_FORMAT_VERSION,
    MANIFEST_INPUT_FINGERPRINT,
    MANIFEST_LABEL,
    MANIFEST_LABEL_SCALE,
    MANIFEST_LEFT_OUT,
    MANIFEST_MAX_SHARDS,
    MANIFEST_NUM_CLASSES,
    MANIFEST_OWNER,
    MANIFEST_PROFILE,
    MANIFEST_QUARANTINE,
    MANIFEST_RAW_COLUMNS,
    MANIFEST_RAW_TYPES,
    MANIFEST_ROWS_CLEAN,
    MANIFEST_ROWS_IN,
    MANIFEST_SOURCE,
    MANIFEST_SPLIT_KEY,
    MANIFEST_SPLITS,
    MANIFEST_TASK,
    PROFILE,
    QUARANTINE_DIR,
    REJECTED_SUFFIX,
    ROW_ID,
    SPLIT,
    SPLITS,
    column,
)
from sparkml_par.errors import SparkmlParError
from sparkml_par.io import hadoop
from sparkml_par.spark_runtime.session import require_classic_session
from sparkml_par.spark_runtime.spark_jobs import BackgroundJob, JobName, current_group, spark_job
from sparkml_par.stage import Run, Stage, always_due, fingerprint

log = logging.getLogger(__name__)


@dataclass
class PrepareResult:
    """What a prepare call produced: the manifest, where it lives, and whether it was already there."""

    manifest: dict[str, Any]
    output: str
    skipped: bool
    seconds: float = 0.0
    # Each step that ran: its name, rows, seconds and Spark jobs (prepare's steps, in the order they ended).
    steps: list[dict[str, Any]] = dataclasses.field(default_factory=list)


def prepare(spark, cfg: DataConfig, owner: str | None = None) -> PrepareResult:
    """Builds the dataset at cfg.output, or returns the existing one when input and config are unchanged.

    `owner` names who may replace the dataset without data.mode=overwrite: the pipeline passes its run
    directory, so `sparkml-par run` re-prepares its own dataset after an edit of the input or config.
    """
    require_classic_session(spark, "prepare")
    with reading_raw_rows(spark), spark_job(spark.sparkContext, "prepare: read the input") as step:
        return _prepare(spark, cfg, owner, step)


def _prepare(spark, cfg: DataConfig, owner: str | None, job: JobName) -> PrepareResult:
    start = time.time()
    steps = _Steps(spark.sparkContext, job)
    steps.begin("read the input")
    output = hadoop.qualify_url(cfg.output)
    fingerprint = mf.fingerprint(cfg, input_fingerprint(spark, cfg))
    hadoop.clear_leftovers(spark, output)
    existing = mf.check_existing_output(spark, output, fingerprint, cfg.mode, owner)
    if existing is not None:
        log.info("%s already holds this dataset (fingerprint %s): nothing to do", output, fingerprint)
        return PrepareResult(manifest=existing, output=output, skipped=True, seconds=time.time() - start)
    # The Python workers start beside reading and validating the input, which leave a core idle while the driver plans.
    workers = steps.beside("start workers", lambda: start_workers(spark))
    try:
        ing = ingest(spark, cfg)
        steps.done("read the input", 0)
        staging = hadoop.create_staging(spark, output, "data.output")
        fs = hadoop.HadoopFs(spark, staging)
        try:
            manifest = _build(spark, cfg, ing, fingerprint, staging, output, steps)
            workers.result()
            manifest[MANIFEST_OWNER] = owner
            mf.publish(spark, staging, output, manifest)
        except BaseException:
            if fs.exists(staging):
                fs.delete(staging)
            raise
    finally:
        _stop(workers)
    seconds = time.time() - start
    log.info(
        "published %s in %.1f s (%.0f input rows/s)", output, seconds, manifest[MANIFEST_ROWS_IN] / max(seconds, 1e-9)
    )
    return PrepareResult(manifest=manifest, output=output, skipped=False, seconds=seconds, steps=steps.records)


def _build(
    spark, cfg: DataConfig, ing: Ingested, fingerprint: str, staging: str, output: str, steps: _Steps
) -> dict[str, Any]:
    steps.begin("validate")
    v = validate(ing, cfg)
    try:
        steps.done("validate", v.rows_in)
        return _build_validated(spark, cfg, ing, v, fingerprint, staging, output, steps)
    finally:
        v.release()


def _build_validated(
    spark, cfg: DataConfig, ing: Ingested, v: Validated, fingerprint: str, staging: str, output: str, steps: _Steps
) -> dict[str, Any]:
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    beside = [_quarantine(spark, v, cfg, staging, output, steps)]
    held = v.clean
    try:
        content = [c for c in v.clean.columns if c != ROW_ID]
        clean = assign_splits(v.clean, cfg)
        numbers = featurize.number_inputs(v.features) if featurize.needs_pipeline(v.features) else None
        medians = cfg.featurize.impute == "median"

        def statistics_beside(split_rows, repeated_over: list[str] | None = None) -> BackgroundJob:
            """The statistics of split_rows (the profile's, and the train split's the feature pipeline is built
            from) and their counts (per split, partition, class and category, and the rows repeating others'
            hash of `repeated_over`) in a job beside the steps."""
            classes = cfg.task == "classification"
            job = steps.beside(
                "statistics",
                lambda: column_statistics(
                    split_rows,
                    cfg.label,
                    v.features,
                    numbers,
                    medians,
                    counts=True,
                    classes=classes,
                    repeated_over=repeated_over,
                ),
                rows=v.rows_clean,
            )
            beside.append(job)
            return job

        # The statistics need only the split rows: their tasks also count the repeated rows where the content
        # hashes fit the driver, a Spark aggregate beside them counts them otherwise; the statistics run again
        # where the duplicates' removal or renumbering replaces the rows.
        if v.rows_clean <= HASHED_ON_DRIVER_ROWS:
            statistics_job = statistics_beside(clean, content)
            repeated = steps.awaited(statistics_job).repeated
        else:
            statistics_job = statistics_beside(clean)
            steps.begin("repeated rows")
            repeated = _repeated_rows(clean, content, v.rows_clean)
            steps.done("repeated rows", v.rows_clean)
        duplicates = 0
        if repeated:  # rows share a content hash: duplicates, or a collision
            steps.begin("duplicates")
            groups = content_groups(v.clean, content).persist(StorageLevel.MEMORY_AND_DISK)
            try:
                duplicates = count_duplicates(groups, content, v.rows_clean)
                if duplicates and (cfg.dedupe or ing.content_row_ids):
                    # What a shuffle made is kept for the jobs below: the rows left once the copies are dropped,
                    # or each group of copies as one row, which each job expands again (cheaper than reading
                    # every copy back from Spark's cache). Otherwise the clean rows are a projection of
                    # validation's persisted rows, cheaper to select again in each job than to cache again.
                    if cfg.dedupe:
                        held = drop_duplicates(groups, content).persist(StorageLevel.MEMORY_AND_DISK)
                        unique = held
                    else:
                        held = copy_offsets(groups, content).persist(StorageLevel.MEMORY_AND_DISK)
                        unique = numbered_copies(held, content)
                    clean = assign_splits(unique, cfg)
                    _stop(statistics_job)
                    beside.remove(statistics_job)
                    statistics_job = statistics_beside(clean)
                    # Their job fills the cache of the rows that replace the clean ones. It must end before the
                    # groups are unpersisted: Spark then builds a cache that is not yet filled again from its plan,
                    # and the rows' partitions, which the writer plans its files from, could change.
                    statistics_job.result()
            finally:
                groups.unpersist()
            steps.done("duplicates", v.rows_clean)
        statistics = statistics_job.result()
        if cfg.task == "classification":
            _require_two_classes(cfg, statistics.classes or {}, v.classes)
        warnings = class_warnings(statistics.classes, v.num_classes, v.classes) if cfg.task == "classification" else []
        for warning in warnings:
            log.warning("data.label %r: %s", cfg.label, warning)
        write_profile = functools.partial(_write_profile, spark, staging, cfg, duplicates)

        steps.begin("featurize")
        label_scale = _label_scale(clean, cfg) if cfg.task == "regression" else None
        fitted = None
        if numbers is not None:
            train = clean.where(F.col(SPLIT) == "train")
            fitted = featurize.fit_feature_pipeline(train, v.features, cfg.featurize, statistics)
        # The profile from the statistics (and a vector column's own aggregate) beside the writes.
        beside.append(
            steps.beside(
                "profile",
                lambda: write_profile(profile(clean, cfg.label, v.features, statistics)),
            )
        )
        encode = featurize.BatchFeatures(v.features, fitted.recipe) if fitted is not None else None
        featurized, features, size = _features(clean, v, encode)
        steps.done("featurize", statistics.splits.get("train", 0))

        # The split key stays in the dataset, so scoring can name it as score.id_column.
        key = [cfg.split.key] if cfg.split.key and cfg.split.key != cfg.label else []
        columns = [F.col(ROW_ID), *features, column(cfg.label), *[column(k) for k in key], F.col(SPLIT)]
        rows = {
            name: statistics.splits.get(name, 0)
            for name in SPLITS
            if statistics.splits.get(name, 0) or getattr(cfg.split, name) != 0
        }
        steps.begin("write splits")
        splits = write_splits(
            spark,
            featurized.select(*columns),
            {name: f"{staging}/{name}" for name in rows},
            rows,
            shapes={FEATURES: (size,)},
            encode=encode,
            row_group_mb=cfg.row_group_size_mb,
            max_shards=cfg.max_shards,
            partition_rows=statistics.partitions,
        )
        splits = {name: {"path": name, **info} for name, info in splits.items()}
        steps.done("write splits", sum(rows.values()))
        for job in beside:
            job.result()
    finally:
        for job in beside:  # after a failure, stopped before the caller removes the staging directory
            _stop(job)
        held.unpersist()
    return {
        MANIFEST_FORMAT_VERSION: mf.FORMAT_VERSION,
        MANIFEST_CREATED: mf.now_iso(),
        MANIFEST_FINGERPRINT: fingerprint,
        MANIFEST_INPUT_FINGERPRINT: ing.input_fingerprint,
        MANIFEST_SOURCE: cfg.source,
        MANIFEST_LABEL: cfg.label,
        MANIFEST_SPLIT_KEY: cfg.split.key,
        MANIFEST_LABEL_SCALE: label_scale,
        MANIFEST_FEATURE_COLUMN: FEATURES,
        MANIFEST_TASK: cfg.task,
        MANIFEST_NUM_CLASSES: v.num_classes,
        MANIFEST_CLASSES: v.classes,
        MANIFEST_CLASS_COUNTS: statistics.classes,
        MANIFEST_CLASS_WARNINGS: warnings,
        MANIFEST_FEATURE_SHAPE: ing.feature_shape or [size],
        MANIFEST_SPLITS: splits,
        MANIFEST_MAX_SHARDS: cfg.max_shards,
        MANIFEST_FEATURE_PIPELINE: fitted.recipe if fitted is not None else None,
        MANIFEST_RAW_COLUMNS: [s.name for s in v.features],
        MANIFEST_RAW_TYPES: {s.name: s.type for s in v.features},
        MANIFEST_CATEGORIES: fitted.categories if fitted is not None else {},
        MANIFEST_LEFT_OUT: v.left_out,
        # The data config with the feature columns as validated: scoring reads raw rows by the same rules.
        MANIFEST_DATA_CONFIG: dataclasses.asdict(dataclasses.replace(cfg, features=v.features)),
        MANIFEST_ROWS_IN: v.rows_in,
        MANIFEST_ROWS_CLEAN: v.rows_clean,
        MANIFEST_DUPLICATES: duplicates,
        MANIFEST_QUARANTINE: {"path": QUARANTINE_DIR, "rows": v.rows_in - v.rows_clean, "reasons": v.reasons},
        MANIFEST_PROFILE: PROFILE,
    }


# Up to this many clean rows the column statistics' tasks count the repeated rows: the distinct 64-bit content
# hashes reach the driver (32 MiB at most); from it, _repeated_rows counts them in a Spark aggregate.
HASHED_ON_DRIVER_ROWS = 1 << 22
# Clean rows a Spark partition holds from which _repeated_rows numbers the content hash's rows in a sorted window of
# their own, instead of a group a hash in its aggregate (see there).
HASH_APART_ROWS = 1_000_000


def _require_two_classes(cfg: DataConfig, classes: dict[str, int], names: list[str] | None) -> None:
    """A label with one class in every clean row trains a model that cannot be wrong: refused before training."""
    if len(classes) == 1:
        (only,) = classes
        value = names[int(only)] if names else only
        raise SparkmlParError(
            f"data.label {cfg.label!r}: every clean row holds the same class ({value!r}); a classifier needs rows "
            f"of at least two classes: check data.label and the input, or set data.task: regression"
        )


def _repeated_rows(clean, content: list[str], rows: int) -> int:
    """The rows of clean that repeat an earlier row's `profile.content_hash` of the `content` columns: 0, no
    duplicate.

    An aggregate counts the rows per hash and sums the repeats. From HASH_APART_ROWS a partition (of `rows`
    clean rows), a group a hash outgrows the aggregate's memory: the rows are then numbered in hash order
    instead, a sort of a narrow column."""
    hashed = clean.selectExpr(f"{content_hash(content)} AS _hash")
    # (A partition holds at most every row: the partitions are counted only where that passes the limit.)
    apart = rows > HASH_APART_ROWS and rows > HASH_APART_ROWS * hashed.rdd.getNumPartitions()
    if apart:
        query = """SELECT count(1) FROM (
            SELECT row_number() OVER (PARTITION BY _hash ORDER BY _hash) AS _copy FROM {hashed}
        ) AS _hashes WHERE _copy > 1"""
    else:
        query = "SELECT sum(_n - 1) FROM (SELECT count(1) AS _n FROM {hashed} GROUP BY _hash) AS _groups"
    return clean.sparkSession.sql(query, hashed=hashed).first()[0] or 0


def _quarantine(spark, v: Validated, cfg: DataConfig, staging: str, output: str, steps: _Steps) -> BackgroundJob:
    """Writes the rejected rows into the dataset in a job beside the steps after it (they need only their
    count); when there are too many, writes them beside the output first and stops."""
    url = f"{staging}/{QUARANTINE_DIR}"
    kept = f"{output}{REJECTED_SUFFIX}"

    def write() -> int:
        if v.rows_in == v.rows_clean:  # nothing to read from the cached rows: no Spark job
            hadoop.write_empty_parquet(spark, v.rejected_schema, url)
            return 0
        v.rejected.write.parquet(url)
        return v.rows_in - v.rows_clean

    try:
        check_reject_fraction(v, cfg, kept)
    except SparkmlParError:
        steps.begin("quarantine")
        write()
        fs = hadoop.HadoopFs(spark, kept)
        if fs.exists(kept):
            fs.delete(kept)
        fs.rename(url, kept)
        raise
    return steps.beside("quarantine", write)


def _stop(job: BackgroundJob) -> None:
    """Cancels a job beside the steps unless it has finished, and waits for it to end."""
    if not job.wait(0):
        job.cancel()
        job.wait(None)


def _label_scale(clean, cfg: DataConfig) -> dict[str, float] | None:
    """Mean and standard deviation of a regression label on the train split (one aggregate)."""
    from pyspark.sql import functions as F

    label = column(cfg.label)
    row = clean.where(F.col(SPLIT) == "train").agg(F.mean(label).alias("mean"), F.stddev(label).alias("std")).first()
    if row["mean"] is None:
        return None
    return {"mean": float(row["mean"]), "std": float(row["std"]) if row["std"] else 1.0}


def _features(clean, v: Validated, encode: featurize.BatchFeatures | None):
    """The rows to write, the columns of them that make the features (the one vector as it is, or the
    feature pipeline's inputs, from which the write tasks compute the features) and the features' length."""
    from pyspark.sql import functions as F

    if encode is not None:
        return clean, [F.expr(sql) for sql in encode.inputs], encode.size
    featurized = featurize.apply_fitted(clean, None, v.features)
    (spec,) = v.features
    # Validation quarantined every vector of another declared size; an undeclared size is the first row's.
    return featurized, [F.col(FEATURES)], spec.size or featurized.select(F.size(FEATURES)).first()[0]


def _write_profile(spark, staging: str, cfg: DataConfig, duplicates: int, stats: dict[str, Any]) -> int:
    """Writes the profile, with the duplicates counted, as the dataset's profile file; returns its rows."""
    stats.update(duplicates=duplicates, deduplicated=bool(cfg.dedupe and duplicates))
    hadoop.write_json(hadoop.HadoopFs(spark, staging), f"{staging}/{PROFILE}", stats)
    return stats["rows"]


class _Steps:
    """Names the Spark jobs of each step ("prepare: validate"), logs each finished step with its duration,
    throughput and Spark jobs, and keeps them as records for the run summary. A step beside the others
    (`beside`) runs in a background job of its own."""

    def __init__(self, sc, job: JobName):
        self._sc = sc
        self._job = job
        self._last = time.time()
        self._jobs_before = 0
        self.records: list[dict[str, Any]] = []

    def begin(self, name: str) -> None:
        self._job.rename(f"prepare: {name}")
        self._jobs_before = self._jobs(self._job.group)

    def done(self, name: str, rows: int) -> None:
        now = time.time()
        seconds, self._last = now - self._last, now
        self._record(name, rows, seconds, self._jobs(self._job.group) - self._jobs_before)

    def awaited(self, job: BackgroundJob) -> Any:
        """The result of a step beside the others: the wait for it is none of the next step's seconds."""
        value = job.result()
        self._last = time.time()
        return value

    def beside(self, name: str, action: Callable[[], Any], rows: int | None = None) -> BackgroundJob:
        """Runs action in the background as step `name`; the job's result is the action's value. The step's
        rows: `rows`, or else the action's value (its rows, or None)."""

        def step() -> Any:
            started = time.time()
            value = action()
            counted = rows if rows is not None else value or 0
            self._record(name, counted, time.time() - started, self._jobs(current_group(self._sc)))
            return value

        return BackgroundJob(self._sc, step, f"prepare: {name}")

    def _jobs(self, group: str | None) -> int:
        return len(self._sc.statusTracker().getJobIdsForGroup(group)) if group else 0

    def _record(self, name: str, rows: int, seconds: float, jobs: int) -> None:
        self.records.append({"step": name, "rows": rows, "seconds": round(seconds, 2), "jobs": jobs})
        log.info(
            "%-16s %10d rows %7.1f s %12.0f rows/s %4d Spark jobs", name, rows, seconds, rows / max(seconds, 1e-9), jobs
        )


def summary(result: PrepareResult) -> str:
    """The run summary: rows in, clean and quarantined per reason, rows per split, throughput."""
    m = result.manifest
    lines = [f"dataset {result.output}" + (" (unchanged, nothing to do)" if result.skipped else "")]
    lines.append(f"  rows in       {m['rows_in']}")
    lines.append(f"  rows clean    {m['rows_clean']}")
    lines.append(f"  quarantined   {m['quarantine']['rows']}")
    for reason, n in m[MANIFEST_QUARANTINE]["reasons"].items():
        lines.append(f"    {reason:<28} {n}")
    if m.get(MANIFEST_TASK) == "classification":
        counts = m.get(MANIFEST_CLASS_COUNTS) or {}
        names = m.get(MANIFEST_CLASSES)
        lines.append(
            f"  classes       {m[MANIFEST_NUM_CLASSES]}: "
            + ", ".join(f"{names[int(k)] if names and int(k) < len(names) else k}={n}" for k, n in counts.items())
        )
        lines += [f"  warning       {w}" for w in m.get(MANIFEST_CLASS_WARNINGS, [])]
    for name, counted in (m.get(MANIFEST_CATEGORIES) or {}).items():
        cut = f", the rest read as {featurize.OTHER_CATEGORY}" if counted["kept"] < counted["distinct"] else ""
        lines.append(f"  text column   {name}: {counted['distinct']} distinct in train, {counted['kept']} kept{cut}")
    for name, why in (m.get(MANIFEST_LEFT_OUT) or {}).items():
        lines.append(f"  left out      {name}: {why}")
    for name, split in m[MANIFEST_SPLITS].items():
        lines.append(
            f"  {name:<13} {split['rows']} rows in {split['row_groups']} row groups, {len(split['files'])} files"
        )
    if not result.skipped:
        lines.append(f"  {result.seconds:.1f} s, {m['rows_in'] / max(result.seconds, 1e-9):.0f} rows/s")
    return "\n".join(lines)


def run(cfg: Config) -> int:
    """Entry point of `sparkml-par prepare`: builds the session, prepares the dataset, prints the summary."""
    from sparkml_par.spark_runtime.session import SHORT_RUN_INPUT_BYTES, run_stage

    size = input_bytes(cfg.data, SHORT_RUN_INPUT_BYTES)
    return run_stage(cfg, lambda spark: prepare(spark, cfg.data), summary, size)


def _stage_work(run: Run, _resume: bool):
    result = prepare(run.spark, run.cfg.data, owner=run.run_dir.store.url)
    m = result.manifest
    return result.output, {
        "fingerprint": m[MANIFEST_FINGERPRINT],
        "rows_clean": m[MANIFEST_ROWS_CLEAN],
        "quarantined": m[MANIFEST_QUARANTINE]["rows"],
        "skipped": result.skipped,
        "steps": result.steps,
    }


# prepare skips an unchanged dataset itself (it compares the input's fingerprint), so the stage is always due.
STAGE = Stage("prepare", lambda run: fingerprint(dataclasses.asdict(run.cfg.data)), always_due, _stage_work)
