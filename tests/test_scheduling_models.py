"""The scheduler with the tiny models loaded as production loads them: two recordings at once get
the answers each gets alone (units change the order, never the result), the shorter one ends
first, and a cancelled request stops at its next unit and leaves the lanes free."""

import threading
import time

import numpy as np
import pytest

from helpers import tone
from speaker_asr.config import InferenceConfig
from speaker_asr.scheduling import Priority, SchedulePolicy, Scheduler, WorkCancelled


def voices(seconds: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    parts = [tone(3.0, freq=float(f)) for f in rng.choice([150.0, 210.0, 290.0, 380.0], int(seconds // 3))]
    return np.concatenate(parts).astype(np.float32)


@pytest.fixture()
def models(handler):
    models = handler.models
    policy = models.scheduler.policy
    yield models
    assert models.scheduler.snapshot() == {"asr": {"running": None, "waiting": 0},
                                          "diarization": {"running": None, "waiting": 0}}
    assert models.scheduler.policy == policy


def answer(result) -> tuple:
    return result.text, [(t.speaker, t.text, t.start, t.end) for t in result.speaker_turns]


def test_two_recordings_at_once_get_the_answers_they_get_alone_and_the_short_one_ends_first(models):
    config = InferenceConfig.from_request({"return_word_timestamps": True, "assisted": False}, models.capabilities)
    long_audio, short_audio = voices(60.0, 1), voices(9.0, 2)
    alone_long = answer(models.transcribe(long_audio, config))
    alone_short = answer(models.transcribe(short_audio, config))

    ended, results = {}, {}

    def run(name, audio, delay):
        time.sleep(delay)
        with models.scheduler.job(Priority.FILE, name):
            results[name] = answer(models.transcribe(audio, config))
        ended[name] = time.monotonic()

    threads = [threading.Thread(target=run, args=("long", long_audio, 0.0)),
               threading.Thread(target=run, args=("short", short_audio, 0.3))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert results == {"long": alone_long, "short": alone_short}
    assert ended["short"] < ended["long"]


def test_a_cancelled_request_stops_at_its_next_unit(models):
    config = InferenceConfig.from_request({"assisted": False}, models.capabilities)
    audio = voices(90.0, 3)
    job = models.scheduler.new_job(Priority.FILE, "abandoned")
    outcome = {}

    def run():
        started = time.monotonic()
        try:
            with models.scheduler.working_for(job):
                models.transcribe(audio, config)
            outcome["result"] = "finished"
        except WorkCancelled as exc:
            outcome["result"] = str(exc)
        outcome["seconds"] = time.monotonic() - started

    alone_started = time.monotonic()
    models.transcribe(audio, config)
    alone = time.monotonic() - alone_started
    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(alone / 5)
    job.cancel("client_gone")
    thread.join(60)
    assert outcome["result"] == "client_gone"
    assert outcome["seconds"] < alone * 0.8


def test_the_settings_name_the_policy():
    from speaker_asr.settings import ModelSettings

    policy = ModelSettings(schedule_file_order="arrival", schedule_max_wait_s=5,
                           schedule_live_first=False).schedule_policy()
    assert policy == SchedulePolicy("arrival", 5.0, False)
    assert isinstance(Scheduler(policy).policy, SchedulePolicy)
    with pytest.raises(ValueError, match="least_served"):
        ModelSettings(schedule_file_order="fastest")
