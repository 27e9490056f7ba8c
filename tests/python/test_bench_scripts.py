"""The benchmark helpers in bench/ that need no GPU: the peers' timer (warm-up by count and by time, then
the median of the timed calls) and the commit the merged results record."""

import os
import sys
import time

import pytest

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench")
sys.path.insert(0, BENCH)

import compare  # noqa: E402
import peers_sdpa  # noqa: E402


class FakeTorch:
    """Just enough of torch for peers_sdpa.Timer: host-clock events and a synchronize that counts."""

    class _Cuda:
        def __init__(self):
            self.syncs = 0

        def synchronize(self):
            self.syncs += 1

        class Event:
            def __init__(self, enable_timing=False):
                self.t = None

            def record(self):
                self.t = time.perf_counter()

            def elapsed_time(self, end):
                return (end.t - self.t) * 1e3

    def __init__(self):
        self.cuda = FakeTorch._Cuda()


def test_timer_warms_up_by_count_without_a_time():
    torch, calls = FakeTorch(), []
    timer = peers_sdpa.Timer(torch, warmup=2, repeat=3, warmup_ms=0.0)
    timer.median_ms(lambda: calls.append(1))
    assert len(calls) == 2 + 3


def test_timer_warms_up_until_the_time_has_passed():
    torch, calls = FakeTorch(), []
    call_ms = 2.0

    def call():
        time.sleep(call_ms / 1e3)
        calls.append(1)

    begin = time.perf_counter()
    ms = peers_sdpa.Timer(torch, warmup=1, repeat=3, warmup_ms=40.0).median_ms(call)
    total_ms = (time.perf_counter() - begin) * 1e3
    warmup_calls = len(calls) - 3
    # At least 40 ms of untimed calls, queued in batches rather than one sync per call.
    assert warmup_calls * call_ms >= 40.0 * 0.9
    assert total_ms >= 40.0
    assert torch.cuda.syncs < warmup_calls
    # The timed calls are measured one by one: about call_ms each.
    assert call_ms * 0.9 <= ms <= call_ms * 20


def test_merged_results_record_flashattn_commit_first(monkeypatch):
    monkeypatch.setenv("FLASHATTN_COMMIT", "abc123")
    assert compare.commit({"commit": "from-ours"}) == "abc123"
    monkeypatch.delenv("FLASHATTN_COMMIT")
    monkeypatch.setattr(compare, "head_commit", lambda: None)
    assert compare.commit({"commit": "from-ours"}) == "from-ours"
    assert compare.commit({}) == "unknown"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
