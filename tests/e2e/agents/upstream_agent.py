"""An agent on the official ``openai`` SDK that makes one chat call and prints the reply.

With ``TELEMETRY_URL`` set it first sends a ping there that trusts only the public CA bundle
(as some SDKs' telemetry does), so the proxy sees a TLS failure on a host that is not a model
host; the ping's failure is ignored. No retries: one failed call ends the run, with the
SDK's traceback on stderr.
"""

from __future__ import annotations

import os
import ssl
import sys
import urllib.request

import certifi
import openai

telemetry = os.environ.get("TELEMETRY_URL")
if telemetry:
    context = ssl.create_default_context(cafile=certifi.where())
    try:
        urllib.request.urlopen(telemetry, context=context, timeout=10)
    except OSError as e:
        print(f"upstream_agent: telemetry ping failed: {e}", file=sys.stderr)

client = openai.OpenAI(max_retries=0)
completion = client.chat.completions.create(
    model="gpt-4o-mini", messages=[{"role": "user", "content": os.environ.get("FLOWPROOF_PROMPT", "hi")}]
)
print(completion.choices[0].message.content)
