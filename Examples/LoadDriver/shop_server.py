#!/usr/bin/env python3
"""The shop's own server, for the load example: `sksim load --backend URL/purchases` POSTs each
purchased or restored transaction to it before the app finishes it (it grants the transaction to
the account), and the example driver's users GET URL/entitlements?account=A after each purchase.

    python3 shop_server.py [PORT] [PORT_FILE]     # PORT 0: any free port, written to PORT_FILE
"""
import json
import os
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

granted = {}  # account -> set of App Store transaction ids
lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def answer(self, code, body=b""):
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if not self.path.startswith("/purchases"):
            return self.answer(404)
        try:
            purchase = json.loads(body)
            account, transaction = purchase["account"], purchase["transactionId"]
        except (ValueError, KeyError, TypeError):
            return self.answer(400)
        with lock:
            granted.setdefault(account, set()).add(transaction)
        self.answer(200, b"{}")

    def do_GET(self):
        url = urllib.parse.urlparse(self.path)
        if url.path != "/entitlements":
            return self.answer(404)
        account = urllib.parse.parse_qs(url.query).get("account", [""])[0]
        with lock:
            listed = sorted(granted.get(account, ()))
        self.answer(200, json.dumps({"account": account, "transactions": listed}).encode())

    def log_message(self, *arguments):
        pass


server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 8080), Handler)
if len(sys.argv) > 2:
    with open(sys.argv[2] + ".tmp", "w") as out:
        out.write(str(server.server_address[1]))
    os.rename(sys.argv[2] + ".tmp", sys.argv[2])
print("shop server on http://127.0.0.1:%d" % server.server_address[1], flush=True)
server.serve_forever()
