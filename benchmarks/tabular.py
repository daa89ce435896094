"""A tabular CSV shaped like a public flights export, for the end-to-end benchmark's tabular workloads.

Each row: an `id` unique per row, five numeric columns with 2.5% of values missing (`dep_delay`,
`arr_delay`, `air_time`, `distance`, `hour`), three text categories of 16, 3 and 105 values (`carrier`,
`origin`, `dest`) and a 0/1 label `late` (arrival more than 15 minutes late) missing in 2.8% of rows.
`repeat` writes the same rows that many times over, as the issue's 10x measurement did.
"""

from __future__ import annotations

from pathlib import Path

ROWS = 336_776
LABEL = "late"
NUMERIC = ("dep_delay", "arr_delay", "air_time", "distance", "hour")
CATEGORIES = {"carrier": 16, "origin": 3, "dest": 105}
# The columns in file order with the type a reader declares: "number" or "text" (the id is a number).
COLUMNS = [("id", "number"), *[(n, "number") for n in NUMERIC], *[(c, "text") for c in CATEGORIES], (LABEL, "number")]
MISSING_VALUE = 0.025
MISSING_LABEL = 0.028


def write_csv(path: Path, rows: int = ROWS, repeat: int = 1, seed: int = 0) -> None:
    """Writes the CSV (a header, then `rows` generated rows `repeat` times); missing values are empty fields."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    hour = rng.integers(5, 24, rows).astype(float)
    distance = rng.gamma(2.0, 500.0, rows).round()
    departure = (rng.exponential(15, rows) - 5 + (hour - 5)).round()
    arrival = (departure + rng.normal(0, 12, rows)).round()
    numbers = {
        "dep_delay": departure,
        "arr_delay": arrival,
        "air_time": (distance / 8 + rng.normal(0, 10, rows)).round(),
        "distance": distance,
        "hour": hour,
    }
    frame = pd.DataFrame({"id": np.arange(1, rows + 1)})
    for name in NUMERIC:
        values = numbers[name].copy()
        values[rng.random(rows) < MISSING_VALUE] = np.nan
        frame[name] = values
    for name, count in CATEGORIES.items():
        frame[name] = rng.choice([f"{name[:1].upper()}{i:03d}" for i in range(count)], rows)
    late = pd.Series((arrival > 15).astype("int64"), dtype="Int64")
    late[rng.random(rows) < MISSING_LABEL] = pd.NA
    frame[LABEL] = late
    with path.open("w") as out:
        frame.to_csv(out, index=False, na_rep="")
        for _ in range(repeat - 1):
            frame.to_csv(out, index=False, header=False, na_rep="")
