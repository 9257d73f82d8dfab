"""Context admission: the boundary, computed from the real counter; the API's own error form."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import anthropic
import httpx2 as httpx
import openai
import orjson
import pytest
from google.genai import errors as genai_errors

from tests.adapters.anthropic_builders import scanned_pdf
from tests.fixtures_dir import COUNTS, FIXTURES_DIR, fixture_params, load_json, note_largest
from tests.graph.chat_builders import assistant, body, call, tool, user
from turngate.adapters import detect_api, get_adapter
from turngate.errors import ContextLengthExceeded
from turngate.graph.model import ApiName
from turngate.policies.admission import CONTEXT_ERRORS, admit
from turngate.policies.config import BUILTIN_POLICY, ModelEntry, PolicyFile
from turngate.policies.tokens import count_request, count_texts

GPT_4O_WINDOW = 128_000


def chat_request(max_tokens: int) -> dict[str, Any]:
    request = body(
        user("What is the weather in Paris?"),
        assistant(calls=[call("call_1")]),
        tool("call_1", "sunny, 21 °C"),
    )
    request["max_completion_tokens"] = max_tokens
    return request


def rendered_chat(request: dict[str, Any]) -> dict[str, Any]:
    adapter = get_adapter("openai_chat")
    return adapter.render_request(adapter.parse_request(request))


def admit_chat(request: dict[str, Any], config: PolicyFile = BUILTIN_POLICY) -> Any:
    rendered = rendered_chat(request)
    return admit(
        rendered,
        api="openai_chat",
        model=request["model"],
        max_output_tokens=request["max_completion_tokens"],
        config=config,
        policy=config.defaults,
    )


def prompt_tokens(api: ApiName, rendered: dict[str, Any], model: str) -> int:
    entry = BUILTIN_POLICY.model_entry(model)
    assert entry is not None
    return count_request(rendered, entry, BUILTIN_POLICY.media).total


def test_a_request_exactly_at_the_window_passes_and_one_token_over_is_refused():
    prompt = prompt_tokens("openai_chat", rendered_chat(chat_request(1)), "gpt-4o")
    assert 20 < prompt < 200
    at_window = admit_chat(chat_request(GPT_4O_WINDOW - prompt))
    assert at_window.status == "admitted"
    assert at_window.input_tokens == prompt
    assert at_window.input_tokens + at_window.output_tokens == GPT_4O_WINDOW
    with pytest.raises(ContextLengthExceeded) as caught:
        admit_chat(chat_request(GPT_4O_WINDOW - prompt + 1))
    error = caught.value
    assert (error.rule, error.status) == ("context_length_exceeded", 400)
    assert (error.input_tokens, error.output_tokens, error.limit) == (
        prompt,
        GPT_4O_WINDOW - prompt + 1,
        GPT_4O_WINDOW,
    )
    assert error.estimated is False
    assert error.message.startswith(
        f"This model's maximum context length is {GPT_4O_WINDOW} tokens. However, you requested "
        f"{GPT_4O_WINDOW + 1} tokens ({prompt} in the messages, "
    )


def test_one_more_token_of_text_crosses_the_same_boundary():
    request = chat_request(1)
    prompt = prompt_tokens("openai_chat", rendered_chat(request), "gpt-4o")
    request["max_completion_tokens"] = GPT_4O_WINDOW - prompt
    assert admit_chat(request).status == "admitted"
    # " Paris" is one o200k token; the count is of the final rendered body, so it shows.
    assert count_texts([" Paris"], "o200k_base") == [1]
    request["messages"][0]["content"] += " Paris"
    with pytest.raises(ContextLengthExceeded):
        admit_chat(request)


def test_tool_definitions_count():
    bare = chat_request(1)
    del bare["tools"]
    with_tools = prompt_tokens("openai_chat", rendered_chat(chat_request(1)), "gpt-4o")
    without = prompt_tokens("openai_chat", rendered_chat(bare), "gpt-4o")
    name_and_schema = count_texts(["get_weather", "city"], "o200k_base")
    assert with_tools - without > sum(name_and_schema)


def anthropic_request(max_tokens: int, text: str = "Two names for a pet pelican") -> dict[str, Any]:
    return {
        "model": "claude-haiku-4-5-20251001",
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": [{"type": "text", "text": text}]}],
        "tools": [{"name": "namer", "description": "", "input_schema": {"type": "object"}}],
    }


def test_claude_is_an_estimate_at_its_own_window_with_the_tool_prompt():
    entry = BUILTIN_POLICY.model_entry("claude-haiku-4-5-20251001")
    assert entry is not None
    assert (entry.context_window, entry.counting, entry.tool_overhead_tokens) == (
        200_000,
        "estimate",
        500,
    )
    count = count_request(anthropic_request(1), entry, BUILTIN_POLICY.media)
    assert count.tool_overhead == 500
    assert count.total >= 500 + count.text + count.structure

    def run(max_tokens: int) -> Any:
        return admit(
            anthropic_request(max_tokens),
            api="anthropic",
            model="claude-haiku-4-5-20251001",
            max_output_tokens=max_tokens,
            config=BUILTIN_POLICY,
            policy=BUILTIN_POLICY.defaults,
        )

    assert run(200_000 - count.total).status == "admitted"
    with pytest.raises(ContextLengthExceeded, match=r"^input length and `max_tokens` exceed") as c:
        run(200_000 - count.total + 1)
    assert c.value.estimated is True
    assert f"{count.total} + {200_000 - count.total + 1} > 200000" in c.value.message


def test_gemini_has_an_input_limit_apart_from_its_output():
    request = {"contents": [{"role": "user", "parts": [{"text": "hello " * 50}]}]}
    unscaled = ModelEntry(match="any", max_input_tokens=1, counting="estimate")
    tokens = count_request(request, unscaled, BUILTIN_POLICY.media).total
    config = PolicyFile.model_validate(
        {
            "models": [
                {"match": "gemini-tiny", "max_input_tokens": tokens, "counting": "estimate"},
                {"match": "gemini-tinier", "max_input_tokens": tokens - 1, "counting": "estimate"},
            ]
        }
    )
    kwargs: dict[str, Any] = {
        "api": "gemini",
        "max_output_tokens": 65_536,
        "config": config,
        "policy": config.defaults,
    }
    # factor 1.0 in these rows: the count is the o200k count itself.
    assert admit(request, model="gemini-tiny", **kwargs).status == "admitted"
    with pytest.raises(ContextLengthExceeded) as caught:
        admit(request, model="gemini-tinier", **kwargs)
    assert caught.value.message.startswith(
        f"The input token count ({tokens}) exceeds the maximum number of tokens allowed "
        f"({tokens - 1})."
    )


def test_unknown_models_and_disabled_admission_are_not_judged():
    config = PolicyFile.model_validate({"defaults": {"admission": {"enabled": False}}})
    huge = {"messages": [{"role": "user", "content": "x " * 300_000}]}
    kwargs: dict[str, Any] = {"api": "openai_chat", "max_output_tokens": None}
    assert (
        admit(huge, model="gpt-4o", config=config, policy=config.defaults, **kwargs).status
        == "disabled"
    )
    unknown = admit(
        huge, model="llama-3", config=BUILTIN_POLICY, policy=BUILTIN_POLICY.defaults, **kwargs
    )
    assert unknown.status == "unknown_model"
    with pytest.raises(ContextLengthExceeded, match="your messages resulted in"):
        admit(huge, model="gpt-4o", config=BUILTIN_POLICY, policy=BUILTIN_POLICY.defaults, **kwargs)


def test_a_default_output_reserve_applies_when_the_request_sets_none():
    request = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    prompt = prompt_tokens("openai_chat", request, "gpt-4o")
    config = PolicyFile.model_validate(
        {"defaults": {"admission": {"default_output_tokens": GPT_4O_WINDOW - prompt + 1}}}
    )
    with pytest.raises(ContextLengthExceeded):
        admit(
            request,
            api="openai_chat",
            model="gpt-4o",
            max_output_tokens=None,
            config=config,
            policy=config.defaults,
        )


def test_media_and_opaque_payloads_are_charged_by_estimate_not_as_base64_text():
    png = base64.b64encode(b"\x89PNG" + bytes(30_000)).decode()
    entry = BUILTIN_POLICY.model_entry("claude-sonnet-4-5")
    assert entry is not None
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}}
    thinking = {"type": "thinking", "thinking": "hmm", "signature": "Eu" + "A" * 4000}
    redacted = {"type": "redacted_thinking", "data": "B" * 4000}
    request = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 100,
        "messages": [
            {"role": "user", "content": [image]},
            {"role": "assistant", "content": [thinking, redacted]},
        ],
    }
    count = count_request(request, entry, BUILTIN_POLICY.media)
    assert count.media == BUILTIN_POLICY.media.image_tokens
    # The signature costs nothing; the redacted thinking its decoded size / 4.
    assert count.encrypted == 4000 * 3 // 4 // 4
    assert count.text < 60


def recorded_prompt_tokens(request_path: Path) -> int | None:
    """The input tokens the provider counted for the request as sent (Anthropic's
    ``message_start``, not the final usage, which adds what server tools fetched)."""
    stem = str(request_path)[: -len(".request.json")]
    response = Path(stem + ".json")
    if response.exists():
        usages = _usages(orjson.loads(response.read_bytes()))
        return usages[-1] if usages else None
    response = Path(stem + ".sse")
    if not response.exists():
        return None
    found: list[int] = []
    for line in response.read_bytes().splitlines():
        payload = line.removeprefix(b"data:").strip()
        if payload.startswith(b"{"):
            data = orjson.loads(payload)
            if data.get("type") == "message_start":
                return int(data["message"]["usage"]["input_tokens"])
            found.extend(_usages(data))
    return found[-1] if found else None


def _usages(data: dict[str, Any]) -> list[int]:
    out = []
    usage = data.get("usage") or (data.get("response") or {}).get("usage")
    if isinstance(usage, dict):
        value = usage.get("prompt_tokens", usage.get("input_tokens"))
        if isinstance(value, int):
            out.append(value)
    meta = data.get("usageMetadata")
    if isinstance(meta, dict) and isinstance(meta.get("promptTokenCount"), int):
        out.append(meta["promptTokenCount"])
    return out


# Input the provider adds that no offline count can see: hosted tools put their results (web
# search pages) or prompts into the input, and Responses adds a hidden prompt (~200 tokens)
# for function tools.
PROVIDER_ADDED_INPUT = {
    "openai-responses/pai-web-search-hosted-tool.request.json": "hosted web_search results",
    "openai-responses/pai-function-call-turn1.request.json": "hidden function-tool prompt",
    "openai-responses/pai-function-call-turn2.request.json": "hidden function-tool prompt",
    "anthropic/pai-web-search-citations.request.json": "hosted web_search results",
    "anthropic/pai-tool-search-mixed.request.json": "hosted tool_search prompt",
    "gemini/pai-code-execution.request.json": "hosted code_execution prompt",
}
_DEFAULT_MODELS = {"gemini": "gemini-2.5-flash"}


@pytest.mark.parametrize("path", fixture_params("*/*.request.json"))
def test_counts_never_fall_below_what_the_provider_billed(path: Path):
    recorded = recorded_prompt_tokens(path)
    if recorded is None:
        pytest.skip("no usage recorded for this request")
    request = load_json(path)
    assert isinstance(request, dict)
    api = detect_api(request)
    assert api is not None
    model = request.get("model") or _DEFAULT_MODELS[api]
    adapter = get_adapter(api)
    rendered = adapter.render_request(adapter.parse_request(request))
    counted = prompt_tokens(api, rendered, model)
    name = str(path.relative_to(FIXTURES_DIR))
    ratio_key = f"admission count / provider's input count x100, largest, {api}"
    note_largest(ratio_key, counted * 100 // recorded)
    if name in PROVIDER_ADDED_INPUT:
        assert counted < recorded, f"{name}: no longer under-counted; drop it from the list"
        return
    assert counted >= recorded, f"{name}: counted {counted} < billed {recorded}"
    COUNTS["admission counts at or above the billed input"] += 1


def _error_of(api: ApiName) -> ContextLengthExceeded:
    config = PolicyFile.model_validate(
        {"models": [{"match": "tiny*", "context_window": 10, "max_input_tokens": 5}]}
    )
    request = {"messages": [{"role": "user", "content": "hello there, how are you today?"}]}
    with pytest.raises(ContextLengthExceeded) as caught:
        admit(
            request,
            api=api,
            model="tiny-1",
            max_output_tokens=1,
            config=config,
            policy=config.defaults,
        )
    return caught.value


@pytest.mark.parametrize("api", ["openai_chat", "openai_responses"])
def test_openai_sdks_raise_bad_request_with_code_context_length_exceeded(api: ApiName):
    error = _error_of(api)
    rendered = get_adapter(api).render_error(error)
    form = CONTEXT_ERRORS[api]
    assert rendered.status == form.status == 400
    assert rendered.headers["Turngate-Rejection"] == "context_length_exceeded"
    assert rendered.body["error"]["type"] == form.kind
    assert rendered.body["error"]["code"] == form.code == "context_length_exceeded"
    client = openai.OpenAI(api_key="k", base_url="http://127.0.0.1:9/v1")
    response = httpx.Response(
        rendered.status,
        json=rendered.body,
        request=httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions"),
    )
    raised = client._make_status_error_from_response(response)
    assert isinstance(raised, openai.BadRequestError)
    assert raised.code == "context_length_exceeded"
    phrase = (
        "maximum context length is 5 tokens. However, your messages resulted in"
        if api == "openai_chat"
        else "Your input exceeds the context window of this model"
    )
    assert phrase in raised.message


def test_anthropic_sdk_raises_bad_request_worded_as_prompt_is_too_long():
    error = _error_of("anthropic")
    rendered = get_adapter("anthropic").render_error(error)
    assert rendered.status == CONTEXT_ERRORS["anthropic"].status
    assert rendered.body["error"]["type"] == CONTEXT_ERRORS["anthropic"].kind
    client = anthropic.Anthropic(api_key="k", base_url="http://127.0.0.1:9")
    response = httpx.Response(
        rendered.status,
        json=rendered.body,
        headers=rendered.headers,
        request=httpx.Request("POST", "http://127.0.0.1:9/v1/messages"),
    )
    raised = client._make_status_error_from_response(response)
    assert type(raised) is anthropic.BadRequestError
    assert raised.body["error"]["message"].startswith("prompt is too long: ")  # type: ignore[index]
    assert "> 5 maximum" in str(raised)


def test_google_genai_raises_client_error_invalid_argument():
    error = _error_of("gemini")
    rendered = get_adapter("gemini").render_error(error)
    assert rendered.status == 400
    assert rendered.body["error"]["status"] == CONTEXT_ERRORS["gemini"].kind
    response = httpx.Response(
        rendered.status,
        json=rendered.body,
        request=httpx.Request("POST", "http://127.0.0.1:9/v1beta/models/m:generateContent"),
    )
    with pytest.raises(genai_errors.ClientError) as caught:
        genai_errors.APIError.raise_for_response(response)
    assert (caught.value.code, caught.value.status) == (400, "INVALID_ARGUMENT")
    assert (caught.value.message or "").startswith("The input token count (")


@pytest.mark.parametrize(
    ("document", "at_most"),
    [
        # 8 MB of scanned pages: 4 pages, not the 262k tokens its size would say.
        (scanned_pdf(4, 8 * 1024 * 1024), 4 * BUILTIN_POLICY.media.file_page_tokens),
        # No page to be read (object streams, or not a PDF): by its decoded size, as before.
        (b"%PDF-1.7\n" + bytes(64_000), 64_009 // BUILTIN_POLICY.media.file_bytes_per_token),
    ],
    ids=["scanned-pdf", "pages-unreadable"],
)
def test_a_pdf_is_charged_by_its_pages_when_they_can_be_read(document: bytes, at_most: int):
    entry = BUILTIN_POLICY.model_entry("claude-haiku-4-5")
    assert entry is not None
    data = base64.b64encode(document).decode()
    block = {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": data},
    }
    request = {
        "model": "claude-haiku-4-5",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": [block]}],
    }
    count = count_request(request, entry, BUILTIN_POLICY.media)
    assert BUILTIN_POLICY.media.file_tokens <= count.media <= at_most
