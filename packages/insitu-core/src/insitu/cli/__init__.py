"""The ``insitu`` command line: subcommands registered by plugins, ``--json`` for scripts.

``insitu inspect URL`` describes a store; ``insitu bench URL`` measures and
tunes a short real run; ``insitu cache show|verify|clear DIR`` looks after the
persisted tier; plugin packages add their own (insitu-transforms adds
``insitu check-transform``) through the ``insitu_register_commands`` hook.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

DESCRIPTION = """\
Train in place on Zarr archives: look at a store, measure and tune a run, and
look after the persisted cache, from a shell.

Each subcommand has its own --help. Options common to those that open a store:
a path or URL (file://, s3://, gs://, az://, https://, memory://), and
--storage-options '{"anon": true}' in the fsspec spelling. Add --json for
output a script can read. Exit status: 0 on success; 2 on bad usage (an
option, or a name that does not exist: a sample dimension, a variable, a
transform, a URL scheme); 1 when what the URL points at fails (missing,
unreachable, refusing, corrupt metadata) or the subcommand found a problem (a
corrupt cache, a transform that breaks its declaration). A failure is one line
on stderr; --debug (or INSITU_DEBUG=1) shows its traceback.
"""


#: Subcommands that plugin packages add, and the package to install for each.
PLUGIN_COMMANDS = {"check-transform": "insitu-transforms"}


class _MissingPluginCommand:
    """Stands in for a plugin's subcommand whose package is not installed."""

    def __init__(self, name: str, package: str) -> None:
        self.name, self.package = name, package

    def run(self, args: argparse.Namespace) -> int:
        raise ModuleNotFoundError(
            f"insitu {self.name} comes with the {self.package} package: pip install {self.package}"
        )


def build_parser() -> argparse.ArgumentParser:
    """The parser with every registered subcommand."""
    from insitu import __version__
    from insitu.plugins.registry import get_registry

    parser = argparse.ArgumentParser(
        prog="insitu", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"insitu {__version__}")
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="log to stderr: -v for INFO, -vv for DEBUG"
    )
    parser.add_argument(
        "--debug", action="store_true", help="show the traceback of a failure (also INSITU_DEBUG=1)"
    )
    sub = parser.add_subparsers(title="commands", metavar="COMMAND")
    registered = get_registry().entries("commands")
    for name, package in sorted(PLUGIN_COMMANDS.items()):
        if name not in registered:  # typed from the docs: say what to install, not "invalid choice"
            child = sub.add_parser(name, help=f"(needs {package}: pip install {package})", add_help=False)
            child.add_argument("rest", nargs=argparse.REMAINDER)
            child.set_defaults(command=_MissingPluginCommand(name, package))
    for name, registration in sorted(registered.items()):
        command = registration.obj
        doc = getattr(command, "description", None) or getattr(command, "__doc__", None) or command.help
        child = sub.add_parser(
            name, help=command.help, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
        )
        command.add_arguments(child)
        child.set_defaults(command=command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (``insitu`` console script)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    command: Any = getattr(args, "command", None)
    if command is None:
        parser.print_help()
        return 2
    if args.verbose:
        logging.basicConfig(
            level=logging.DEBUG if args.verbose > 1 else logging.INFO, format="%(name)s: %(message)s"
        )
    try:
        return int(command.run(args))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`insitu inspect ... | head`): stop quietly, as Unix tools do. Point
        # stdout at /dev/null so the interpreter's final flush does not raise the same error again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a tool killed by the signal
    except Exception as exc:  # one line naming what is at fault, not a traceback
        if args.debug or os.environ.get("INSITU_DEBUG", "") not in ("", "0"):
            raise
        from insitu.cli.failures import exit_status, one_line

        print(f"insitu: error: {one_line(exc)}", file=sys.stderr)
        return exit_status(exc)


def entry_point() -> None:
    """``sys.exit(main())`` for the console script."""
    sys.exit(main())


__all__ = ["build_parser", "entry_point", "main"]
