"""The files and folders given -> one :class:`Job` per recording, and what is left to do
(:class:`Plan`: outputs keeping subfolders, clashes refused, resume by existing outputs)."""

from __future__ import annotations

import errno
import logging
import os
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any, Iterable, Iterator, Optional, Sequence, Union

from speaker_asr.audio.files import is_audio
from speaker_asr.batch.errors import BatchError
from speaker_asr.batch.outputs import PARTIAL_SUFFIX, is_partial, output_name
from speaker_asr.batch.sources import Source, is_uri, walk_uri
from speaker_asr.formats import FORMATS

logger = logging.getLogger("speaker_asr.batch")


@dataclass(frozen=True)
class Job:
    """One recording: where it is (``source``, the path as given or as found in a given
    folder; a URI, ``str``, for a recording in a bucket: speaker_asr/batch/sources.py), its place
    under the output folder (``relative``: subfolders and file name) and the file each format is
    written to (``outputs``)."""

    source: Source
    relative: PurePath
    outputs: dict[str, Path]

    @property
    def name(self) -> str:
        return str(self.source)

    def done(self) -> bool:
        """Every output exists (what a rerun skips)."""
        return all(path.is_file() for path in self.outputs.values())


@dataclass
class Discovery:
    """What the paths given hold: ``found`` recordings as (source, relative place), files that
    are not audio by their extension (``ignored``), subfolders left out without ``recursive``
    (``unsearched``) and folders that could not be read (``unreadable``, with the reason)."""

    found: list[tuple[Source, PurePath]] = field(default_factory=list)
    ignored: list[Source] = field(default_factory=list)
    unsearched: list[Source] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)


def _missing(path: str) -> BatchError:
    return BatchError(f"cannot read {path}: {os.strerror(errno.ENOENT)} (give audio files or "
                      "folders that hold them)")


def discover(paths: Sequence[Union[str, Path]], recursive: bool = False,
             exclude: Optional[Union[str, Path]] = None) -> Discovery:
    """The recordings in ``paths``: a file given is taken whatever its extension (it was asked
    for); a folder gives its files whose extension is audio (``AUDIO_EXTENSIONS``), in name
    order, and with ``recursive`` those of its subfolders (symbolic links followed, each folder
    once). Hidden files and folders (``.name``) are skipped, and so is the folder ``exclude``
    (the output folder). The same file reached twice is taken once. A URI (``s3://bucket/calls``,
    a ``str``) is searched the same way through fsspec (speaker_asr/batch/sources.py). Raises
    BatchError for a path that does not exist or a URI that cannot be listed."""
    out = Discovery()
    seen: set[str] = set()
    skip = os.path.realpath(exclude) if exclude is not None else None

    def add(source: Source, relative: PurePath) -> None:
        real = source if is_uri(source) else os.path.realpath(source)
        if real not in seen:
            seen.add(real)
            out.found.append((source, relative))

    for given in paths:
        if is_uri(given):
            files, unsearched, folder = walk_uri(str(given), recursive)
            out.unsearched.extend(unsearched)
            for uri, relative in files:
                if folder and not is_audio(relative.name):
                    out.ignored.append(uri)
                else:
                    add(uri, relative)
            continue
        path = Path(given)
        if path.is_dir():
            for source, relative in _walk(path, recursive, skip, out):
                add(source, relative)
        elif path.exists():
            add(path, PurePath(path.name))
        else:
            raise _missing(str(given))
    return out


def _walk(root: Path, recursive: bool, skip: Optional[str], out: Discovery) -> Iterator[tuple[Path, PurePath]]:
    visited: set[str] = set()

    def unreadable(exc: OSError) -> None:
        out.unreadable.append(f"{exc.filename}: {exc.strerror or exc}")

    for folder, subfolders, files in os.walk(root, onerror=unreadable, followlinks=True):
        real = os.path.realpath(folder)
        if real in visited:  # a link back up the tree
            subfolders[:] = []
            continue
        visited.add(real)
        keep = []
        for name in sorted(subfolders):
            full = Path(folder, name)
            if name.startswith(".") or (skip is not None and os.path.realpath(full) == skip):
                continue
            if recursive:
                keep.append(name)
            else:
                out.unsearched.append(full)
        subfolders[:] = keep
        for name in sorted(files):
            if name.startswith("."):
                continue
            full = Path(folder, name)
            if is_audio(name):
                yield full, PurePath(full.relative_to(root))
            else:
                out.ignored.append(full)


@dataclass
class Plan:
    """Every recording found (``jobs``), split into what is left to do (``todo``) and what a
    previous run finished (``skipped``: its outputs all exist), and what discovery noted."""

    jobs: list[Job]
    todo: list[Job]
    skipped: list[Job]
    discovery: Discovery
    output_dir: Path
    formats: list[str]

    def notes(self, limit: int = 5) -> list[str]:
        """Lines saying what was left out and why."""
        lines = []
        d = self.discovery

        def some(paths: Sequence[Any]) -> str:
            shown = ", ".join(str(p) for p in paths[:limit])
            return shown + (f", ... ({len(paths) - limit} more)" if len(paths) > limit else "")

        if d.ignored:
            one = len(d.ignored) == 1
            lines.append(f"ignored {len(d.ignored)} file{'' if one else 's'} that {'is' if one else 'are'} "
                         f"not audio by {'its' if one else 'their'} extension: {some(d.ignored)}")
        if d.unsearched:
            lines.append(f"not searched ({len(d.unsearched)} subfolder"
                         f"{'s' if len(d.unsearched) != 1 else ''}; add --recursive): {some(d.unsearched)}")
        for problem in d.unreadable:
            lines.append(f"cannot read folder {problem}")
        return lines


def plan(paths: Sequence[Union[str, Path]], output_dir: Union[str, Path], formats: Sequence[str],
         *, recursive: bool = False, overwrite: bool = False) -> Plan:
    """The jobs for ``paths`` (see :func:`discover`) writing ``formats`` into ``output_dir``:
    a recording found in a given folder keeps its subfolders there
    (``folder/a/b.wav`` -> ``output_dir/a/b.<ext>``), a file given directly goes to the top.
    Raises BatchError when a format is unknown or two recordings would write the same file."""
    formats = list(formats)
    for fmt in formats:
        if fmt not in FORMATS:
            raise BatchError(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}")
    if not formats:
        raise BatchError("no output format: give at least one of " + ", ".join(FORMATS))
    output_dir = Path(output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise BatchError(f"--output-dir {output_dir} exists and is not a folder")
    found = discover(paths, recursive=recursive, exclude=output_dir)
    jobs: list[Job] = []
    writers: dict[str, Job] = {}
    clashes: list[str] = []
    for source, relative in found.found:
        outputs = {fmt: output_dir / relative.parent / output_name(relative.stem or relative.name, fmt, formats)
                   for fmt in formats}
        job = Job(source, relative, outputs)
        for path in outputs.values():
            key = os.path.normpath(path)
            other = writers.setdefault(key, job)
            if other is not job:
                clashes.append(f"{other.source} and {source} would both write {path}")
                break
        jobs.append(job)
    if clashes:
        shown = "; ".join(clashes[:5]) + (f"; ... ({len(clashes) - 5} more)" if len(clashes) > 5 else "")
        raise BatchError(f"{len(clashes)} recording{'s' if len(clashes) != 1 else ''} would overwrite "
                         f"another's output: {shown}. Rename one of each pair, or transcribe them "
                         "into separate --output-dir folders")
    todo = list(jobs) if overwrite else [job for job in jobs if not job.done()]
    left = {id(job) for job in todo}
    skipped = [job for job in jobs if id(job) not in left]
    return Plan(jobs, todo, skipped, found, output_dir, formats)


def remove_stale_partials(jobs: Iterable[Job]) -> int:
    """Remove the temporary files a killed run left beside these jobs' outputs; how many."""
    wanted: dict[Path, set[str]] = {}
    for job in jobs:
        for path in job.outputs.values():
            wanted.setdefault(path.parent, set()).add(path.name)
    removed = 0
    for folder, names in wanted.items():
        try:
            entries = os.listdir(folder)
        except OSError:
            continue
        for entry in entries:
            if not is_partial(entry):
                continue
            final = entry[1:-len(PARTIAL_SUFFIX)].rsplit(".", 1)[0]  # .<final>.<random>.partial
            if final in names:
                with suppress(OSError):
                    os.unlink(folder / entry)
                    removed += 1
    return removed
