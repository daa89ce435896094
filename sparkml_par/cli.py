"""`sparkml-par`: the pipeline's commands, each taking `CONF [section.key=value ...]` the same way.

A stage plugs in with one line in COMMANDS. Its module is imported only when its command runs, so
`--version`, `config` and `doctor`'s start-up do not pay for importing Spark, torch or Horovod.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import sys
from typing import Callable, NoReturn, Optional, Sequence

from sparkml_par import __version__
from sparkml_par.config import Config, describe, load_config
from sparkml_par.errors import SparkmlParError
from sparkml_par.logs import setup_logging, stderr_apart_under_spark_submit

# command -> ("module:function", help); the function takes the loaded Config and returns the exit code.
COMMANDS: dict[str, tuple[str, str]] = {
    "smoke": ("sparkml_par.smoke:run", "2 Horovod ranks in a Spark barrier stage all-reduce a tensor"),
    "prepare": ("data_prep.job:run", "ingest, validate, profile, featurize, split and write a petastorm dataset"),
    "train": ("sparkml_par.train.job:run", "train on the prepared dataset with Horovod ranks in a barrier stage"),
    "tune": ("sparkml_par.tune.job:run", "hyperparameter search: trials as concurrent Spark tasks"),
    "score": ("sparkml_par.infer.score:run", "score a dataset or table with a model artifact in Spark (mapInArrow)"),
    "report": ("sparkml_par.report:run", "write the HTML report of a run directory"),
    "run": ("sparkml_par.pipeline:run", "the whole pipeline: prepare, tune, train, score, report"),
}

_OVERRIDES_HELP = "section.key=value settings that win over CONF, e.g. train.epochs=3 spark.master=local[4]"


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs one command; a SparkmlParError becomes `error: <message>` on stderr and exit code 2."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version and usage errors: return argparse's code instead
        return int(exc.code or 0)
    try:
        return args.handler(args)
    except SparkmlParError as exc:
        print(f"error: {str(exc).strip()}", file=sys.stderr)
        return 2


def exit_with(code: int) -> NoReturn:
    """Ends the process that ran a command with its exit code. The heap the command leaves (torch's, pyspark's
    and matplotlib's modules among it) is frozen first: the interpreter's exit would otherwise walk all of it in
    its final garbage collections, most of a second after the work is done."""
    gc.freeze()
    sys.exit(code)


def console() -> NoReturn:
    """The `sparkml-par` command."""
    exit_with(main())


def run_job(command: str, argv: Optional[Sequence[str]] = None) -> int:
    """Entry of the spark-submit scripts in jobs/: `--config CONF [overrides]` runs `command` like the CLI."""
    parser = argparse.ArgumentParser(prog=f"jobs/{command}.py", description=COMMANDS[command][1])
    parser.add_argument("--config", required=True, metavar="CONF", help="YAML config file, e.g. conf/quickstart.yaml")
    parser.add_argument("overrides", metavar="section.key=value", nargs="*", help=_OVERRIDES_HELP)
    args = parser.parse_args(argv)
    stderr_apart_under_spark_submit()
    return main([command, args.config, *args.overrides])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sparkml-par",
        description="Spark data preparation, barrier-mode Horovod training of PyTorch models, Spark scoring.",
    )
    parser.add_argument("--version", action="version", version=f"sparkml-par {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    doctor = commands.add_parser(
        "doctor",
        help="check that this machine's Python, Java and packages can run the pipeline, and say how to fix what cannot",
    )
    doctor.set_defaults(handler=_run_doctor)

    config = commands.add_parser("config", help="print the effective config as YAML")
    _add_config_arguments(config, conf_required=False)
    config.add_argument("--reference", action="store_true", help="print every key with its default and meaning")
    config.add_argument(
        "--markdown", action="store_true", help="with --reference: as the page docs/config-reference.md (make docs)"
    )
    config.set_defaults(handler=_run_config)

    for name, (_, help_text) in COMMANDS.items():
        stage = commands.add_parser(name, help=help_text)
        _add_config_arguments(stage, conf_required=True)
        if name == "run":
            stage.add_argument(
                "--from",
                dest="from_stage",
                choices=["prepare", "tune", "train", "score", "report"],
                help="run this stage and all later ones even if unchanged (output.from_stage)",
            )
        stage.set_defaults(handler=_run_stage)
    return parser


def _add_config_arguments(parser: argparse.ArgumentParser, conf_required: bool) -> None:
    parser.add_argument(
        "conf", metavar="CONF", nargs=None if conf_required else "?", help="YAML config file, e.g. conf/quickstart.yaml"
    )
    parser.add_argument("overrides", metavar="section.key=value", nargs="*", help=_OVERRIDES_HELP)
    parser.add_argument("--quiet", action="store_true", help="only warnings and the final summary (output.quiet)")
    parser.add_argument("--log-format", choices=["text", "json"], help="log lines as text or JSON (output.log_format)")


def _load(args: argparse.Namespace) -> Config:
    """The config from CONF and overrides; --quiet and --log-format are overrides of output.*."""
    overrides = list(args.overrides)
    if args.quiet:
        overrides.append("output.quiet=true")
    if args.log_format:
        overrides.append(f"output.log_format={args.log_format}")
    if getattr(args, "from_stage", None):
        overrides.append(f"output.from_stage={args.from_stage}")
    cfg = load_config(args.conf, overrides)
    setup_logging(cfg.output.quiet, cfg.output.log_format)
    return cfg


def _resolve(target: str) -> Callable[[Config], int]:
    module_name, _, function_name = target.partition(":")
    return getattr(importlib.import_module(module_name), function_name)


def _run_stage(args: argparse.Namespace) -> int:
    cfg = _load(args)
    return _resolve(COMMANDS[args.command][0])(cfg)


def _run_doctor(args: argparse.Namespace) -> int:
    from sparkml_par import doctor

    return doctor.report()


def _run_config(args: argparse.Namespace) -> int:
    if args.reference:
        print(config_reference_page() if args.markdown else config_reference())
        return 0
    if args.conf is None:
        raise SparkmlParError("config needs CONF, a YAML file such as conf/quickstart.yaml, or --reference")
    print(_load(args).to_yaml(), end="")
    return 0


def config_reference() -> str:
    """Every key, its default and its meaning, one aligned line each."""
    rows = describe()
    key_width = max(len(key) for key, _, _ in rows)
    default_width = max(len(default) for _, default, _ in rows)
    return "\n".join(f"{key:<{key_width}}  {default:<{default_width}}  {doc}" for key, default, doc in rows)


def config_reference_page() -> str:
    """The reference as a Markdown page, one table row per key: docs/config-reference.md, written by `make docs`."""
    pipe = "\\|"  # a | in a table cell
    rows = "\n".join(f"| `{key}` | `{default}` | {doc.replace('|', pipe)} |" for key, default, doc in describe())
    return (
        "# Config reference\n\n"
        "Every key of the YAML config, its default and its meaning, generated from the code "
        "(`sparkml-par config --reference`; `make docs` writes this page). How the config is read, overridden "
        "and checked: [configuration.md](configuration.md).\n\n"
        "| key | default | meaning |\n| --- | --- | --- |\n" + rows
    )


if __name__ == "__main__":
    console()
