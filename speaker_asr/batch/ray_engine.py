"""The batch run on a Ray cluster (``python -m speaker_asr transcribe DIR --ray ADDRESS``): the
same plan, resume, outputs, progress and summary as the run in this process (speaker_asr/batch/),
with the recordings transcribed by a pool of Ray actors, each holding the handler with its models
loaded once.

:class:`RayEngine` is an :class:`~speaker_asr.batch.engine.Engine` like the others: the driver
plans what is left (``batch.plan``), :class:`~speaker_asr.batch.run.BatchRun` keeps one recording
in flight per actor and writes each one's outputs atomically as its answer comes back. What
differs is where the work happens:

* **One model load per actor.** :class:`Transcriber` is the actor: it builds the handler
  (``LocalEngine``, the settings read from its environment) once, then answers one recording at a
  time. ``actors`` of them, each with ``gpus_per_actor`` GPUs (default 1 where the cluster has
  GPUs, else 0) and ``cpus_per_actor`` CPUs (default: 1 beside a GPU; else the cluster's CPUs
  shared out, at most one node's), which is also the actor's torch thread count.
* **The driver's settings reach the workers** through the actors' ``runtime_env``: the model
  settings (``ASR_MODEL``, ``DIARIZATION_MODEL``, ... every ``ModelSettings`` field) and the
  libraries' offline and cache variables set here (:data:`PASSED_ENV`), and this package itself
  (``py_modules``), so every worker runs the driver's code. Tokens (``HF_TOKEN``) go to the actor's
  constructor instead, never into the runtime_env, which Ray shows in its dashboard and state API.
* **Workers read the recordings** from a path or bucket they share (``reads_sources``:
  batch/sources.py's ``read_source``, fsspec URIs included); only the path and the answer cross the
  network.
* **An actor that dies mid-file** (killed, out of memory, its node gone) is replaced by a new one
  (its models loaded again) and the recording retried, ``retries`` times; then it fails with the
  reason, and the run goes on. A recording the handler refuses or fails on fails alone, as in this
  process.

Ray is imported only by :meth:`RayEngine.load` (the endpoint never imports this module).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any, NamedTuple, Optional

from speaker_asr.batch.engine import Engine, Reply
from speaker_asr.batch.errors import FileError, RunError
from speaker_asr.batch.sources import Source, read_source

logger = logging.getLogger("speaker_asr.batch")

DEFAULT_RETRIES = 2
DEFAULT_START_TIMEOUT_S = 900.0  # an actor's scheduling and model load (large-v3 from the hub)
# what the libraries read from the environment, passed on when set here: where models are cached,
# offline mode, pyannote's telemetry, quiet logs
PASSED_ENV = ("HF_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE", "HF_ENDPOINT", "TRANSFORMERS_OFFLINE",
              "TRANSFORMERS_VERBOSITY", "HF_HUB_DISABLE_PROGRESS_BARS", "TOKENIZERS_PARALLELISM",
              "PYANNOTE_METRICS_ENABLED", "PYANNOTE_CACHE", "TORCH_HOME", "LOG_LEVEL")
# secrets: to the actor's constructor, not the runtime_env
SECRET_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")


def worker_env(environ: Optional[dict[str, str]] = None) -> dict[str, str]:
    """The variables of ``environ`` (default: this process's) that the workers get: every model
    setting (``ModelSettings``' fields, in any case) and :data:`PASSED_ENV`, where set; never a
    token."""
    from speaker_asr.settings import ModelSettings

    environ = dict(os.environ if environ is None else environ)
    wanted = {name.upper() for name in ModelSettings.model_fields} | set(PASSED_ENV)
    wanted -= set(SECRET_ENV)
    return {key: value for key, value in environ.items() if key.upper() in wanted}


def secret_env(environ: Optional[dict[str, str]] = None) -> dict[str, str]:
    environ = dict(os.environ if environ is None else environ)
    return {key: environ[key] for key in SECRET_ENV if environ.get(key)}


class Answer(NamedTuple):
    """An actor's answer for one recording, which the driver turns back into a Reply or the
    batch's errors. ``kind``: ``ok`` (``response``, and the ``seconds`` it took in the actor),
    ``file`` (this recording failed: ``message``, ``refused`` when it is the input's fault) or
    ``run`` (the actor cannot transcribe anything: ``message``; the run ends)."""

    kind: str
    response: Any = None
    seconds: float = 0.0
    message: str = ""
    refused: bool = False


class Transcriber:
    """The Ray actor: the handler in a worker process, its models loaded once at construction
    (``secrets``: the tokens, set in its environment first). Its methods never raise for a
    recording: they answer an :class:`Answer`."""

    def __init__(self, secrets: dict[str, str]):
        os.environ.update(secrets)
        from speaker_asr.batch.engine import LocalEngine

        self.engine = LocalEngine()
        self.error: Optional[str] = None
        try:
            self.engine.load()
        except RunError as exc:
            self.error = str(exc)

    def ready(self) -> Optional[str]:
        """Why its models could not be loaded, or None."""
        return self.error

    def respond(self, source: str, parameters: dict[str, Any]) -> Answer:
        """``source``: an absolute path or a URI."""
        started = time.monotonic()
        if self.error is not None:
            return Answer("run", message=self.error)
        try:
            audio = read_source(source)
            reply = self.engine.respond(audio, parameters, source, threading.Event())
        except FileError as exc:
            return Answer("file", message=str(exc), refused=exc.refused)
        except RunError as exc:
            return Answer("run", message=str(exc))
        return Answer("ok", response=reply.response, seconds=time.monotonic() - started)


@dataclass
class _Slot:
    """One place in the pool: the actor in it (replaced when it dies)."""

    actor: Any


class RayEngine(Engine):
    """The recordings on a Ray cluster (see the module's docstring). ``address``: ``auto`` (a
    cluster running on this machine or named by ``RAY_ADDRESS``), ``local`` (a cluster started in
    this process, ended with it), ``HOST:PORT`` of a head, or ``ray://HOST:PORT`` (Ray Client).
    ``actors``/``gpus_per_actor``/``cpus_per_actor``: None chooses from the cluster's resources
    (:meth:`load`); ``retries``: how many times a recording is tried again on a new actor after
    the one transcribing it died."""

    reads_sources = True

    def __init__(self, address: str, actors: Optional[int] = None, gpus_per_actor: Optional[float] = None,
                 cpus_per_actor: Optional[float] = None, retries: int = DEFAULT_RETRIES,
                 start_timeout_s: float = DEFAULT_START_TIMEOUT_S):
        self.address = address
        self.concurrency = actors or 1
        self._actors = actors
        self.gpus_per_actor = gpus_per_actor
        self.cpus_per_actor = cpus_per_actor
        self.retries = retries
        self.start_timeout_s = start_timeout_s
        self.slots: list[_Slot] = []
        self._idle: "queue.Queue[_Slot]" = queue.Queue()
        self._lock = threading.Lock()  # the timings, appended by the run's threads
        self._connected = False
        self._started_ray = False  # close() ends Ray only where connect() started it
        self._loaded = False
        self.actor_options: dict[str, Any] = {}  # each actor's Ray options, chosen by load()
        self._secrets = secret_env()
        # each recording answered: (source, seconds in the actor, seconds here from sending it to
        # its answer, retries included): what Ray adds per recording (bench/ray_throughput.py)
        self.timings: list[tuple[str, float, float]] = []

    def describe(self) -> str:
        return (f"{len(self.slots)} Ray actor{'s' if len(self.slots) != 1 else ''} at {self.address} "
                f"({self.actor_options.get('num_gpus', 0):g} GPU, {self.actor_options.get('num_cpus', 0):g} "
                "CPU each)")

    # -- the cluster and the pool
    def _ray(self):
        try:
            import ray
        except ImportError:
            raise RunError("--ray needs Ray on this machine and the cluster's: pip install "
                           "'ray>=2.40'") from None
        return ray

    def connect(self) -> None:
        """Join (or, for ``local``, start) the cluster. Raises RunError naming the address."""
        if self._connected:
            return
        ray = self._ray()
        kwargs: dict[str, Any] = {"address": self.address, "logging_level": logging.WARNING,
                                  "log_to_driver": logger.isEnabledFor(logging.INFO)}
        if self.address == "local":
            kwargs["include_dashboard"] = False
        # the job's runtime_env (a folder to ship is taken only here, not per actor): the
        # driver's settings and this package, so that every worker runs the driver's code
        kwargs["runtime_env"] = {"env_vars": worker_env(),
                                 "py_modules": [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))],
                                 "excludes": ["__pycache__", "*.pyc"]}
        try:
            if not ray.is_initialized():
                ray.init(**kwargs)
                self._started_ray = True
        except Exception as exc:
            raise RunError(f"could not connect to the Ray cluster at {self.address}: "
                           f"{type(exc).__name__}: {_first_line(exc)} (--ray auto joins the cluster "
                           "started on this machine with `ray start --head`; local starts one in "
                           "this process)") from None
        self._connected = True

    def _resources(self) -> dict[str, Any]:
        """The options of every actor, chosen from the cluster's resources. Raises RunError when
        the pool cannot fit in the cluster as it is."""
        ray = self._ray()
        total = ray.cluster_resources()
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        gpus_total = float(total.get("GPU", 0))
        cpus_total = float(total.get("CPU", 0))
        node_cpus = [float(n.get("Resources", {}).get("CPU", 0)) for n in nodes] or [cpus_total]
        gpus = self.gpus_per_actor if self.gpus_per_actor is not None else (1.0 if gpus_total >= 1 else 0.0)
        actors = self._actors
        if actors is None:
            actors = max(1, int(gpus_total // gpus) if gpus else sum(1 for c in node_cpus if c >= 1))
        if self.cpus_per_actor is not None:
            cpus = self.cpus_per_actor
        elif gpus:
            cpus = 1.0
        else:
            cpus = float(max(1, min(int(cpus_total // max(1, actors)), int(max(node_cpus)))))
        if actors < 1 or gpus * actors > gpus_total + 1e-9 or cpus * actors > cpus_total + 1e-9:
            raise RunError(
                f"the Ray cluster at {self.address} has {gpus_total:g} GPU and {cpus_total:g} CPU; "
                f"{actors} actor{'s' if actors != 1 else ''} with {gpus:g} GPU and {cpus:g} CPU each "
                "need more: lower --ray-actors, --ray-gpus-per-actor or --ray-cpus-per-actor")
        self.concurrency = actors
        threads = str(max(1, int(cpus)))
        # merged with the job's env_vars (Ray merges that field of a runtime_env)
        return {"num_gpus": gpus, "num_cpus": cpus,
                "runtime_env": {"env_vars": {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}}}

    def _start(self, count: int) -> list[_Slot]:
        """``count`` new actors, their models loaded. Raises RunError when one cannot start."""
        ray = self._ray()
        slots: list[_Slot] = []
        try:
            remote = ray.remote(max_restarts=0, max_task_retries=0)(Transcriber)
            slots = [_Slot(remote.options(**self.actor_options).remote(self._secrets)) for _ in range(count)]
            answers = ray.get([slot.actor.ready.remote() for slot in slots], timeout=self.start_timeout_s)
        except ray.exceptions.GetTimeoutError:
            self._kill(slots)
            raise RunError(f"the Ray actors were not ready within {self.start_timeout_s:g} s "
                           "(waiting for resources, or a model that is slow to download)") from None
        except Exception as exc:
            self._kill(slots)
            raise RunError(f"a Ray actor could not start: {type(exc).__name__}: {_first_line(exc)}") from None
        for error in answers:
            if error is not None:
                self._kill(slots)
                raise RunError(f"could not load the models on a Ray actor: {error}")
        return slots

    def load(self) -> None:
        if self._loaded:
            return
        self.connect()
        self.actor_options = self._resources()
        self.slots = self._start(self.concurrency)
        for slot in self.slots:
            self._idle.put(slot)
        self._loaded = True

    def _kill(self, slots: list[_Slot]) -> None:
        ray = self._ray()
        for slot in slots:
            try:
                ray.kill(slot.actor, no_restart=True)
            except Exception:
                pass

    def _replace(self, slot: _Slot) -> None:
        """A new actor in ``slot``'s place (the old one is dead; the slot is the calling thread's
        alone, taken from the idle queue)."""
        self._kill([slot])
        slot.actor = self._start(1)[0].actor

    def close(self) -> None:
        """End the actors (and a cluster started here)."""
        if not self._connected:
            return
        self._kill(self.slots)
        self.slots = []
        self._loaded = False
        if self._started_ray:
            self._ray().shutdown()
            self._started_ray = False
        self._connected = False

    # -- one recording
    def respond(self, audio: Optional[bytes], parameters: dict[str, Any], source: Optional[Source],
                stop: threading.Event) -> Reply:
        if source is None:
            raise FileError("a Ray run transcribes files its workers can read, not standard input",
                            refused=True)
        self.load()
        ray = self._ray()
        died = _actor_deaths(ray)
        from speaker_asr.batch.sources import is_uri

        # a worker's working folder is not the driver's: a local path goes as an absolute one
        where = str(source) if is_uri(source) else os.path.abspath(source)
        slot = self._idle.get()
        sent = time.monotonic()
        try:
            reason = ""
            for attempt in range(1, self.retries + 2):
                try:
                    answer = ray.get(slot.actor.respond.remote(where, parameters))
                except died as exc:
                    reason = _first_line(exc)
                    logger.warning("the Ray actor transcribing %s died (%s); %s", source, reason,
                                   "starting another" if attempt <= self.retries else "giving up")
                    self._replace(slot)  # the pool keeps its size (RunError when it cannot)
                    continue
                if answer.kind == "file":
                    raise FileError(answer.message, refused=answer.refused, attempts=attempt)
                if answer.kind == "run":
                    raise RunError(answer.message)
                with self._lock:
                    self.timings.append((str(source), answer.seconds, time.monotonic() - sent))
                return Reply(answer.response, attempts=attempt)
            raise FileError(f"the Ray actor transcribing it died {self.retries + 1} times "
                            f"(last: {reason})", attempts=self.retries + 1)
        finally:
            self._idle.put(slot)


def _actor_deaths(ray) -> tuple[type, ...]:
    """Ray's exceptions for a task whose actor or worker died under it."""
    names = ("RayActorError", "ActorDiedError", "ActorUnavailableError", "WorkerCrashedError",
             "OutOfMemoryError", "NodeDiedError", "ObjectLostError", "OwnerDiedError")
    return tuple(getattr(ray.exceptions, n) for n in names if hasattr(ray.exceptions, n))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0][:300] if lines else type(exc).__name__


__all__ = ["Answer", "DEFAULT_RETRIES", "PASSED_ENV", "RayEngine", "Transcriber", "secret_env", "worker_env"]
