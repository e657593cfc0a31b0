"""Live calls (record and compare): forwarding, tapping, hook failures."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import Harness, chat_body, json_response, model_flow


class TestLiveHookFailure:
    def test_a_crash_while_recording_a_response_fails_the_run(
        self, harness: Harness, monkeypatch: pytest.MonkeyPatch
    ):
        """A response flowproof cannot record is an error event, so no recording silently lacks a turn."""
        path = harness.tmp / "rec.json"
        harness.configure(flowproof_mode="record", flowproof_cassette=str(path))
        f = model_flow(chat_body(stream=False))
        harness.addon.request(f)

        def broken(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("boom")

        monkeypatch.setattr(harness.addon.root.concern, "_recorded_response", broken)
        json_response(f, {"id": "x", "choices": []})
        harness.addon.responseheaders(f)
        harness.addon.response(f)
        (event,) = harness.events("error")
        assert event["id"] == f.id and "response hook" in event["text"]
