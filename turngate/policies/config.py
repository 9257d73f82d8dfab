"""The policy file: one YAML document validated by these pydantic models.

    version: 1
    defaults: {mode, role_forgery, stream_text, tool_arguments, trust, admission, shadow,
               adapter_versions}
    routes:   [{match: {prefix, model}, <any field of defaults>}, ...]   first match wins
    models:   [{match, context_window, max_input_tokens, encoding, counting, factor,
                tool_overhead_tokens}, ...]                              before the built-ins
    media:    {image_tokens, audio_tokens, ...}                          admission estimates
    shadow_records: 1000                                                 kept for the report

A route lists only what it changes; everything else comes from ``defaults`` (nested sections
merge field by field). Loading, line numbers and environment overrides are in
``policies/loading.py``; docs/policies.md describes every field.
"""

from __future__ import annotations

import fnmatch
from functools import cached_property
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from turngate.graph.codec import digest_of
from turngate.graph.model import ApiName, Trust
from turngate.graph.validator import ForgeryPolicy
from turngate.policies.models import BUILTIN_MODELS
from turngate.policies.modes import Mode

Prefix = Literal["openai", "anthropic", "gemini", "openai_chat", "openai_responses"]
Encoding = Literal["o200k_base", "cl100k_base"]
SCHEMA_ID = "https://turngate.dev/schemas/policy.v1.json"

_PREFIX_APIS: dict[str, frozenset[str]] = {
    "openai": frozenset({"openai_chat", "openai_responses"}),
    "anthropic": frozenset({"anthropic"}),
    "gemini": frozenset({"gemini"}),
    "openai_chat": frozenset({"openai_chat"}),
    "openai_responses": frozenset({"openai_responses"}),
}


def _version_text(value: Any) -> Any:
    # `openai_chat: 1` in YAML is an int; an adapter version is a name.
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


AdapterVersion = Annotated[str, BeforeValidator(_version_text), Field(min_length=1)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TrustPolicy(_Section):
    """The trust label of each source of content."""

    system: Trust = "trusted"
    developer: Trust = "trusted"
    user: Trust = "untrusted"
    assistant: Trust = "untrusted"
    tool_result: Trust = Field(default="untrusted", description="tool results and their parts")
    snippet: Trust = Field(default="untrusted", description="retrieved snippets")
    compression: Trust = Field(default="untrusted", description="compression/compaction artifacts")


class AdmissionPolicy(_Section):
    enabled: bool = Field(default=True, description="count the rendered request before sending")
    default_output_tokens: int = Field(
        default=0,
        ge=0,
        description="output tokens reserved when the request sets no max output tokens",
    )
    count_tokens_endpoint: bool = Field(
        default=False,
        description="let the proxy ask Anthropic/Gemini count_tokens (an extra upstream call) "
        "instead of estimating",
    )


class ShadowPolicy(_Section):
    max_paths: int = Field(
        default=50, ge=1, le=1000, description="JSON paths kept per semantic diff"
    )
    max_example_chars: int = Field(
        default=200, ge=16, le=10_000, description="characters kept of each example value"
    )
    values: Literal["clipped", "hashed"] = Field(
        default="clipped",
        description="keep example values clipped, or only their digest and length (for "
        "prompts that must not be stored)",
    )


class Policy(_Section):
    """Everything one request is handled under, once defaults and its route are merged."""

    mode: Mode = "enforce"
    role_forgery: ForgeryPolicy = Field(
        default="flag",
        description="role markers in untrusted text: allow (ignore), flag (response header), "
        "refuse (400 role_forgery)",
    )
    stream_text: Literal["preview", "buffer"] = Field(
        default="preview",
        description="relay text deltas at once (preview) or only committed blocks",
    )
    tool_arguments: Literal["schema", "json"] = Field(
        default="schema",
        description="check streamed tool arguments against the tool's JSON Schema, or only "
        "that they parse",
    )
    trust: TrustPolicy = TrustPolicy()
    admission: AdmissionPolicy = AdmissionPolicy()
    shadow: ShadowPolicy = ShadowPolicy()
    adapter_versions: dict[ApiName, AdapterVersion] = Field(
        default_factory=dict,
        description="adapter version pinned per API; an API left out uses the current one",
    )

    @cached_property
    def digest(self) -> str:
        """Bound into each dispatch manifest (``policyDigest``)."""
        return digest_of(self.model_dump(mode="json"))


class RouteMatch(_Section):
    prefix: Prefix | None = Field(
        default=None, description="openai, anthropic, gemini, or an API name (openai_chat…)"
    )
    model: str | None = Field(
        default=None, min_length=1, description="glob on the model name, e.g. 'claude-*'"
    )

    @model_validator(mode="after")
    def _needs_a_condition(self) -> RouteMatch:
        if self.prefix is None and self.model is None:
            raise ValueError("a route match needs a prefix, a model pattern, or both")
        return self

    def matches(self, api: ApiName, model: str | None) -> bool:
        if self.prefix is not None and api not in _PREFIX_APIS[self.prefix]:
            return False
        if self.model is None:
            return True
        return model is not None and any(
            fnmatch.fnmatchcase(name, self.model.lower()) for name in _model_names(model)
        )


class RouteRule(Policy):
    """A route override: ``match`` plus the fields of ``defaults`` it changes."""

    match: RouteMatch


class ModelEntry(_Section):
    match: str = Field(min_length=1, description="glob on the model name, e.g. 'gpt-4o*'")
    context_window: int | None = Field(
        default=None, gt=0, description="input + max output tokens must fit in this"
    )
    max_input_tokens: int | None = Field(
        default=None, gt=0, description="input tokens alone must fit in this (Gemini's input limit)"
    )
    encoding: Encoding = "o200k_base"
    counting: Literal["exact", "estimate"] = Field(
        default="exact", description="exact: the model's own encoding; estimate: o200k × factor"
    )
    factor: float = Field(default=1.0, ge=1.0, le=4.0, description="multiplier of an estimate")
    tool_overhead_tokens: int = Field(
        default=0,
        ge=0,
        description="added once when the request defines tools (hidden tool prompt)",
    )

    @model_validator(mode="after")
    def _needs_a_limit(self) -> ModelEntry:
        if self.context_window is None and self.max_input_tokens is None:
            raise ValueError("a model entry needs context_window, max_input_tokens, or both")
        return self

    def matches(self, model: str) -> bool:
        return any(fnmatch.fnmatchcase(name, self.match.lower()) for name in _model_names(model))


class MediaEstimates(_Section):
    """Tokens charged for content that is not text: images, audio, video, files, ciphertext."""

    image_tokens: int = Field(default=1600, ge=0, description="per image")
    audio_tokens: int = Field(default=1000, ge=0, description="per audio clip, at least")
    audio_bytes_per_token: int = Field(default=500, gt=0, description="inline audio, decoded size")
    video_tokens: int = Field(default=8000, ge=0, description="per video, at least")
    video_bytes_per_token: int = Field(default=1000, gt=0)
    file_tokens: int = Field(default=1600, ge=0, description="per file/document, at least")
    file_bytes_per_token: int = Field(default=32, gt=0, description="inline files, decoded size")
    file_page_tokens: int = Field(
        default=3000,
        ge=0,
        description="per page of an inline PDF whose pages can be counted, instead of its size",
    )
    encrypted_bytes_per_token: int = Field(
        default=4,
        gt=0,
        description="encrypted reasoning carried back (encrypted_content, redacted)",
    )


# Model names whose row model_entry remembers.
_MODEL_MEMO = 1024


class PolicyFile(_Section):
    version: Literal[1] = 1
    defaults: Policy = Policy()
    routes: list[RouteRule] = Field(default_factory=list)
    models: list[ModelEntry] = Field(default_factory=list)
    builtin_models: bool = Field(
        default=True, description="look up the built-in table after `models`"
    )
    media: MediaEstimates = MediaEstimates()
    shadow_records: int = Field(
        default=1000,
        ge=1,
        le=100_000,
        description="shadow records kept in the state store for the report; the oldest are dropped",
    )

    def policy_for(self, api: ApiName, model: str | None) -> Policy:
        """The policy of the first route matching (api, model), merged over ``defaults``."""
        for rule, policy in zip(self.routes, self._route_policies, strict=True):
            if rule.match.matches(api, model):
                return policy
        return self.defaults

    def all_policies(self) -> tuple[Policy, ...]:
        """``defaults`` and every route's merged policy (what a startup check must see)."""
        return (self.defaults, *self._route_policies)

    def model_entry(self, model: str | None) -> ModelEntry | None:
        if model is None:
            return None
        known = self._entries_by_model
        if model in known:
            return known[model]
        found = next((entry for entry in self._model_table if entry.matches(model)), None)
        # Every request asks for its model's row; names come from clients, so the memo is
        # bounded (past it, the table is searched each time).
        if len(known) < _MODEL_MEMO:
            known[model] = found
        return found

    def with_default_mode(self, mode: Mode) -> PolicyFile:
        """A copy whose ``defaults.mode`` is ``mode`` (``--mode``); routes keep their own."""
        # Validated anew, not copied: a copy would keep the routes merged over the old defaults.
        data = self.model_dump(exclude_unset=True)
        data.setdefault("defaults", {})["mode"] = mode
        return PolicyFile.model_validate(data)

    @cached_property
    def _route_policies(self) -> tuple[Policy, ...]:
        base = self.defaults.model_dump()
        return tuple(
            Policy.model_validate(
                deep_merged(base, rule.model_dump(exclude_unset=True, exclude={"match"}))
            )
            for rule in self.routes
        )

    @cached_property
    def _entries_by_model(self) -> dict[str, ModelEntry | None]:
        return {}

    @cached_property
    def _model_table(self) -> tuple[ModelEntry, ...]:
        builtin = (
            tuple(ModelEntry.model_validate(row) for row in BUILTIN_MODELS)
            if self.builtin_models
            else ()
        )
        return (*self.models, *builtin)


def deep_merged(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        current = out.get(key)
        if isinstance(value, dict) and isinstance(current, dict):
            out[key] = deep_merged(current, value)
        else:
            out[key] = value
    return out


def _model_names(model: str) -> tuple[str, ...]:
    """The name as sent, and its base name: ``models/gemini-2.5-pro`` -> ``gemini-2.5-pro``,
    ``ft:gpt-4o-2024-08-06:org::id`` -> ``gpt-4o-2024-08-06``."""
    name = model.lower()
    base = name.rsplit("/", 1)[-1]
    if base.startswith("ft:"):
        base = base.split(":")[1]
    return (name,) if base == name else (name, base)


def policy_schema() -> dict[str, Any]:
    """The JSON Schema of the policy file, as published by docs/policies.md."""
    schema = PolicyFile.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = SCHEMA_ID
    schema["title"] = "turngate policy file (version 1)"
    return schema


BUILTIN_POLICY = PolicyFile()
