"""Tools in real turns: the real server and model, the built-ins and an operator's MCP server from the config
(tests/data/inventory_mcp_server.py, started by the LLM worker through the `mcp` package), over Socket.IO."""

from __future__ import annotations

import sys

import pytest
import yaml

from tests.harness.client import RecordingClient
from tests.harness.server import ROOT, running_server
from tests.test_conversation import of_turn, turn_done

INVENTORY = str(ROOT / "tests" / "data" / "inventory_mcp_server.py")


@pytest.fixture(scope="module")
def tool_server(tmp_path_factory, vllm_api_starting):
    """Generating on the vLLM API server (the same model; prompts, tools and their calls are the worker's own):
    the LLM worker loads no engine of its own."""
    tmp = tmp_path_factory.mktemp("tools")
    config = yaml.safe_load((ROOT / "configs" / "default.yaml").read_text())
    config["tools"]["mcp_servers"] = [{"name": "inventory", "command": sys.executable, "args": [INVENTORY]},
                                      {"name": "broken", "command": str(tmp / "no-such-server")}]
    (tmp / "tools.yaml").write_text(yaml.safe_dump(config))
    with running_server(tmp, "--config", str(tmp / "tools.yaml"), "--llm_url", vllm_api_starting.url) as server:
        yield server


def test_health_lists_the_tools_and_the_mcp_server_that_failed(tool_server):
    detail = tool_server.get("/health").json()["workers"]["llm"]["detail"]
    assert "tools get_current_time, calculate, stock_count, opening_hours" in detail
    assert "MCP server broken failed" in detail


def test_arithmetic_is_answered_by_the_tool_and_the_page_hears_of_the_call(tool_server):
    client = RecordingClient(tool_server.url).connect()
    try:
        client.sio.emit("client_settings", {"timezone": "Asia/Tokyo"})
        assert client.wait_event("client_settings", 10)
        client.sio.emit("text_input", {"text": "What is 347 times 29?"})
        assert turn_done(client, 1), client.events
        (call,) = of_turn(client, "tool_call", 1)
        assert (call["name"], call["result"], call["ok"]) == ("calculate", "10063", True)
        (reply,) = of_turn(client, "response_text", 1)
        assert "10063" in reply["text"].replace(",", ""), reply  # not the model's own 9823
        assert client.named("audio"), "the answer is spoken"
        metrics = tool_server.get("/metrics").text
        assert 'vita_tool_calls_total{outcome="ok",tool="calculate"} 1.0' in metrics

        client.sio.emit("client_settings", {"tools": []})  # the user switched tools off
        assert client.wait_for(lambda evs: any(n == "client_settings" and d["tools"] == [] for _, n, d in evs), 10)
        client.sio.emit("text_input", {"text": "What is 12 times 12?"})
        assert turn_done(client, 2), client.events
        assert of_turn(client, "tool_call", 2) == []
    finally:
        client.close()


def test_bad_client_settings_are_refused_readably(tool_server):
    client = RecordingClient(tool_server.url).connect()
    try:
        client.sio.emit("client_settings", {"timezone": "Mars/Olympus"})
        assert client.wait_for(lambda evs: any(n == "error" and d.get("code") == "bad_settings"
                                               for _, n, d in evs), 10)
        client.sio.emit("client_settings", {"tools": "all"})
        assert client.wait_for(lambda evs: sum(n == "error" and d.get("code") == "bad_settings"
                                               for _, n, d in evs) == 2, 10)
    finally:
        client.close()
