"""Choose the sentences' voices' thresholds (speaker_asr/attribution/sentence_voices.py,
``VoiceRule``) so that they do no harm, leaving one clip out at a time.

    # after eval/evaluate.py has run each part once (its ASR and diarization cached)
    .venv/bin/python eval/choose_voice_rule.py --parts meetings,meetings-hard,tuning

For each part it runs eval/evaluate.py's scoring (the same cached ASR words, diarizations and
sentence voices) with every rule of a grid, on the reference turns (``oracle``) and on the
pipeline's, for each model; then:

* **the rule**: among the rules that do no harm -- on no file, with the reference turns, more
  speaker errors than the attribution without the sentences' voices -- the one with the fewest
  errors with the pipeline's turns (then with the reference turns);
* **leave one clip out**: for each clip (a meeting with its harder variants is one clip; a
  generated dialogue is one), the rule chosen so on all the other clips, scored on it. The
  held-out rows are what the rule is worth on a recording it never saw.

Also, on the reference turns, how far apart one person's sentence voices lie in each part (what
a split distance must stand above). Output: the tables on stdout and in ``<out>/voice-rule.md``;
every row in ``<out>/voice-rule.json``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Optional

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import algorithms  # noqa: E402
import evaluate  # noqa: E402
import numpy as np  # noqa: E402

from speaker_asr.attribution.sentence_voices import VOICE_RULE, VoiceRule  # noqa: E402

NONE = "none"  # the attribution without the sentences' voices


def grid(quick: bool = False) -> list[VoiceRule]:
    """The rules compared: the endpoint's default, the rule before it was made safe, and a grid
    over the evidence each decision asks for."""
    if quick:
        return [VOICE_RULE, VoiceRule(), VoiceRule(split_distance=0.8, min_group_units=3)]
    rules = [VOICE_RULE, VoiceRule()]
    for split, gap, units, seconds, new, sure in itertools.product(
            (0.6, 0.7, 0.8, 0.9), (0.0, 0.15, 0.3), (1, 2, 3), (2.0, 4.0), (True, False), (1.01, 0.5)):
        rules.append(VoiceRule(split_distance=split, split_gap=gap, min_group_units=units, min_group_s=seconds,
                               join_margin=0.15, new_speakers=new, sure_support=sure))
    # around the safest: a wider gap, a larger margin, fewer sentences that may move alone
    for gap, units, seconds, margin, sure in itertools.product(
            (0.3, 0.4), (1, 2), (2.0, 3.0), (0.15, 0.3), (0.5, 0.25, 0.0)):
        rules.append(VoiceRule(split_distance=0.8, split_gap=gap, min_group_units=units, min_group_s=seconds,
                               join_margin=margin, sure_support=sure))
    seen, out = set(), []
    for r in rules:
        if r not in seen:
            seen.add(r)
            out.append(r)
    return out


def rule_name(i: int) -> str:
    return f"rule{i:03d}"


def score_part(part: str, rules: list[VoiceRule], args, extra: Optional[dict] = None,
               modes: str = "oracle,pipeline") -> list[dict]:
    """eval/evaluate.py's rows for ``part`` in ``modes`` with each rule (``rule000``...), the
    anchor and the attribution without the voices (``none``), and the ``extra`` algorithms."""
    algs = {"anchor": algorithms.anchor, "ours": algorithms.ours(), NONE: algorithms.ours(voices=False)}
    algs.update({rule_name(i): algorithms.ours(voice_rule=r) for i, r in enumerate(rules)})
    algs.update(extra or {})
    evaluate.runners = lambda before=None, ablate=False: algs
    evaluate.label = lambda alg: alg
    with tempfile.TemporaryDirectory() as out:
        argv = ["--part", part, "--mode", modes, "--out", out, "--threads", str(args.threads)]
        if args.models:
            argv += ["--models", args.models]
        if args.count and part in ("tuning", "heldout"):
            argv += ["--count", str(args.count)]
        for option in ("cache_dir", "models_dir", "meetings_dir"):
            if getattr(args, option):
                argv += [f"--{option.replace('_', '-')}", getattr(args, option)]
        evaluate.main(argv)
        rows = json.loads((Path(out) / "latest.json").read_text())["rows"]
    for r in rows:
        r["part"] = part
    return rows


def spread_runner(found: list) -> Callable:
    """An algorithm that attributes as ours does without the voices and, on the reference turns
    (every speaker right), records how far apart each person's sentence voices lie: the
    average-linkage distance of their two groups, the spread inside each and every pairwise
    distance, for each speaker with enough sentences to compare."""
    from speaker_asr.attribution.sentence_voices import MIN_UNITS, embedded_span, split_in_two, voice_units

    def run(chunks, words, diar, duration):
        pieces = algorithms.attribution.attribute_words(algorithms._pieces(words, duration), diar.turns,
                                                        diar.own_exclusive)
        if diar.embed is not None and not diar.heard:  # the reference turns (oracle)
            units = voice_units(pieces)
            by_speaker: dict = {}
            for u in units:
                if u.embedded:
                    by_speaker.setdefault(u.speaker, []).append(u)
            for speaker, us in by_speaker.items():
                vectors = [v for v in diar.embed([embedded_span(u) for u in us]) if v is not None]
                if len(vectors) < MIN_UNITS:
                    continue
                stacked = np.stack(vectors)
                distance, _, spread = split_in_two(stacked)
                pairs = (1.0 - stacked @ stacked.T)[np.triu_indices(len(stacked), 1)]
                found.append({"split": distance, "gap": distance - spread, "pairs": pairs.tolist()})
        return algorithms._word_tokens(pieces)

    return run


def spread_table(found_by_part: dict[str, list]) -> list[str]:
    """How far apart one person's sentence voices lie, per part (the reference turns), from what
    :func:`spread_runner` found in each."""
    lines = ["## How far apart one person's sentences lie (reference turns, CAM++)", "",
             "| part | speakers compared | pairs of sentences | pair distance p50 / p90 / max "
             "| two groups' distance p50 / p90 / max | gap past the spread p50 / p90 / max |",
             "|---|---:|---:|---|---|---|"]
    for part, found in found_by_part.items():
        pairs = np.array([x for f in found for x in f["pairs"]])
        splits = np.array([f["split"] for f in found])
        gaps = np.array([f["gap"] for f in found])

        def q(a):
            return "-" if not len(a) else " / ".join(f"{v:.2f}" for v in (np.quantile(a, 0.5), np.quantile(a, 0.9), a.max()))

        lines.append(f"| {part} | {len(found)} | {len(pairs)} | {q(pairs)} | {q(splits)} | {q(gaps)} |")
    return lines


def clip_of(row: dict) -> str:
    """The clip a row's file is (a meeting and its harder variants are one)."""
    return row["file"].split("-")[0] if row["part"].startswith("meetings") else f"{row['part']}/{row['file']}"


def errors(rows: list[dict]) -> dict:
    """(model, mode, file, algorithm) -> (speaker errors, words scored)."""
    return {(r["model"], r["mode"], r["part"], r["file"], r["algorithm"]): (r["spk_errors"], r["spk_scored"])
            for r in rows}


def choose(table: dict, keys: list[tuple], candidates: list[str]) -> str:
    """The rule that does no harm on ``keys`` (model, mode, part, file) with the reference turns
    and has the fewest errors with the pipeline's, then with the reference turns."""
    def total(alg, mode):
        return sum(table[k + (alg,)][0] for k in keys if k[1] == mode)

    safe = [a for a in candidates
            if all(table[k + (a,)][0] <= table[k + (NONE,)][0] for k in keys if k[1] == "oracle")]
    pool = safe or [NONE]
    return min(pool, key=lambda a: (total(a, "pipeline"), total(a, "oracle"), a))


def report(rows: list[dict], rules: list[VoiceRule]) -> tuple[list[str], dict]:
    table = errors(rows)
    keys = sorted({k[:4] for k in table})
    names = [rule_name(i) for i in range(len(rules))]
    chosen = choose(table, keys, names)
    clips = sorted({clip_of({"part": k[2], "file": k[3]}) for k in keys})
    held: dict[str, str] = {}
    for clip in clips:
        train = [k for k in keys if clip_of({"part": k[2], "file": k[3]}) != clip]
        held[clip] = choose(table, train, names)

    def fmt(e: int, n: int) -> str:
        return f"{100 * e / n:.2f} % ({e}/{n})" if n else "-"

    lines = ["## The rule chosen on every clip", "",
             f"`{chosen}`: {_describe(rules, chosen)}", "",
             "## Held out: each clip scored with the rule chosen on the others", "",
             "| model | turns | part | anchor | without the voices | with the held-out rule | ratio to anchor | "
             "files harmed (more errors than without) |",
             "|---|---|---|---|---|---|---:|---:|"]
    summary = {}
    for model in sorted({k[0] for k in keys}):
        for mode in ("oracle", "pipeline"):
            for part in sorted({k[2] for k in keys}):
                ks = [k for k in keys if k[0] == model and k[1] == mode and k[2] == part]
                if not ks:
                    continue
                a = [table[k + ("anchor",)] for k in ks]
                n = [table[k + (NONE,)] for k in ks]
                h = [table[k + (held[clip_of({"part": k[2], "file": k[3]})],)] for k in ks]
                harmed = sum(x[0] > y[0] for x, y in zip(h, n))
                ae, an = sum(x[0] for x in a), sum(x[1] for x in a)
                he, hn = sum(x[0] for x in h), sum(x[1] for x in h)
                ne, nn = sum(x[0] for x in n), sum(x[1] for x in n)
                ratio = (he / hn) / (ae / an) if an and hn and ae else None
                summary[(model, mode, part)] = {"anchor": (ae, an), "none": (ne, nn), "held": (he, hn)}
                lines.append(f"| {model} | {mode} | {part} | {fmt(ae, an)} | {fmt(ne, nn)} | {fmt(he, hn)} "
                             f"| {'-' if ratio is None else f'{ratio:.2f}x'} | {harmed}/{len(ks)} |")
    lines += ["", "## Per clip, held out (speaker errors: anchor / without the voices / held-out rule; "
              "the rule chosen without the clip)", "",
              "| clip | model | turns | file | anchor | without | held-out rule | rule |", "|---|---|---|---|---:|---:|---:|---|"]
    for clip in clips:
        for k in keys:
            if clip_of({"part": k[2], "file": k[3]}) != clip:
                continue
            a, n, h = table[k + ("anchor",)], table[k + (NONE,)], table[k + (held[clip],)]
            mark = " **harm**" if h[0] > n[0] else ""
            lines.append(f"| {clip} | {k[0]} | {k[1]} | {k[3]} | {a[0]} | {n[0]} | {h[0]}{mark} | {held[clip]} |")
    lines += ["", "## Every clip's choice", ""]
    for clip in clips:
        lines.append(f"* {clip}: `{held[clip]}` {_describe(rules, held[clip])}")
    return lines, {"chosen": chosen, "rule": _rule_dict(rules, chosen), "held": held,
                   "summary": {"/".join(k): v for k, v in summary.items()}}


def _describe(rules: list[VoiceRule], name: str) -> str:
    d = _rule_dict(rules, name)
    return "no sentences' voices" if d is None else ", ".join(f"{k}={v}" for k, v in d.items())


def _rule_dict(rules: list[VoiceRule], name: str) -> Optional[dict]:
    if name == NONE:
        return None
    return asdict(rules[int(name[4:])])


def write_results(out: Path, name: str, text: str, result: dict, rows: list[dict]) -> None:
    """The report printed and kept as ``out/name.md``, the scored rows as ``out/name.json``."""
    print(text)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.md").write_text(text)
    (out / f"{name}.json").write_text(json.dumps({"result": result, "rows": [
        {k: r[k] for k in ("model", "mode", "part", "file", "algorithm", "spk_errors", "spk_scored")}
        for r in rows]}, indent=1))


def add_part_options(ap: argparse.ArgumentParser) -> None:
    """The options that say where eval/evaluate.py's parts come from (shared with
    eval/choose_word_rules.py)."""
    ap.add_argument("--models", default=None, help="as eval/evaluate.py (default tiny.en,base)")
    ap.add_argument("--count", type=int, default=24, help="generated dialogues per generated part")
    ap.add_argument("--cache-dir", default=None, help="as eval/evaluate.py")
    ap.add_argument("--models-dir", default=None, help="as eval/evaluate.py")
    ap.add_argument("--meetings-dir", default=None, help="as eval/evaluate.py")
    ap.add_argument("--threads", type=int, default=1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", default="meetings,meetings-hard,tuning",
                    help="eval/evaluate.py parts, comma-separated (each run before, for its cache)")
    add_part_options(ap)
    ap.add_argument("--quick", action="store_true", help="three rules only (a smoke run)")
    ap.add_argument("--out", default=str(HERE / "results" / "voice-rule"))
    args = ap.parse_args(argv)
    rules = grid(args.quick)
    parts = [p.strip() for p in args.parts.split(",")]
    rows, found_by_part = [], {}
    for part in parts:  # the spreads measured in the same pass as the rules
        found_by_part[part] = []
        rows += [r for r in score_part(part, rules, args, extra={"spread": spread_runner(found_by_part[part])})
                 if r["algorithm"] != "spread"]
    lines, result = report(rows, rules)
    lines += [""] + spread_table(found_by_part)
    text = "\n".join([f"# The sentences' voices' rule, chosen leaving one clip out ({len(rules)} rules, "
                      f"parts {args.parts})", ""] + lines) + "\n"
    write_results(Path(args.out), "voice-rule", text, result, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
