"""Real datasets the project has never seen, written as a user would bring them.

scikit-learn ships them (breast cancer, wine, iris, diabetes, digits); each is written with column names
of its own (spaces included, as scikit-learn names them), an id column, and in the format a case asks for:
CSV, JSON lines, Parquet, or PNG images in one folder per class.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd


def frame(name: str) -> pd.DataFrame:
    """The dataset as a table: an id column, its feature columns and its target, named as in the case table."""
    from sklearn import datasets

    if name == "breast_cancer":
        bunch = datasets.load_breast_cancer()
        df = pd.DataFrame(bunch.data, columns=list(bunch.feature_names))
        df.insert(0, "patient id", np.arange(10_000, 10_000 + len(df)))
        df["diagnosis"] = bunch.target
    elif name == "wine":
        bunch = datasets.load_wine()
        df = pd.DataFrame(bunch.data, columns=list(bunch.feature_names))
        df.insert(0, "sample_id", [f"w{i:04d}" for i in range(len(df))])
        df["cultivar"] = bunch.target
    elif name == "iris":
        bunch = datasets.load_iris()
        df = pd.DataFrame(bunch.data, columns=["sepal length", "sepal width", "petal length", "petal width"])
        df.insert(0, "flower", np.arange(len(df)))
        df["species"] = np.asarray(bunch.target_names)[bunch.target]
    elif name == "diabetes":
        bunch = datasets.load_diabetes()
        df = pd.DataFrame(bunch.data, columns=list(bunch.feature_names))
        df.insert(0, "patient", np.arange(len(df)))
        df["progression"] = bunch.target
    else:
        raise ValueError(f"unknown dataset {name!r}")
    return df


def with_region(df: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """A categorical column with missing values: about one row in eight has no region."""
    rng = np.random.default_rng(seed)
    regions = np.asarray(["north", "south", "east", "west"], dtype=object)[rng.integers(0, 4, len(df))]
    regions[rng.random(len(df)) < 0.125] = None
    return df.assign(region=regions)


def write(df: pd.DataFrame, directory: Path, fmt: str) -> Path:
    """df in one file of the format under directory (a fresh folder): the path to give data.path."""
    directory.mkdir(parents=True, exist_ok=True)
    if fmt == "csv":
        path = directory / "data.csv"
        df.to_csv(path, index=False)
    elif fmt == "json":
        path = directory / "data.json"
        df.to_json(path, orient="records", lines=True)
    elif fmt == "parquet":
        path = directory / "data.parquet"
        df.to_parquet(path, index=False)
    else:
        raise ValueError(f"unknown format {fmt!r}")
    return path


def write_digit_images(directory: Path, per_class: int = 40, offset: int = 0) -> Path:
    """scikit-learn's 8x8 digits as grayscale PNGs in one folder per class (`zero`, `one`, ...)."""
    from PIL import Image
    from sklearn.datasets import load_digits

    names = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
    digits = load_digits()
    for digit, name in enumerate(names):
        folder = directory / name
        folder.mkdir(parents=True, exist_ok=True)
        rows = np.flatnonzero(digits.target == digit)[offset : offset + per_class]
        for i in rows:
            pixels = (digits.images[i] / 16.0 * 255).astype(np.uint8)
            Image.fromarray(pixels, mode="L").save(folder / f"img{i:04d}.png")
    return directory
