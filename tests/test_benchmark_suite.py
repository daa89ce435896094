"""The benchmark suite's table: what `make bench` writes into docs/performance.md, and where; and the order in
which benchmarks run what they compare."""

import pytest

from benchmarks.__main__ import TABLE_BEGIN, TABLE_END, page_with_table
from benchmarks.rounds import rotating_rounds
from benchmarks.table import HEADER

RECORD = {
    "command": ".venv/bin/python -m benchmarks",
    "machine": {
        "nproc": 2,
        "ram_gib": 23.5,
        "cpu": "AMD EPYC",
        "os": "Linux",
        "python": "3.11.7",
        "date": "2026-12-01T18:12:34+00:00",
        "load_average": (1.7, 1.6, 1.5),
    },
    "load_average_after": (2.9, 2.6, 2.3),
    "seconds": 1236.0,
}


def test_the_table_replaces_only_what_lies_between_the_markers():
    page = f"# Title\n\nbefore\n{TABLE_BEGIN}\nold table\n| a | b |\n{TABLE_END}\nafter\n"
    line = ("read: loader (samples/s)", "887,541", "855,886", "1.04x", ">= 0.5", "yes", "1,537", "404")
    written = page_with_table(page, RECORD, [HEADER, line])

    head, _, rest = written.partition(TABLE_BEGIN)
    table, _, tail = rest.partition(TABLE_END)
    assert head == "# Title\n\nbefore\n" and tail == "\nafter\n"
    assert "old table" not in table
    assert "20.6 minutes" in table and "load average 1.7 / 1.6 / 1.5 at the start, 2.9 / 2.6 / 2.3 at the end" in table
    assert "| read: loader (samples/s) | 887,541 | 855,886 | 1.04x | >= 0.5 | yes | 1,537 | 404 |" in table
    # Written twice, the page holds one table.
    again = page_with_table(written, RECORD, [HEADER, line])
    assert again == written


def test_a_page_without_the_markers_is_named_with_the_fix():
    with pytest.raises(SystemExit, match="has no benchmark table to replace: put the lines"):
        page_with_table("# Title\nno markers\n", RECORD, [HEADER])


def test_compared_runs_take_every_place_in_a_round_in_turn():
    ran = []
    blocks = {name: (lambda name=name: ran.append(name) or f"{name}{len(ran)}") for name in ("gloo", "hvd", "tuned")}
    results = rotating_rounds(blocks, 4)
    assert ran == ["gloo", "hvd", "tuned", "hvd", "tuned", "gloo", "tuned", "gloo", "hvd", "gloo", "hvd", "tuned"]
    assert results == {
        "gloo": ["gloo1", "gloo6", "gloo8", "gloo10"],
        "hvd": ["hvd2", "hvd4", "hvd9", "hvd11"],
        "tuned": ["tuned3", "tuned5", "tuned7", "tuned12"],
    }
