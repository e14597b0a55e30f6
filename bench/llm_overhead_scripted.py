"""The scripted OpenAI-compatible server the LLM overhead bench times Chukwa against, driven in
this process or in a child process (this file run as a script: JSON lines on stdin and stdout)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

PROJECT_DIR = Path(__file__).resolve().parent.parent
if str(PROJECT_DIR) not in sys.path:  # the child imports tests.support.scripted_llm
    sys.path.insert(0, str(PROJECT_DIR))

CHUNK_SIZE = 8


class ScriptedServer:
    """The ScriptedLLM, driven through a small interface, so that it can run either in this
    process or in a child process. In this process its handler thread shares the GIL with the
    code being measured: while Chukwa waits on a socket, the server thread takes the GIL, and
    Chukwa's thread may then wait up to the interpreter's switch interval (5 ms) to get it
    back, so the server's time leaks into Chukwa's. A child process keeps it out."""

    base_url: str

    def script(self, text: str) -> None:
        raise NotImplementedError

    def status(self) -> dict[str, Any]:
        """pending, failures, requests, probes, accepted (connections accepted so far)."""
        raise NotImplementedError

    def last_request(self) -> dict[str, Any]:
        raise NotImplementedError

    def set_nagle(self, on: bool) -> None:
        """Nagle's algorithm on connections accepted from now on (on = as shipped)."""
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError


class _Controller:
    """Answers the control operations on a running ScriptedLLM (both modes use it)."""

    def __init__(self) -> None:
        from tests.support import scripted_llm

        self.module = scripted_llm
        # TCP_NODELAY on accepted connections, as real OpenAI-compatible servers set it: with
        # Nagle's algorithm on (socketserver's default), a streamed reply's first event waits
        # for the client's delayed ACK, about 40 ms on Linux; that is neither model nor Chukwa.
        scripted_llm._Handler.disable_nagle_algorithm = True
        self.llm = scripted_llm.ScriptedLLM().start()
        self.accepted = 0
        track = self.llm._track

        def counting_track(conn: Any) -> None:
            self.accepted += 1
            track(conn)

        self.llm._track = counting_track  # type: ignore[method-assign]

    def handle(self, command: dict[str, Any]) -> dict[str, Any]:
        op = command["op"]
        if op == "script":
            reply = self.module.Reply(text=command["text"], chunk_size=CHUNK_SIZE, delay_s=0)
            self.llm.script(reply)
            return {"pending": self.llm.pending}
        if op == "status":
            return {
                "pending": self.llm.pending,
                "failures": self.llm.failures,
                "requests": len(self.llm.requests),
                "probes": len(self.llm.probes),
                "accepted": self.accepted,
            }
        if op == "last_request":
            return {"request": self.llm.requests[-1]}
        if op == "nagle":
            self.module._Handler.disable_nagle_algorithm = not command["on"]
            return {}
        raise ValueError(f"unknown operation {op!r}")

    def stop(self) -> None:
        self.llm.stop()


class InProcessServer(ScriptedServer):
    def __init__(self) -> None:
        self.controller = _Controller()
        self.base_url = self.controller.llm.base_url

    def script(self, text: str) -> None:
        self.controller.handle({"op": "script", "text": text})

    def status(self) -> dict[str, Any]:
        return self.controller.handle({"op": "status"})

    def last_request(self) -> dict[str, Any]:
        return self.controller.handle({"op": "last_request"})["request"]

    def set_nagle(self, on: bool) -> None:
        self.controller.handle({"op": "nagle", "on": on})

    def stop(self) -> None:
        self.controller.stop()


class ChildProcessServer(ScriptedServer):
    """This file run as a script: JSON lines in on stdin, out on stdout."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve())],
            cwd=PROJECT_DIR,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.base_url = self._read()["base_url"]

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the scripted server process exited ({self.proc.poll()})")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"scripted server process: {answer['error']}")
        return answer

    def _call(self, command: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def script(self, text: str) -> None:
        self._call({"op": "script", "text": text})

    def status(self) -> dict[str, Any]:
        return self._call({"op": "status"})

    def last_request(self) -> dict[str, Any]:
        return self._call({"op": "last_request"})["request"]

    def set_nagle(self, on: bool) -> None:
        self._call({"op": "nagle", "on": on})

    def stop(self) -> None:
        if self.proc.poll() is not None:
            return
        if self.proc.stdin is not None:
            self.proc.stdin.close()  # end of input: the child stops its server and exits
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


def serve_child() -> int:
    """The child side of ChildProcessServer (no Django here)."""
    controller = _Controller()
    print(json.dumps({"base_url": controller.llm.base_url}), flush=True)
    try:
        for line in sys.stdin:
            try:
                answer = controller.handle(json.loads(line))
            except (ValueError, KeyError, IndexError, TypeError) as exc:
                answer = {"error": f"{type(exc).__name__}: {exc}"}
            print(json.dumps(answer), flush=True)
    finally:
        controller.stop()
    return 0


if __name__ == "__main__":
    sys.exit(serve_child())
