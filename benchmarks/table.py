"""The table every benchmark prints: this project next to its baseline in the same run, the ratio, the target,
and the peak memory of the driver and of the ranks (benchmarks.memory)."""

from __future__ import annotations

HEADER = (
    "part",
    "this project",
    "baseline in the same run",
    "ratio",
    "target",
    "met?",
    "driver peak MB",
    "rank peak MB",
)


def result_row(
    part: str,
    ours: float | None,
    baseline: float | None,
    baseline_name: str,
    better: str,
    target: str = "",
    target_ratio: float | None = None,
) -> dict:
    """One row; met is None without a baseline or a target ratio. better: 'higher' or 'lower'."""
    ratio = ours / baseline if baseline else None
    met = None
    if ratio is not None and target_ratio is not None:
        met = ratio <= target_ratio if better == "lower" else ratio >= target_ratio
    return {
        "part": part,
        "ours": ours,
        "baseline": baseline,
        "baseline_name": baseline_name,
        "ratio": ratio,
        "better": better,
        "target": target,
        "met": met,
    }


def number(value: float | None) -> str:
    """Whole numbers with separators from 100 up, three significant digits below (1.00, 0.957): one
    format fits seconds, GB/s and rows/s in one table."""
    if value is None:
        return "-"
    return f"{value:,.0f}" if abs(value) >= 99.95 else f"{value:#.3g}"


def cells(row: dict) -> tuple[str, ...]:
    """A row as the strings of HEADER's columns; the memory columns are '-' where a row has none."""
    baseline = f"{number(row['baseline'])} ({row['baseline_name']})" if row["baseline"] is not None else "-"
    ratio = "-" if row["ratio"] is None else f"{row['ratio']:.2f}x"
    met = "-" if row["met"] is None else ("yes" if row["met"] else "NO")
    return (
        row["part"],
        number(row["ours"]),
        baseline,
        ratio,
        row["target"] or "-",
        met,
        number(row.get("driver_peak_mb")),
        number(row.get("rank_peak_mb")),
    )


def text_table(lines: list[tuple[str, ...]]) -> str:
    """Aligned columns; the first line is the header."""
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    out = [" | ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in lines]
    out.insert(1, "-+-".join("-" * width for width in widths))
    return "\n".join(out)


def markdown_table(lines: list[tuple[str, ...]]) -> str:
    """The same lines as a Markdown table."""
    out = ["| " + " | ".join(cell.replace("|", "\\|") for cell in line) + " |" for line in lines]
    out.insert(1, "|" + "---|" * len(lines[0]))
    return "\n".join(out)


def print_table(rows: list[dict]) -> None:
    print()
    print(text_table([HEADER, *(cells(row) for row in rows)]))
