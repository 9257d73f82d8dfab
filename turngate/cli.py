"""`turngate serve | check | schema | policy | shadow`.

Every serve flag has an environment variable (flags win); see ``turngate.settings``.

    turngate serve [--config FILE] [--mode M] ...   a bad policy file: message on stderr, exit 2
    turngate check FILE... [--api A] [--json]       bodies, transcripts, batches (1: refused)
    turngate schema sequence|policy                 a published JSON Schema
    turngate policy schema                          the policy file's JSON Schema
    turngate policy check FILE                      validate a policy file (exit 1 if invalid)
    turngate shadow report [--state URL] [--json]   the shadow report from the state store
"""

from __future__ import annotations

import argparse
import asyncio
import os
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
        "check",
        help="validate request bodies, JSONL transcripts or batch files offline "
        "(exit 1 on rejection)",
    )
    check.add_argument("files", nargs="+", type=Path, metavar="FILE")
    check.add_argument(
        "--api",
        choices=["openai_chat", "openai_responses", "anthropic", "gemini"],
        help="the wire API of every file (default: detected from each body's shape)",
    )
    check.add_argument(
        "--anthropic-beta",
        default="",
        metavar="NAMES",
        help="the anthropic-beta header the bodies were sent with (comma-separated), for the "
        "rules a beta changes",
    )
    check.add_argument(
        "--anthropic-version",
        metavar="VERSION",
        help="the anthropic-version header the bodies were sent with (2026-10-21 takes no "
        "sampling settings; default: judged as 2023-06-01)",
    )
    check.add_argument(
        "--gemini-path",
        metavar="PATH",
        help="the path Gemini bodies were sent on (/v1beta/models/gemini-2.5-flash:"
        "generateContent, a Vertex AI path), for the rules the model and the service decide "
        "(default: neither known, those rules left to Google)",
    )
    check.add_argument("--json", action="store_true", help="print one JSON report for machines")
    check.set_defaults(run=_check)

    schema = sub.add_parser("schema", help="print a published JSON Schema")
    schema.add_argument("name", choices=["sequence", "policy"])
    schema.set_defaults(run=_schema)

    policy = sub.add_parser("policy", help="the policy file (--config): its schema, a check")
    policy_sub = policy.add_subparsers(dest="policy_command", required=True)
    policy_sub.add_parser("schema", help="print the policy file's JSON Schema").set_defaults(
        run=_policy_schema
    )
    check_policy = policy_sub.add_parser(
        "check",
        help="validate a policy file as `serve --config` would (with TURNGATE_POLICY__* "
        "variables); exit 1 if invalid",
    )
    check_policy.add_argument("file", type=Path, metavar="FILE")
    check_policy.set_defaults(run=_policy_check)

    shadow = sub.add_parser("shadow", help="what shadow mode recorded")
    shadow_sub = shadow.add_subparsers(dest="shadow_command", required=True)
    report = shadow_sub.add_parser(
        "report", help="counts by rule and by diff path, with examples, from the state store"
    )
    report.add_argument(
        "--state", help="env TURNGATE_STATE; default the serve default, sqlite:///./turngate.db"
    )
    report.add_argument("--json", action="store_true", help="print the report as JSON")
    report.add_argument(
        "--limit", type=int, default=1000, help="the newest N records (default 1000)"
    )
    report.add_argument("--examples", type=int, default=3, help="examples per rule and path")
    report.set_defaults(run=_shadow_report)
    return parser


def _serve(args: argparse.Namespace) -> int:
    from turngate.policies.loading import PolicyConfigError, load_serving_policy
    from turngate.proxy.routes import prefixes
    from turngate.settings import settings_from_args
    from turngate.state.store import check_state_url

    try:
        settings = settings_from_args(args)
        check_state_url(settings.state)
        # An upstream or proxy URL turngate cannot use: said here, not as a traceback.
        prefixes(settings, os.environ)
    except ValueError as exc:  # SettingsError and EgressConfigError too
        print(f"turngate: {exc}", file=sys.stderr)
        return 2
    # --mode (or TURNGATE_MODE) replaces the file's default mode only when given.
    mode_given = args.mode is not None or bool(os.environ.get("TURNGATE_MODE"))
    from turngate.proxy.services import DEFAULT_ADAPTERS

    try:
        policies = load_serving_policy(
            settings.config,
            os.environ,
            mode=settings.mode if mode_given else None,
            registry=DEFAULT_ADAPTERS,
        )
    except PolicyConfigError as exc:
        print(f"turngate: {exc}", file=sys.stderr)
        return 2
    from turngate.proxy.server import serve

    serve(settings, policies)
    return 0


def _schema(args: argparse.Namespace) -> int:
    if args.name == "policy":
        return _policy_schema(args)
    from turngate.graph.serialize import sequence_schema

    _print_json(sequence_schema())
    return 0


def _policy_schema(args: argparse.Namespace) -> int:
    from turngate.policies.config import policy_schema

    _print_json(policy_schema())
    return 0


def _policy_check(args: argparse.Namespace) -> int:
    from turngate.policies.loading import PolicyConfigError, load_serving_policy
    from turngate.proxy.services import DEFAULT_ADAPTERS

    try:
        config = load_serving_policy(args.file, os.environ, registry=DEFAULT_ADAPTERS)
    except PolicyConfigError as exc:
        print(exc, file=sys.stderr)
        return 1
    routes = len(config.routes)
    print(
        f"{args.file}: valid (default mode {config.defaults.mode}, {routes} "
        f"route{'s' if routes != 1 else ''}, {len(config.models)} model rows)"
    )
    return 0


def _shadow_report(args: argparse.Namespace) -> int:
    from turngate.policies.report import ShadowReport, format_report, report_json
    from turngate.proxy.shadow import read_report
    from turngate.settings import Settings
    from turngate.state.store import open_store

    url = args.state or os.environ.get("TURNGATE_STATE") or Settings().state
    scheme = url.split("://", 1)[0]
    if args.limit < 0 or args.examples < 0:
        print("turngate: --limit and --examples must not be negative", file=sys.stderr)
        return 2
    if scheme == "sqlite":
        # Opening a missing file would create an empty one: say so instead.
        path = url.removeprefix("sqlite://")
        file = Path(path.removeprefix("/") if path.startswith("/./") else path)
        if not file.is_file():
            print(f"turngate: no state file at {file}", file=sys.stderr)
            return 2

    async def read() -> ShadowReport:
        store = open_store(url)
        await store.open()
        try:
            return await read_report(store, limit=args.limit, examples=args.examples)
        finally:
            await store.close()

    try:
        report = asyncio.run(read())
    except Exception as exc:
        print(f"turngate: cannot read the shadow report ({scheme}): {exc}", file=sys.stderr)
        return 2
    if args.json:
        _print_json(report_json(report))
    else:
        print(format_report(report))
    return 0


def _print_json(value: object) -> None:
    sys.stdout.buffer.write(orjson.dumps(value, option=orjson.OPT_INDENT_2) + b"\n")


def _check(args: argparse.Namespace) -> int:
    from turngate.adapters.anthropic.headers import with_headers
    from turngate.adapters.base import RouteInfo
    from turngate.adapters.gemini.paths import CHAT_PATH, chat_route
    from turngate.checker import check_file, print_reports

    sent_with = with_headers(RouteInfo(), [args.anthropic_beta], args.anthropic_version)
    gemini_route = None
    if args.gemini_path is not None:
        found = CHAT_PATH.fullmatch(args.gemini_path.split("?", 1)[0])
        if found is None:
            print(
                f"turngate check: --gemini-path {args.gemini_path!r} is not a Gemini chat path "
                "(/v1beta/models/MODEL:generateContent, or a Vertex AI one)",
                file=sys.stderr,
            )
            return 2
        gemini_route = chat_route(found)
    reports = [
        report
        for path in args.files
        for report in check_file(path, args.api, sent_with, gemini_route=gemini_route)
    ]
    print_reports(reports, as_json=args.json, out=sys.stdout)
    if any(r.status == "ERROR" for r in reports):
        return 2
    return 1 if any(r.status == "REJECTED" for r in reports) else 0


if __name__ == "__main__":
    raise SystemExit(main())
