"""The `resomap` command: argument parsing, printing and exit codes (0 ok, 1 a trial failed, 2 bad input).

A full disk (ENOSPC) that ends a command is said in one line naming the file and the space left, exit code 2.
Ctrl-C or SIGTERM ends it with `resomap: interrupted`, exit 130 (143 for SIGTERM): resomap.interrupts.

One module per command group (run: train/sweep/sync, listing: the registries and config, ui, perf: profile/bench,
analysis: explain/analyze); each imports what its command needs when the command runs, so `--help`, the
listings and config errors answer without loading the explanation, tracking or plotting libraries.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import warnings
from collections.abc import Sequence

from resomap import interrupts
from resomap.cli import analysis, listing, perf, run, ui
from resomap.cli.args import OneLineParser
from resomap.errors import ResoMapError

log = logging.getLogger("resomap")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="resomap", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    for group in (run, ui, perf, analysis, listing):
        group.add_commands(sub)
    return parser


def _setup_logging(args: argparse.Namespace) -> None:
    level = logging.DEBUG if args.verbose else logging.WARNING if args.quiet else logging.INFO
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)-7s %(message)s", datefmt="%H:%M:%S")
    for noisy in ("mlflow", "alembic", "urllib3", "matplotlib", "PIL", "git"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:  # a signal in the moments around the command's own handling (interrupts.handled
        # winding down): said and coded like any other, not Python's death by SIGINT (-2) with a traceback
        print(interrupts.LINE, file=sys.stderr)
        return interrupts.exit_code()


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _setup_logging(args)
    os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")  # mlflow probes git; stay quiet outside a repo
    if not args.verbose:  # MLflow sets its own loggers to INFO when imported (database set-up lines)
        os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    warnings.filterwarnings("ignore", category=FutureWarning)  # libraries' deprecation notices, not ours
    # `resomap ui` and `resomap server` stop their server on a signal themselves (exit 0)
    signals = contextlib.nullcontext() if getattr(args, "own_signals", False) else interrupts.handled()
    with signals:
        try:
            code = int(args.func(args) or 0)
            sys.stdout.flush()  # a closed pipe is said here (BrokenPipeError below), not at the interpreter's exit
            interrupts.check()  # a signal whose KeyboardInterrupt was lost in a callback still ends the command
            return code
        except ResoMapError as exc:
            print(f"resomap: error: {exc}", file=sys.stderr)
            return 2
        except PermissionError as exc:  # another user's files: say which, not a traceback
            where = exc.filename or "a file"
            print(f"resomap: error: {where}: permission denied; ask its owner for access (chmod g+rX)", file=sys.stderr)
            return 2
        except BrokenPipeError:  # the reader went away (`resomap ... | head`): stop quietly, as a shell tool does
            with contextlib.suppress(OSError):  # stdout's flush at exit would raise again
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 141  # 128 + SIGPIPE
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: 130 or 143
            print(interrupts.LINE, file=sys.stderr)
            return interrupts.exit_code()
        except Exception as exc:  # a full disk: the file and the space left, not a traceback
            from resomap.atomic import disk_full

            full = disk_full(exc)
            if full is None:
                raise
            print(f"resomap: error: {full}; free some space, then run the command again", file=sys.stderr)
            return 2
