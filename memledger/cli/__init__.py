"""The `memledger` command line. Sub-commands register here; each module under memledger.cli
adds its parser with `add(subparsers)`. Errors in user input exit 2 with one line."""
from __future__ import annotations

import sys

from memledger.cli.args import Parser
from memledger.errors import SpecError

# modules under memledger.cli: add(), run()
COMMANDS = ["ledger", "advise", "plan", "reference", "trace", "validate", "config", "compare"]


def build_parser() -> Parser:
    import importlib
    parser = Parser(prog="memledger", description="GPU memory ledger for large-model training")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for name in COMMANDS:
        importlib.import_module(f"memledger.cli.{name}_cmd").add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    from memledger.cli.contract import check_args, flag_names, flag_of
    names = flag_names(parser._subparsers._group_actions[0].choices[args.command])
    try:
        from memledger.cli.config_flags import apply_configs, apply_loop_implied
        words = sys.argv[1:] if argv is None else list(argv)
        apply_loop_implied(args, parser, words, apply_configs(args, parser, words))
        check_args(args, names)  # every flag in its range before any command runs
        rc = args.run(args) or 0
        sys.stdout.flush()
        return rc
    except BrokenPipeError:  # `memledger ... | head`: the reader left; stop quietly
        _silence_stdout()
        return 0
    except SpecError as e:  # the core names a spec field: show the flag the user typed
        print(f"memledger {args.command}: error: {flag_of(e.field, names, args)}: {e.message}",
              file=sys.stderr)
        return 2
    except (OSError, ValueError) as e:
        print(f"memledger {args.command}: error: {e}", file=sys.stderr)
        return 2


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail again."""
    import os
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
