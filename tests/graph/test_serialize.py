"""The published JSON form and JSON Schema of MessageSequence.v1."""

from __future__ import annotations

from pathlib import Path

import fastjsonschema
import orjson
import pydantic
import pytest

from tests.fixtures_dir import fixture_params, load_json
from tests.graph.chat_builders import assistant, body, call, tool, user
from turngate.adapters.openai_chat import ADAPTER
from turngate.graph.serialize import from_json, sequence_schema, to_json

VALIDATE = fastjsonschema.compile(sequence_schema())


@pytest.mark.parametrize("path", fixture_params("openai-chat/*.request.json"))
def test_recorded_graphs_match_the_published_schema_and_load_back(path: Path):
    seq = ADAPTER.parse_request(load_json(path))  # type: ignore[arg-type]
    data = orjson.loads(orjson.dumps(to_json(seq)))
    VALIDATE(data)
    loaded = from_json(data)
    assert loaded == seq
    assert loaded.sequence_digest == data["sequenceDigest"] == seq.sequence_digest


def test_digests_are_canonical_and_change_with_content():
    one = ADAPTER.parse_request(body(user("hi"), assistant(calls=[call("c1")]), tool("c1")))
    same = ADAPTER.parse_request(body(user("hi"), assistant(calls=[call("c1")]), tool("c1")))
    other = ADAPTER.parse_request(body(user("hi"), assistant(calls=[call("c1")]), tool("c1", "x")))
    assert one.sequence_digest == same.sequence_digest
    assert one.sequence_digest != other.sequence_digest
    assert one.sequence_digest.startswith("sha256:")
    assert len(one.sequence_digest) == 71
    block = one.messages[0].blocks[0]
    assert block.digest == same.messages[0].blocks[0].digest


def test_a_graph_with_a_kind_this_version_does_not_know_fails_to_load():
    data = orjson.loads(orjson.dumps(to_json(ADAPTER.parse_request(body(user("hi"))))))
    data["messages"][0]["blocks"][0]["kind"] = "hologram"
    with pytest.raises(pydantic.ValidationError):
        from_json(data)
    with pytest.raises(fastjsonschema.JsonSchemaException):
        VALIDATE(data)


def test_edges_pair_calls_with_results():
    seq = ADAPTER.parse_request(
        body(user("hi"), assistant(calls=[call("a"), call("b")]), tool("b", "2"), tool("a", "1"))
    )
    edges = {e.call_id: e for e in seq.edges}
    assert edges["a"].result_block_id == "m3.b0"
    assert edges["b"].result_block_id == "m2.b0"
    assert edges["a"].result_status == "success"
    assert edges["a"].schema_digest == seq.tools[0].schema_digest
    assert seq.conversation_revision == 1
