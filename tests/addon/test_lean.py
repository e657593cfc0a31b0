"""Tests for flowproof.addon.lean: a proxy the runner started drops the default addons it never uses."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
from mitmproxy import exceptions, hooks, http, options
from mitmproxy.addons import clientplayback, dumper, save
from mitmproxy.http import HTTPFlow
from mitmproxy.log import LegacyLogEvents
from mitmproxy.proxy.layers.http import HttpRequestHook
from mitmproxy.test import taddons, tflow
from mitmproxy.tools.dump import DumpMaster

from flowproof.addon import Flowproof, lean
from flowproof.addon.lean import UNUSED, drop_legacy_log, drop_unused, skip_idle


def kinds(chain: list[object]) -> set[str]:
    return {f"{type(a).__module__}.{type(a).__qualname__}" for a in chain}


class TestDropUnused:
    async def test_mitmdump_s_chain_loses_exactly_the_unused_ones(self) -> None:
        """Every name in the list is one of mitmdump's addons (a rename in mitmproxy fails
        here), and what shapes the agent's traffic stays."""
        master = DumpMaster(options.Options(), with_termlog=False, with_dumper=True)
        before = kinds(master.addons.chain)
        assert UNUSED <= before
        dropped = drop_unused(master.addons)
        assert len(dropped) == len(UNUSED) and "Save" in dropped and "Dumper" in dropped
        after = kinds(master.addons.chain)
        assert after == before - UNUSED
        for kept in ("core.Core", "proxyserver.Proxyserver", "tlsconfig.TlsConfig", "next_layer.NextLayer",
                     "script.ScriptLoader", "update_alt_svc.UpdateAltSvc", "block.Block",
                     "disable_h2c.DisableH2C", "onboarding.Onboarding", "errorcheck.ErrorCheck"):
            assert f"mitmproxy.addons.{kept}" in after
        assert master.addons.get("save") is None and master.addons.get("core") is not None

    async def test_an_addon_whose_done_is_a_coroutine_stays(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """mitmproxy's remove runs ``done`` synchronously and refuses a coroutine: such an addon
        is left in place rather than failing the proxy's start."""
        monkeypatch.setattr(lean, "UNUSED", UNUSED | {"mitmproxy.addons.clientplayback.ClientPlayback"})
        master = DumpMaster(options.Options(), with_termlog=False, with_dumper=False)
        assert "ClientPlayback" not in drop_unused(master.addons)
        assert master.addons.get("clientplayback") is not None


class Recorder:
    """An addon that notes each call of its hooks in a shared list."""

    def __init__(self, name: str, calls: list[str], *, halts: bool = False):
        self.name, self.calls, self.halts = name, calls, halts

    def request(self, flow: HTTPFlow) -> None:
        self.calls.append(f"{self.name}.request")
        if self.halts:
            raise exceptions.AddonHalt


class Silent:
    """No hooks, no children: the kind of addon `skip_idle` passes over."""

    def __init__(self, name: str) -> None:
        self.name = name


class Parent:
    """No hook of its own; its children have: it must still be entered."""

    def __init__(self, name: str, children: list[object]) -> None:
        self.name, self.addons = name, children


class Failing:
    def __init__(self, name: str = "failing") -> None:
        self.name = name

    def request(self, flow: HTTPFlow) -> None:
        raise RuntimeError("boom")


class NotCallable:
    request = "not a function"


class Falsy:
    """A falsy attribute of the hook's name: mitmproxy passes over it."""

    request = 0


class ModuleNamed:
    """A module imported under the hook's name (``from mitmproxy import log``): passed over."""

    request = re


class Async(Recorder):
    async def request(self, flow: HTTPFlow) -> None:  # type: ignore[override]
        self.calls.append(f"{self.name}.request")


class Updates:
    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    def update(self, flows: list[HTTPFlow]) -> None:
        self.calls.append(f"update {len(flows)}")


class ParentWithHook(Parent, Recorder):
    """A hook of its own and children: its own runs first, then theirs, and a failing child
    ends the walk of this addon (the rest of its children) but not the event."""

    def __init__(self, name: str, calls: list[str], children: list[object]) -> None:
        Recorder.__init__(self, name, calls)
        self.addons = children


def chain(calls: list[str]) -> list[object]:
    return [Recorder("a", calls), Silent("s1"), Failing(), Falsy(), ModuleNamed(),
            Parent("p", [Silent("s2"), Recorder("c", calls), Parent("pp", [Async("d", calls)])]),
            ParentWithHook("q", calls, [Recorder("e", calls), Failing("failing child"), Recorder("never", calls)]),
            Updates(calls), Async("f", calls),
            NotCallable(), Recorder("halt", calls, halts=True), Recorder("after", calls)]


class TestSkipIdle:
    async def delivered(self, patched: bool, caplog: pytest.LogCaptureFixture) -> tuple[list[str], list[str]]:
        calls: list[str] = []
        master = DumpMaster(options.Options(), with_termlog=False, with_dumper=False)
        master.addons.add(*chain(calls))
        if patched:
            skip_idle(master.addons)
        caplog.clear()
        await master.addons.trigger_event(HttpRequestHook(tflow.tflow()))
        await master.addons.handle_lifecycle(HttpRequestHook(tflow.tflow()))
        errors = [re.sub(r" at 0x[0-9a-f]+", "", r.getMessage().splitlines()[0])
                  for r in caplog.records if r.levelname == "ERROR"]
        return calls, errors

    async def test_every_hook_runs_as_mitmproxys_own_loop_runs_it(self, caplog: pytest.LogCaptureFixture) -> None:
        """Same hooks in the same order, children included, the same errors logged, and an
        AddonHalt still stops the rest of the chain."""
        plain = await self.delivered(False, caplog)
        assert plain == await self.delivered(True, caplog)
        calls, errors = plain
        one = ["a.request", "c.request", "d.request", "q.request", "e.request", "f.request", "halt.request"]
        assert calls == one + one + ["update 1"]  # handle_lifecycle: the hook, then update
        assert errors.count("Addon error: boom") == 4 and any("not callable" in e for e in errors)

    async def test_an_update_reaches_its_handler_as_mitmproxy_s_loop_sends_it(self) -> None:
        for patched in (False, True):
            calls: list[str] = []
            master = DumpMaster(options.Options(), with_termlog=False, with_dumper=False)
            master.addons.add(Parent("p", [Updates(calls)]))
            if patched:
                skip_idle(master.addons)
            await master.addons.handle_lifecycle(HttpRequestHook(tflow.tflow()))
            assert calls == ["update 1"]

    async def test_an_addon_with_neither_hook_nor_children_is_not_entered(self) -> None:
        master = DumpMaster(options.Options(), with_termlog=False, with_dumper=False)
        drop_unused(master.addons)
        entered: list[str] = []
        invoke = master.addons.invoke_addon

        async def noting(addon: object, event: hooks.Hook) -> None:
            entered.append(type(addon).__name__)
            await invoke(addon, event)

        master.addons.invoke_addon = noting  # type: ignore[method-assign]
        await master.addons.trigger_event(HttpRequestHook(tflow.tflow()))
        every = len(entered)
        entered.clear()
        skip_idle(master.addons)
        await master.addons.trigger_event(HttpRequestHook(tflow.tflow()))
        with_request = [type(a).__name__ for a in master.addons.chain if hasattr(a, "request") or hasattr(a, "addons")]
        assert entered == with_request and 0 < len(entered) < every


def unchecked_response() -> http.Response:
    """A response whose end time is not a number: mitmproxy's debug-only check refuses it."""
    return http.Response(b"HTTP/1.1", 200, b"OK", http.Headers(), b"", None, 1.0, "late")  # type: ignore[arg-type]


def legacy_handlers(master: object) -> list[logging.Handler]:
    return [h for h in logging.getLogger().handlers if isinstance(h, LegacyLogEvents) and h.master is master]


class TestDropLegacyLog:
    async def test_no_add_log_anywhere_drops_the_handler_and_other_handlers_still_log(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        master = DumpMaster(options.Options(), with_termlog=False, with_dumper=False)
        try:
            assert legacy_handlers(master)
            assert drop_legacy_log(master)
            assert not legacy_handlers(master)
            logging.getLogger("mitmproxy.proxy.server").warning("still heard")
            assert "still heard" in caplog.text
        finally:
            master.shutdown()

    async def test_an_addon_with_add_log_keeps_it(self) -> None:
        class Reader:
            def add_log(self, entry: object) -> None: ...

        master = DumpMaster(options.Options(), with_termlog=False, with_dumper=False)
        try:
            master.addons.add(Parent("p", [Reader()]))
            assert not drop_legacy_log(master)
            assert legacy_handlers(master)
        finally:
            master.shutdown()


class TestOnlyTheRunnersProxy:
    async def test_a_proxy_with_a_control_socket_drops_them_when_it_runs(self, tmp_path: Path) -> None:
        addon = Flowproof()
        with taddons.context(save.Save(), dumper.Dumper(), addon) as tctx:
            tctx.options.update(flowproof_control=str(tmp_path / "c.sock"),
                                flowproof_report=str(tmp_path / "events.jsonl"))
            addon.running()
            try:
                chain = kinds(tctx.master.addons.chain)
                assert "flowproof.addon.core.Flowproof" in chain and "mitmproxy.addons.core.Core" in chain
                assert not chain & {"mitmproxy.addons.save.Save", "mitmproxy.addons.dumper.Dumper"}
                assert "skip_idle" in tctx.master.addons.trigger_event.__qualname__
                assert not legacy_handlers(tctx.master)
                unchecked_response()  # built as under python -O
            finally:
                addon.done()
            with pytest.raises(TypeError):  # put back when the proxy is done
                unchecked_response()

    def test_mitmdump_by_hand_keeps_every_addon(self, tmp_path: Path) -> None:
        """Without a control socket (``mitmdump -s``, debugging) nothing is removed."""
        addon = Flowproof()
        with taddons.context(save.Save(), clientplayback.ClientPlayback(), addon) as tctx:
            tctx.options.update(flowproof_mode="record", flowproof_cassette=str(tmp_path / "c.json"),
                                flowproof_report=str(tmp_path / "events.jsonl"))
            addon.running()
            assert tctx.master.addons.get("save") is not None
            assert "skip_idle" not in tctx.master.addons.trigger_event.__qualname__
            assert legacy_handlers(tctx.master)
            with pytest.raises(TypeError):
                unchecked_response()
