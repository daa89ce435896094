"""What every benchmark part's `main` does: quiet logs, parsed and checked arguments, the run, the exit code.

A part passes its parser, its run (returning the table's rows) and, where some arguments depend on others
or have bounds, a `resolve(args)` that fills those defaults in and returns what is wrong, or None. The exit
code is 1 when a row misses its target (the suite reads that as a result, not a failure).
"""

from __future__ import annotations

import argparse
import logging
import warnings
from typing import Callable, Optional


def main(
    argv: Optional[list[str]],
    build_parser: Callable[[], argparse.ArgumentParser],
    run: Callable[[argparse.Namespace], list[dict]],
    resolve: Optional[Callable[[argparse.Namespace], Optional[str]]] = None,
) -> int:
    # petastorm 0.12 on pyarrow 14: deprecation notices on every dataset written and every reader opened.
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"(petastorm|data_prep)(\.|$)")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    problem = resolve(args) if resolve else None
    if problem:
        raise SystemExit(problem)
    rows = run(args)
    return 0 if all(row["met"] is not False for row in rows) else 1
