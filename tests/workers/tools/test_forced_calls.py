"""A required call's opening and grammar (pure: no model; the grammar built as vLLM's xgrammar backend builds it)."""

from __future__ import annotations

import json
import time

import jsonschema
import pytest
import xgrammar

from vita.messages import ClientTool
from workers.tools.forced_calls import call_schema, forced_call

pytestmark = pytest.mark.fast

ORDER = ClientTool("order_status", "", json.dumps({"type": "object", "properties": {"id": {"type": "string"}},
                                                   "required": ["id"]}))
WEATHER = ClientTool("weather", "", "")  # no schema: any arguments object
QWEN_TEMPLATE = "... <tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call> ..."


def test_the_grammar_takes_a_call_of_a_required_function_only_with_arguments_of_its_schema():
    schema = call_schema([ORDER, WEATHER])
    for call in ({"name": "order_status", "arguments": {"id": "4512"}}, {"name": "weather", "arguments": {"x": 1}}):
        jsonschema.validate(call, schema)
    for wrong in ({"name": "order_status", "arguments": {}}, {"name": "lookup", "arguments": {}},
                  {"name": "weather"}, {"name": "weather", "arguments": {}, "more": 1}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(wrong, schema)
    only = call_schema([ORDER])  # one function: no choice to make
    assert only["properties"]["name"] == {"const": "order_status"}


def test_a_call_is_forced_only_of_declared_functions_and_where_the_template_writes_tagged_calls():
    forced = forced_call(("weather",), (ORDER, WEATHER), QWEN_TEMPLATE)
    assert forced.opening == "<tool_call>\n"
    jsonschema.validate({"name": "weather", "arguments": {}}, json.loads(forced.schema))
    with pytest.raises(jsonschema.ValidationError):  # declared, but not the one required
        jsonschema.validate({"name": "order_status", "arguments": {"id": "1"}}, json.loads(forced.schema))
    assert forced_call((), (ORDER,), QWEN_TEMPLATE) is None  # nothing required
    assert forced_call(("lookup",), (ORDER,), QWEN_TEMPLATE) is None  # not declared
    assert forced_call(("order_status",), (ORDER,), "{{ messages }}") is None  # a template without tagged calls
    assert forced_call(("order_status",), (ORDER,), None) is None


def grammar_of(schema: dict) -> None:
    xgrammar.Grammar.from_json_schema(json.dumps(schema))  # raises what vLLM would refuse the request with


def test_a_schema_with_defs_and_refs_keeps_its_shape_where_the_call_nests_it():
    """Pydantic writes nested models as $defs; nested under the call's "arguments", "#/$defs/..." would point
    nowhere (vLLM refused every such request)."""
    cart = ClientTool("add_to_cart", "", json.dumps({
        "$defs": {"Item": {"type": "object", "properties": {"sku": {"type": "string"},
                                                              "count": {"type": "integer"}},
                           "required": ["sku"]}},
        "type": "object", "properties": {"items": {"type": "array", "items": {"$ref": "#/$defs/Item"}},
                                         "note": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
        "required": ["items"]}))
    schema = call_schema([cart])
    assert "$ref" not in json.dumps(schema)
    grammar_of(schema)
    jsonschema.validate({"name": "add_to_cart", "arguments": {"items": [{"sku": "a1", "count": 2}], "note": None}},
                        schema)
    with pytest.raises(jsonschema.ValidationError):  # an item without its required sku
        jsonschema.validate({"name": "add_to_cart", "arguments": {"items": [{"count": 2}]}}, schema)


def test_what_makes_a_grammar_slow_or_large_is_left_to_the_client():
    """A pattern with a long repeat took xgrammar 20 s to build, on the engine's thread; a recursive schema, or
    one of thousands of nodes, would grow without end when inlined."""
    slow = ClientTool("slow", "", json.dumps({"type": "object", "properties": {
        "code": {"type": "string", "pattern": "(a|b|c|d|e|f|g|h){1,4000}", "minLength": 3, "format": "uuid"}}}))
    recursive = ClientTool("tree", "", json.dumps({"type": "object", "properties": {
        "name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#"}}}}))
    wide = ClientTool("wide", "", json.dumps({"type": "object", "properties": {
        f"p{i}": {"type": "object", "properties": {f"q{j}": {"type": "string"} for j in range(50)}}
        for i in range(50)}}))
    for tool in (slow, recursive, wide):
        started = time.monotonic()
        schema = call_schema([tool])
        grammar_of(schema)
        assert time.monotonic() - started < 1.0, tool.name
        assert "pattern" not in json.dumps(schema) and "format" not in json.dumps(schema)
    assert call_schema([wide])["properties"]["arguments"] == {"type": "object"}  # too large: any object
    jsonschema.validate({"name": "tree", "arguments": {"name": "a", "children": [{"name": "b", "children": []}]}},
                        call_schema([recursive]))


def test_refs_copied_out_where_they_are_used_do_not_make_the_grammar_large():
    """20 $refs to one enum of 60 long strings (a 30 KB event) once became a 3.5 MB grammar schema."""
    values = [f"{i:03d}" + "v" * 477 for i in range(60)]
    bomb = ClientTool("bomb", "", json.dumps({
        "type": "object", "$defs": {"e": {"enum": values}},
        "properties": {**{f"p{i}": {"$ref": "#/$defs/e"} for i in range(20)}, "again": {"$ref": "#"}}}))
    started = time.monotonic()
    schema = call_schema([bomb, ORDER])
    assert len(json.dumps(schema)) < 20_000
    grammar_of(schema)
    assert time.monotonic() - started < 10.0  # (the 3.5 MB grammar was still compiling after 40 s)
    jsonschema.validate({"name": "order_status", "arguments": {"id": "7"}}, schema)  # the small one keeps its shape
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"name": "order_status", "arguments": {}}, schema)


def test_a_schema_that_is_not_one_takes_any_arguments_object():
    for parameters in ("", "not json", "[1, 2]", json.dumps({"type": "array"})):
        schema = call_schema([ClientTool("f", "", parameters)])
        grammar_of(schema)
        jsonschema.validate({"name": "f", "arguments": {"x": 1}}, schema)


def test_an_object_of_hundreds_of_optional_properties_takes_any_arguments_object():
    """The grammar compiler's time grows with the square of an object's optional properties (0.85 s for 390)."""
    from workers.tools.schema_shape import MAX_PROPERTIES

    wide = ClientTool("wide", "", json.dumps({"type": "object", "properties": {
        f"p{i}": {"type": "string"} for i in range(MAX_PROPERTIES + 1)}}))
    schema = call_schema([wide, ORDER])
    assert len(json.dumps(schema)) < 1_000
    jsonschema.validate({"name": "wide", "arguments": {"anything": 1}}, schema)
    jsonschema.validate({"name": "order_status", "arguments": {"id": "7"}}, schema)
