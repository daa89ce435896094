"""The benchmark suite: every part, then one table of all their rows.

    python -m benchmarks                      # every part (make bench): about 20 minutes on 2 cores
    python -m benchmarks convert read         # some parts
    python -m benchmarks --scale              # only the cost curve of data_prep's write at 1x, 4x, 16x

Each part runs as `python -m benchmarks.<part>` in a process of its own, so each has its own Spark JVM
and the peak memory in its rows is its own. The suite passes the smaller sizes in PARTS (end_to_end, the
longest, runs at its full size: three ways, two workloads, three repetitions); a part run alone uses its
full default sizes. Every part
writes benchmarks/results/<part>.json; the suite prints their rows as one table and writes
benchmarks/results/suite.json and suite.md (the table, the machine, the date and the commands).

A run of every part (`make bench`) also writes its table, with the machine and its load, into
docs/performance.md, between the TABLE_BEGIN and TABLE_END marker lines; a run of some parts leaves the
page as it is (its table would be partial).

Memory columns: driver = peak RSS of the part's Python driver plus its Spark JVM; rank = the largest
peak RSS of its Spark Python workers, where the Horovod ranks run (convert and score: the workers that
write or score; read: the reading process, which plays rank 0). A missed target is a result, not an
error: the suite exits non-zero only when a part fails to run.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import machine
from benchmarks.table import HEADER, cells, markdown_table, result_row, text_table
from benchmarks.train import CHECKPOINTS_OFF

REPO = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO / "benchmarks" / "results"
# Each part's arguments in the suite, sized for 2 cores.
PARTS: dict[str, list[str]] = {
    "convert": ["--job-rows", "200000"],
    "read": ["--reps", "9"],
    "launch": ["--reps", "3", "--rounds", "3"],
    "train": ["--rounds", "2", "--plain-seconds", "2", "--mlp-variant", CHECKPOINTS_OFF],
    "train_steps": ["--rounds", "1"],
    "score": ["--rows", "200000", "--repeats", "3"],
    "storage": ["--reps", "3"],
    "prepare_scale": [],
    "prepare_images": [],
    "end_to_end": [],
}
TAIL_LINES = 30
PERFORMANCE_PAGE = REPO / "docs" / "performance.md"
TABLE_BEGIN = "<!-- benchmark table: written by `make bench` -->"
TABLE_END = "<!-- end of the benchmark table -->"


def run_part(name: str) -> dict:
    """Runs one part, its output shown as it comes; its rows, or why it has none."""
    results = RESULTS_DIR / f"{name}.json"
    command = [sys.executable, "-m", f"benchmarks.{name}", *PARTS[name], "--json", str(results)]
    print(f"\n=== {name}: {_shell(command)}", flush=True)
    results.unlink(missing_ok=True)  # a part that stops early must not leave an old file to be read
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    started = time.perf_counter()
    with subprocess.Popen(
        command,
        cwd=REPO,
        env=os.environ | {"PYTHONUNBUFFERED": "1"},
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    ) as process:
        for line in process.stdout:
            print(line, end="", flush=True)
            tail.append(line.rstrip("\n"))
    part = {
        "name": name,
        "command": _shell(command),
        "seconds": time.perf_counter() - started,
        "exit_code": process.returncode,
    }
    # Parts exit 1 on a missed target too; only a part that wrote its results ran to the end.
    if not results.exists():
        return part | {
            "rows": [
                result_row(f"{name}: did not run to the end (exit {process.returncode})", None, None, "", "higher")
            ],
            "error": list(tail),
        }
    return part | {"rows": json.loads(results.read_text())["rows"]}


def run_suite(names: list[str], command: str) -> int:
    whole = set(names) == set(PARTS)
    if whole:
        _table_span(
            PERFORMANCE_PAGE.read_text()
        )  # a page without the markers stops the suite before 20 minutes of work
    before = machine.describe()
    started = time.perf_counter()
    parts = [run_part(name) for name in names]
    record = {
        "command": command,
        "machine": before,
        "load_average_after": machine.describe()["load_average"],
        "seconds": time.perf_counter() - started,
        "parts": parts,
    }
    lines = [HEADER, *(cells(row) for part in parts for row in part["rows"])]
    failed = [part for part in parts if "error" in part]

    print("\n" + text_table(lines))
    for part in failed:
        print(
            f"\n{part['name']} failed: {part['command']} exited with {part['exit_code']}; last lines:\n"
            + "\n".join(part["error"])
        )
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "suite.json").write_text(json.dumps(record, indent=1) + "\n")
    (RESULTS_DIR / "suite.md").write_text(suite_markdown(record, lines))
    written = [RESULTS_DIR / "suite.json", RESULTS_DIR / "suite.md"]
    if whole:
        PERFORMANCE_PAGE.write_text(page_with_table(PERFORMANCE_PAGE.read_text(), record, lines))
        written.append(PERFORMANCE_PAGE)
    print(f"\n{', '.join(names)}: {record['seconds'] / 60:.1f} min; written: {', '.join(map(str, written))}")
    return 1 if failed else 0


def page_with_table(page: str, record: dict, lines: list[tuple[str, ...]]) -> str:
    """The page with the text between its marker lines replaced by this run's machine line and table."""
    begin, end = _table_span(page)
    return f"{page[:begin]}\n{_machine_line(record)}\n\n{markdown_table(lines)}\n{page[end:]}"


def _table_span(page: str) -> tuple[int, int]:
    """Where the page's table lies: from the end of the begin marker to the start of the end marker."""
    begin, end = page.find(TABLE_BEGIN), page.find(TABLE_END)
    if begin < 0 or end < begin:
        raise SystemExit(
            f"{PERFORMANCE_PAGE} has no benchmark table to replace: put the lines {TABLE_BEGIN!r} and {TABLE_END!r} "
            "around the place the table goes"
        )
    return begin + len(TABLE_BEGIN), end


def _machine_line(record: dict) -> str:
    m = record["machine"]
    return (
        f"`{record['command']}`, {m['date']}, {record['seconds'] / 60:.1f} minutes. "
        f"Machine: nproc {m['nproc']}, {m['ram_gib']:.1f} GiB RAM, {m['cpu']}, {m['os']}, Python {m['python']}; "
        f"load average {_load(m['load_average'])} at the start, {_load(record['load_average_after'])} at the end."
    )


def suite_markdown(record: dict, lines: list[tuple[str, ...]]) -> str:
    out = [
        "# Benchmark suite",
        "",
        _machine_line(record),
        "",
        markdown_table(lines),
        "",
        "Ratios compare figures measured in the same run. Memory: driver = the part's Python driver plus its "
        "Spark JVM; rank = the largest of its Spark Python workers (where the ranks run), peak RSS in MB.",
        "",
        "Parts as run:",
        "",
    ]
    for part in record["parts"]:
        status = f", failed (exit {part['exit_code']})" if "error" in part else ""
        out.append(f"- {part['name']}: `{part['command']}` ({part['seconds']:.0f} s{status})")
    return "\n".join(out) + "\n"


def _load(values: list[float]) -> str:
    return " / ".join(f"{value:.1f}" for value in values)


def _shell(command: list[str]) -> str:
    """The command as typed in the repository root."""

    def short(arg: str) -> str:
        path = Path(arg)
        return str(path.relative_to(REPO)) if path.is_absolute() and path.is_relative_to(REPO) else arg

    return shlex.join(short(arg) for arg in command)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("parts", nargs="*", metavar="PART", help=f"parts to run (default all): {', '.join(PARTS)}")
    parser.add_argument(
        "--scale", action="store_true", help="only the cost curve: data_prep's write at 1x, 4x, 16x of 250,000 rows"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = parser.parse_args(argv)
    unknown = [name for name in args.parts if name not in PARTS]
    if unknown:
        parser.error(f"unknown part(s) {', '.join(map(repr, unknown))}; the parts are {', '.join(PARTS)}")
    if args.scale:
        if args.parts:
            parser.error("--scale runs alone: leave out the parts")
        return subprocess.call([sys.executable, "-m", "benchmarks.convert", "--scale"], cwd=REPO)
    return run_suite(args.parts or list(PARTS), _shell([sys.executable, "-m", "benchmarks", *argv]))


if __name__ == "__main__":
    sys.exit(main())
