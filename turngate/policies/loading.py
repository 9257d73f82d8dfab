"""Loading the policy file: YAML text + environment overrides -> PolicyFile, or every problem
found, each naming where it is (``file:line:column`` and the field path, or the variable).

Environment overrides: ``TURNGATE_POLICY__<PATH>=<YAML value>``, where ``__`` separates the
path's parts, names are case-insensitive and list items are numbered from 0:

    TURNGATE_POLICY__DEFAULTS__MODE=shadow
    TURNGATE_POLICY__DEFAULTS__ADMISSION__ENABLED=false
    TURNGATE_POLICY__ROUTES__0__ROLE_FORGERY=refuse
    TURNGATE_POLICY__DEFAULTS__ADAPTER_VERSIONS__OPENAI_CHAT=1

They are applied to the parsed file before validation, so a bad value is reported against
the variable that set it.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pydantic
import yaml

from turngate.graph.model import ApiName
from turngate.policies.config import PolicyFile
from turngate.policies.modes import Mode
from turngate.policies.pins import AdapterRegistry

ENV_PREFIX = "TURNGATE_POLICY__"
PathPart = str | int
Loc = tuple[PathPart, ...]


@dataclass(frozen=True)
class Problem:
    path: str
    message: str
    # Where: "file:line:column", or "env NAME" for a value set by a variable.
    where: str

    def __str__(self) -> str:
        field = f"{self.path}: " if self.path else ""
        return f"{self.where}: {field}{self.message}"


class PolicyConfigError(ValueError):
    """A policy file turngate refuses to start with; ``problems`` says each thing and where."""

    def __init__(self, source: str, problems: list[Problem]):
        self.source = source
        self.problems = tuple(problems)
        count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
        lines = "\n".join(f"  {p}" for p in problems)
        super().__init__(f"invalid policy {source} ({count}):\n{lines}")


def load_policy(path: str | Path, environ: Mapping[str, str]) -> PolicyFile:
    """Read and validate the policy file at ``path`` (``--config``)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyConfigError(str(path), [Problem("", str(exc), str(path))]) from exc
    return parse_policy(text, source=str(path), environ=environ)


def load_serving_policy(
    path: str | Path | None,
    environ: Mapping[str, str],
    *,
    mode: Mode | None = None,
    registry: AdapterRegistry | None = None,
) -> PolicyFile:
    """The policy ``turngate serve`` runs with: the file at ``path`` (``--config``), or the
    built-in policy when there is none, with the environment's overrides; ``mode``
    (``--mode``) replaces ``defaults.mode``. Adapter pins are checked against ``registry``."""
    if path is None:
        text, source = "", "built-in policy"
    else:
        source = str(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise PolicyConfigError(source, [Problem("", str(exc), source)]) from exc
    config = parse_policy(text, source=source, environ=environ, registry=registry)
    return config if mode is None else config.with_default_mode(mode)


def parse_policy(
    text: str,
    *,
    source: str = "<policy>",
    environ: Mapping[str, str] | None = None,
    registry: AdapterRegistry | None = None,
) -> PolicyFile:
    node, data = _compose(text, source)
    overrides: dict[Loc, str] = {}
    problems: list[Problem] = []
    if environ:
        data, overrides, problems = apply_environment(data, environ)
    if problems:
        raise PolicyConfigError(source, problems)
    try:
        config = PolicyFile.model_validate(data)
    except pydantic.ValidationError as exc:
        problems = [_problem(error, node, source, overrides) for error in exc.errors()]
        raise PolicyConfigError(source, problems) from None
    if registry is not None:
        problems = [
            _located(loc, message, node, source, overrides)
            for loc, message in _pin_problems(config, registry)
        ]
        if problems:
            raise PolicyConfigError(source, problems)
    return config


def _pin_problems(config: PolicyFile, registry: AdapterRegistry) -> list[tuple[Loc, str]]:
    """Pins naming no registered version, or one that does not load: a typo fails at start."""
    pinned: list[tuple[Loc, dict[ApiName, str]]] = [
        (("defaults", "adapter_versions"), config.defaults.adapter_versions)
    ]
    for index, rule in enumerate(config.routes):
        if "adapter_versions" in rule.model_fields_set:
            pinned.append((("routes", index, "adapter_versions"), rule.adapter_versions))
    problems: list[tuple[Loc, str]] = []
    for loc, versions in pinned:
        for api, version in versions.items():
            try:
                registry.get(api, version).adapter()
            except (LookupError, ImportError, AttributeError) as exc:
                problems.append(((*loc, api), str(exc)))
    return problems


def _compose(text: str, source: str) -> tuple[yaml.Node | None, Any]:
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is not None:
            _check_duplicate_keys(node, source)
        data = loader.construct_document(node) if node is not None else {}
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = _where(source, mark)
        raise PolicyConfigError(source, [Problem("", f"not YAML: {exc.problem}", where)]) from None
    except yaml.YAMLError as exc:
        raise PolicyConfigError(source, [Problem("", f"not YAML: {exc}", source)]) from None
    finally:
        loader.dispose()
    if data is None:
        data = {}
    if not isinstance(data, dict):
        where = _where(source, node.start_mark if node is not None else None)
        kind = type(data).__name__
        raise PolicyConfigError(source, [Problem("", f"must be a mapping, not a {kind}", where)])
    return node, data


def _check_duplicate_keys(node: yaml.Node, source: str) -> None:
    # PyYAML keeps the last of two equal keys silently; a policy must say one thing.
    problems: list[Problem] = []
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, yaml.MappingNode):
            seen: dict[object, yaml.Node] = {}
            for key, value in current.value:
                if isinstance(key, yaml.ScalarNode):
                    first = seen.get(key.value)
                    if first is not None:
                        line = first.start_mark.line + 1
                        problems.append(
                            Problem(
                                str(key.value),
                                f"duplicate key (first at line {line})",
                                _where(source, key.start_mark),
                            )
                        )
                    seen[key.value] = key
                stack.append(value)
        elif isinstance(current, yaml.SequenceNode):
            stack.extend(current.value)
    if problems:
        raise PolicyConfigError(source, problems)


def apply_environment(
    data: dict[str, Any], environ: Mapping[str, str]
) -> tuple[dict[str, Any], dict[Loc, str], list[Problem]]:
    """``data`` with every ``TURNGATE_POLICY__…`` variable applied, in name order."""
    out: dict[str, Any] = _copy(data)
    overrides: dict[Loc, str] = {}
    problems: list[Problem] = []
    for name in sorted(environ):
        if not name.upper().startswith(ENV_PREFIX):
            continue
        parts = name[len(ENV_PREFIX) :].split("__")
        loc: Loc = tuple(int(p) if p.isdigit() else p.lower() for p in parts)
        where = f"env {name}"
        if any(part == "" for part in loc):
            problems.append(Problem("", "empty path part (use __ between names)", where))
            continue
        try:
            value = yaml.safe_load(environ[name])
        except yaml.YAMLError:
            problems.append(Problem(path_text(loc), "value is not YAML", where))
            continue
        problem = _set(out, loc, value)
        if problem:
            problems.append(Problem(path_text(loc), problem, where))
        else:
            overrides[loc] = name
    return out, overrides, problems


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _set(data: dict[str, Any], loc: Loc, value: Any) -> str | None:
    target: Any = data
    for depth, part in enumerate(loc):
        last = depth == len(loc) - 1
        if isinstance(part, int):
            if not isinstance(target, list):
                return f"{path_text(loc[:depth]) or 'the file'} is not a list"
            if part > len(target):
                return f"{path_text(loc[:depth])} has {len(target)} entries"
            if part == len(target):
                # One past the end adds an entry: TURNGATE_POLICY__ROUTES__2__… on two routes.
                target.append(value if last else [] if isinstance(loc[depth + 1], int) else {})
                if last:
                    return None
        elif not isinstance(target, dict):
            return f"{path_text(loc[:depth])} is not a mapping"
        if last:
            target[part] = value
            return None
        if isinstance(part, str) and part not in target:
            target[part] = [] if isinstance(loc[depth + 1], int) else {}
        target = target[part]
    return None


def _problem(
    error: Mapping[str, Any], node: yaml.Node | None, source: str, overrides: Mapping[Loc, str]
) -> Problem:
    loc: Loc = tuple(error["loc"])
    return _located(
        loc, _message(error), node, source, overrides, at_key=error["type"] == "extra_forbidden"
    )


def _located(
    loc: Loc,
    message: str,
    node: yaml.Node | None,
    source: str,
    overrides: Mapping[Loc, str],
    *,
    at_key: bool = False,
) -> Problem:
    for prefix_len in range(len(loc), 0, -1):
        variable = overrides.get(loc[:prefix_len])
        if variable is not None:
            return Problem(path_text(loc), message, f"env {variable}")
    if node is None:
        return Problem(path_text(loc), message, source)
    found, extra_key = _locate(node, loc)
    mark = (extra_key if at_key and extra_key else found).start_mark
    return Problem(path_text(loc), message, _where(source, mark))


def _locate(node: yaml.Node, loc: Loc) -> tuple[yaml.Node, yaml.Node | None]:
    """The deepest node ``loc`` reaches, and the key node of its last step (if a mapping)."""
    current, key_node = node, None
    for part in loc:
        if isinstance(current, yaml.MappingNode) and isinstance(part, str):
            step = next(((k, v) for k, v in current.value if k.value == part), None)
            if step is None:
                break
            key_node, current = step
        elif isinstance(current, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(current.value):
                break
            current, key_node = current.value[part], None
        else:
            break
    return current, key_node


def _message(error: Mapping[str, Any]) -> str:
    kind = error["type"]
    loc = error["loc"]
    if kind == "extra_forbidden":
        name = str(loc[-1]) if loc else ""
        close = difflib.get_close_matches(name, _FIELD_NAMES, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        return f"unknown field{hint}"
    if kind == "missing":
        return "required field is missing"
    message = str(error["msg"])
    if kind.startswith("value_error"):
        message = message.removeprefix("Value error, ")
    given = error.get("input")
    if isinstance(given, str | int | float | bool) and len(repr(given)) <= 60:
        message += f" (got {given!r})"
    return message


def path_text(loc: Loc) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _where(source: str, mark: yaml.Mark | None) -> str:
    if mark is None:
        return source
    return f"{source}:{mark.line + 1}:{mark.column + 1}"


def _field_names() -> list[str]:
    names: set[str] = set()
    schema = PolicyFile.model_json_schema()
    for definition in [schema, *schema.get("$defs", {}).values()]:
        names.update(definition.get("properties", {}))
    return sorted(names)


_FIELD_NAMES = _field_names()
