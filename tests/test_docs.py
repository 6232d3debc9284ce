"""The files the documentation and the docstrings name exist.

Scanned: README.md, docs/*.md, bench/README.md, eval/README.md, reliability/README.md and every
docstring (module, class, function) of the repository's Python files. A path counts when it
starts with one of the repository's top-level names (``tests/...``, ``speaker_asr/...``,
``bench/...``, ``Makefile``), with one of speaker_asr's own folders and a file name
(``patches/registry.py``, looked up in speaker_asr/ as well), is a bare Python file name
(``handler.py``: some file of the repository has that name) or starts with ``../shared/`` (checked
where ../shared is present); markdown links must point at a file. A path git ignores (an output:
``bench/results/``) may be absent; names with placeholders (``<time>``, ``*``) are not checked.

Also: a link's ``#anchor`` names a heading of the markdown file it points at (GitHub's ids), and
every setting and request parameter is documented where users look for it -- the models'
settings and the parameters in docs/reference.md's tables, our server's settings in
docs/serving.md's.
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

from helpers import ROOT

DOCS = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")),
        "bench/README.md", "eval/README.md", "reliability/README.md"]
# bare file names of code that lives elsewhere: the real-models kit (../shared/real-models and the
# pipeline folder it builds), the Inference Endpoints toolkit, 3D-Speaker's CAM++ source
ELSEWHERE = {"campp_embedding.py", "build_pipeline.py", "webservice_starlette.py", "setup.py", "logging.py",
             "DTDNN.py"}
EXTENSIONS = ("py", "md", "txt", "yaml", "yml", "toml", "ini", "sh", "cfg", "json", "wav", "stm", "rttm")
# a run of path characters not glued to a longer word, a placeholder or a home/variable prefix
TOKEN = re.compile(r"(?<![\w/.~$<>*{}-])((?:\.\./)?[\w.-]+(?:/[\w.-]*)*)(?![\w/.<>*{}$-])")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def tracked_files() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return out.splitlines()


def ignored(paths: list[str]) -> set[str]:
    if not paths:
        return set()
    # as files and as folders (a pattern such as "/bench/data/" matches only a folder)
    queries = [q for p in paths for q in (p.rstrip("/"), p.rstrip("/") + "/")]
    out = subprocess.run(["git", "check-ignore", "--no-index", "--stdin"], cwd=ROOT, input="\n".join(queries),
                         capture_output=True, text=True).stdout
    hits = set(out.splitlines())
    return {p for p in paths if p.rstrip("/") in hits or p.rstrip("/") + "/" in hits}


def docstrings(path: Path) -> str:
    tree = ast.parse(path.read_text(), filename=str(path))
    nodes = [tree] + [n for n in ast.walk(tree)
                      if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    return "\n".join(filter(None, (ast.get_docstring(n, clean=False) for n in nodes)))


class Checker:
    """What a text names, and which of those names are not in the repository."""

    def __init__(self, root: Path, files: list[str]):
        self.root = root
        self.top = {f.split("/")[0] for f in files}
        self.basenames = {f.rsplit("/", 1)[-1] for f in files}
        self.package = {p.name for p in (root / "speaker_asr").iterdir() if p.is_dir()}
        self.shared = root.parent / "shared"

    def candidates(self, text: str, where: Path) -> list[tuple[str, list[Path]]]:
        """(the name as written, the places it may be) for every path-like name in ``text``
        written in the file ``where``."""
        found = []
        for match in TOKEN.finditer(text):
            name = match.group(1).rstrip(".")
            head, _, rest = name.partition("/")
            has_ext = bool(re.search(rf"\.(?:{'|'.join(EXTENSIONS)})$", name))
            if head == ".." and rest.startswith("shared/"):
                if self.shared.is_dir():
                    found.append((name, [self.shared / rest.removeprefix("shared/")]))
            elif head in self.top and (rest or has_ext or name.endswith("/") or head in {"Makefile", "Dockerfile"}):
                found.append((name, [self.root / name]))
            elif head in self.package and (has_ext or (name.endswith("/") and not rest.strip("/"))):
                found.append((name, [self.root / "speaker_asr" / name, self.root / name, where.parent / name]))
            elif not rest and name.endswith(".py") and name not in ELSEWHERE | self.basenames:
                found.append((name, []))  # no file of the repository has that name
        for target in LINK.findall(text):
            target = target.split("#")[0]
            if target and not re.match(r"[a-z]+:", target):
                found.append((target, [where.parent / target]))
        return found

    def missing(self, text: str, where: Path) -> list[str]:
        absent = [name for name, places in self.candidates(text, where)
                  if not any(p.exists() for p in places)]
        generated = ignored([n for n in absent if not n.startswith("..")])
        return sorted(set(n for n in absent if n not in generated))


@pytest.fixture(scope="module")
def checker() -> Checker:
    return Checker(ROOT, tracked_files())


@pytest.mark.parametrize("doc", DOCS)
def test_docs_name_files_that_exist(checker, doc):
    path = ROOT / doc
    assert checker.missing(path.read_text(), path) == []


def test_docstrings_name_files_that_exist(checker):
    missing = {}
    for name in tracked_files():
        if name.endswith(".py"):
            path = ROOT / name
            if absent := checker.missing(docstrings(path), path):
                missing[name] = absent
    assert missing == {}


def heading_ids(path: Path) -> set[str]:
    """The anchors GitHub gives ``path``'s headings: lowercased, punctuation but ``-`` and ``_``
    dropped, spaces as ``-``, a repeated one suffixed ``-1``, ``-2``...; none inside code fences."""
    ids, seen, fenced = set(), {}, False
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        heading = None if fenced else re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.group(1)).lower()
            slug = re.sub(r"[^\w\- ]", "", text).replace(" ", "-")
            ids.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
            seen[slug] = seen.get(slug, 0) + 1
    return ids


def broken_anchors(text: str, where: Path) -> list[str]:
    """The links in ``text`` (written in ``where``) whose ``#anchor`` is no heading of their file."""
    broken = []
    for target in LINK.findall(text):
        name, _, anchor = target.partition("#")
        if not anchor or re.match(r"[a-z]+:", target):
            continue
        path = (where.parent / name) if name else where
        if path.suffix == ".md" and path.exists() and anchor not in heading_ids(path):
            broken.append(target)
    return broken


@pytest.mark.parametrize("doc", DOCS + ["bench/results.md", "bench/profile_results.md"])
def test_links_reach_their_headings(doc):
    path = ROOT / doc
    assert broken_anchors(path.read_text(), path) == []


def table_names(path: Path) -> set[str]:
    """The names a markdown file's tables document: every backquoted name in a row's first cell."""
    names = set()
    for line in path.read_text().splitlines():
        if line.startswith("|"):
            names.update(re.findall(r"`([^`]+)`", line.split("|")[1]))
    return names


def test_every_setting_and_parameter_is_documented():
    from speaker_asr.config import InferenceConfig
    from speaker_asr.settings import ModelSettings, ServerSettings

    reference, serving = table_names(ROOT / "docs" / "reference.md"), table_names(ROOT / "docs" / "serving.md")
    assert sorted(set(InferenceConfig.model_fields) - reference) == []
    assert sorted({name.upper() for name in ModelSettings.model_fields} - reference) == []
    assert sorted({name.upper() for name in ServerSettings.model_fields} - serving) == []


def test_the_anchor_check_finds_what_is_missing(tmp_path):
    (tmp_path / "a.md").write_text("# Speed and accuracy\n\n## `QUANTIZATION=int8`: its two forms\n\n"
                                   "```bash\n# not a heading\n```\n## Speed and accuracy\n")
    doc = tmp_path / "b.md"
    doc.write_text("# There\n")
    text = ("[ok](a.md#speed-and-accuracy) [ok](a.md#quantizationint8-its-two-forms) "
            "[ok](a.md#speed-and-accuracy-1) [no](a.md#not-a-heading) [no](a.md#gone) [no](#here) "
            "[ok](https://example.com/x.md#y) [ok](missing.md#z)")
    assert broken_anchors(text, doc) == ["a.md#not-a-heading", "a.md#gone", "#here"]


def test_the_check_finds_what_is_missing(checker):
    doc = ROOT / "docs" / "made-up.md"
    text = ("Run `tests/test_speedups.py` and whisper_speedups.py, see speaker_asr/attribution/nowhere.py and "
            "patches/gone.py, [the guide](missing-guide.md), `make test-nothing`, `bench/README.md`, "
            "patches/registry.py, handler.py, bench/results/benchmark-1.json (ignored output), "
            "bench/results/benchmark-<time>.json, audio/wav, pyannote/speaker-diarization-3.1, "
            "[ok](architecture.md#code), https://example.com/x.py, ~/.cache/real-models/x.py.")
    assert checker.missing(text, doc) == ["missing-guide.md", "patches/gone.py", "speaker_asr/attribution/nowhere.py",
                                          "tests/test_speedups.py", "whisper_speedups.py"]
