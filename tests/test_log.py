"""flowproof.log: the runner's structlog configuration, the addon's logger, and no credential in either."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
import structlog

from flowproof.log import (
    TERMINAL,
    Terminal,
    addon_logger,
    configure,
    delivered,
    get_logger,
    level_for,
)

#: Clearly fake, distinct from every other key in the suite.
KEY = "sk-test-log-8123-secret"
ENV = {"OPENAI_API_KEY": KEY, "HOME": "/home/someone"}


@pytest.fixture(autouse=True)
def reset_structlog() -> Iterator[None]:
    """Each test configures structlog itself; nothing of it leaks into other tests."""
    yield
    structlog.reset_defaults()
    TERMINAL.detach()


def lines(stream: io.StringIO) -> list[str]:
    return stream.getvalue().splitlines()


def leaky_call(log: object) -> None:
    """One event carrying the key every way a careless caller could pass it."""
    log.info(  # type: ignore[attr-defined]
        "model_call",
        provider="openai-chat",
        text=f"upstream said 401 for Authorization: Bearer {KEY}",
        url=f"https://generativelanguage.googleapis.com/v1/models/x:generate?alt=sse&key={KEY}",
        headers={"Authorization": f"Bearer {KEY}", "content-type": "application/json"},
        api_key=KEY,
        nested=[{"env": f"OPENAI_API_KEY={KEY}"}],
    )


class TestLevels:
    def test_verbosity_maps_to_a_level(self) -> None:
        """-q errors only, default warnings, -v info (the per-call lines), -vv and more debug."""
        assert [level_for(v) for v in (-1, 0, 1, 2, 5)] == [
            logging.ERROR, logging.WARNING, logging.INFO, logging.DEBUG, logging.DEBUG,
        ]

    @pytest.mark.parametrize(
        ("verbosity", "shown"),
        [(-1, ["error"]), (0, ["warning", "error"]), (1, ["info", "warning", "error"]),
         (2, ["debug", "info", "warning", "error"])],
    )
    def test_only_events_at_the_level_or_above_are_written(self, verbosity: int, shown: list[str]) -> None:
        out = io.StringIO()
        configure(verbosity, json_lines=True, stream=out, environ={})
        log = get_logger()
        for level in ("debug", "info", "warning", "error"):
            getattr(log, level)(f"at_{level}")
        assert [json.loads(line)["level"] for line in lines(out)] == shown


class TestRenderers:
    def test_json_lines_parse_and_lead_with_the_event(self) -> None:
        """--log-json: one JSON object a line, ``event``/``level``/``timestamp`` first, then the fields in order."""
        out = io.StringIO()
        configure(1, json_lines=True, stream=out, environ={})
        get_logger(flow="booking").info("model_call", provider="openai-chat", turn=0, ms=1.5)
        [line] = lines(out)
        obj = json.loads(line)
        assert list(obj) == ["event", "level", "timestamp", "flow", "provider", "turn", "ms"]
        assert (obj["event"], obj["level"], obj["flow"], obj["turn"], obj["ms"]) == (
            "model_call", "info", "booking", 0, 1.5,
        )
        assert obj["timestamp"].endswith("Z")

    def test_console_lines_are_readable_and_lead_with_the_flow(self) -> None:
        """The default: one readable line, the flow's name in front, fields as key=value in call order."""
        out = io.StringIO()
        configure(1, stream=out, environ={})
        get_logger(flow="booking").info("model_call", provider="openai-chat", turn=0, ms=1.5)
        [line] = lines(out)
        assert "[info] [booking] model_call provider=openai-chat turn=0 ms=1.5" in line
        assert "\x1b[" not in line  # a StringIO is no terminal: no colours

    def test_a_value_s_terminal_escapes_are_shown_not_obeyed(self, caplog: pytest.LogCaptureFixture) -> None:
        """A model name or an error text from a recording cannot retitle the window or write the
        clipboard: console lines and the addon's lines show the escapes."""
        out = io.StringIO()
        configure(1, stream=out, environ={})
        hostile = "gpt\x1b]52;c;cm0=\x07\x9b2A"
        get_logger(flow="booking").info("model_call", model=hostile, turn=0)
        caplog.set_level(logging.INFO, logger="flowproof.addon")
        addon_logger(environ={}).info("turn_recorded", model=hostile)
        for line in (out.getvalue(), caplog.records[-1].getMessage()):
            assert "\x1b" not in line and "\x9b" not in line and "\x07" not in line
            assert "x1b]52;c;cm0=" in line and "x9b2A" in line, line

    def test_the_stream_is_read_when_writing(self, capsys: pytest.CaptureFixture[str]) -> None:
        """Without a stream the lines go to whatever sys.stderr is at the time, never stdout."""
        configure(0, environ={})
        get_logger().warning("careful", what="x")
        captured = capsys.readouterr()
        assert "careful what=x" in captured.err and captured.out == ""


class TestNoSecretInAnyLine:
    @pytest.mark.parametrize("json_lines", [False, True], ids=["console", "json"])
    def test_a_key_in_headers_text_urls_fields_and_the_environment_is_masked(self, json_lines: bool) -> None:
        """The key given every way (a header, a Bearer text, a ?key= URL, a field named api_key,
        an env value in a nested list) is in no line; the harmless fields are kept."""
        out = io.StringIO()
        configure(2, json_lines=json_lines, stream=out, environ=ENV)
        leaky_call(get_logger(flow="f"))
        text = out.getvalue()
        assert text.count("\n") == 1
        assert KEY not in text
        assert "[redacted]" in text and "openai-chat" in text and "application/json" in text
        assert "alt=sse" in text  # the URL keeps what is not a credential

    def test_the_addon_logger_masks_the_key_and_logs_through_the_stdlib(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Under mitmdump the addon logs ``event key=value`` records on the flowproof.addon logger,
        where mitmproxy's handlers print them; the key is masked there too."""
        caplog.set_level(logging.DEBUG, logger="flowproof.addon")
        log = addon_logger(environ=ENV)
        leaky_call(log)
        log.warning("turns_unconsumed", count=2)
        records = [r for r in caplog.records if r.name == "flowproof.addon"]
        assert [r.levelno for r in records] == [logging.INFO, logging.WARNING]
        assert records[0].getMessage().startswith("model_call provider=openai-chat text=")
        assert records[1].getMessage() == "turns_unconsumed count=2"
        assert all(KEY not in r.getMessage() for r in records)

    def test_a_short_variable_value_is_not_masked_everywhere(self) -> None:
        """A credential variable with a tiny value (``1``) would blank every digit: it is left alone."""
        out = io.StringIO()
        configure(1, json_lines=True, stream=out, environ={"FLOWPROOF_TOKEN": "1"})
        get_logger().info("model_call", turn=1, ms=11.0)
        assert json.loads(out.getvalue())["ms"] == 11.0


class TestTerminal:
    def test_a_log_line_is_written_between_clearing_and_redrawing_the_status_line(self) -> None:
        """With a status line attached, each log line clears it first and redraws it after."""
        terminal, out, calls = Terminal(), io.StringIO(), []
        terminal.attach(lambda: calls.append("clear"), lambda: calls.append(f"redraw after {out.getvalue()!r}"))
        terminal.write_line(out, "line")
        assert calls == ["clear", "redraw after 'line\\n'"]
        terminal.detach()
        terminal.write_line(out, "again")
        assert len(calls) == 2 and out.getvalue() == "line\nagain\n"

    def test_configured_lines_go_through_the_shared_terminal(self) -> None:
        """The runner's log lines use TERMINAL, so the status line steps aside for them."""
        out, calls = io.StringIO(), []
        TERMINAL.attach(lambda: calls.append("clear"), lambda: calls.append("redraw"))
        configure(1, stream=out, environ={})
        get_logger().info("model_call", turn=0)
        assert calls == ["clear", "redraw"] and "model_call turn=0" in out.getvalue()


class TestTheAddonBuildsOnlyWhatAHandlerTakes:
    """Under ``mitmdump -q`` no handler takes a per-call info line: it is never built."""

    @pytest.fixture
    def isolated(self) -> Iterator[logging.Logger]:
        """A logger of its own (no propagation to the root's handlers), with a filter that
        counts the records built for it. pytest puts its capture handlers on every logger,
        taking every level: each test sets the handlers it means."""
        logger = logging.getLogger("flowproof.addon.gate_test")
        logger.propagate, logger.built = False, 0  # type: ignore[attr-defined]
        logger.setLevel(logging.DEBUG)  # as mitmproxy sets the root logger: its handlers filter

        def count(record: logging.LogRecord) -> bool:
            logger.built += 1  # type: ignore[attr-defined]
            return True

        logger.addFilter(count)
        yield logger
        logger.removeFilter(count)
        logger.handlers.clear()
        logger.propagate = True
        logger.setLevel(logging.NOTSET)

    def test_a_level_no_handler_takes_builds_no_record(self, isolated: logging.Logger) -> None:
        out = io.StringIO()
        handler = logging.StreamHandler(out)
        handler.setLevel(logging.WARNING)
        isolated.handlers = [handler]
        log = addon_logger(isolated.name, environ=ENV)
        log.info("turn_replayed", turn=1)
        log.debug("egress", host="api.openai.com")
        assert isolated.built == 0  # type: ignore[attr-defined]
        log.warning("turns_unconsumed", count=2, key=KEY)
        assert isolated.built == 1  # type: ignore[attr-defined]
        assert out.getvalue() == "turns_unconsumed count=2 key=[redacted]\n"
        handler.setLevel(logging.INFO)  # handlers change at run time (mitmproxy's termlog_verbosity)
        log.info("turn_replayed", turn=1)
        assert out.getvalue().endswith("turn_replayed turn=1\n")

    def test_with_no_handler_at_all_the_last_resort_decides(self, isolated: logging.Logger) -> None:
        isolated.handlers = []
        assert not delivered(isolated, logging.INFO)
        isolated.setLevel(logging.ERROR)
        assert not delivered(isolated, logging.WARNING)  # the logger's own level first
        isolated.setLevel(logging.DEBUG)
        assert delivered(isolated, logging.WARNING)  # what logging.lastResort would print

    def test_mitmproxy_s_add_log_handler_counts_only_with_an_add_log_addon(self, isolated: logging.Logger) -> None:
        """mitmproxy hands every record to the addons of its deprecated ``add_log`` hook: with
        none, it takes nothing; with one, every level."""
        from mitmproxy.log import LegacyLogEvents
        from mitmproxy.test import taddons

        class Listener:
            def __init__(self) -> None:
                self.entries: list[object] = []

            def add_log(self, entry: object) -> None:
                self.entries.append(entry)

        with taddons.context() as tctx:
            isolated.handlers = [LegacyLogEvents(tctx.master)]
            assert not delivered(isolated, logging.DEBUG)
            tctx.master.addons.add(Listener())
            assert delivered(isolated, logging.DEBUG)


class TestStructlogLoadsWithTheFirstLine:
    """Neither process imports structlog (about 13 ms in the proxy, 30 ms in the runner) until a
    line is due: a quiet replay writes none."""

    @staticmethod
    def run(body: str) -> list[str]:
        import subprocess
        import sys

        code = "import io, logging, sys\nfrom flowproof.log import addon_logger, configure, get_logger\n" + body
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
        return done.stdout.splitlines()

    def test_the_runner(self) -> None:
        out = self.run(
            "err = io.StringIO()\nconfigure(0, stream=err, environ={})\nlog = get_logger(flow='f')\n"
            "log.info('model_call', turn=0)\nprint('structlog' in sys.modules)\n"
            "log.warning('careful', what='x')\nprint('structlog' in sys.modules, 'careful what=x' in err.getvalue(),"
            " 'model_call' in err.getvalue())\n"
        )
        assert out == ["False", "True True False"]

    def test_the_addon(self) -> None:
        out = self.run(
            "log = addon_logger(environ={})\nlogging.getLogger().addHandler(logging.NullHandler())\n"
            "logging.getLogger().handlers[0].setLevel(logging.WARNING)\n"
            "log.info('turn_replayed', turn=1)\nprint('structlog' in sys.modules)\n"
            "log.warning('turns_unconsumed', count=2)\nprint('structlog' in sys.modules)\n"
        )
        assert out == ["False", "True"]
