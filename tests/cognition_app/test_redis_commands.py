"""Redis commands on a thread's own connection (``cognition_app.sources.admission.leases.
commands``): the replies as Redis gives them, a connection the server dropped replaced once, an
error reply raised without spoiling the connection, a forked child never sharing its parent's,
and a script Redis lost loaded again."""

from __future__ import annotations

import os
import uuid

import pytest
from redis.exceptions import ResponseError

from cognition_app.sources.admission import leases
from cognition_app.sources.admission.leases import client, command, commands, script


def _key() -> str:
    return leases.redis_key("test-commands", uuid.uuid4().hex)


def _own_id() -> int:
    return int(command("CLIENT", "ID"))


def test_replies_come_as_redis_gives_them_and_in_order() -> None:
    key = _key()
    try:
        assert command("SET", key, "a", "NX", "PX", 60_000) == b"OK"
        assert command("SET", key, "b", "NX", "PX", 60_000) is None  # taken: not set
        assert commands(("RPUSH", key + ":l", "x", "y"), ("LLEN", key + ":l"), ("GET", key)) == [
            2,
            2,
            b"a",
        ]
    finally:
        client().delete(key, key + ":l")


def test_the_thread_keeps_its_one_connection() -> None:
    first = _own_id()
    assert [_own_id() for _ in range(3)] == [first] * 3


def test_a_connection_the_server_dropped_is_replaced_once() -> None:
    """What a Redis restart does to an idle connection: the next command still succeeds, on a
    new connection."""
    dropped = _own_id()
    client().client_kill_filter(_id=dropped)
    assert command("PING") == b"PONG"
    assert _own_id() != dropped


def test_an_error_reply_is_raised_after_every_reply_is_read() -> None:
    key = _key()
    try:
        client().set(key, "not a list")
        with pytest.raises(ResponseError, match="WRONGTYPE"):
            commands(("LLEN", key), ("SET", key + ":after", "1"))
        assert client().get(key + ":after") == b"1"  # the command after the error ran
        assert command("PING") == b"PONG"  # and the connection is in step
    finally:
        client().delete(key, key + ":after")


def test_a_forked_child_makes_its_own_connection() -> None:
    parent = _own_id()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its answer through the pipe, then out without cleanup
        try:
            os.write(write, str(_own_id()).encode())
        finally:
            os._exit(0)
    os.close(write)
    child = int(os.read(read, 64))
    os.close(read)
    os.waitpid(pid, 0)
    assert child != parent
    assert _own_id() == parent  # the parent's connection is untouched


def test_a_script_redis_lost_is_loaded_again() -> None:
    key = _key()
    text = "return redis.call('SET', KEYS[1], ARGV[1])"
    run = script(client(), text)
    try:
        assert run(keys=[key], args=["1"]) == b"OK"
        client().script_flush()
        assert run(keys=[key], args=["2"]) == b"OK"  # NOSCRIPT: loaded and run
        assert client().get(key) == b"2"
    finally:
        client().delete(key)
