"""A small agent service for `url:` specs: POST {"prompt": "..."} -> one openai SDK call -> the reply.

Started by hand (here: by the test) with the exports of ``flowproof env
--proxy-port N`` in its environment, so its model calls go through whichever
flowproof proxy listens on N. It listens on 127.0.0.1 (port 0: the OS picks)
and prints ``listening on http://127.0.0.1:PORT`` as its first stdout line.
Anything but a JSON object with a string ``prompt`` is a 400; a failed model
call is a 502 with the error.
"""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import openai

MODEL = "gpt-4o-mini"
SYSTEM_PROMPT = "You are a concise support agent for a flight booking site."

client = openai.OpenAI(max_retries=0, timeout=20)


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        try:
            prompt = json.loads(self.rfile.read(length))["prompt"]
            if not isinstance(prompt, str):
                raise TypeError("prompt must be a string")
        except (ValueError, KeyError, TypeError) as e:
            self.answer(400, f"bad request: {e}")
            return
        try:
            completion = client.chat.completions.create(
                model=MODEL,
                messages=[{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": prompt}],
            )
        except openai.OpenAIError as e:
            self.answer(502, f"model call failed: {e}")
            return
        self.answer(200, completion.choices[0].message.content or "")

    def answer(self, status: int, text: str) -> None:
        data = text.encode("utf-8")
        self.send_response(status)
        self.send_header("content-type", "text/plain; charset=utf-8")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        print(format % args, file=sys.stderr, flush=True)


def main() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(f"listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
