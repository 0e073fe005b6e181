"""The cluster simulation's open-loop load: signed GitHub deliveries and operators' manual runs
at steady rates, into the real API.

Open loop: the i-th request is due at start + i / rate whatever the answers do, so a slow API
shows up as latency and as sends that left late (counted), not as a lower offered rate. At most
`in_flight` requests of a kind are outstanding (one keep-alive `bench.rawhttp` connection each);
a request that finds none free waits for one and is sent late, its trigger instant being when it
actually left. Every delivery goes to one repository of the mix's webhook rules, so it starts
exactly one rule's run (idempotency key `github:<delivery id>:<rule id>`); every manual run names
one of the manual rules (`POST /api/v1/rules/{id}/runs`, an operator token).
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from bench import rawhttp
from bench.cluster_mix import Layout
from bench.common import github_headers
from bench.webhooks_load import trimmed_payload

WEBHOOK_PATH = "/api/v1/webhooks/github"
REQUEST_TIMEOUT = 30.0
LATE_SECONDS = 0.5  # a send this much after its due time counts as late
# uvicorn closes a keep-alive connection idle for 5 s; one idle this long is reopened first.
IDLE_SECONDS = 3.0
NUMBER = 987654321  # stands for the pull request number in the template


@dataclass
class Sent:
    """One request: when it left (epoch seconds), its round trip and what came back."""

    key: str  # the delivery id, or the manual run's id once answered
    sent: float
    seconds: float
    status: int  # 0: no answer
    late: bool


@dataclass
class LoadLog:
    """Everything the load generator sent, by kind, and the first error of each sort."""

    webhooks: list[Sent] = field(default_factory=list)
    manual: list[Sent] = field(default_factory=list)
    first_errors: dict[str, str] = field(default_factory=dict)


class Deliveries:
    """`pull_request.opened` deliveries to a chosen repository, signed with the secret."""

    def __init__(self, secret: bytes) -> None:
        self.secret = secret
        payload = trimmed_payload()
        payload["repository"]["full_name"] = "@REPO@"
        payload["number"] = payload["pull_request"]["number"] = NUMBER
        self._template = json.dumps(payload, separators=(",", ":"))

    def make(self, repo: str, number: int) -> tuple[str, dict[str, str], bytes]:
        """(delivery id, headers, body) of one delivery."""
        text = self._template.replace('"@REPO@"', json.dumps(repo))
        body = text.replace(str(NUMBER), str(number)).encode()
        delivery = str(uuid.uuid4())
        headers = github_headers(self.secret, delivery, body, "GitHub-Hookshot/bench-cluster")
        return delivery, headers, body


async def generate(
    url: str,
    token: str,
    secret: bytes,
    layout: Layout,
    rates: tuple[float, float],
    seconds: float,
    in_flight: int = 16,
    seed: int = 18,
) -> LoadLog:
    """Webhooks at `rates[0]` and manual runs at `rates[1]` per second for `seconds`."""
    log = LoadLog()
    rng = random.Random(seed)
    deliveries = Deliveries(secret)
    start = time.monotonic() + 0.05
    webhook_rate, manual_rate = rates

    async def webhook(connection: rawhttp.Connection, seq: int, due: float) -> None:
        repo = layout.webhook_repos[rng.randrange(len(layout.webhook_repos))]
        delivery, headers, body = deliveries.make(repo, seq + 1)
        sent = await _send(connection, log, delivery, WEBHOOK_PATH, headers, body, due)
        log.webhooks.append(sent)

    async def manual(connection: rawhttp.Connection, _seq: int, due: float) -> None:
        rule = layout.manual_rules[rng.randrange(len(layout.manual_rules))]
        headers = {"content-type": "application/json", "authorization": f"Bearer {token}"}
        path = f"/api/v1/rules/{rule}/runs"
        sent = await _send(connection, log, "", path, headers, b'{"requested_by":"sim"}', due)
        log.manual.append(sent)

    async with asyncio.TaskGroup() as group:
        if webhook_rate > 0 and layout.webhook_repos:
            group.create_task(_paced(url, webhook_rate, start, seconds, in_flight, webhook))
        if manual_rate > 0 and layout.manual_rules:
            group.create_task(_paced(url, manual_rate, start, seconds, in_flight, manual))
    return log


Sender = Callable[[rawhttp.Connection, int, float], Awaitable[None]]


async def _paced(
    url: str, rate: float, start: float, seconds: float, in_flight: int, send: Sender
) -> None:
    """Call `send(connection, seq, due)` for seq = 0, 1, ... at `rate` per second."""
    # Last in, first out: at low rates one or two connections stay warm and the rest idle.
    free: asyncio.LifoQueue[rawhttp.Connection] = asyncio.LifoQueue()
    used: dict[rawhttp.Connection, float] = {}
    for _ in range(in_flight):
        free.put_nowait(rawhttp.Connection(url, REQUEST_TIMEOUT))

    async def one(seq: int, due: float) -> None:
        connection = await free.get()
        if time.monotonic() - used.get(connection, math.inf) > IDLE_SECONDS:
            connection.close()  # the server may be closing it right now: open a fresh one
        try:
            await send(connection, seq, due)
        finally:
            used[connection] = time.monotonic()
            free.put_nowait(connection)

    try:
        async with asyncio.TaskGroup() as group:
            for seq in range(int(rate * seconds)):  # bounded: rate x seconds requests
                due = start + seq / rate
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                group.create_task(one(seq, due))
    finally:
        while not free.empty():
            free.get_nowait().close()


async def _send(
    connection: rawhttp.Connection,
    log: LoadLog,
    key: str,
    path: str,
    headers: dict[str, str],
    body: bytes,
    due: float,
) -> Sent:
    left = time.monotonic()
    sent = time.time()
    late = left - due > LATE_SECONDS
    try:
        answer = await connection.post(path, headers, body)
    except rawhttp.HttpError as exc:
        log.first_errors.setdefault(f"{path.split('/')[3]} {str(exc).partition(':')[0]}", str(exc))
        return Sent(key, sent, time.monotonic() - left, 0, late)
    seconds = time.monotonic() - left
    if answer.status != 202:
        kind = f"{path.split('/')[3]} HTTP {answer.status}"
        log.first_errors.setdefault(kind, answer.body[:300].decode(errors="replace"))
    elif not key:
        key = str(json.loads(answer.body).get("run_id", ""))
    return Sent(key, sent, seconds, answer.status, late)
