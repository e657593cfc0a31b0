"""Tests for flowproof.addon.lean: a proxy the runner started drops the default addons it never uses."""

from __future__ import annotations

from pathlib import Path

import pytest
from mitmproxy import options
from mitmproxy.addons import clientplayback, dumper, save
from mitmproxy.test import taddons
from mitmproxy.tools.dump import DumpMaster

from flowproof.addon import Flowproof, lean
from flowproof.addon.lean import UNUSED, drop_unused


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
            finally:
                addon.done()

    def test_mitmdump_by_hand_keeps_every_addon(self, tmp_path: Path) -> None:
        """Without a control socket (``mitmdump -s``, debugging) nothing is removed."""
        addon = Flowproof()
        with taddons.context(save.Save(), clientplayback.ClientPlayback(), addon) as tctx:
            tctx.options.update(flowproof_mode="record", flowproof_cassette=str(tmp_path / "c.json"),
                                flowproof_report=str(tmp_path / "events.jsonl"))
            addon.running()
            assert tctx.master.addons.get("save") is not None
