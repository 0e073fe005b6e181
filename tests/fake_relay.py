"""A scripted relay on 127.0.0.1 for the drain's fault tests: it speaks the relay's protocol
(`GET /relay/v1/events`, `/relay/v1/wake`) from a list of events the test writes, can answer
500s, 503s or 429s (with a Retry-After) or ignore `after` (a non-advancing cursor), and records who asked what and when."""

from __future__ import annotations

import asyncio
import base64
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from fastapi import FastAPI, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse

from tests.support import free_port, wait_until

TOKEN = "fake-relay-token"


@dataclass
class Asked:
    """One request to the fake relay."""

    at: float
    agent: str
    after: int


@dataclass
class FakeRelay:
    """The fake relay's script and its record."""

    events: list[dict[str, Any]] = field(default_factory=list)
    fail_next: int = 0  # answer this many event listings with `fail_status`
    fail_status: int = 500
    retry_after: str | None = None  # the failing answers' Retry-After header, if any
    ignore_after: bool = False  # answer every listing from the first event (non-advancing)
    asked: list[Asked] = field(default_factory=list)
    sockets: int = 0  # wake-up sockets open now
    most_sockets: int = 0  # the most ever open at once
    socket_agents: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._lock = threading.Lock()
        self._wakeups: list[asyncio.Queue[int]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        config = uvicorn.Config(
            self._app(),
            host="127.0.0.1",
            port=self.port,
            ws="websockets-sansio",
            log_level="warning",
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    def add(self, source: str, delivery: str | None, event: str | None, body: bytes) -> int:
        """Append an event (the cursor is its position, from 1) and wake the listeners."""
        with self._lock:
            cursor = len(self.events) + 1
            self.events.append(
                {
                    "cursor": cursor,
                    "source": source,
                    "delivery_id": delivery,
                    "event": event,
                    "received_at": "2026-12-01T10:00:00+00:00",
                    "body": base64.b64encode(body).decode(),
                }
            )
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._wake, cursor)
        return cursor

    def start(self) -> FakeRelay:
        self._thread.start()
        wait_until(lambda: self._server.started, 10, "the fake relay to listen")
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)

    def _wake(self, cursor: int) -> None:
        for queue in self._wakeups:
            queue.put_nowait(cursor)

    def _app(self) -> FastAPI:
        app = FastAPI()

        @app.get("/relay/v1/events")
        def events(request: Request, after: int = 0, limit: int = 100) -> JSONResponse:
            self._loop = self._loop or _running_loop(request)
            self.asked.append(Asked(time.time(), request.headers.get("user-agent", ""), after))
            if request.headers.get("authorization") != f"Bearer {TOKEN}":
                return JSONResponse({"detail": "bad token"}, status_code=401)
            if self.fail_next > 0:
                self.fail_next -= 1
                headers = {"Retry-After": self.retry_after} if self.retry_after else None
                return JSONResponse(
                    {"detail": "the relay's database is down"},
                    status_code=self.fail_status,
                    headers=headers,
                )
            with self._lock:
                chosen = self.events if self.ignore_after else self.events[after:]
                page = chosen[:limit]
                newest = len(self.events)
            return JSONResponse({"events": page, "newest": newest})

        @app.websocket("/relay/v1/wake")
        async def wake(websocket: WebSocket) -> None:
            self._loop = asyncio.get_running_loop()
            await websocket.accept()
            queue: asyncio.Queue[int] = asyncio.Queue()
            self._wakeups.append(queue)
            self.sockets += 1
            self.most_sockets = max(self.most_sockets, self.sockets)
            self.socket_agents.append(websocket.headers.get("user-agent", ""))
            try:
                await websocket.send_json({"type": "hello", "newest": len(self.events)})
                while True:
                    getter = asyncio.ensure_future(queue.get())
                    receiver = asyncio.ensure_future(websocket.receive())
                    done, pending = await asyncio.wait(
                        {getter, receiver}, return_when=asyncio.FIRST_COMPLETED
                    )
                    for task in pending:
                        task.cancel()
                    if receiver in done:
                        if receiver.result()["type"] == "websocket.disconnect":
                            return
                        continue
                    await websocket.send_json({"type": "wake", "cursor": getter.result()})
            except WebSocketDisconnect:
                pass
            finally:
                self.sockets -= 1
                self._wakeups.remove(queue)

        return app


def _running_loop(_request: Request) -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:  # a sync route runs in a thread; the socket route records the loop
        return None
