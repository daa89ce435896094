"""Any table a user can write: prepare then scoring's read of the same file give exact counts or one clear error.

Hypothesis writes small CSV, JSON lines and Parquet files with generated column names (dots, spaces, backticks,
leading digits, reserved words, non-ASCII, very long, names equal but for case), values (missing, NaN and
infinities, empty and very long text, words), ragged CSV lines, Latin-1 bytes, and labels of each kind (two
classes, one class, all missing, a number per row). Each input is prepared on the shared SparkSession and, when
that gives a dataset, read for scoring by the dataset's rules. The outcome is either a dataset whose counts hold
exactly and whose manifest names the file's own columns, or a SparkmlParError of one line; the generator knows
which inputs must give which error. The inputs it once shrank to a failure are kept as `@example`s; how
many more it draws is tests/property_budget.py's (the other tested stacks run the kept examples only).
"""

from __future__ import annotations

import json
import math
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st
from property_budget import examples

from data_prep import score_rows
from data_prep.job import prepare
from sparkml_par.config import DataConfig, FeaturizeConfig, SplitConfig
from sparkml_par.errors import SparkmlParError

LABEL_KINDS = ("two classes", "one class", "all missing", "a number per row")
# Names Spark's parser reads as more than one plain identifier, and names Spark compares without case.
NAMES = st.one_of(
    st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True),
    st.sampled_from(["petal.length", "Sepal.Width", "mean radius", "`tick`", "a`b", "1st", "select", "from", "order"]),
    st.sampled_from(["größe", "日付", "ñame", "col-1", "x+y", "a,b", "what?", "(a)"]),
    st.integers(100, 300).map(lambda n: "w" * n),
)
NUMBERS = st.one_of(st.floats(-1e6, 1e6, allow_nan=False), st.sampled_from([math.nan, math.inf, -math.inf]), st.none())
WORDS = st.one_of(st.sampled_from(["red", "green", "blue", "", "NA", "café"]), st.none(), st.just("t" * 2000))


@dataclass
class Table:
    fmt: str
    names: list[str]  # feature columns, then the label
    rows: list[list]
    label_kind: str
    ragged: int = 0  # CSV lines with a field too many
    latin1: bool = False  # written as Latin-1, read as UTF-8
    kinds: list[str] = field(default_factory=list)  # per feature: number or word


@st.composite
def tables(draw) -> Table:
    fmt = draw(st.sampled_from(["csv", "json", "parquet"]))
    n_features = draw(st.integers(1, 4))
    names = draw(st.lists(NAMES, min_size=n_features, max_size=n_features, unique=True))
    if draw(st.integers(0, 4)) == 0 and len(names) > 1:  # two names equal but for case
        names[-1] = names[0].upper() if names[0].upper() != names[0] else names[0].lower() + "_"
    names = names + ["label"]
    kinds = [draw(st.sampled_from(["number", "word"])) for _ in range(n_features)]
    n = draw(st.integers(30, 60))
    label_kind = draw(st.sampled_from(LABEL_KINDS[:1] * 3 + LABEL_KINDS))  # mostly a label to learn
    rows = []
    for i in range(n):
        values = [draw(NUMBERS) if kind == "number" else draw(WORDS) for kind in kinds]
        label = {"two classes": i % 2, "one class": 1, "all missing": None, "a number per row": i}[label_kind]
        rows.append(values + [label])
    table = Table(fmt, names, rows, label_kind, kinds=kinds)
    if fmt == "csv":
        table.ragged = draw(st.integers(0, 2))
        table.latin1 = draw(st.booleans()) and any("é" in str(v) for row in rows for v in row)
    return table


def _expected_errors(t: Table) -> tuple[list[str], bool]:
    """The errors this table may end in, and whether it must end in one of them rather than in a dataset."""
    lowered = [name.lower() for name in t.names]
    if len(set(lowered)) < len(lowered):
        return [r"the same name .*when case is ignored|are both named"], True
    errors = {
        r"bytes that are not utf-8 text; set data.encoding": t.latin1,
        r"failed validation": t.label_kind == "all missing",
        r"every clean row holds the same class": t.label_kind == "one class",
    }
    must = [pattern for pattern, raised in errors.items() if raised]
    may = []
    if t.kinds and all(kind == "number" for kind in t.kinds):  # floats are unique per row
        may.append(r"every column besides the label is unique per row")
    return must + may, bool(must)


def _write(t: Table, root: Path) -> Path:
    path = root / f"input.{t.fmt}"
    if t.fmt == "parquet":
        columns = {f"c{i}": [row[i] for row in t.rows] for i in range(len(t.names))}
        table = pa.table(columns).rename_columns(t.names)
        pq.write_table(table, path)
    elif t.fmt == "json":
        lines = [json.dumps(dict(zip(t.names, row)), allow_nan=True, ensure_ascii=False) for row in t.rows]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    else:
        lines = [",".join(_csv_field(name) for name in t.names)]
        lines += [",".join(_csv_field(v) for v in row) for row in t.rows]
        for i in range(t.ragged):
            lines[1 + i * 7] += ",extra"
        path.write_bytes(("\n".join(lines) + "\n").encode("latin-1" if t.latin1 else "utf-8", errors="replace"))
    return path


def _csv_field(value) -> str:
    text = "" if value is None else str(value)
    if any(c in text for c in ',"\n') or text != text.strip():
        return '"' + text.replace('"', '""') + '"'
    return text


def _config(t: Table, path: Path, root: Path) -> DataConfig:
    return DataConfig(
        source=t.fmt,
        path=str(path),
        label="label",
        output=str(root / "dataset"),
        max_shards=1,
        max_reject_fraction=1.0,
        featurize=FeaturizeConfig(impute="median"),
        split=SplitConfig(train=1.0, validation=0.0, test=0.0),
    )


@pytest.mark.stack
@settings(max_examples=examples(ci=10, deep=200))
@given(table=tables())
# What the first runs found, each shrunk to its smallest table and kept.
@example(table=Table("csv", ["petal.length", "label"], [[i % 5, i % 2] for i in range(30)], "two classes"))
@example(
    table=Table(
        "parquet", ["`tick`", "select", "1st", "label"], [[i % 3, "a", i % 4, i % 2] for i in range(30)], "two classes"
    )
)
@example(table=Table("csv", ["a", "a", "label"], [[1.0, 2.0, i % 2] for i in range(30)], "two classes"))
@example(table=Table("csv", ["a", "A", "label"], [[1.0, 2.0, i % 2] for i in range(30)], "two classes"))
@example(
    table=Table(
        "json", ["petal.length", "PETAL.LENGTH", "label"], [[1.0, 2.0, i % 2] for i in range(30)], "two classes"
    )
)
@example(table=Table("json", ["a`b", "A`B", "label"], [[0.0, 0.0, i % 2] for i in range(30)], "two classes"))
@example(table=Table("csv", ["x", "label"], [[i % 3, 1] for i in range(30)], "one class"))
@example(table=Table("csv", ["x", "label"], [["café", i % 2] for i in range(30)], "two classes", latin1=True))
def test_any_table_gives_exact_counts_or_one_clear_error(spark, table):
    expected, must_fail = _expected_errors(table)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cfg = _config(table, _write(table, root), root)
        try:
            prepared = prepare(spark, cfg)
        except SparkmlParError as exc:
            message = str(exc)
            assert "\n" not in message and "Traceback" not in message, message
            assert any(re.search(pattern, message) for pattern in expected), f"unexpected error: {message}"
            event(f"refused: {next(p for p in expected if re.search(p, message))}")
            assert not (root / "dataset").exists()
            return
        assert not must_fail, f"prepared, but should have ended in one of {expected}"
        event(f"dataset from {table.fmt}")
        _check_dataset(prepared.manifest, table)
        _check_scoring_read(spark, prepared.manifest, prepared.output, cfg, table)


def _check_dataset(m: dict, t: Table) -> None:
    quarantine = m["quarantine"]
    assert m["rows_in"] == len(t.rows)
    assert m["rows_in"] == m["rows_clean"] + quarantine["rows"]
    assert sum(quarantine["reasons"].values()) == quarantine["rows"]
    assert sum(split["rows"] for split in m["splits"].values()) == m["rows_clean"]
    assert quarantine["reasons"].get("malformed_row", 0) == t.ragged
    # Every column of the file is a feature, the label, or left out with a reason: none renamed or lost.
    features = set(m["raw_feature_columns"])
    assert features | set(m["left_out_columns"]) | {"label"} == set(t.names)
    assert not features & set(m["left_out_columns"])


def _check_scoring_read(spark, m: dict, url: str, cfg: DataConfig, t: Table) -> None:
    rows = score_rows.score_rows(spark, score_rows.read_raw(spark, cfg.path, t.fmt, m), m, url)
    scored = rows.rows.count()
    assert rows.rows_in == len(t.rows)
    assert scored + sum(rows.reasons.values()) == rows.rows_in
    assert set(m["raw_feature_columns"]) <= set(rows.rows.columns)
