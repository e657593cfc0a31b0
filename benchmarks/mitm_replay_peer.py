"""``mitmdump -s`` script: answer each model call from a flowproof cassette, in order.

The plain-mitmproxy peer of benchmarks/single_flow.py: mitmdump's own start, ready and
stop around the same agent, with a replay that costs next to nothing (no matching: the
n-th request gets the n-th turn's recorded response), so what flowproof-run adds over
it is flowproof's own. ``--set bench_cassette=PATH``. Standard library and mitmproxy only.
"""

from __future__ import annotations

import json
from typing import Any

from mitmproxy import ctx, http
from mitmproxy.addonmanager import Loader


def _body(response: dict[str, Any]) -> bytes:
    if "events" in response:
        out = []
        for event in response["events"]:
            if "raw" in event:
                out.append(event["raw"])
                continue
            lines = [f"event: {event['event']}"] if event.get("event") else []
            lines += [f"data: {line}" for line in str(event.get("data", "")).split("\n")]
            out.append("\n".join(lines) + "\n\n")
        return "".join(out).encode()
    body = response.get("body")
    return body.encode() if isinstance(body, str) else json.dumps(body).encode()


class ReplayPeer:
    def __init__(self) -> None:
        self.answers: list[tuple[int, dict[str, str], bytes]] = []

    def load(self, loader: Loader) -> None:
        loader.add_option("bench_cassette", str, "", "the flowproof cassette whose turns are served in order")

    def configure(self, updated: set[str]) -> None:
        if "bench_cassette" in updated and ctx.options.bench_cassette:
            with open(ctx.options.bench_cassette, encoding="utf-8") as f:
                turns = json.load(f)["turns"]
            self.answers = [(t["response"]["status"], t["response"].get("headers", {}), _body(t["response"]))
                            for t in turns]

    def request(self, flow: http.HTTPFlow) -> None:
        status, headers, content = self.answers.pop(0) if self.answers else (599, {}, b"no turn left")
        flow.response = http.Response.make(status, content, headers)


addons = [ReplayPeer()]
