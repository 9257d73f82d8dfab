"""The policy file: the example loads, each bad config says what and where, routes, env."""

from __future__ import annotations

from pathlib import Path

import fastjsonschema
import pytest
import yaml

from turngate.policies.config import BUILTIN_POLICY, PolicyFile, policy_schema
from turngate.policies.loading import PolicyConfigError, load_policy, parse_policy

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "turngate.yaml"


def problems_of(text: str, environ: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(PolicyConfigError) as caught:
        parse_policy(text, source="t.yaml", environ=environ)
    return [str(p) for p in caught.value.problems]


def test_the_example_file_loads_and_says_what_it_says():
    config = load_policy(EXAMPLE, {})
    assert config.defaults.mode == "enforce-no-tools"
    assert config.defaults.adapter_versions == {"openai_chat": "1"}
    claude = config.policy_for("anthropic", "claude-sonnet-4-5")
    assert (claude.mode, claude.role_forgery) == ("shadow", "refuse")
    rag = config.policy_for("openai_chat", "gpt-4.1-mini")
    assert (rag.mode, rag.trust.snippet) == ("enforce", "trusted")
    assert rag.trust.tool_result == "untrusted"
    assert rag.admission.default_output_tokens == 4096
    # A file row wins over the built-in table; the built-ins still answer the rest.
    entry = config.model_entry("claude-sonnet-4-5-20250929")
    assert entry is not None
    assert entry.context_window == 1_000_000
    builtin = config.model_entry("gpt-4o-2024-08-06")
    assert builtin is not None
    assert builtin.context_window == 128_000


def test_the_published_schema_accepts_the_example_and_refuses_a_bad_mode():
    check = fastjsonschema.compile(policy_schema())
    data = yaml.safe_load(EXAMPLE.read_text())
    check(data)
    data["defaults"]["mode"] = "enforced"
    with pytest.raises(fastjsonschema.JsonSchemaException):
        check(data)
    assert policy_schema()["$id"] == "https://turngate.dev/schemas/policy.v1.json"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "defaults:\n  mode: enforced\n",
            "t.yaml:2:9: defaults.mode: Input should be 'shadow', 'enforce-no-tools' or "
            "'enforce' (got 'enforced')",
        ),
        (
            "defaults:\n  trust:\n    tool_results: trusted\n",
            "t.yaml:3:5: defaults.trust.tool_results: unknown field; did you mean 'tool_result'?",
        ),
        (
            "defaults:\n  rolle_forgery: refuse\n",
            "t.yaml:2:3: defaults.rolle_forgery: unknown field; did you mean 'role_forgery'?",
        ),
        (
            "routes:\n  - match: {prefix: openai}\n  - match: {prefix: azure}\n",
            "t.yaml:3:21: routes[1].match.prefix: Input should be 'openai', 'anthropic', "
            "'gemini', 'openai_chat' or 'openai_responses' (got 'azure')",
        ),
        (
            "routes:\n  - mode: shadow\n",
            "t.yaml:2:5: routes[0].match: required field is missing",
        ),
        (
            "routes:\n  - match: {}\n",
            "t.yaml:2:12: routes[0].match: a route match needs a prefix, a model pattern, or both",
        ),
        (
            "models:\n  - match: my-model\n    context_window: lots\n",
            "t.yaml:3:21: models[0].context_window: Input should be a valid integer, unable to "
            "parse string as an integer (got 'lots')",
        ),
        (
            "models:\n  - match: my-model\n",
            "t.yaml:2:5: models[0]: a model entry needs context_window, max_input_tokens, or both",
        ),
        (
            "defaults:\n  admission:\n    default_output_tokens: -1\n",
            "t.yaml:3:28: defaults.admission.default_output_tokens: Input should be greater than "
            "or equal to 0 (got -1)",
        ),
        ("version: 2\n", "t.yaml:1:10: version: Input should be 1 (got 2)"),
        ("defaults:\n  mode: shadow\n  mode: enforce\n", "t.yaml:3:3: mode: duplicate key (first"),
        ("defaults: [mode\n", "t.yaml:2:1: not YAML: expected ',' or ']'"),
        ("- mode: shadow\n", "t.yaml:1:1: must be a mapping, not a list"),
    ],
)
def test_each_kind_of_bad_config_names_the_line_column_and_field(text: str, expected: str):
    problems = problems_of(text)
    assert len(problems) == 1
    assert problems[0].startswith(expected)


def test_every_problem_of_a_file_is_reported_at_once():
    text = "defaults:\n  mode: enforced\n  role_forgery: maybe\nroutes:\n  - match: {}\n"
    problems = problems_of(text)
    assert [p.split(": ")[0] for p in problems] == ["t.yaml:2:9", "t.yaml:3:17", "t.yaml:5:12"]
    with pytest.raises(PolicyConfigError, match=r"invalid policy t\.yaml \(3 problems\)"):
        parse_policy(text, source="t.yaml")


def test_a_missing_file_is_a_config_error_naming_the_path(tmp_path: Path):
    with pytest.raises(PolicyConfigError, match=r"nope\.yaml"):
        load_policy(tmp_path / "nope.yaml", {})


def test_an_empty_file_is_the_built_in_policy():
    assert parse_policy("") == BUILTIN_POLICY
    assert BUILTIN_POLICY.defaults.mode == "enforce"


def test_the_first_matching_route_wins_and_merges_over_defaults_field_by_field():
    config = parse_policy(
        """
defaults:
  mode: shadow
  trust: {user: trusted}
  adapter_versions: {openai_chat: "1"}
routes:
  - match: {prefix: openai_responses}
    mode: enforce
  - match: {prefix: openai, model: "gpt-4o*"}
    mode: enforce-no-tools
    trust: {tool_result: trusted}
    adapter_versions: {openai_responses: "1"}
  - match: {model: "claude-opus-*"}
    role_forgery: refuse
  - match: {prefix: anthropic}
    role_forgery: allow
"""
    )
    responses = config.policy_for("openai_responses", "gpt-4o")
    assert responses.mode == "enforce"
    chat = config.policy_for("openai_chat", "gpt-4o-mini")
    assert chat.mode == "enforce-no-tools"
    # Nested sections merge: the route's field, the defaults' others.
    assert (chat.trust.user, chat.trust.tool_result) == ("trusted", "trusted")
    assert chat.adapter_versions == {"openai_chat": "1", "openai_responses": "1"}
    # Model glob not matching: falls through to defaults.
    assert config.policy_for("openai_chat", "gpt-5") == config.defaults
    assert config.policy_for("openai_chat", None) == config.defaults
    assert config.policy_for("anthropic", "claude-opus-4-7").role_forgery == "refuse"
    assert config.policy_for("anthropic", "claude-haiku-4-5").role_forgery == "allow"
    # A model pattern with no prefix matches on any API; a Gemini path model matches bare.
    assert config.policy_for("gemini", "models/claude-opus-x").role_forgery == "refuse"
    assert config.policy_for("gemini", "gemini-2.5-pro") == config.defaults
    # The digest bound into manifests tells the policies apart.
    assert len({chat.digest, responses.digest, config.defaults.digest}) == 3


def test_environment_overrides_apply_to_the_file_and_win():
    text = "defaults:\n  mode: enforce\nroutes:\n  - match: {prefix: gemini}\n    mode: shadow\n"
    config = parse_policy(
        text,
        environ={
            "TURNGATE_POLICY__DEFAULTS__MODE": "enforce-no-tools",
            "TURNGATE_POLICY__DEFAULTS__ADMISSION__ENABLED": "false",
            "TURNGATE_POLICY__DEFAULTS__ADAPTER_VERSIONS__OPENAI_CHAT": "1",
            "TURNGATE_POLICY__ROUTES__0__ROLE_FORGERY": "refuse",
            "TURNGATE_POLICY__ROUTES__1__MATCH__PREFIX": "anthropic",
            "TURNGATE_POLICY__ROUTES__1__MODE": "shadow",
            "TURNGATE_MODE": "ignored: not a policy variable",
        },
    )
    assert config.defaults.mode == "enforce-no-tools"
    assert config.defaults.admission.enabled is False
    assert config.defaults.adapter_versions == {"openai_chat": "1"}
    gemini = config.policy_for("gemini", "gemini-2.5-pro")
    assert (gemini.mode, gemini.role_forgery) == ("shadow", "refuse")
    assert config.policy_for("anthropic", "claude-x").mode == "shadow"


def test_a_bad_environment_override_is_reported_against_its_variable():
    problems = problems_of(
        "defaults: {mode: shadow}\n",
        {"TURNGATE_POLICY__DEFAULTS__ROLE_FORGERY": "sometimes"},
    )
    assert problems == [
        "env TURNGATE_POLICY__DEFAULTS__ROLE_FORGERY: defaults.role_forgery: Input should be "
        "'allow', 'flag' or 'refuse' (got 'sometimes')"
    ]
    problems = problems_of("routes: []\n", {"TURNGATE_POLICY__ROUTES__3__MODE": "shadow"})
    assert problems == [
        "env TURNGATE_POLICY__ROUTES__3__MODE: routes[3].mode: routes has 0 entries"
    ]


def test_the_command_line_mode_sets_the_default_and_routes_keep_their_own():
    config = parse_policy(
        "routes:\n  - match: {prefix: gemini}\n    mode: enforce\n"
        "  - match: {prefix: anthropic}\n    role_forgery: refuse\n"
    )
    # Resolve once before, as a running proxy would have.
    assert config.policy_for("anthropic", "claude-x").mode == "enforce"
    shadowed = config.with_default_mode("shadow")
    assert shadowed.defaults.mode == "shadow"
    assert shadowed.policy_for("openai_chat", "gpt-4o").mode == "shadow"
    assert shadowed.policy_for("gemini", "gemini-2.5-pro").mode == "enforce"
    claude = shadowed.policy_for("anthropic", "claude-x")
    assert (claude.mode, claude.role_forgery) == ("shadow", "refuse")


def test_model_lookup_uses_base_names_and_globs():
    assert BUILTIN_POLICY.model_entry("gpt-4o-2024-08-06").context_window == 128_000  # type: ignore[union-attr]
    ft = BUILTIN_POLICY.model_entry("ft:gpt-4.1-mini-2025-04-14:acme::abc")
    assert ft is not None
    assert ft.context_window == 1_047_576
    gemini = BUILTIN_POLICY.model_entry("models/gemini-2.5-flash")
    assert gemini is not None
    assert (gemini.max_input_tokens, gemini.counting) == (1_048_576, "estimate")
    assert BUILTIN_POLICY.model_entry("llama-3-70b") is None
    assert PolicyFile(builtin_models=False).model_entry("gpt-4o") is None


def test_the_docs_show_the_example_file_as_it_is():
    docs = EXAMPLE.parents[1] / "docs" / "policies.md"
    assert EXAMPLE.read_text().rstrip() in docs.read_text()


def test_a_model_row_is_the_same_asked_again_and_past_the_memo():
    config = load_policy(EXAMPLE, {})
    first = config.model_entry("claude-sonnet-4-5-20250929")
    assert config.model_entry("claude-sonnet-4-5-20250929") is first
    assert config.model_entry("no-such-model") is None
    # Model names come from clients: thousands of unknown names, then the known ones still.
    for n in range(3000):
        assert config.model_entry(f"no-such-model-{n}") is None
    assert config.model_entry("claude-sonnet-4-5-20250929") is first
    late = config.model_entry("gpt-4o-2024-08-06")
    assert late is not None
    assert late.context_window == 128_000
    # Another file's rows are its own: the memo is per policy file.
    assert BUILTIN_POLICY.model_entry("claude-sonnet-4-5-20250929") != first
