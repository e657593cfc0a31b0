"""The --html report end to end: flowproof-run writes the page, headless Chromium renders it,
and the test reads what is on the rendered page (Chromium's DOM after load).

Chromium is Debian's ``chromium`` package. Without it these tests skip and say so,
unless ``FLOWPROOF_REQUIRE_CHROMIUM=1`` (set by ``.ci/run``, which installs it): then
a missing browser fails them, so CI cannot pass without having looked at the page.
"""

from __future__ import annotations

import http.server
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest

from flowproof.testing import FakeModelServer, Reply, load_script

from .conftest import Flowproof, upstream_args

Fake = Callable[..., FakeModelServer]

#: Without the background-networking flags Chromium's own connections are refused here and
#: it stalls; the profile is a fresh temporary folder each time.
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
)


def find_chromium() -> str:
    """The browser's path; skips the test when there is none, fails it when CI requires one."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        message = ("headless Chromium is not installed: `apt-get install chromium` (Debian) to render "
                   "the HTML report; .ci/run installs it")
        if os.environ.get("FLOWPROOF_REQUIRE_CHROMIUM") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return found


@pytest.fixture(scope="session")
def chromium() -> str:
    return find_chromium()


class TestFindChromium:
    def test_a_missing_browser_skips_unless_ci_requires_it(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(shutil, "which", lambda _name: None)
        monkeypatch.delenv("FLOWPROOF_REQUIRE_CHROMIUM", raising=False)
        with pytest.raises(pytest.skip.Exception, match="apt-get install chromium"):
            find_chromium()
        monkeypatch.setenv("FLOWPROOF_REQUIRE_CHROMIUM", "1")
        with pytest.raises(pytest.fail.Exception, match="headless Chromium is not installed"):
            find_chromium()


def render(chromium: str, page: Path, *extra: str) -> str:
    """Chromium's DOM of ``page`` after load (``--dump-dom``), or what ``extra`` asks for."""
    with tempfile.TemporaryDirectory(prefix="flowproof-chromium-") as profile:
        done = subprocess.run(
            [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *(extra or ("--dump-dom",)),
             page.resolve().as_uri()],
            capture_output=True, text=True, timeout=120, check=False, start_new_session=True,
        )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


class Dom(HTMLParser):
    """The rendered DOM: elements with their attributes, the text of each element by class."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.by_class: dict[str, list[str]] = {}
        self._open: list[tuple[str, list[str]]] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        self.tags.append((tag, attributes))
        if tag in ("td", "span", "div", "p", "li", "h2", "h3"):
            self._open.append((tag, (attributes.get("class") or "").split()))
            for name in self._open[-1][1]:
                self.by_class.setdefault(name, []).append("")

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self._open) - 1, -1, -1):
            if self._open[i][0] == tag:
                del self._open[i:]
                break

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        for _tag, classes in self._open:
            for name in classes:
                self.by_class[name][-1] += data

    @property
    def all_text(self) -> str:
        return "".join(self.text)

    def cells(self, name: str) -> list[str]:
        return self.by_class.get(name, [])


@pytest.fixture
def listener() -> Iterator[tuple[int, list[str]]]:
    """A local HTTP server that records every request: a page that loads anything hits it."""
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            self.send_response(404)
            self.end_headers()

        def log_message(self, *_args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], hits
    server.shutdown()
    server.server_close()


class TestReplayReport:
    def test_a_run_of_the_examples_is_one_page_with_the_first_bad_turn_as_a_diff(
        self, examples: Path, flowproof: Flowproof, chromium: str
    ) -> None:
        """Replay of the bundled examples with -j 2, one diverging and one failing an assertion:
        the rendered page holds the summary, every thread's turns, tool calls with their
        arguments, the tool results the model was told, the reply, guard evidence, and the
        divergence as recorded/replayed cells."""
        booking = examples / "booking.flow.yaml"
        booking.write_text(booking.read_text(encoding="utf-8").replace("{ booking: B-1042 }", "{ booking: B-2077 }"),
                           encoding="utf-8")
        refund = examples / "refund_guard.flow.yaml"
        refund.write_text(refund.read_text(encoding="utf-8").replace("reply contains not eligible",
                                                                      "reply contains refunded"), encoding="utf-8")
        page = examples / "out" / "report.html"

        ran = flowproof.run(examples, "-j", "2", "--html", page, cwd=examples, timeout=240)
        assert ran.code == 3, ran.output
        dom = Dom(render(chromium, page))
        text = dom.all_text

        flows = len(list(examples.rglob("*.flow.yaml")))
        assert f"{flows - 2} of {flows} flow(s) passed · exit code 3" in text
        for name in ("Booking assistant books a flight", "Support agent refuses a refund for a non-refundable order",
                     "plan mode refuses a direct order to write"):
            assert text.count(name) == 2, name  # its summary row and its section
        # The divergence: one row, field path and the two sides.
        assert [c.strip() for c in dom.cells("path") if "messages" in c] == ["messages.5.content → booking"]
        assert [c.strip() for c in dom.cells("recorded")] == ["B-1042"]
        assert [c.strip() for c in dom.cells("other")] == ["B-2077"]
        assert "first bad turn: divergence at recorded turn 2" in text
        # Conversations: turns, prompts, tool calls with arguments, tool results, replies.
        assert "turn 0 · openai-chat · gpt-4o-mini" in dom.cells("turnhead")
        assert "turn 0 · anthropic · claude-haiku-4-5" in dom.cells("turnhead")
        user = dom.cells("user")
        assert "userBook me a flight to Nairobi tomorrow" in user
        calls = dom.cells("call")
        assert any(c.startswith("tool call · search_flights") and '"destination": "NBO"' in c for c in calls)
        assert any(c.startswith("tool call · lookup_order") and '"order_id": "A-1001"' in c for c in calls)
        results = dom.cells("result")
        assert any(r.startswith("tool result · search_flights") and "KQ311" in r for r in results)
        assert any("refundable" in r for r in results)
        replies = dom.cells("reply")
        assert any("not eligible for a refund" in r for r in replies)  # the refund flow's reply
        assert any("MCP tools/call · list_rows" in m for m in dom.cells("mcp"))
        # Checks and guard evidence.
        assert any("✗ reply contains refunded" in li for li in dom.cells("bad"))
        assert any("no call to issue_refund" in r for r in dom.cells("ok"))
        assert "guarded: the model asked; 0 call(s) crossed the mcp boundary" in dom.cells("guard")


HOSTILE_REPLY = (
    "All booked. <script>document.title='pwned'; fetch('http://127.0.0.1:{port}/script')</script>"
    "<img src='http://127.0.0.1:{port}/img'>"
)


class TestUntrustedContent:
    def test_markup_in_a_recorded_reply_is_shown_not_run_and_nothing_is_fetched(
        self, examples: Path, flowproof: Flowproof, fake_model: Fake, chromium: str,
        listener: tuple[int, list[str]],
    ) -> None:
        """A model reply holding a <script> and an <img> pointing at a local server, recorded:
        the rendered page shows them as text, the title is untouched, and the server sees no
        request. The same markup in a plain page does reach the server (the check works)."""
        port, hits = listener
        reply = HOSTILE_REPLY.format(port=port)
        replies = list(load_script(examples / "fake_model" / "booking.json").replies)
        replies[-1] = Reply.text(reply)
        server = fake_model(replies)
        page = examples / "report.html"

        ran = flowproof.run(examples / "booking.flow.yaml", *upstream_args(server), "--record", "--html", page,
                            keys=True)
        assert ran.code == 0, ran.failure
        dumped = render(chromium, page)
        dom = Dom(dumped)
        assert "<title>flowproof report</title>" in dumped  # the script did not retitle the page
        assert [tag for tag, _ in dom.tags if tag in ("script", "img")] == []
        assert any(reply in r for r in dom.cells("reply"))
        assert hits == []

        control = examples / "control.html"
        control.write_text(f"<p>{reply}</p>", encoding="utf-8")
        render(chromium, control)
        assert sorted(hits) == ["/img", "/script"]


class TestCompareReport:
    def test_a_drift_sets_recorded_and_live_side_by_side(
        self, examples: Path, flowproof: Flowproof, fake_model: Fake, chromium: str
    ) -> None:
        """Compare against a model that words the last answer differently: the page shows the
        first drift as recorded and live cells."""
        replies = list(load_script(examples / "fake_model" / "booking.json").replies)
        replies[-1] = Reply.text("All booked: KQ311 to Nairobi, reference B-1042.")
        server = fake_model(replies)
        page = examples / "report.html"

        ran = flowproof.run(examples / "booking.flow.yaml", *upstream_args(server), "--compare", "--html", page,
                            keys=True)
        assert ran.code == 4, ran.output
        dom = Dom(render(chromium, page))
        assert "first bad turn: drift at recorded turn 2, thread 0 (paired)" in dom.all_text
        assert any("All booked: KQ311 to Nairobi, reference B-1042." in c for c in dom.cells("other"))
        assert any("You're booked on KQ311" in c for c in dom.cells("recorded"))
        # The conversation is the live one.
        assert any("All booked: KQ311" in r for r in dom.cells("reply"))


class TestScreenshot:
    def test_chromium_draws_the_page(self, examples: Path, flowproof: Flowproof, chromium: str,
                                     tmp_path: Path) -> None:
        """The page renders to a non-blank image (how docs/img/report.png is made: docs/report.md)."""
        page = examples / "report.html"
        assert flowproof.run(examples / "booking.flow.yaml", "--html", page).code == 0
        shot = tmp_path / "shot.png"
        render(chromium, page, f"--screenshot={shot}", "--window-size=1000,900", "--hide-scrollbars")
        data = shot.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
