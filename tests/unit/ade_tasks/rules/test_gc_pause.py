"""The cyclic collector is paused for a block of bulk work and comes back as it was."""

from __future__ import annotations

import gc

import pytest

from ade_tasks.rules.gc_pause import paused_gc


def test_the_collector_is_off_in_the_block_and_on_again_after_even_on_an_error() -> None:
    assert gc.isenabled()
    with paused_gc():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), paused_gc():
        raise RuntimeError("a failed sync")
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off() -> None:
    gc.disable()
    try:
        with paused_gc(), paused_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
