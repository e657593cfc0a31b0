"""A hook of flowproof's own layers run inline (`flowproof.addon.inline`): what mitmproxy's
connection handler would have run for it, in the same order, and the layer goes on at once
unless something in it waited."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from mitmproxy.proxy.layers.http._hooks import HttpRequestHook
from mitmproxy.test import taddons, tflow

from flowproof.addon.inline import FlowproofRestHook, fire, rest


class Notes:
    """An addon that notes each hook it sees, by name."""

    def __init__(self, seen: list[str], label: str) -> None:
        self.seen, self.label = seen, label
        self.name = f"notes {label}"  # mitmproxy keys addons by name

    def request(self, flow: Any) -> None:
        self.seen.append(f"{self.label} request")

    def update(self, flows: Any) -> None:
        self.seen.append(f"{self.label} update")


class Waits:
    """An addon whose ``request`` waits on ``gate`` before it notes its end."""

    def __init__(self, seen: list[str], gate: asyncio.Event) -> None:
        self.seen, self.gate = seen, gate

    async def request(self, flow: Any) -> None:
        self.seen.append("waits start")
        await self.gate.wait()
        self.seen.append("waits end")


def commands_of(hook: Any) -> list[Any]:
    return list(fire(hook))


class Root:
    """What the root addon does for `FlowproofRestHook`, under the name mitmproxy calls."""

    flowproof_rest = staticmethod(rest)


async def test_a_hook_whose_handlers_return_at_once_runs_whole_and_yields_nothing() -> None:
    seen: list[str] = []
    with taddons.context(Notes(seen, "a"), Notes(seen, "b")):
        assert commands_of(HttpRequestHook(tflow.tflow())) == []
    # Every handler in chain order, then ``update`` for the flow: mitmproxy's own order.
    assert seen == ["a request", "b request", "a update", "b update"]


async def test_the_same_handlers_run_as_through_mitmproxy_s_lifecycle() -> None:
    inline: list[str] = []
    handled: list[str] = []
    with taddons.context(Notes(inline, "a"), Notes(inline, "b")):
        commands_of(HttpRequestHook(tflow.tflow()))
    with taddons.context(Notes(handled, "a"), Notes(handled, "b")) as tctx:
        await tctx.master.addons.handle_lifecycle(HttpRequestHook(tflow.tflow()))
    assert inline == handled


async def test_a_handler_that_waits_leaves_the_rest_to_a_hook_that_ends_when_it_does() -> None:
    seen: list[str] = []
    gate = asyncio.Event()
    with taddons.context(Waits(seen, gate), Notes(seen, "after"), Root()) as tctx:
        [command] = commands_of(HttpRequestHook(tflow.tflow()))
        assert isinstance(command, FlowproofRestHook) and command.blocking
        assert seen == ["waits start"] and not command.task.done()
        # As mitmproxy's connection handler runs the hook the layer yielded.
        waiting = asyncio.ensure_future(tctx.master.addons.handle_lifecycle(command))
        await asyncio.sleep(0)
        assert not waiting.done()
        gate.set()
        await asyncio.wait_for(waiting, 5)
    assert seen == ["waits start", "waits end", "after request", "after update"]


async def test_an_intercepted_flow_is_waited_for_until_it_is_resumed() -> None:
    class Intercepts:
        def request(self, flow: Any) -> None:
            flow.intercept()

    flow = tflow.tflow()
    with taddons.context(Intercepts(), Root()) as tctx:
        [command] = commands_of(HttpRequestHook(flow))
        assert isinstance(command, FlowproofRestHook)
        waiting = asyncio.ensure_future(tctx.master.addons.handle_lifecycle(command))
        await asyncio.sleep(0.01)
        assert not waiting.done()
        flow.resume()
        await asyncio.wait_for(waiting, 5)


async def test_a_handler_s_error_is_logged_and_the_hook_ends(caplog: pytest.LogCaptureFixture) -> None:
    seen: list[str] = []

    class Breaks:
        def request(self, flow: Any) -> None:
            raise RuntimeError("broken handler")

    caplog.set_level(logging.ERROR)
    with taddons.context(Breaks(), Notes(seen, "after")):
        assert commands_of(HttpRequestHook(tflow.tflow())) == []
    assert "broken handler" in caplog.text
    assert seen == ["after request", "after update"]


def test_without_a_running_loop_the_hook_itself_is_yielded_for_its_driver_to_answer() -> None:
    seen: list[str] = []
    hook = HttpRequestHook(tflow.tflow())
    with taddons.context(Notes(seen, "a")):
        assert commands_of(hook) == [hook]
    assert seen == []
