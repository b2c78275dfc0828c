"""A required call's opening and grammar (pure: no model)."""

from __future__ import annotations

import json

import jsonschema
import pytest

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
