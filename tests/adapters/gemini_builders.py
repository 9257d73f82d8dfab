"""Gemini request bodies written the way the API takes them, for the gemini adapter tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.fixtures_dir import FIXTURES_DIR
from turngate.adapters.base import RouteInfo
from turngate.adapters.gemini import ADAPTER, CAPABILITIES
from turngate.graph.model import MessageSequence
from turngate.graph.validator import Verdict, validate


def text(value: str, **extra: Any) -> dict[str, Any]:
    return {"text": value, **extra}


def call(name: str, args: Any = None, id: str | None = None, **extra: Any) -> dict[str, Any]:
    function_call: dict[str, Any] = {"name": name, "args": {} if args is None else args}
    if id is not None:
        function_call["id"] = id
    return {"functionCall": function_call, **extra}


def response(name: str, output: Any = "ok", id: str | None = None, **extra: Any) -> dict[str, Any]:
    function_response: dict[str, Any] = {"name": name, "response": {"output": output}}
    if id is not None:
        function_response["id"] = id
    return {"functionResponse": function_response, **extra}


def user(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "parts": list(parts)}


def model(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"role": "model", "parts": list(parts)}


def body(*contents: dict[str, Any], system: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"contents": list(contents)}
    if system is not None:
        out["systemInstruction"] = {"parts": [{"text": system}]}
    return out


def parse(request: dict[str, Any]) -> MessageSequence:
    return ADAPTER.parse_request(request, RouteInfo(model="gemini-2.5-flash", stream=False))


def check(request: dict[str, Any]) -> Verdict:
    return validate(parse(request), CAPABILITIES)


def recorded_route(path: Path) -> RouteInfo:
    """Model and streaming of a recorded request, from the URL MANIFEST.tsv gives for it."""
    name = f"{path.parent.name}/{path.name}"
    for line in (FIXTURES_DIR / "MANIFEST.tsv").read_text().splitlines():
        columns = line.split("\t")
        if columns[0] == name:
            url = columns[-1].split()[1].rstrip(";")
            model, method = url.split("/models/", 1)[1].split("?")[0].split(":")
            return RouteInfo(model=model, stream=method == "streamGenerateContent")
    raise LookupError(f"{name} is not in MANIFEST.tsv")
