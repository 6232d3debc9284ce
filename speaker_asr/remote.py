"""The batch client's remote engine: recordings sent to our server (``python -m speaker_asr
serve``) or to an Inference Endpoint, on its ``/`` contract (``{"inputs": <base64>,
"parameters": {...}}``, or the raw file with the parameters in the query string).

:class:`RemoteEngine` is an :class:`~speaker_asr.batch.Engine`: ``concurrency`` recordings in
flight, each POSTed with ``Authorization: Bearer <token>`` when there is a token. An autoscaled
endpoint answers 503 while a replica starts (scale-to-zero) and proxies answer 502/504 or 429
under load, so those, and connection errors, are retried with exponential backoff and jitter,
honouring ``Retry-After``, until the recording has spent ``RetryPolicy.max_wait_s`` retrying
(:class:`~speaker_asr.batch.Unavailable`, saying so). tenacity runs the retries (attempts, the
budget, the waits on the run's stop event, the log line before each); :class:`RetryPolicy` says
which answers are retried and how long each wait is. A 4xx is the recording's own failure
(400: bad audio or parameters, 413: larger than the server takes, 415), never retried, reported
with the server's message; 401/403 (the token) and 404/405 (not an endpoint's URL) end the run.
The token is never written anywhere: every message is scrubbed of it.

:class:`RetryPolicy` and :func:`parse_retry_after` are pure (no I/O) and so is
:func:`query_items` (parameters as a query string the server reads back as sent).
"""

from __future__ import annotations

import email.utils
import ipaddress
import json
import logging
import random
import re
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, Optional
from urllib.parse import urlsplit, urlunsplit

import tenacity

from speaker_asr.audio.files import upload_content_type
from speaker_asr.batch import Engine, FileError, Interrupted, Reply, RunError, Unavailable

logger = logging.getLogger("speaker_asr.remote")

RETRY_STATUSES = frozenset({429, 502, 503, 504})
BODIES = ("json", "raw")
MAX_QUERY_CHARS = 8000  # longer query strings are refused by many proxies
USER_AGENT = "speaker-asr-batch/1"


# --------------------------------------------------------------------------- retry policy


def parse_retry_after(value: Optional[str], now: Optional[float] = None) -> Optional[float]:
    """``Retry-After`` as seconds to wait: a number of seconds or an HTTP date; None when absent
    or unreadable (never negative)."""
    if value is None:
        return None
    text = value.strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


@dataclass(frozen=True)
class RetryPolicy:
    """When to try a recording again, and for how long.

    The n-th retry waits ``min(max_delay_s, initial_s * 2**(n-1))``, its second half random
    ("equal jitter": replicas and clients do not retry in step), or what ``Retry-After`` asks
    (at least ``initial_s``, plus up to 10 % jitter). A recording gives up once waiting again
    would take it past ``max_wait_s`` after its first failed attempt."""

    initial_s: float = 1.0
    max_delay_s: float = 30.0
    max_wait_s: float = 600.0
    statuses: frozenset = RETRY_STATUSES

    def __post_init__(self):
        for name in ("initial_s", "max_delay_s", "max_wait_s"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and value >= 0):
                raise ValueError(f"RetryPolicy.{name} must be a number >= 0, got {value!r}")

    def retryable(self, status: int) -> bool:
        return status in self.statuses

    def delay(self, retry: int, retry_after: Optional[float] = None,
              rng: Optional[random.Random] = None) -> float:
        """Seconds to wait before retry number ``retry`` (1 for the first)."""
        rng = rng or random
        if retry_after is not None:
            base = max(float(retry_after), self.initial_s)
            return base * (1.0 + 0.1 * rng.random())
        cap = min(self.max_delay_s, self.initial_s * 2 ** max(0, retry - 1))
        return cap / 2 + rng.uniform(0, cap / 2)


# --------------------------------------------------------------------------- request shapes


def query_items(parameters: dict[str, Any]) -> list[tuple[str, str]]:
    """``parameters`` as query-string pairs that our server reads back exactly as given (each
    by its declared type: ``true``/``false``, numbers, a ``prompt`` of ``1984`` as text, repeated
    keys for lists); raises ValueError for what a query string cannot carry (nested objects,
    reference clips, a one-item ``temperature`` list) -- those need the JSON body -- and for an
    unknown parameter or a value of the wrong type (the server's message)."""
    from speaker_asr.text_parameters import parameters_from_text

    def text(key: str, value: Any) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, (int, float)):
            return repr(value) if isinstance(value, float) else str(value)
        if isinstance(value, str):
            return value
        raise ValueError(f"parameter {key!r} ({type(value).__name__}) cannot go in a query string: "
                         "use --body json (the default)")

    if "known_speaker_references" in parameters:
        raise ValueError("known speakers' clips cannot go in a query string (too long for a URL): "
                         "use --body json (the default)")
    items: list[tuple[str, str]] = []
    for key, value in parameters.items():
        values = value if isinstance(value, (list, tuple)) else [value]
        items.extend((key, text(key, v)) for v in values)
    if sum(len(k) + len(v) + 2 for k, v in items) > MAX_QUERY_CHARS:
        raise ValueError(f"the parameters are longer than {MAX_QUERY_CHARS} characters as a query "
                         "string: use --body json (the default)")
    back = parameters_from_text(items)
    wrong = sorted(k for k in parameters if back.get(k) != (list(parameters[k]) if isinstance(
        parameters[k], tuple) else parameters[k]))
    if wrong:
        raise ValueError(f"{', '.join(repr(k) for k in wrong)} would not read back as given from a "
                         "query string (a one-item temperature list): use --body json (the default)")
    return items


def check_url(url: str) -> str:
    """``url`` if it is an http(s) URL with a host; ValueError saying what is wrong otherwise.
    A URL without a path gets ``/``."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"--url {display_url(url)!r} is not an http:// or https:// URL with a host, "
                         "e.g. http://127.0.0.1:8080 or https://xyz.endpoints.huggingface.cloud")
    try:
        parts.port
    except ValueError:
        raise ValueError(f"--url {display_url(url)!r} has an invalid port") from None
    return urlunsplit((parts.scheme, parts.netloc, parts.path or "/", parts.query, ""))


def display_url(url: str) -> str:
    """The URL without user name, password or query string: safe to print."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        netloc = host + (f":{parts.port}" if parts.port else "")
        return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
    except ValueError:
        return "<invalid URL>"


def _is_loopback(host: Optional[str]) -> bool:
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# --------------------------------------------------------------------------- the engine


class _Budget:
    """tenacity's stop condition for one recording: stop once waiting again would take it past
    ``max_wait_s`` of retrying, counted from its first failed attempt (the first request's own
    time, which may be long, is not retrying)."""

    def __init__(self, max_wait_s: float):
        self.max_wait_s = max_wait_s
        self.first_failure: Optional[float] = None

    def spent(self, state: tenacity.RetryCallState) -> float:
        """Seconds from the first failed attempt's answer to the last one's."""
        if self.first_failure is None:
            self.first_failure = state.outcome_timestamp
        return state.outcome_timestamp - self.first_failure

    def __call__(self, state: tenacity.RetryCallState) -> bool:
        return self.spent(state) + state.upcoming_sleep > self.max_wait_s


@dataclass
class _Attempt:
    status: Optional[int] = None          # None: no HTTP answer (connection error)
    reason: str = ""
    retry_after: Optional[float] = None
    response: Any = None


class RemoteEngine(Engine):
    """Recordings POSTed to ``url``, ``concurrency`` at a time (see the module's docstring).

    ``body``: ``json`` (base64 JSON, what every Endpoints container takes) or ``raw`` (the file's
    bytes with its audio Content-Type, the parameters in the query string: a third smaller; the
    formats are then all rendered here from the plain json answer). ``token``: sent as a bearer
    token (``token_source`` names where it came from in messages, never the token itself).
    ``timeout_s``: how long to wait for an answer once a recording is sent (not retried: the
    server may still be working on it); ``connect_timeout_s``: to connect (retried)."""

    def __init__(self, url: str, *, token: Optional[str] = None, token_source: str = "--token",
                 concurrency: int = 2, body: str = "json", policy: Optional[RetryPolicy] = None,
                 timeout_s: float = 3600.0, connect_timeout_s: float = 10.0,
                 rng: Optional[random.Random] = None):
        self.url = check_url(url)
        if body not in BODIES:
            raise ValueError(f"body {body!r}: use one of {', '.join(BODIES)}")
        if not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"concurrency must be an integer >= 1, got {concurrency!r}")
        self.token = (token or "").strip() or None
        self.token_source = token_source
        self.concurrency = concurrency
        self.body = body
        self.render_locally = body == "raw"
        self.policy = policy or RetryPolicy()
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.rng = rng or random.Random()
        self._rng_lock = threading.Lock()
        self._local = threading.local()
        self.loopback = _is_loopback(urlsplit(self.url).hostname)
        self.shown_url = display_url(self.url)

    # -- safe text

    def redact(self, text: Any) -> str:
        """``text`` without the token (nor anything that looks like a Hugging Face token)."""
        from speaker_asr.redaction import scrub

        text = str(text)
        if self.token:
            text = text.replace(self.token, "<redacted>")
        return scrub(text)

    # -- Engine

    def load(self) -> None:
        """Nothing to load: the first recording tells whether the endpoint answers."""

    def respond(self, audio: bytes, parameters: dict[str, Any], source: Optional[Path],
                stop: threading.Event) -> Reply:
        data, headers, query = self._request(audio, parameters, source)
        policy, budget = self.policy, _Budget(self.policy.max_wait_s)
        attempts = 0

        def post() -> _Attempt:
            nonlocal attempts
            attempts += 1
            return self._post(data, headers, query)

        def wait(state: tenacity.RetryCallState) -> float:
            with self._rng_lock:
                return policy.delay(state.attempt_number, state.outcome.result().retry_after, self.rng)

        def sleep(seconds: float) -> None:
            if stop.wait(float(seconds)):  # the run is stopping: put the recording down
                raise Interrupted()

        def log(state: tenacity.RetryCallState) -> None:
            logger.info("%s: %s; retrying in %.1f s", source or self.shown_url,
                        self.redact(state.outcome.result().reason), state.upcoming_sleep)

        def give_up(state: tenacity.RetryCallState) -> NoReturn:
            attempt, spent = state.outcome.result(), budget.spent(state)
            asked = (f"; it asked to wait {attempt.retry_after:.0f} s more (Retry-After)"
                     if attempt.retry_after is not None and attempt.retry_after > policy.max_wait_s - spent
                     else "")
            raise Unavailable(self.redact(
                f"gave up after {attempts} attempt{'s' if attempts != 1 else ''} over {spent:.1f} s "
                f"(the limit is {policy.max_wait_s:g} s of retrying, --max-wait){asked}; "
                f"last answer: {attempt.reason}"), attempts=attempts)

        attempt = tenacity.Retrying(
            retry=tenacity.retry_if_result(lambda a: a.status is None or policy.retryable(a.status)),
            wait=wait, stop=budget, sleep=sleep, before_sleep=log, retry_error_callback=give_up)(post)
        if attempt.status == 200:
            return Reply(attempt.response, attempts=attempts)
        raise self._failure(attempt, attempts)

    # -- one request

    def _request(self, audio: bytes, parameters: dict[str, Any],
                 source: Optional[Path]) -> tuple[bytes, dict[str, str], list[tuple[str, str]]]:
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if self.body == "raw":
            try:
                query = query_items(parameters)
            except ValueError as exc:
                raise RunError(str(exc)) from None
            headers["Content-Type"] = upload_content_type(source) if source is not None else "application/octet-stream"
            return audio, headers, query
        import base64

        payload = {"inputs": base64.b64encode(audio).decode("ascii"), "parameters": parameters}
        headers["Content-Type"] = "application/json"
        return json.dumps(payload, ensure_ascii=False).encode("utf-8"), headers, []

    def _session(self):
        session = getattr(self._local, "session", None)
        if session is None:
            import requests

            session = requests.Session()
            if self.loopback:
                session.trust_env = False  # never through a proxy to 127.0.0.1
            self._local.session = session
        return session

    def _post(self, data: bytes, headers: dict[str, str], query: list[tuple[str, str]]) -> _Attempt:
        import requests

        headers = {**headers, "X-Request-Id": f"batch-{uuid.uuid4().hex[:16]}"}
        try:
            r = self._session().post(self.url, data=data, headers=headers, params=query or None,
                                     timeout=(self.connect_timeout_s, self.timeout_s))
        except requests.exceptions.ReadTimeout:
            return _Attempt(status=-1, reason=f"no answer within {self.timeout_s:g} s of sending "
                            "(--request-timeout); the server may still be working on it")
        except (requests.exceptions.ConnectionError, requests.exceptions.ChunkedEncodingError) as exc:
            return _Attempt(status=None, reason=f"connection error ({_connection_reason(exc)}) "
                                                f"on {self.shown_url}")
        except requests.exceptions.RequestException as exc:
            return _Attempt(status=-1, reason=self.redact(f"the request failed: {type(exc).__name__}"))
        request_id = r.headers.get("X-Request-Id") or headers["X-Request-Id"]
        if r.status_code == 200:
            try:
                response = r.json()
            except ValueError:
                return _Attempt(status=-2, reason=f"200 but the body is not JSON: {_snippet(r.text)!r} "
                                                  f"(request id {request_id})")
            if not isinstance(response, dict):
                return _Attempt(status=-2, reason=f"200 but the JSON is a {type(response).__name__}, "
                                                  f"not an object (request id {request_id})")
            return _Attempt(status=200, response=response)
        message = _error_message(r)
        reason = self.redact(f"{r.status_code} {r.reason or ''}".strip()
                             + (f": {message}" if message else "") + f" (request id {request_id})")
        return _Attempt(status=r.status_code, reason=reason,
                        retry_after=parse_retry_after(r.headers.get("Retry-After")))

    def _failure(self, attempt: _Attempt, attempts: int) -> Exception:
        status = attempt.status
        if status in (401, 403):
            told = (f"the token from {self.token_source}" if self.token
                    else "no token was sent (set HF_TOKEN or API_KEY, or pass --token)")
            return RunError(self.redact(f"{self.shown_url} refused the request: {attempt.reason}; "
                                        f"{told}"))
        if status in (404, 405):
            return RunError(self.redact(f"{self.shown_url} is not a transcription endpoint: "
                                        f"{attempt.reason}; give the endpoint's URL (POST / or /predict)"))
        refused = status is not None and 400 <= status < 500
        return FileError(self.redact(attempt.reason), refused=refused, attempts=attempts)


def _snippet(text: str, limit: int = 300) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[:limit] + "..."


def _error_message(r) -> str:
    """The server's error text: ``{"error": ...}`` (ours and the toolkit's), else the body."""
    try:
        body = r.json()
    except ValueError:
        return _snippet(r.text)
    if isinstance(body, dict):
        for key in ("error", "detail", "message", "reason"):
            if isinstance(body.get(key), str):
                return _snippet(body[key], 1000)
    return _snippet(json.dumps(body))


def _connection_reason(exc: BaseException) -> str:
    """``connection refused`` from requests' nest of wrapped exceptions."""
    seen = set()
    stack = [exc]
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.strerror:
            return e.strerror.lower()
        for nested in (getattr(e, "reason", None), e.__cause__, e.__context__, *getattr(e, "args", ())):
            if isinstance(nested, BaseException):
                stack.append(nested)
    text = str(exc)
    for pattern, reason in (("RemoteDisconnected", "the server closed the connection without answering"),
                            ("Connection aborted", "connection aborted"), ("timed out", "timed out"),
                            ("Name or service not known", "unknown host"), ("reset", "connection reset")):
        if pattern in text:
            return reason
    return type(exc).__name__


__all__ = ["BODIES", "RETRY_STATUSES", "RemoteEngine", "RetryPolicy", "check_url", "display_url",
           "parse_retry_after", "query_items"]
