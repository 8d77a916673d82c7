"""An OpenAI-compatible HTTP server in-process, for what a local model never does: failures of a remote service
(500, 429, hangs, garbage, empty answers, a rejected key), and a stand-in served model for command-line tests whose
subject is the command's handling of the backend, not the model's answers. It answers ``GET /v1/models`` with
``model_ids``, and each ``POST`` by the next behaviour of its script (the last one repeats)."""

from __future__ import annotations

import http.server
import json
import threading
import time


def _completion(content: str | None, *, usage: bool = True, logprobs: bool = True) -> dict:
    choice: dict = {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
    if logprobs:
        choice["logprobs"] = {"content": [{"token": "Paris", "logprob": -0.1, "bytes": None, "top_logprobs": []}]}
    body: dict = {"id": "c1", "object": "chat.completion", "created": 0, "model": "fake", "choices": [choice]}
    if usage:
        body["usage"] = {"prompt_tokens": 12, "completion_tokens": 1, "total_tokens": 13}
    return body


class FaultServer:
    """Answers each POST by the next behaviour of ``script`` (the last one repeats) and records what it received."""

    def __init__(self, script: list[str], model_ids: tuple[str, ...] = ("fake-served-model",)) -> None:
        self.script = list(script)
        self.model_ids = list(model_ids)
        self.requests: list[dict] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                if self.path.rstrip("/") != "/v1/models":
                    self.send_error(404)
                    return
                payload = json.dumps({"object": "list", "data": [{"id": m, "object": "model"} for m in outer.model_ids]})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload.encode())

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                with outer.lock:
                    outer.requests.append({"auth": self.headers.get("Authorization"), "body": body})
                    behaviour = outer.script.pop(0) if len(outer.script) > 1 else outer.script[0]
                    outer.in_flight += 1
                    outer.max_in_flight = max(outer.max_in_flight, outer.in_flight)
                outer.respond(self, behaviour)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def respond(self, handler: http.server.BaseHTTPRequestHandler, behaviour: str) -> None:
        status, ctype, payload = 200, "application/json", b""
        if behaviour == "ok":
            payload = json.dumps(_completion("Paris")).encode()
        elif behaviour == "bare":
            payload = json.dumps(_completion("Paris", usage=False, logprobs=False)).encode()
        elif behaviour == "slow":
            time.sleep(0.3)
            payload = json.dumps(_completion("Paris")).encode()
        elif behaviour == "hang":
            time.sleep(3.0)
            payload = json.dumps(_completion("late")).encode()
        elif behaviour == "empty":
            payload = json.dumps(_completion("")).encode()
        elif behaviour == "garbage":
            ctype, payload = "text/html", b"<html><body>502 Bad Gateway</body></html>"
        elif behaviour == "no-choices":
            payload = b'{"object": "chat.completion", "choices": []}'
        elif behaviour == "echo-key":  # a careless service that repeats the key back in its error
            status = 401
            auth = handler.headers.get("Authorization") or ""
            payload = json.dumps({"error": {"message": f"invalid key {auth.removeprefix('Bearer ')}"}}).encode()
        else:  # an HTTP status
            status = int(behaviour)
            payload = json.dumps({"error": {"message": f"status {status} on purpose"}}).encode()
        # the request stops counting as in flight before its answer is sent: once the client has the answer it may send
        # the next one, which must not overlap this one in the count
        with self.lock:
            self.in_flight -= 1
        handler.send_response(status)
        handler.send_header("Content-Type", ctype)
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
