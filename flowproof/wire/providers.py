"""The one table of model providers: every fact about a provider that is not about its bodies.

Each codec (``openai-chat``, ``openai-responses``, ``anthropic``, ``gemini``)
has one `Provider` row in `PROVIDERS`. Everything outside ``wire/`` that needs
to know a provider reads it from here, never from a list of its own:

- detection and `flowproof.wire.is_model_host` (``hosts``, ``host_suffixes``,
  ``path_suffixes``);
- the agent's environment in ``runner/env.py``: hosts that ``NO_PROXY`` must
  not bypass, the base-URL variables of ``agent.route: base_url``, and the API
  key variables that decide where a placeholder key may go;
- the reverse listeners of the base-URL route (``base_url_host``) and the paths clients
  send there (``base_url_aliases``);
- the volatile-rule refusal list of the spec loader (``system_roots``,
  ``message_roots``, ``tool_roots``, ``model_roots``, ``content_keys``);
- the cassette header allow-list (``allowed_headers``);
- the prompt-cache order the cache-prefix rule compares requests in
  (``cache_order``, ``cache_ignored_keys``; `flowproof.wire.prefix`);
- the names OpenTelemetry's GenAI conventions give the provider and its operation
  (``genai_provider``, ``genai_operation``; `flowproof.genai_spans`).

Pure data: no I/O, no imports beyond the standard library. The fake model
server in ``flowproof.testing`` deliberately keeps its own copy of these facts,
so that it stays an independent oracle for the codecs.

    >>> provider("gemini").key_vars
    ('GOOGLE_API_KEY', 'GEMINI_API_KEY')
    >>> reverse_hosts()
    ('api.openai.com', 'api.anthropic.com', 'generativelanguage.googleapis.com')
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "PROVIDERS",
    "BaseUrlVar",
    "ConversationVocabulary",
    "Provider",
    "allowed_headers",
    "base_url_families",
    "base_url_path",
    "base_url_vars",
    "conversation_vocabulary",
    "genai_provider",
    "model_host_suffixes",
    "model_hosts",
    "provider",
    "reverse_hosts",
]


@dataclass(frozen=True, slots=True)
class BaseUrlVar:
    """An environment variable a client reads its base URL from, and the path the URL must end with.

    ``OPENAI_BASE_URL`` includes the API version (``http://127.0.0.1:P/v1``);
    ``ANTHROPIC_BASE_URL`` and ``GOOGLE_GEMINI_BASE_URL`` do not.
    """

    name: str
    suffix: str


@dataclass(frozen=True, slots=True)
class Provider:
    """What flowproof knows about one model API outside its request and response bodies.

    Every tuple is ordered; none is empty except where the field says so.
    """

    #: The codec's name, as stored in cassettes.
    name: str
    #: Well-known hosts that serve this API (the provider's own and the best-known gateways).
    hosts: tuple[str, ...]
    #: Host families matched by suffix (Azure OpenAI resources, Vertex AI regions); may be empty.
    host_suffixes: tuple[str, ...]
    #: The official request paths (``{model}`` stands for a model name), for documentation and tests.
    paths: tuple[str, ...]
    #: The path endings that make a POST to an ``--extra-host`` gateway a call of this API.
    path_suffixes: tuple[str, ...]
    #: The upstream a base-URL listener forwards to for this API.
    base_url_host: str
    #: The variables the official clients read their base URL from.
    base_url_vars: tuple[BaseUrlVar, ...]
    #: Paths clients send on the base-URL route when they expect the base URL to carry the
    #: API version and it does not (``ANTHROPIC_BASE_URL`` has none, as the anthropic SDKs and
    #: Claude Code want; a client on the Vercel AI SDK, opencode among them, appends only
    #: ``/messages``), each with the API path it stands for; may be empty. The request goes
    #: upstream, and into the cassette, as that API path.
    base_url_aliases: tuple[tuple[str, str], ...]
    #: The name a spec gives this API's base URL for a variable of its own choosing:
    #: ``${flowproof.base_url.<family>}`` (APIs on one base URL share it).
    family: str
    #: Python modules of the SDKs that speak this API (``flowproof init`` reads an agent's imports).
    python_modules: tuple[str, ...]
    #: npm packages of the SDKs that speak this API.
    node_packages: tuple[str, ...]
    #: The variable those SDKs read the key from, named in the advice to record.
    sdk_key_var: str
    #: Every variable the official clients read this provider's key (or token) from, in the
    #: order they read them: a key in an earlier variable shadows one in a later variable.
    key_vars: tuple[str, ...]
    #: The subset of ``key_vars`` that gets a placeholder key when none of ``key_vars`` holds
    #: one (a placeholder login token could switch a client's auth mode, so tokens get none).
    placeholder_vars: tuple[str, ...]
    #: Body paths holding the system prompt (empty when it travels inside the messages).
    system_roots: tuple[str, ...]
    #: Body paths holding the conversation (messages, items, contents).
    message_roots: tuple[str, ...]
    #: Body paths holding the tool declarations.
    tool_roots: tuple[str, ...]
    #: Body paths naming the model (empty when the model is in the URL path).
    model_roots: tuple[str, ...]
    #: Keys below a conversation or system root that carry content rather than metadata.
    content_keys: tuple[str, ...]
    #: Header names (lowercase) a cassette may keep, request or response. An allow-list:
    #: a header nobody thought of cannot leak.
    allowed_headers: tuple[str, ...]
    #: The body roots the provider's prompt cache reads, in its order: a request reuses the
    #: cache only while it starts with the previous request's bytes in this order.
    cache_order: tuple[str, ...]
    #: Keys inside those roots that are not part of the cached prefix (Anthropic's
    #: ``cache_control`` markers: Claude Code moves them to the newest message every turn).
    cache_ignored_keys: tuple[str, ...] = ()
    #: ``gen_ai.provider.name`` of the GenAI semantic conventions (docs/otel.md): the API's
    #: owner, also for the gateways that speak it (``server.address`` names the host).
    genai_provider: str = "_OTHER"
    #: ``gen_ai.operation.name`` of a call: ``chat``, or ``generate_content`` for Gemini.
    genai_operation: str = "chat"
    #: Hosts (matched by suffix, as ``host_suffixes``) whose calls the conventions give a
    #: provider name of their own: a gateway speaking this API, a cloud's deployment of it.
    genai_hosts: tuple[tuple[str, str], ...] = ()


# The OpenAI family: Chat Completions and Responses share hosts, base URL and keys.
_OPENAI_HOST = "api.openai.com"
_AZURE_OPENAI = ".openai.azure.com"
_OPENAI_BASE_URL = (BaseUrlVar("OPENAI_BASE_URL", "/v1"),)
# Codex CLI reads CODEX_API_KEY before OPENAI_API_KEY (`codex exec` with the built-in provider
# ignores OPENAI_API_KEY alone); the openai SDKs read OPENAI_API_KEY only.
_OPENAI_KEYS = ("CODEX_API_KEY", "OPENAI_API_KEY")
_OPENAI_HEADERS = ("content-type", "openai-beta", "openai-version")

PROVIDERS: tuple[Provider, ...] = (
    Provider(
        name="openai-chat",
        hosts=(
            _OPENAI_HOST,
            "openrouter.ai",
            "api.groq.com",
            "api.mistral.ai",
            "api.deepseek.com",
            "api.together.xyz",
            "api.fireworks.ai",
            "api.x.ai",
        ),
        host_suffixes=(_AZURE_OPENAI,),
        paths=("/v1/chat/completions",),
        path_suffixes=("/chat/completions",),
        base_url_host=_OPENAI_HOST,
        base_url_vars=_OPENAI_BASE_URL,
        base_url_aliases=(),
        family="openai",
        python_modules=("openai", "agents"),
        node_packages=("openai", "@openai/agents"),
        sdk_key_var="OPENAI_API_KEY",
        key_vars=_OPENAI_KEYS,
        placeholder_vars=_OPENAI_KEYS,
        system_roots=(),
        message_roots=("messages",),
        tool_roots=("tools", "functions"),
        model_roots=("model",),
        content_keys=(
            "content", "text", "role", "name", "type", "tool_calls", "function",
            "function_call", "arguments",
        ),
        allowed_headers=_OPENAI_HEADERS,
        # OpenAI caches the longest prefix of the prompt: tools, then the messages (the system
        # and developer messages are the first of them).
        cache_order=("tools", "messages"),
        genai_provider="openai",
        genai_hosts=(
            (_AZURE_OPENAI, "azure.ai.openai"),
            ("api.groq.com", "groq"),
            ("api.mistral.ai", "mistral_ai"),
            ("api.deepseek.com", "deepseek"),
            ("api.x.ai", "x_ai"),
        ),
    ),
    Provider(
        name="openai-responses",
        # chatgpt.com serves Codex's model calls under a ChatGPT login, and receives its key.
        hosts=(_OPENAI_HOST, "chatgpt.com", "openrouter.ai"),
        host_suffixes=(_AZURE_OPENAI,),
        paths=("/v1/responses",),
        path_suffixes=("/responses",),
        base_url_host=_OPENAI_HOST,
        base_url_vars=_OPENAI_BASE_URL,
        base_url_aliases=(),
        family="openai",
        python_modules=("openai", "agents"),
        node_packages=("openai", "@openai/agents"),
        sdk_key_var="OPENAI_API_KEY",
        key_vars=_OPENAI_KEYS,
        placeholder_vars=_OPENAI_KEYS,
        system_roots=("instructions",),
        message_roots=("input",),
        tool_roots=("tools",),
        model_roots=("model",),
        content_keys=(
            "content", "text", "role", "name", "type", "arguments", "output", "summary",
        ),
        allowed_headers=_OPENAI_HEADERS,
        cache_order=("tools", "instructions", "input"),
        genai_provider="openai",
        genai_hosts=((_AZURE_OPENAI, "azure.ai.openai"),),
    ),
    Provider(
        name="anthropic",
        hosts=("api.anthropic.com",),
        host_suffixes=(),
        paths=("/v1/messages",),
        path_suffixes=("/messages",),
        base_url_host="api.anthropic.com",
        base_url_vars=(BaseUrlVar("ANTHROPIC_BASE_URL", ""),),
        base_url_aliases=(("/messages", "/v1/messages"),),
        family="anthropic",
        python_modules=("anthropic", "claude_agent_sdk"),
        node_packages=("@anthropic-ai/sdk", "@anthropic-ai/claude-agent-sdk"),
        sdk_key_var="ANTHROPIC_API_KEY",
        # The anthropic SDK (2.x) uses ANTHROPIC_API_KEY and ignores ANTHROPIC_AUTH_TOKEN when
        # both are set; Claude Code reads the same two, and its own login token.
        key_vars=("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"),
        placeholder_vars=("ANTHROPIC_API_KEY",),
        system_roots=("system",),
        message_roots=("messages",),
        tool_roots=("tools",),
        model_roots=("model",),
        content_keys=(
            "content", "text", "role", "name", "type", "input", "thinking", "source", "data",
            "result",
        ),
        allowed_headers=("content-type", "anthropic-version", "anthropic-beta"),
        # Anthropic's prompt caching documents the prefix order: tools, system, then messages.
        cache_order=("tools", "system", "messages"),
        cache_ignored_keys=("cache_control",),
        genai_provider="anthropic",
    ),
    Provider(
        name="gemini",
        hosts=("generativelanguage.googleapis.com",),
        # Vertex AI: us-central1-aiplatform.googleapis.com and its regional siblings.
        host_suffixes=("aiplatform.googleapis.com",),
        # google-genai sends v1 by default and v1beta when asked (the REST reference's form).
        paths=(
            "/v1/models/{model}:generateContent",
            "/v1/models/{model}:streamGenerateContent",
            "/v1beta/models/{model}:generateContent",
            "/v1beta/models/{model}:streamGenerateContent",
        ),
        path_suffixes=(":streamGenerateContent", ":generateContent"),
        base_url_host="generativelanguage.googleapis.com",
        base_url_vars=(BaseUrlVar("GOOGLE_GEMINI_BASE_URL", ""),),
        base_url_aliases=(),
        family="gemini",
        python_modules=("google.genai", "google.generativeai"),
        node_packages=("@google/genai", "@google/generative-ai"),
        sdk_key_var="GEMINI_API_KEY",
        # google-genai reads GOOGLE_API_KEY before GEMINI_API_KEY (and warns when both are set).
        key_vars=("GOOGLE_API_KEY", "GEMINI_API_KEY"),
        placeholder_vars=("GOOGLE_API_KEY", "GEMINI_API_KEY"),
        system_roots=("systemInstruction", "system_instruction"),
        message_roots=("contents",),
        tool_roots=("tools",),
        model_roots=(),  # the model is in the URL path
        content_keys=(
            "parts", "text", "role", "name", "args", "response", "functionCall",
            "functionResponse", "function_call", "function_response", "data",
        ),
        allowed_headers=("content-type", "x-goog-api-version"),
        # Gemini documents only that a cached context is the prompt's beginning; flowproof reads
        # its parts in the order the other providers cache them.
        cache_order=("tools", "systemInstruction", "system_instruction", "contents"),
        # The conventions name the AI Studio API gcp.gemini and its operation generate_content.
        genai_provider="gcp.gemini",
        genai_operation="generate_content",
        genai_hosts=(("aiplatform.googleapis.com", "gcp.vertex_ai"),),
    ),
)

_BY_NAME = {p.name: p for p in PROVIDERS}


def provider(name: str) -> Provider:
    """The row for codec ``name``; KeyError for a name that is not in the table."""
    return _BY_NAME[name]


def genai_provider(name: str, host: str | None = None) -> str:
    """``gen_ai.provider.name`` of a call of codec ``name`` to ``host`` (None: the API's owner).

    >>> genai_provider("openai-chat", "api.groq.com"), genai_provider("gemini")
    ('groq', 'gcp.gemini')
    >>> genai_provider("gemini", "us-central1-aiplatform.googleapis.com")
    'gcp.vertex_ai'
    """
    row = _BY_NAME[name]
    if host:
        host = host.lower()
        for pattern, named in row.genai_hosts:
            if host == pattern.lstrip(".") or host.endswith(pattern):
                return named
    return row.genai_provider


def _unique(items: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def model_hosts() -> tuple[str, ...]:
    """Every well-known model host, once, in table order."""
    return _unique([h for p in PROVIDERS for h in p.hosts])


def model_host_suffixes() -> tuple[str, ...]:
    """Every host-family suffix (``.openai.azure.com``, ``aiplatform.googleapis.com``), once."""
    return _unique([s for p in PROVIDERS for s in p.host_suffixes])


def reverse_hosts() -> tuple[str, ...]:
    """The upstreams of the base-URL route, once each, in table order (one listener per host)."""
    return _unique([p.base_url_host for p in PROVIDERS])


def base_url_vars() -> tuple[tuple[str, BaseUrlVar], ...]:
    """``(upstream host, variable)`` for every base-URL variable, once per variable."""
    seen: dict[str, tuple[str, BaseUrlVar]] = {}
    for p in PROVIDERS:
        for var in p.base_url_vars:
            seen.setdefault(var.name, (p.base_url_host, var))
    return tuple(seen.values())


def base_url_path(host: str, path: str) -> str | None:
    """The API path a base-URL-route request to upstream ``host`` (normalized) at ``path`` (no
    query) stands for, when ``path`` is a client's alias of it (`Provider.base_url_aliases`);
    None otherwise.

    >>> base_url_path("api.anthropic.com", "/messages")
    '/v1/messages'
    >>> base_url_path("api.anthropic.com", "/v1/messages") is None
    True
    """
    return _ALIASES.get((host, path.rstrip("/")))


_ALIASES = {(p.base_url_host, alias): api for p in PROVIDERS for alias, api in p.base_url_aliases}


def base_url_families() -> tuple[tuple[str, str, str], ...]:
    """``(family, upstream host, path suffix)`` of every base URL, once per family: what
    ``${flowproof.base_url.<family>}`` becomes (the reverse listener plus the suffix the
    official client's variable carries, ``/v1`` for OpenAI)."""
    seen: dict[str, tuple[str, str, str]] = {}
    for p in PROVIDERS:
        suffix = p.base_url_vars[0].suffix if p.base_url_vars else ""
        seen.setdefault(p.family, (p.family, p.base_url_host, suffix))
    return tuple(seen.values())


def allowed_headers() -> frozenset[str]:
    """The cassette header allow-list: the union of every provider's allowed headers."""
    return frozenset(h for p in PROVIDERS for h in p.allowed_headers)


@dataclass(frozen=True, slots=True)
class ConversationVocabulary:
    """The union over providers of the body roots the volatile-rule refusal list needs.

    A spec does not say which API its agent speaks, so a rule is judged against
    every provider's vocabulary at once.
    """

    system_roots: frozenset[str]
    message_roots: frozenset[str]
    tool_roots: frozenset[str]
    model_roots: frozenset[str]
    content_keys: frozenset[str]


def conversation_vocabulary() -> ConversationVocabulary:
    """The body vocabulary of every provider, merged (see `ConversationVocabulary`)."""
    return ConversationVocabulary(
        system_roots=frozenset(r for p in PROVIDERS for r in p.system_roots),
        message_roots=frozenset(r for p in PROVIDERS for r in p.message_roots),
        tool_roots=frozenset(r for p in PROVIDERS for r in p.tool_roots),
        model_roots=frozenset(r for p in PROVIDERS for r in p.model_roots),
        content_keys=frozenset(k for p in PROVIDERS for k in p.content_keys),
    )
