"""The wire as witness, on plain data: finding a secret by where it went, masking, egress."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from flowproof.spec import EgressAssertion, Location, SecretLeakAssertion
from flowproof.witness import (
    EgressHost,
    Secret,
    SecretLeak,
    Witness,
    evaluate_egress,
    evaluate_secret,
    find_leaks,
    host_allowed,
    mask,
    secret_placeholder,
)

TOKEN = "cust-tok-9f2e41a7"
SECRET = Secret("${CUSTOMER_TOKEN}", TOKEN, "«secret:CUSTOMER_TOKEN»")
HERE = Location("t.flow.yaml", 7, 5)


def leaks(url: str = "http://exfil.example.test/collect", headers=(), body: bytes = b""):  # type: ignore[no-untyped-def]
    return find_leaks([SECRET], method="POST", url=url, headers=headers, body=body)


class TestFindLeaks:
    def test_by_json_path_in_the_body(self) -> None:
        (leak,) = leaks(body=json.dumps({"data": [{"note": f"token {TOKEN}"}]}).encode())
        assert (leak.host, leak.where, leak.path, leak.label) == ("exfil.example.test", "body", "data.0.note",
                                                                   "${CUSTOMER_TOKEN}")
        assert TOKEN not in json.dumps(leak.to_json())

    def test_in_a_raw_body_and_a_form_body(self) -> None:
        assert [leak.where for leak in leaks(body=f"t={TOKEN}&x=1".encode())] == ["body"]
        spaced = Secret("${S}", "tok en+value", "«secret:S»")
        found = find_leaks([spaced], method="POST", url="http://x.test/", headers=(), body=b"t=tok+en%2Bvalue")
        assert [(leak.where, leak.path) for leak in found] == [("body", "")]

    def test_in_the_url_query_masked_in_the_report(self) -> None:
        (leak,) = leaks(url=f"https://exfil.example.test/c?t={TOKEN}")
        assert (leak.where, leak.path) == ("url", "query")
        assert leak.url == "https://exfil.example.test/c?t=«secret:CUSTOMER_TOKEN»"

    def test_in_a_header_but_never_a_credential_header(self) -> None:
        found = leaks(headers=[("X-Debug", TOKEN), ("Authorization", f"Bearer {TOKEN}")])
        assert [(leak.where, leak.path) for leak in found] == [("header", "x-debug")]

    def test_nothing_found_and_no_secrets(self) -> None:
        assert leaks(body=b'{"a": "nothing here"}') == []
        assert find_leaks([], method="GET", url="http://x/", headers=(), body=TOKEN.encode()) == []

    def test_describe_never_shows_the_value(self) -> None:
        (leak,) = leaks(body=json.dumps({"t": TOKEN}).encode())
        assert leak.describe() == ("${CUSTOMER_TOKEN} went to exfil.example.test: request POST "
                                   "http://exfil.example.test/collect, in the body at t")
        assert SecretLeak.from_json(leak.to_json()) == leak


class TestMask:
    def test_every_form_is_masked(self) -> None:
        value = 'to"k/en+1 234'
        secret = Secret("${S}", value, "«secret:S»")
        for form in (value, json.dumps(value)[1:-1], "to%22k%2Fen%2B1%20234", "to%22k%2Fen%2B1+234"):
            assert mask(f"a {form} b", [secret]) == "a «secret:S» b"

    @given(st.text(min_size=8).filter(lambda s: "«" not in s), st.text(), st.text())
    def test_a_masked_text_never_holds_the_value(self, value: str, before: str, after: str) -> None:
        masked = mask(before + value + after, [Secret("${S}", value, "«secret:S»")])
        assert value not in masked

    def test_placeholders(self) -> None:
        assert secret_placeholder("${CUSTOMER_TOKEN}", 1) == "«secret:CUSTOMER_TOKEN»"
        assert secret_placeholder("the secret at line 9", 2) == "«secret:2»"


class TestEgress:
    WITNESS = Witness(egress=(
        EgressHost("api.openai.com", 443, "model", "connect"),
        EgressHost("exfil.example.test", 80, "other", "http"),
        EgressHost("cdn.example.org", 443, "other", "connect"),
        EgressHost("exfil.example.test", 80, "other", "http"),
    ))

    def test_a_host_outside_the_model_apis_fails(self) -> None:
        result = evaluate_egress(EgressAssertion((), "assert_no_egress", HERE), self.WITNESS)
        assert not result.passed
        assert result.message.splitlines()[2:] == ["  - exfil.example.test:80 (plain HTTP)",
                                                   "  - cdn.example.org:443 (CONNECT)"]
        assert [m.actual for m in result.mismatches] == ["exfil.example.test:80", "cdn.example.org:443"]

    def test_except_patterns(self) -> None:
        step = EgressAssertion(("exfil.example.test", "*.example.org"), "x", HERE)
        result = evaluate_egress(step, self.WITNESS)
        assert result.passed
        assert "reached: api.openai.com:443, exfil.example.test:80, cdn.example.org:443" in result.message

    def test_host_allowed(self) -> None:
        assert host_allowed("a.example.org:443", ["*.example.org"])
        assert host_allowed("a.example.org:8443", ["a.example.org:8443"])
        assert not host_allowed("example.org:443", ["*.example.org"])

    def test_round_trip(self) -> None:
        host = EgressHost("x", 1, "mcp", "connect")
        assert EgressHost.from_json(host.to_json()) == host
        assert EgressHost.from_json({"host": "y", "role": "bogus"}).role == "other"


def test_secret_assertion() -> None:
    step = SecretLeakAssertion(TOKEN, "${CUSTOMER_TOKEN}", "no leak of ${CUSTOMER_TOKEN}", HERE)
    assert evaluate_secret(step, Witness()).passed
    (leak,) = leaks(body=json.dumps({"t": TOKEN}).encode())
    result = evaluate_secret(step, Witness(leaks=(leak,)))
    assert not result.passed and TOKEN not in result.message
    assert "(shown masked)" in result.message and "in the body at t" in result.message
