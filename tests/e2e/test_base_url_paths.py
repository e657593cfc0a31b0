"""Every path form a provider's own clients send on `agent.route: base_url` is a model call.

The runner hands each client its base URL (`OPENAI_BASE_URL` with `/v1`,
`ANTHROPIC_BASE_URL` and `GOOGLE_GEMINI_BASE_URL` without a version), and each
client appends its own path. The provider table (`flowproof/wire/providers.py`)
lists those paths: the API's own (`paths`) and a client's alias of one
(`base_url_aliases`: the Vercel AI SDK, on which opencode is built, posts to
`ANTHROPIC_BASE_URL + /messages`). Here a real client speaks each form, through a
real mitmdump, against the fake model: recorded, with the call forwarded and
stored under the API's own path, then replayed.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from flowproof.testing import FakeModelServer, Reply
from flowproof.wire.providers import PROVIDERS, provider

from .conftest import AGENTS, Flowproof, write_spec

Fake = Callable[..., FakeModelServer]
API_HOSTS = ("api.openai.com", "api.anthropic.com", "generativelanguage.googleapis.com")
SCRIPT = [Reply.tool_call("get_weather", {"city": "Nairobi"}), Reply.text("It is sunny in Nairobi, 26 degrees.")]
LOOP_SCRIPT = [Reply.tool_call("book_flight", {"flight": "KQ311", "seats": 2}),
               Reply.text("You are booked on KQ311, reference B-1042.")]


@dataclass(frozen=True)
class Client:
    """A real client that speaks one form: its command (``{node}`` is tests/e2e/node_agent),
    its environment, the tool its flow calls and the fake model's replies."""

    command: str
    env: tuple[tuple[str, str], ...]
    tool: str
    script: tuple[Reply, ...]

    @property
    def needs_node(self) -> bool:
        return "{node}" in self.command


LOOP = f"{shlex.quote(sys.executable)} {shlex.quote(str(AGENTS / 'api_loop_agent.py'))}"


def loop_agent(api: str, stream: bool, **env: str) -> Client:
    """`api_loop_agent.py` on the official Python SDK of ``api``."""
    return Client(LOOP, (("FP_API", api), ("FP_STREAM", "1" if stream else "0"), *env.items()), "book_flight",
                  tuple(LOOP_SCRIPT))


AI_SDK = Client("node {node}/ai_sdk_agent.mjs", (), "get_weather", tuple(SCRIPT))

#: (provider, the path its client sends, the API path it is recorded as) -> a client sending it.
FORMS: dict[tuple[str, str, str], Client] = {
    ("openai-chat", "/v1/chat/completions", "/v1/chat/completions"): loop_agent("openai-chat", stream=False),
    ("openai-responses", "/v1/responses", "/v1/responses"): loop_agent("openai-responses", stream=True),
    ("anthropic", "/v1/messages", "/v1/messages"): loop_agent("anthropic", stream=True),
    ("anthropic", "/messages", "/v1/messages"): AI_SDK,
    **{("gemini", f"/{version}/models/{{model}}:{method}", f"/{version}/models/{{model}}:{method}"):
       loop_agent("gemini", stream=method.startswith("stream"),
                  **({"FP_GEMINI_API_VERSION": version} if version != "v1" else {}))
       for version in ("v1", "v1beta") for method in ("generateContent", "streamGenerateContent")},
}


def table_forms() -> set[tuple[str, str, str]]:
    forms = {(p.name, path, path) for p in PROVIDERS for path in p.paths}
    forms |= {(p.name, alias, api) for p in PROVIDERS for alias, api in p.base_url_aliases}
    return forms


def test_every_path_form_in_the_provider_table_has_a_client_here() -> None:
    """A form added to the table without a client speaking it here fails, and a client here
    for a form the table does not list fails too."""
    assert table_forms() == set(FORMS)


@pytest.mark.parametrize("form", sorted(FORMS), ids=lambda f: f"{f[0]} {f[1]}")
def test_a_client_speaking_the_form_records_and_replays(
    form: tuple[str, str, str], tmp_path: Path, flowproof: Flowproof, fake_model: Fake,
    request: pytest.FixtureRequest,
) -> None:
    name, _sent, api_path = form
    client = FORMS[form]
    command = client.command
    if client.needs_node:
        command = command.replace("{node}", shlex.quote(str(request.getfixturevalue("node_agent"))))
    env = ["  env:", *(f"    {k}: '{v}'" for k, v in client.env)] if client.env else []
    spec = write_spec(tmp_path / "form.flow.yaml", "\n".join([
        "name: base-URL path form", "agent:", f"  command: {command}", "  route: base_url", "  timeout: 60",
        *env, "cassette: form.cassette.json", "steps:", "  - prompt: Book KQ311 for two, and what is the weather?",
        f"  - assert_tool_call: {client.tool}", "",
    ]))
    server = fake_model(list(client.script))
    upstream = [arg for host in API_HOSTS for arg in ("--upstream", f"{host}={server.url}")]
    keys = {"GEMINI_API_KEY": "fake-gemini-key"} if name == "gemini" else {}
    recorded = flowproof.run(spec, *upstream, "--record", keys=True, **keys)
    assert recorded.code == 0, recorded.output
    want = api_path.replace("{model}", "gemini-2.0-flash")
    # Forwarded upstream under the API's own path, whichever form the client sent.
    assert [r.path for r in server.model_requests] == [want, want]
    server.stop()
    cassette = json.loads((tmp_path / "form.cassette.json").read_text())
    host = provider(name).base_url_host
    assert [t["request"]["url"].split("?")[0] for t in cassette["turns"]] == [f"https://{host}{want}"] * 2
    assert {t["provider"] for t in cassette["turns"]} == {name}
    replayed = flowproof.run(spec, "--json")
    assert replayed.code == 0, replayed.output
    assert replayed.report()["flows"][0]["turns"] == 2
