#!/usr/bin/env python3
"""Serves the web push example on http://localhost:8000 and passes its one
API call, PUT /api/v1/registrations/{id}, on to a Clarion coordinator with
the API key, as a site's own backend would: the page and the call share one
origin (the coordinator sends no CORS headers, and an API key does not
belong in a page). Also serves /config.json: the VAPID public key the page
subscribes with.

Usage:
  CLARION_API_KEY=desk-key python3 serve.py \
      --vapid-public-key "$(cat vapid-public.txt)" \
      [--coordinator http://127.0.0.1:8080] [--port 8000]
"""
import argparse
import functools
import http.server
import json
import os
import re
import sys
import urllib.error
import urllib.request

ROUTE = re.compile(r"^/api/v1/registrations/[A-Za-z0-9_-]{16,128}$")
MAX_BODY = 8192
DEADLINE_SECONDS = 10


class Handler(http.server.SimpleHTTPRequestHandler):
    # Set by main(): the coordinator and key (kept here), and what the
    # page may see.
    config = {}
    page_config = {}

    def do_GET(self):
        if self.path == "/config.json":
            self.answer(200, json.dumps(self.page_config).encode(), "application/json")
        else:
            super().do_GET()

    def do_PUT(self):
        length = int(self.headers.get("content-length") or 0)
        if not ROUTE.match(self.path) or length > MAX_BODY:
            self.answer(404 if length <= MAX_BODY else 413, b"", "text/plain")
            return
        request = urllib.request.Request(
            self.config["coordinator"] + self.path,
            data=self.rfile.read(length),
            method="PUT",
            headers={
                "content-type": "application/json",
                "authorization": "Bearer " + self.config["apiKey"],
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=DEADLINE_SECONDS) as response:
                self.answer(response.status, response.read(), response.headers.get("content-type", ""))
        except urllib.error.HTTPError as refused:
            self.answer(refused.code, refused.read(), refused.headers.get("content-type", ""))
        except OSError as err:
            self.answer(502, str(err).encode(), "text/plain")

    def answer(self, status, body, content_type):
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--coordinator", default="http://127.0.0.1:8080")
    parser.add_argument("--vapid-public-key", required=True, help="base64url, 65 bytes uncompressed")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    api_key = os.environ.get("CLARION_API_KEY")
    if not api_key:
        sys.exit("set CLARION_API_KEY to a key with the `register` scope")
    Handler.config = {"coordinator": args.coordinator.rstrip("/"), "apiKey": api_key}
    Handler.page_config = {"vapidPublicKey": args.vapid_public_key}
    here = os.path.dirname(os.path.abspath(__file__))
    handler = functools.partial(Handler, directory=here)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), handler)
    print(f"open http://localhost:{args.port}/ (localhost counts as a secure origin)")
    server.serve_forever()


if __name__ == "__main__":
    main()
