"""Builders for cassette turns and fake-addon scripts used by the runner tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from flowproof.divergence import Divergence, FieldChange


def chat_turn(index: int, *, text: str | None = None, call: tuple[str, dict] | None = None,
              user: str = "Book me a flight", system: str = "You book flights.") -> dict[str, Any]:
    """An openai-chat cassette turn answering with ``text`` or one tool ``call``."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    finish = "stop"
    if call is not None:
        name, args = call
        message["tool_calls"] = [{"id": f"call_{index}", "type": "function",
                                  "function": {"name": name, "arguments": json.dumps(args)}}]
        finish = "tool_calls"
    return {
        "index": index,
        "provider": "openai-chat",
        "request": {
            "method": "POST",
            "url": "https://api.openai.com/v1/chat/completions",
            "headers": {"content-type": "application/json"},
            "body_sha256": f"{index:064x}",
            "body": {"model": "gpt-4o", "messages": [
                {"role": "system", "content": system}, {"role": "user", "content": user}]},
        },
        "response": {
            "status": 200,
            "headers": {"content-type": "application/json"},
            "body": {"id": f"cmpl-{index}", "object": "chat.completion", "model": "gpt-4o",
                     "choices": [{"index": 0, "message": message, "finish_reason": finish}]},
        },
    }


def cassette_text(turns: list[dict[str, Any]], route: str = "proxy") -> str:
    """A format-1 cassette document holding ``turns``."""
    return json.dumps({"format": 1, "generator": "test", "route": route, "turns": turns}, indent=2) + "\n"


BOOKING_TURNS = [
    chat_turn(0, call=("search_flights", {"destination": "NBO"})),
    chat_turn(1, call=("create_booking", {"flight": {"id": "KQ311"}})),
    chat_turn(2, text="Your flight is booked: B-1042."),
]


def turn_events(turns: list[dict[str, Any]], mode: str = "replay") -> list[dict[str, Any]]:
    """request_started + turn events for each turn, as the addon writes them in ``mode``: a
    replayed turn is named by its place in the cassette (here its ``index``) and its body hash,
    a recorded or compared one is the whole live turn."""
    events = []
    for t in turns:
        events.append({"event": "request_started", "id": str(t["index"])})
        if mode == "replay":
            events.append({"event": "turn", "id": str(t["index"]), "mode": "replay", "index": t["index"],
                           "body_sha256": t["request"]["body_sha256"]})
        else:
            events.append({"event": "turn", "id": str(t["index"]), "mode": mode, "turn": t})
    return events


def divergence_event(call: str, path: str, recorded: Any, replayed: Any, closest: int = 0) -> dict[str, Any]:
    """A replay divergence at one body field, as the replaying addon logs it."""
    divergence = Divergence("unmatched", 1, closest, fields=(FieldChange(path, recorded, replayed),))
    return {"event": "divergence", "id": call, "divergence": divergence.to_json()}


def write_script(path: Path, **script: Any) -> Path:
    """Write a fake-addon script file and return its path."""
    path.write_text(json.dumps(script), encoding="utf-8")
    return path


SPEC = """\
name: Booking assistant books a flight
app: agent
agent:
  command: {command}
  timeout: {timeout}
tools:
  - name: search_flights
    result: {{ flights: [ {{ id: KQ311, dest: NBO }} ] }}
  - name: create_booking
steps:
  - prompt: Book me a flight to Nairobi tomorrow
  - assert_tool_call: search_flights where destination contains NBO
  - assert_tool_call: create_booking where flight.id equals KQ311
  - assert: reply contains booked
"""


def write_spec(directory: Path, command: str = "true", timeout: float = 20, name: str = "booking") -> Path:
    """A booking spec in ``directory`` whose agent runs ``command``."""
    path = directory / f"{name}.flow.yaml"
    path.write_text(SPEC.format(command=json.dumps(command), timeout=timeout), encoding="utf-8")
    return path
