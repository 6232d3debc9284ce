"""The scheduler's policy on hand-made claims, and its lanes on hand-made units (threads that
sleep a few milliseconds per unit): priorities, short work before long, no starvation,
cancellation at the next unit, live work first. No models."""

import threading
import time

import pytest

from speaker_asr.scheduling import Priority, SchedulePolicy, Scheduler, WorkCancelled, checkpoint
from speaker_asr.scheduling.policy import Claim, choose, should_yield

P = SchedulePolicy()


def claim(job, priority=Priority.FILE, arrived=0.0, since=0.0, served=0.0, last_ran=float("-inf")):
    return Claim(job, priority, arrived, since, served, last_ran)


def test_live_final_decodes_go_first_then_speakers_then_partials_then_files():
    claims = [claim(1, Priority.FILE), claim(2, Priority.LIVE_PARTIAL, since=0.1),
              claim(3, Priority.LIVE_SPEAKERS, since=0.2), claim(4, Priority.LIVE_FINAL, since=0.3)]
    order = []
    while claims:
        best = choose(claims, now=1.0, policy=P)
        order.append(best.job_id)
        claims.remove(best)
    assert order == [4, 3, 2, 1]


def test_the_file_with_the_least_model_time_goes_first_and_arrival_order_is_a_choice():
    long_one = claim(1, arrived=0.0, served=40.0)
    short_one = claim(2, arrived=5.0, served=0.5)
    assert choose([long_one, short_one], 6.0, P).job_id == 2
    assert choose([long_one, short_one], 6.0, SchedulePolicy(file_order="arrival")).job_id == 1
    # round robin: the job that ran longest ago
    rr = SchedulePolicy(file_order="round_robin")
    assert choose([claim(1, last_ran=5.9), claim(2, last_ran=3.0)], 6.0, rr).job_id == 2


def test_a_holder_gives_way_to_less_served_work_but_not_within_the_quantum():
    holder = claim(1, served=10.0)
    assert should_yield(holder, [claim(2, served=0.0)], 11.0, P)
    assert not should_yield(holder, [claim(2, served=9.8)], 11.0, P)
    assert not should_yield(claim(1, Priority.LIVE_FINAL), [claim(2, served=0.0)], 11.0, P)
    assert should_yield(claim(1, Priority.LIVE_PARTIAL), [claim(2, Priority.LIVE_FINAL)], 11.0, P)


def test_file_work_pauses_while_live_work_waits_and_only_with_live_first():
    assert choose([claim(1)], 1.0, P, live_active=True) is None
    assert choose([claim(1)], 1.0, SchedulePolicy(live_first=False), live_active=True).job_id == 1
    assert should_yield(claim(1), [], 1.0, P, live_active=True)
    # a partial decode is not work files pause for
    assert choose([claim(1), claim(2, Priority.LIVE_PARTIAL)], 1.0, P).job_id == 2


def test_an_overdue_file_unit_goes_before_partials_and_less_served_files_but_not_finals():
    old = claim(1, since=0.0, served=100.0)
    fresh = [claim(2, since=25.0, served=0.0), claim(3, Priority.LIVE_PARTIAL, since=25.0)]
    assert choose([old] + fresh, 26.0, P).job_id == 1
    assert choose([old, claim(4, Priority.LIVE_FINAL, since=25.5)], 26.0, P).job_id == 4
    assert choose([old] + fresh, 10.0, P).job_id == 3  # not yet overdue: the partial, then the short file


def test_no_file_starves_behind_a_stream_of_shorter_ones():
    """One unit a second; a new one-unit file arrives every other second for ever (the machine
    keeps up, with little to spare): the long file still runs a unit about every max_wait_s."""
    policy = SchedulePolicy(max_wait_s=5.0)
    long_since, waits, now, ran_long = 0.0, [], 0.0, 0
    queue = []
    for step in range(100):
        now = float(step)
        if step % 2 == 0:
            queue.append(claim(100 + step, arrived=now, since=now, served=0.0))
        best = choose(queue + [claim(1, arrived=0.0, since=long_since, served=10.0 + ran_long)], now, policy)
        if best.job_id == 1:
            waits.append(now - long_since)
            ran_long += 1
            long_since = now + 1.0
        else:
            queue.remove(best)
    assert ran_long >= 100 // 7
    assert max(waits) <= policy.max_wait_s + 1


def test_a_policy_with_an_unknown_order_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="least_served, round_robin, arrival"):
        SchedulePolicy(file_order="shortest")


# -- the lanes, with threads ----------------------------------------------------------------------


def run_units(scheduler, lane, job, units, log, unit_s=0.004):
    with scheduler.working_for(job), scheduler.unit(lane):
        for _ in range(units):
            time.sleep(unit_s)
            checkpoint()
    log.append((job.name, time.monotonic()))


def start(fn, *args):
    thread = threading.Thread(target=fn, args=args, daemon=True)
    thread.start()
    return thread


def until_cancelled(fn, *args):
    try:
        fn(*args)
    except WorkCancelled:
        pass


def wait_until(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


def test_a_short_file_sent_after_a_long_one_finishes_first_and_the_long_one_still_ends():
    scheduler, log = Scheduler(SchedulePolicy(quantum_s=0.01)), []
    long_job = scheduler.new_job(Priority.FILE, "long")
    a = start(run_units, scheduler, "asr", long_job, 150, log)
    wait_until(lambda: long_job.served > 0 or scheduler.snapshot()["asr"]["running"])
    time.sleep(0.05)
    b = start(run_units, scheduler, "asr", scheduler.new_job(Priority.FILE, "short"), 10, log)
    a.join(10), b.join(10)
    assert [name for name, _ in log] == ["short", "long"]
    assert scheduler.yields >= 1


def test_arrival_order_keeps_the_short_file_behind_the_long_one():
    scheduler, log = Scheduler(SchedulePolicy(file_order="arrival")), []
    long_job = scheduler.new_job(Priority.FILE, "long")
    a = start(run_units, scheduler, "asr", long_job, 60, log)
    wait_until(lambda: scheduler.snapshot()["asr"]["running"] is not None)
    b = start(run_units, scheduler, "asr", scheduler.new_job(Priority.FILE, "short"), 5, log)
    a.join(10), b.join(10)
    assert [name for name, _ in log] == ["long", "short"]


def test_a_live_final_decode_takes_the_lane_at_the_files_next_unit():
    scheduler, log = Scheduler(), []
    file_job = scheduler.new_job(Priority.FILE, "file")
    a = start(until_cancelled, run_units, scheduler, "asr", file_job, 500, log, 0.004)
    wait_until(lambda: scheduler.snapshot()["asr"]["running"] is not None)
    asked = time.monotonic()
    b = start(run_units, scheduler, "asr", scheduler.new_job(Priority.LIVE_FINAL, "final"), 1, log)
    b.join(5)
    assert log[0][0] == "final" and log[0][1] - asked < 0.5
    file_job.cancel("test over")
    a.join(5)


def test_file_work_on_the_other_lane_pauses_while_live_work_runs():
    scheduler, span = Scheduler(), []
    file_job = scheduler.new_job(Priority.FILE, "file")
    units_done = []

    def diarize():
        try:
            with scheduler.working_for(file_job), scheduler.unit("diarization"):
                while True:
                    time.sleep(0.002)
                    units_done.append(time.monotonic())
                    checkpoint()
        except WorkCancelled:
            pass

    def live():
        with scheduler.job(Priority.LIVE_FINAL, "final"), scheduler.unit("asr"):
            span.append(time.monotonic())
            time.sleep(0.2)
            span.append(time.monotonic())

    a = start(diarize)
    wait_until(lambda: len(units_done) > 3)
    start(live).join(5)
    # at most the unit running when the live work came ends inside it; none starts there
    assert len([t for t in units_done if span[0] + 0.01 < t < span[1]]) == 0
    wait_until(lambda: units_done[-1] > span[1])  # and the file goes on after it
    file_job.cancel("done")
    a.join(5)
    assert not a.is_alive()


def test_a_cancelled_job_stops_at_its_next_unit_and_its_waiting_claims_at_once():
    scheduler = Scheduler()
    running = scheduler.new_job(Priority.FILE, "running")
    outcome = {}

    def work(job, key):
        try:
            run_units(scheduler, "asr", job, 10_000, [], 0.002)
            outcome[key] = "finished"
        except WorkCancelled as exc:
            outcome[key] = f"cancelled: {exc}"

    a = start(work, running, "a")
    wait_until(lambda: scheduler.snapshot()["asr"]["running"] is not None)
    waiting = scheduler.new_job(Priority.FILE, "waiting")
    waiting.served = 1e9  # ranks last: it waits
    b = start(work, waiting, "b")
    wait_until(lambda: scheduler.snapshot()["asr"]["waiting"] == 1)
    waiting.cancel("client gone")
    b.join(2)
    assert outcome["b"] == "cancelled: client gone"
    running.cancel("client gone")
    a.join(2)
    assert outcome["a"] == "cancelled: client gone"
    assert scheduler.snapshot()["asr"] == {"running": None, "waiting": 0}
    assert scheduler.cancelled == 2


def test_a_thread_that_holds_a_lane_takes_it_again_without_waiting():
    scheduler = Scheduler()
    with scheduler.unit("asr"):
        with scheduler.unit("asr"):
            checkpoint()
    assert scheduler.snapshot()["asr"] == {"running": None, "waiting": 0}
    with pytest.raises(ValueError, match="lanes: asr, diarization"):
        with scheduler.unit("gpu"):
            pass


def test_the_live_load_is_the_share_of_the_last_minute_live_work_held_a_lane():
    now = [0.0]
    scheduler = Scheduler(clock=lambda: now[0])
    for start in (10.0, 20.0, 30.0):  # three final decodes of 1.5 s, and a file unit of 20 s
        now[0] = start
        with scheduler.job(Priority.LIVE_FINAL), scheduler.unit("asr"):
            now[0] = start + 1.5
    with scheduler.job(Priority.FILE), scheduler.unit("asr"):
        now[0] = 60.0
    assert scheduler.load("asr") == pytest.approx(4.5 / 60)
    assert scheduler.load("diarization") == 0.0
    now[0] = 75.0  # the first has left the window
    assert scheduler.load("asr") == pytest.approx(3.0 / 60)
    now[0] = 90.8  # the second too, and the third is partly outside it
    assert scheduler.load("asr") == pytest.approx(0.7 / 60)


def test_a_new_live_session_is_refused_only_when_the_measured_load_says_it_cannot_be_served():
    from speaker_asr.serving.live_limits import capacity_refusal

    assert capacity_refusal(0.3, 1, 0.8, 60) is None  # 2 x 0.3 = 0.6 fits
    assert capacity_refusal(0.9, 0, 0.8, 60) is None  # the first session is never refused
    why = capacity_refusal(0.5, 2, 0.8, 60)  # 3 x 0.25 = 0.75 fits
    assert why is None
    why = capacity_refusal(0.6, 2, 0.8, 60)  # 3 x 0.3 = 0.9 does not
    assert "2 live sessions keep its speech model busy 60% of the time" in why
    assert "about 90%, past LIVE_MAX_LOAD (80%)" in why and "another server" in why
