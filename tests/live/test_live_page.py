"""``GET /live`` end to end: ``python -m speaker_asr serve`` on the tiny random models with
``API_KEY``, the page opened in Debian's headless Chromium (driven by Playwright, launched from
/usr/bin/chromium: Playwright's own browser download cannot run here) whose fake microphone plays
real speech from a WAV file. What a person would see (the captions, their speaker labels and
colours, the timeline's blocks, the error box) is checked against the protocol events the page
received (``window.liveEvents``; speaker_asr/serving/live_page.html says what it exposes).

The speech is pyannote.audio's own sample (two speakers, shipped in its package): three single-
speaker stretches of it with 1.2 s of silence after each, so that silero's server VAD closes each
one (the recording's turns follow each other with shorter pauses than the default 500 ms silence).
Chromium loops the file; the test presses Stop once an item has its speakers and the next one is
being spoken. The tiny Whisper's words are noise; the checks are about the protocol and the page,
not the words. What the tiny models never send (an item with two speakers, a failed item, an error
event) comes from a scripted server: Playwright stands in for the WebSocket.

The browser tests skip, saying why, where /usr/bin/chromium or Playwright is missing (make
install brings both).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

from helpers import HTTP, running_server, server_env

pytestmark = pytest.mark.subprocess

CHROMIUM = "/usr/bin/chromium"
KEY = "sk-page-0123456789abcdef-SECRET"
ITEM = "conversation.item.input_audio_transcription."
# the sample's single-speaker stretches (seconds; its RTTM beside it), silence after each
STRETCHES = ((8.35, 9.9), (14.75, 17.9), (18.6, 21.45))
SILENCE_S = 1.2
# the network here is closed: nothing of Chromium's may try to reach out (or wait on it)
CHROMIUM_ARGS = ["--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
                 "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-proxy-server"]


@pytest.fixture(scope="module")
def server(tiny_models, tmp_path_factory):
    with running_server("live-page", server_env(tiny_models, API_KEY=KEY),
                        tmp_path_factory.mktemp("live-page-logs")) as server:
        yield server


@pytest.fixture(scope="module")
def speech_wav(tmp_path_factory) -> Path:
    """The fake microphone's file: 16-bit mono WAV at the sample's 16 kHz (Chromium's fake
    capture converts it to the device's rate)."""
    import soundfile as sf

    spec = importlib.util.find_spec("pyannote.audio")
    sample = Path(spec.origin).parent / "sample" / "sample.wav"
    audio, sr = sf.read(sample, dtype="float32")
    gap = np.zeros(int(SILENCE_S * sr), dtype=np.float32)
    parts = [gap[:sr // 2]]
    for start, end in STRETCHES:
        parts += [audio[int(start * sr):int(end * sr)], gap]
    path = tmp_path_factory.mktemp("fake-mic") / "speech.wav"
    sf.write(path, np.concatenate(parts), sr, subtype="PCM_16")
    return path


@pytest.fixture(scope="module")
def browser(speech_wav, tmp_path_factory):
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"{CHROMIUM} is missing (Debian's chromium package: apt-get install chromium; "
                    "make install does it as root)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed "
                                   "(pip install -r requirements-test.txt)")
    with sync_api.sync_playwright() as pw:
        # launch() gives the browser a fresh profile (user data dir) of its own, removed at close
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                     args=[*CHROMIUM_ARGS, f"--use-file-for-fake-audio-capture={speech_wav}"],
                                     env={**os.environ, "HOME": str(tmp_path_factory.mktemp("chromium-home"))})
        try:
            yield browser
        finally:
            browser.close()


# every state of every caption a person could have seen: a snapshot of the captions after each
# change (the page handles each WebSocket message in a task of its own, and a MutationObserver
# reports after each task)
RECORD_CAPTIONS = """
window.captionHistory = [];
document.addEventListener("DOMContentLoaded", () => {
  const captions = document.getElementById("captions");
  new MutationObserver(() => {
    for (const li of captions.children) {
      window.captionHistory.push({item_id: li.dataset.itemId, className: li.className,
        turns: [...li.querySelectorAll(".turn")].map((t) => [t.dataset.speaker || null, t.querySelector(".text").textContent]),
        fontStyle: getComputedStyle(li.querySelector(".text")).fontStyle});
    }
  }).observe(captions, {subtree: true, childList: true, characterData: true, attributes: true});
});
"""


@pytest.fixture
def page(browser, server):
    context = browser.new_context()
    context.add_init_script(RECORD_CAPTIONS)
    page = context.new_page()
    page.set_default_timeout(30_000)
    problems = []  # what the page's own code threw (a bug in the page)
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    yield page
    context.close()
    assert problems == []


def shown(page) -> dict:
    """What the page shows: the captions in order (each its turns: speaker label, text, colour),
    the timeline's blocks (and where they are drawn), the errors."""
    return page.evaluate("""() => {
        const box = (el) => el.getBoundingClientRect();
        const strip = document.getElementById("timeline"), s = box(strip);
        return {
          captions: [...document.querySelectorAll("#captions > li")].map((li) => ({
            item_id: li.dataset.itemId, className: li.className,
            turns: [...li.querySelectorAll(".turn")].map((t) => ({
              speaker: t.dataset.speaker || null, who: t.querySelector(".who").textContent,
              text: t.querySelector(".text").textContent, colour: getComputedStyle(t).borderLeftColor}))})),
          blocks: [...strip.children].map((b) => ({
            item_id: b.dataset.itemId, speaker: b.dataset.speaker, start: +b.dataset.start,
            end: +b.dataset.end, colour: getComputedStyle(b).backgroundColor,
            left: box(b).left - s.left, width: box(b).width})),
          strip_width: s.width, total: +strip.dataset.total,
          errors: [...document.querySelectorAll("#errors > p")].map((p) => p.textContent),
          state: document.getElementById("state").dataset.state,
        };
    }""")


def test_the_page_is_served_without_the_key_and_loads_nothing_from_elsewhere(server):
    r = HTTP.get(server.url + "/live", timeout=30)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    policy = r.headers["content-security-policy"]
    assert "default-src 'none'" in policy and "connect-src 'self'" in policy
    # no script, style, font or image from anywhere (the policy would block one all the same)
    assert not re.search(r"\b(src|href)\s*=|<link|@import|url\(", r.text)
    # the rest still needs the key
    assert HTTP.get(server.url + "/v1/models", timeout=30).status_code == 401


def test_the_page_streams_the_microphone_and_shows_each_caption_with_its_speakers(server, page):
    page.goto(server.url + f"/live#key={KEY}")
    assert page.input_value("#key") == KEY  # from the fragment
    page.click("#start")
    # once an item has its speakers and the next one is being spoken: Stop then commits that one
    page.wait_for_function(f"""() => (window.liveEvents.some((e) => e.type === "{ITEM}segment")
                                      && window.liveEvents.filter((e) => e.type.endsWith("speech_started")).length >= 2)
                                     || document.querySelector("#errors > p")""", timeout=60_000)
    page.click("#stop")
    page.wait_for_function("() => document.getElementById('state').dataset.state === 'stopped'")
    events = page.evaluate("window.liveEvents")
    view = shown(page)
    assert view["errors"] == [], view["errors"]
    assert page.get_attribute("#captions", "aria-live") == "polite"
    kinds = [e["type"] for e in events]
    assert kinds[0] == "session.created" and "session.updated" in kinds and "error" not in kinds, kinds
    updated = next(e for e in events if e["type"] == "session.updated")["session"]["audio"]["input"]
    assert updated["format"] == {"type": "audio/pcm", "rate": 24000}
    assert updated["turn_detection"]["type"] == "server_vad"

    # server VAD made the items: each committed one was heard starting first
    started = [e["item_id"] for e in events if e["type"] == "input_audio_buffer.speech_started"]
    committed = [e["item_id"] for e in events if e["type"] == "input_audio_buffer.committed"]
    assert committed and set(committed) <= set(started)
    # Stop waited for every committed item: each completed, in order
    completed = [e for e in events if e["type"] == ITEM + "completed"]
    assert [e["item_id"] for e in completed] == committed
    segments = [e for e in events if e["type"] == ITEM + "segment"]
    by_item = {}
    for e in segments:
        by_item.setdefault(e["item_id"], []).append(e)
    # the tiny pipeline has a voice model: every item with words got its speakers, the one Stop
    # committed too (Stop waits for them before it closes)
    assert len(committed) >= 2 and set(by_item) == {e["item_id"] for e in completed if e["transcript"]}

    # the captions: one per item with words, in order; its text the completed transcript until
    # its speakers came, then one turn per segment (label and text)
    said = [e for e in completed if e["transcript"].strip()]
    assert [c["item_id"] for c in view["captions"]] == [e["item_id"] for e in said]
    history = page.evaluate("window.captionHistory")
    colours = {}
    for caption, done in zip(view["captions"], said):
        assert caption["className"] == "final", caption
        assert {"item_id": done["item_id"], "className": "final", "turns": [[None, done["transcript"]]],
                "fontStyle": "normal"} in history, done
        expected = [(e["speaker"], e["speaker"], e["text"]) for e in by_item.get(done["item_id"], [])] \
            or [(None, "", done["transcript"])]
        assert [(t["speaker"], t["who"], t["text"]) for t in caption["turns"]] == expected
        for turn in caption["turns"]:
            if turn["speaker"]:  # one colour per speaker
                assert colours.setdefault(turn["speaker"], turn["colour"]) == turn["colour"]
    assert len(set(colours.values())) == len(colours) == len({e["speaker"] for e in segments})

    # while an item was tentative, its caption showed its deltas as they came, in italics
    tentative_seen = 0
    for item in committed:
        sums, text = [], ""
        for e in events:
            if e["type"] == ITEM + "delta" and e["item_id"] == item:
                text += e["delta"]
                sums.append(text)
        seen = [h["turns"][0][1] for h in history
                if h["item_id"] == item and h["className"] == "tentative" and h["turns"][0][1]]
        assert list(dict.fromkeys(seen)) == list(dict.fromkeys(sums)), (item, seen, sums)
        assert all(h["fontStyle"] == "italic" for h in history if h["className"] == "tentative")
        tentative_seen += bool(seen)
    assert tentative_seen, "no caption was ever shown tentative"

    # the timeline: one block per segment, where its times put it, in its speaker's colour
    assert [(b["item_id"], b["speaker"], b["start"], b["end"]) for b in view["blocks"]] == \
        [(e["item_id"], e["speaker"], e["start"], e["end"]) for e in segments]
    px = view["strip_width"] / view["total"]
    for block in view["blocks"]:
        assert block["left"] == pytest.approx(block["start"] * px, abs=1.5), block
        assert block["width"] == pytest.approx(max(2.0, (block["end"] - block["start"]) * px), abs=1.5), block
        assert block["colour"] == colours[block["speaker"]]
    assert KEY not in server.log()


def test_a_wrong_key_is_said_in_plain_words(server, page):
    page.goto(server.url + "/live#key=" + KEY[:-1] + "X")
    page.click("#start")
    page.wait_for_function("() => document.getElementById('state').dataset.state === 'stopped'")
    view = shown(page)
    assert view["errors"][0] == "The server refused this API key: check it and press Start again."
    assert view["captions"] == [] and view["blocks"] == []
    assert [e["type"] for e in page.evaluate("window.liveEvents")] == ["error"]
    assert KEY[:-1] not in server.log()


def test_an_item_with_two_speakers_a_failed_one_and_an_error_as_shown(server, page):
    """What the tiny models never send, from a scripted server (Playwright stands in for the
    WebSocket): an item with two speakers' turns, an item with no words, a failed one, an error
    event; then Stop closes the socket cleanly."""
    opened, closed, received = [], [], []
    seg = ITEM + "segment"
    script = [
        {"type": "input_audio_buffer.speech_started", "item_id": "A", "audio_start_ms": 500},
        {"type": ITEM + "delta", "item_id": "A", "content_index": 0, "delta": "Hello"},
        {"type": "input_audio_buffer.committed", "item_id": "A", "previous_item_id": None},
        {"type": ITEM + "completed", "item_id": "A", "content_index": 0, "transcript": "Hello there. Yes.",
         "usage": {"type": "duration", "seconds": 2.0}},
        {"type": seg, "item_id": "A", "content_index": 0, "id": "seg_0", "start": 0.5, "end": 1.5,
         "text": "Hello there.", "speaker": "SPEAKER_00"},
        {"type": seg, "item_id": "A", "content_index": 0, "id": "seg_1", "start": 1.6, "end": 2.4,
         "text": "Yes.", "speaker": "SPEAKER_01"},
        {"type": "input_audio_buffer.committed", "item_id": "B", "previous_item_id": "A"},
        {"type": ITEM + "completed", "item_id": "B", "content_index": 0, "transcript": "",
         "usage": {"type": "duration", "seconds": 0.4}},
        {"type": "input_audio_buffer.committed", "item_id": "C", "previous_item_id": "B"},
        {"type": ITEM + "failed", "item_id": "C", "content_index": 0,
         "error": {"type": "server_error", "message": "The server had an error while transcribing this item."}},
        {"type": "error", "error": {"type": "invalid_request_error", "code": "invalid_value",
                                    "message": "Invalid value: 'x'.", "param": "audio", "event_id": None}},
    ]

    def serve(ws):
        opened.append(ws.protocols)

        def on_message(message):
            event = json.loads(message)
            received.append(event["type"])
            if event["type"] == "session.update":
                ws.send(json.dumps({"type": "session.updated", "session": {"speaker_asr": {"speaker_labels": True}}}))
            elif received.count("input_audio_buffer.append") == 1:
                for e in script:
                    ws.send(json.dumps(e))
        ws.on_message(on_message)
        ws.on_close(lambda code, reason: closed.append((code, reason)))

    page.route_web_socket(re.compile(r".*/v1/realtime\?intent=transcription$"), serve)
    page.goto(server.url + f"/live#key={KEY}")
    page.click("#start")
    page.wait_for_function("() => document.querySelectorAll('#errors > p').length")
    view = shown(page)
    assert view["state"] == "live"
    [caption_a, caption_c] = view["captions"]  # B said nothing: no caption
    assert [(t["speaker"], t["who"], t["text"]) for t in caption_a["turns"]] == \
        [("SPEAKER_00", "SPEAKER_00", "Hello there."), ("SPEAKER_01", "SPEAKER_01", "Yes.")]
    a0, a1 = caption_a["turns"]
    assert a0["colour"] != a1["colour"]
    assert caption_c["className"] == "failed" and "could not be transcribed" in caption_c["turns"][0]["text"]
    assert [(b["speaker"], b["colour"]) for b in view["blocks"]] == \
        [("SPEAKER_00", a0["colour"]), ("SPEAKER_01", a1["colour"])]
    assert view["errors"] == ["The server says: Invalid value: 'x'."]
    assert [e["type"] for e in page.evaluate("window.liveEvents")] == ["session.updated"] + [e["type"] for e in script]

    page.click("#stop")
    page.wait_for_function("() => document.getElementById('state').dataset.state === 'stopped'")
    assert received[0] == "session.update" and set(received[1:]) == {"input_audio_buffer.append"}
    assert closed == [(1000, "stopped")]
    assert opened == [["realtime", f"openai-insecure-api-key.{KEY}"]]  # the key from the fragment
    assert len(shown(page)["errors"]) == 1  # a clean close is not an error
