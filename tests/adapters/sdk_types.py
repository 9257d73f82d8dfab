"""Instances of the official SDKs' request types, built from their annotations.

The SDKs describe every block, item and part a client can send as a TypedDict (openai,
anthropic) or a pydantic model (google-genai). ``instance`` builds one of each: with only
its required keys, or with every key (``full=True``), each value the first choice its
annotation allows. ``kinds`` lists the members of a union alias. Whatever the SDK version
installed adds, these see it: no list of kinds is written here.
"""

from __future__ import annotations

import collections.abc
import enum
import types
import typing
from typing import Any, Literal, Union, get_args, get_origin

import typing_extensions

_WRAPPERS = {
    typing.Required,
    typing.NotRequired,
    typing.Annotated,
    typing_extensions.Required,
    typing_extensions.NotRequired,
    typing_extensions.Annotated,
}
_SEQUENCES = {
    list,
    collections.abc.Iterable,
    collections.abc.Sequence,
}
_MAPPINGS = {dict, collections.abc.Mapping}
# Values that make a block hang together where a key names another one.
_STRINGS = {
    "id": "call_sdk_1",
    "tool_use_id": "call_sdk_1",
    "call_id": "call_sdk_1",
    "tool_call_id": "call_sdk_1",
    "name": "lookup",
    "data": "ZGF0YQ==",
    "media_type": "image/png",
}


def bare(annotation: Any) -> Any:
    """``annotation`` without Required / NotRequired / Annotated around it."""
    while get_origin(annotation) in _WRAPPERS:
        annotation = get_args(annotation)[0]
    return annotation


def kinds(annotation: Any) -> list[Any]:
    """The members of a union (nested unions flattened), or the annotation itself."""
    annotation = bare(annotation)
    if get_origin(annotation) in (Union, types.UnionType):
        out: list[Any] = []
        for member in get_args(annotation):
            out.extend(kinds(member))
        return out
    return [annotation]


def item_kinds(annotation: Any) -> list[Any]:
    """The kinds of a field typed as a union of ``str`` and an iterable of a union."""
    out: list[Any] = []
    for member in kinds(annotation):
        if get_origin(member) in _SEQUENCES:
            out.extend(kinds(get_args(member)[0]))
    return out


def is_typeddict(annotation: Any) -> bool:
    return isinstance(annotation, type) and hasattr(annotation, "__optional_keys__")


def hints(annotation: Any) -> dict[str, Any]:
    return typing.get_type_hints(annotation, include_extras=True)


def literal(annotation: Any, key: str) -> Any:
    """The one value a TypedDict's ``key`` may take (its ``type`` or ``role``)."""
    return get_args(bare(hints(annotation)[key]))[0]


def _required(typed_dict: Any, name: str, hint: Any) -> bool:
    # Under `from __future__ import annotations` the class cannot see Required itself.
    wrapper = get_origin(hint)
    if wrapper in (typing.Required, typing_extensions.Required):
        return True
    optional = (typing.NotRequired, typing_extensions.NotRequired)
    return name in typed_dict.__required_keys__ and wrapper not in optional


def instance(annotation: Any, *, full: bool = False, key: str = "", depth: int = 0) -> Any:
    annotation = bare(annotation)
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        members = [m for m in get_args(annotation) if m is not type(None)]
        chosen = next((m for m in members if bare(m) is str), members[0])
        return instance(chosen, full=full, key=key, depth=depth)
    if origin in (Literal, typing_extensions.Literal):
        return get_args(annotation)[0]
    if annotation is str:
        return _STRINGS.get(key, "x")
    if annotation is bool:
        return False
    if annotation in (int, float):
        return annotation(1)
    if annotation is bytes:
        return b"x"
    if origin in _SEQUENCES:
        return [] if depth > 6 else [instance(get_args(annotation)[0], full=full, depth=depth + 1)]
    if origin in _MAPPINGS or annotation in (object, Any):
        return {}
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return list(annotation)[-1].value
    if is_typeddict(annotation):
        return {
            name: instance(hint, full=full, key=name, depth=depth + 1)
            for name, hint in hints(annotation).items()
            if full or _required(annotation, name, hint)
        }
    fields = getattr(annotation, "model_fields", None)
    if fields is not None:
        return {
            name: instance(field.annotation, full=full, key=name, depth=depth + 1)
            for name, field in fields.items()
            if full or field.is_required()
        }
    raise TypeError(f"no instance for {annotation!r} (key {key!r})")
