"""`turngate serve | check | schema`.

Every serve flag has an environment variable (flags win); see ``turngate.settings``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import orjson

from turngate import __version__


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    code: int = args.run(args)
    return code


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="turngate",
        description="A sidecar proxy that refuses invalid LLM message sequences before they "
        "are sent.",
    )
    parser.add_argument("--version", action="version", version=f"turngate {__version__}")
    sub = parser.add_subparsers(dest="command")

    serve = sub.add_parser("serve", help="run the proxy")
    from turngate.settings import add_serve_arguments

    add_serve_arguments(serve)
    serve.set_defaults(run=_serve)

    check = sub.add_parser(
        "check", help="validate request bodies or JSONL transcripts offline (exit 1 on rejection)"
    )
    check.add_argument("files", nargs="+", type=Path, metavar="FILE")
    check.add_argument(
        "--api",
        choices=["openai_chat", "openai_responses", "anthropic", "gemini"],
        help="the wire API of every file (default: detected from each body's shape)",
    )
    check.add_argument("--json", action="store_true", help="print one JSON report for machines")
    check.set_defaults(run=_check)

    schema = sub.add_parser("schema", help="print a published JSON Schema")
    schema.add_argument("name", choices=["sequence"])
    schema.set_defaults(run=_schema)
    return parser


def _serve(args: argparse.Namespace) -> int:
    from turngate.settings import settings_from_args

    settings = settings_from_args(args)
    from turngate.proxy.server import serve

    serve(settings)
    return 0


def _schema(args: argparse.Namespace) -> int:
    from turngate.graph.serialize import sequence_schema

    sys.stdout.buffer.write(orjson.dumps(sequence_schema(), option=orjson.OPT_INDENT_2) + b"\n")
    return 0


def _check(args: argparse.Namespace) -> int:
    from turngate.checker import check_file, print_reports

    reports = [report for path in args.files for report in check_file(path, args.api)]
    print_reports(reports, as_json=args.json, out=sys.stdout)
    if any(r.status == "ERROR" for r in reports):
        return 2
    return 1 if any(r.status == "REJECTED" for r in reports) else 0


if __name__ == "__main__":
    raise SystemExit(main())
