"""flowproof.doctor: the verdict on what an agent did against the stand-in model."""

from __future__ import annotations

from flowproof.doctor import Call, DoctorFacts, Received, diagnose, healthy, key_marker, markers_in, record_hint
from flowproof.options import Route

CALL = Call("openai-chat", "api.openai.com", "/v1/chat/completions", "gpt-4o-mini")


def texts(facts: DoctorFacts) -> list[str]:
    return [("✓ " if c.passed else "✗ ") + c.text for c in diagnose(facts)]


def test_markers_name_the_variables_in_order() -> None:
    values = [f"Bearer {key_marker('OPENAI_API_KEY')}", "x",
              f"{key_marker('GEMINI_API_KEY')},{key_marker('OPENAI_API_KEY')}"]
    assert markers_in(values) == ["OPENAI_API_KEY", "GEMINI_API_KEY"]


def test_a_healthy_proxy_agent() -> None:
    facts = DoctorFacts(Route.PROXY, (CALL,), (Received((f"Bearer {key_marker('OPENAI_API_KEY')}",)),), returncode=0)
    assert texts(facts) == [
        "✓ it reached the proxy (HTTPS_PROXY): 1 model call",
        "✓ it trusts flowproof's CA (TLS to api.openai.com through the proxy)",
        "✓ it spoke openai-chat to api.openai.com (POST /v1/chat/completions, model gpt-4o-mini)",
        "✓ it read HTTPS_PROXY (how its calls reached flowproof)",
        "✓ it read OPENAI_API_KEY (the key it sent); record with it set",
        "✓ it finished (exit 0)",
    ]
    assert healthy(diagnose(facts))
    assert record_hint(facts, "a.flow.yaml") == "OPENAI_API_KEY=... flowproof-run a.flow.yaml --record"


def test_a_variable_of_its_own_is_named_beside_the_standard_one() -> None:
    facts = DoctorFacts(Route.BASE_URL, (CALL,), (), returncode=0,
                        spec_env={"MY_LLM_URL": "${flowproof.base_url.openai}", "OTHER": "x"})
    assert "✓ it reached the base-URL listeners: 1 model call" in texts(facts)
    assert "✓ it read OPENAI_BASE_URL or MY_LLM_URL (agent.env) (how its calls reached flowproof)" in texts(facts)
    assert not any("trusts" in t for t in texts(facts))  # plain http: no CA involved


def test_an_untrusted_ca_says_which_host_and_what_to_set() -> None:
    facts = DoctorFacts(Route.PROXY, tls_failures=(("api.openai.com", "unknown ca"),), returncode=1,
                        stderr_tail="Traceback\nopenai.APIConnectionError: Connection error.\n")
    checks = diagnose(facts)
    assert checks[0].text == "it reached the proxy but does not trust flowproof's CA for api.openai.com (unknown ca)"
    assert "SSL_CERT_FILE" in checks[0].fix and "${flowproof.ca_bundle}" in checks[0].fix
    assert checks[-1].text == "it exited with 1: openai.APIConnectionError: Connection error."
    assert not healthy(checks)


def test_no_call_at_all_suggests_the_base_url_route() -> None:
    (first, last) = diagnose(DoctorFacts(Route.PROXY, returncode=0))
    assert not first.passed and "ignores HTTPS_PROXY" in first.text and "agent.route: base_url" in first.fix
    assert last.passed


def test_a_key_from_elsewhere_is_flagged() -> None:
    facts = DoctorFacts(Route.PROXY, (CALL,), (Received(("Bearer sk-from-a-config-file",)),), returncode=0)
    (check,) = [c for c in diagnose(facts) if "key" in c.text]
    assert not check.passed and "came from none of" in check.text
    assert "sk-from-a-config-file" not in check.render()


def test_an_error_before_the_agent_started_is_the_only_line() -> None:
    (check,) = diagnose(DoctorFacts(Route.PROXY, error="t.flow.yaml:3:12: ${BIN} is not set"))
    assert not check.passed and "${BIN} is not set" in check.text


def test_a_timeout() -> None:
    checks = diagnose(DoctorFacts(Route.PROXY, (CALL,), (), timed_out=True))
    assert checks[-1].text == "it did not finish before the timeout" and "stdin" in checks[-1].fix
