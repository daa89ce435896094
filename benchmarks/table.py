"""The table every benchmark prints: this project next to its baseline, the ratio and the target."""

from __future__ import annotations


def print_table(rows: list[dict], number_format: str) -> None:
    """rows as built by benchmarks.launch._row: part, ours, baseline, baseline_name, ratio, target, met."""
    def fmt(value) -> str:
        return "-" if value is None else format(value, number_format)

    table = [("part", "this project", "baseline", "ratio", "target", "met?")]
    for row in rows:
        base = f"{fmt(row['baseline'])} ({row['baseline_name']})" if row["baseline"] is not None else "-"
        ratio = "-" if row["ratio"] is None else f"{row['ratio']:.2f}x"
        met = "-" if row["met"] is None else ("yes" if row["met"] else "NO")
        table.append((row["part"], fmt(row["ours"]), base, ratio, row["target"] or "-", met))
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    print()
    for i, line in enumerate(table):
        print(" | ".join(cell.ljust(width) for cell, width in zip(line, widths)))
        if i == 0:
            print("-+-".join("-" * width for width in widths))
