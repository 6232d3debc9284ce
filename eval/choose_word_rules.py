"""Choose the word attribution's rules and weights (speaker_asr/attribution/speakers.py, ``RULES``
and ``WEIGHTS``) so that each rule does no harm, leaving one meeting clip out at a time.

    # after eval/evaluate.py has run each part once (its ASR and diarization cached)
    .venv/bin/python eval/choose_word_rules.py --parts meetings,meetings-hard,tuning

A rule that corrects must leave correct input alone. On the reference turns every speaker is
right, so there a rule may only fix what the plain attribution gets wrong: with it, no recording
may have more speaker errors than the same attribution without it. For each part it runs
eval/choose_voice_rule.py's scoring (eval/evaluate.py on the cached ASR words, diarizations and
sentence voices) with every candidate of a grid -- each rule on or off, ``newest`` and
``continuity`` at a few weights (:func:`grid`) -- on the reference turns (``oracle``: exclusive
turns derived, as for pyannote 3.x; ``oracle4``: the pipeline's own exclusive turns where the
reference has two speakers at once, the only reference turns on which ``dominant`` acts) and on
the pipeline's, for each model; then:

* **the set**: among the candidates that do no harm -- on no recording, with the reference turns,
  more speaker errors than the same candidate without any one of its rules, or than the
  candidate with no rule at all -- the one with the fewest errors with the pipeline's turns (then
  with the reference turns, then the fewest changes from today's defaults);
* **leave one clip out**: for each meeting clip (a meeting and its harder variants), the set
  chosen so on everything else, scored on it;
* **held out**: the untouched generated part (``--heldout``), scored last with today's rules and
  the chosen set, nothing chosen on it.

Every candidate runs with the sentences' voices after it, as the endpoint does. Output: the
tables on stdout and in ``<out>/word-rules.md``; every row in ``<out>/word-rules.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import sys
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Iterable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import algorithms  # noqa: E402
from choose_voice_rule import add_part_options, clip_of, errors, score_part, write_results  # noqa: E402

from speaker_asr.attribution.speakers import RULES, WEIGHTS  # noqa: E402

# the modes with the reference turns; on the first alone every speaker is right (the criterion's
# default); oracle4's exclusive turns are who the pipeline heard where two people talk at once: the
# one test of ``dominant`` there is, but its evidence is the pipeline's (``--harm-modes``)
REFERENCE = ("oracle", "oracle4")
HARM_MODES = ("oracle",)
MODES = "oracle,oracle4,pipeline"
TURNS = {"oracle": "reference", "oracle4": "reference (4)", "pipeline": "pipeline"}


@dataclass(frozen=True)
class WordRules:
    """One candidate: which of :data:`RULES` are on, and the weights of ``newest`` and
    ``continuity`` (0: off). ``dominant`` and ``sentence`` keep their weight (1) when on."""

    tidy: bool
    dominant: bool
    newest: float
    continuity: float
    sentence: bool

    def on(self) -> list[str]:
        return [f.name for f in fields(self) if getattr(self, f.name)]

    def without(self, rule: str) -> "WordRules":
        return replace(self, **{rule: 0.0 if isinstance(getattr(self, rule), float) else False})

    def rules(self) -> frozenset:
        return frozenset(self.on())

    def weights(self) -> dict[str, float]:
        return {"dominant": 1.0, "newest": self.newest, "continuity": self.continuity, "sentence": 1.0}

    @property
    def name(self) -> str:
        parts = [f"{r} {getattr(self, r):g}" if isinstance(getattr(self, r), float) else r for r in self.on()]
        return " + ".join(parts) or "no rule"


def today() -> WordRules:
    """speakers.py's defaults as a candidate."""
    w = {r: WEIGHTS[r] if r in RULES else 0.0 for r in ("newest", "continuity")}
    return WordRules(tidy="tidy" in RULES, dominant="dominant" in RULES and WEIGHTS["dominant"] > 0,
                     newest=w["newest"], continuity=w["continuity"],
                     sentence="sentence" in RULES and WEIGHTS["sentence"] > 0)


NO_RULE = WordRules(False, False, 0.0, 0.0, False)


def grid(quick: bool = False) -> list[WordRules]:
    """Every rule on or off, ``newest`` at 0 / 0.1 / 0.25 and ``continuity`` at 0 / 0.25 / 0.5
    (``quick``: off or today's weight), today's defaults first. A product: every candidate's
    neighbours without one of its rules are candidates too."""
    t = today()
    newest = (0.0, t.newest or 0.25) if quick else (0.0, 0.1, 0.25)
    continuity = (0.0, t.continuity or 0.5) if quick else (0.0, 0.25, 0.5)
    out = [t]
    for tidy, dominant, n, c, sentence in itertools.product((True, False), (True, False), newest, continuity,
                                                            (True, False)):
        r = WordRules(tidy, dominant, n, c, sentence)
        if r not in out:
            out.append(r)
    if NO_RULE not in out:
        out.append(NO_RULE)
    return out


def runners(candidates: Iterable[WordRules]) -> dict:
    """An eval/algorithms.py runner per candidate: the endpoint's attribution with its rules and
    weights, then the sentences' voices."""
    return {c.name: algorithms.ours(rules=c.rules(), weights=c.weights()) for c in candidates}


def score(parts: list[str], candidates: list[WordRules], args) -> list[dict]:
    """eval/evaluate.py's rows of every candidate (and the anchor) on each part; its own tables
    are not printed."""
    rows = []
    for part in parts:
        with contextlib.redirect_stdout(io.StringIO()):
            rows += [r for r in score_part(part, [], args, extra=runners(candidates), modes=args.modes)
                     if r["algorithm"] not in ("ours", "none")]
    return rows


# --------------------------------------------------------------------------- the choice


def harms(table: dict, keys: list[tuple], c: WordRules, modes: Iterable[str] = HARM_MODES) -> list[tuple]:
    """Where ``c`` does harm on ``keys`` (model, mode, part, file) in ``modes`` (reference turns):
    (rule, key, errors with, errors without) for each of its rules and each recording where the
    candidate has more errors than without that rule ("all": than with no rule at all). A
    neighbour not scored counts as harm (nothing shows it safe)."""
    out = []
    for rule, other in [(r, c.without(r)) for r in c.on()] + ([("all", NO_RULE)] if c.on() else []):
        for k in keys:
            if k[1] not in modes:
                continue
            mine, theirs = table[k + (c.name,)][0], table.get(k + (other.name,), (-1,))[0]
            if mine > theirs:
                out.append((rule, k, mine, theirs))
    return out


def distance(a: WordRules, b: WordRules) -> int:
    return sum(getattr(a, f.name) != getattr(b, f.name) for f in fields(a))


def total(table: dict, keys: list[tuple], c: WordRules, modes: Iterable[str]) -> int:
    return sum(table[k + (c.name,)][0] for k in keys if k[1] in modes)


def ranking(table: dict, keys: list[tuple], candidates: list[WordRules],
            modes: Iterable[str] = HARM_MODES) -> list[WordRules]:
    """The candidates that do no harm on ``keys`` in ``modes``, best first: the fewest errors with
    the pipeline's turns, then with the reference turns, then the fewest changes from today's
    defaults. No rule at all is always safe."""
    t = today()
    safe = [c for c in candidates if not harms(table, keys, c, modes)] or [NO_RULE]
    return sorted(safe, key=lambda c: (total(table, keys, c, ("pipeline",)), total(table, keys, c, REFERENCE),
                                       distance(c, t), c.name))


def choose(table: dict, keys: list[tuple], candidates: list[WordRules],
           modes: Iterable[str] = HARM_MODES) -> WordRules:
    """The first of :func:`ranking`."""
    return ranking(table, keys, candidates, modes)[0]


# --------------------------------------------------------------------------- the tables


def fmt(e: int, n: int) -> str:
    return f"{100 * e / n:.2f} % ({e}/{n})" if n else "-"


def pooled(table: dict, ks: list[tuple], alg: str) -> tuple[int, int]:
    xs = [table[k + (alg,)] for k in ks]
    return sum(x[0] for x in xs), sum(x[1] for x in xs)


def groups(keys: list[tuple]):
    """(part, model, mode, keys) in table order."""
    for part in sorted({k[2] for k in keys}, key=lambda p: (p != "meetings", p)):
        for model in sorted({k[0] for k in keys}):
            for mode in ("oracle", "oracle4", "pipeline"):
                ks = [k for k in keys if k[0] == model and k[1] == mode and k[2] == part]
                if ks:
                    yield part, model, mode, ks


def rule_tables(table: dict, keys: list[tuple], c: WordRules, candidates: list[WordRules]) -> list[str]:
    """Per part: what each rule does in ``c`` -- anchor, ``c`` without the rule, with it (a rule
    ``c`` leaves off: ``c``, and ``c`` with the rule at today's weight or the grid's largest), the
    recordings it harms and helps."""
    t = today()
    names = {x.name for x in candidates}
    lines = []
    for part in sorted({k[2] for k in keys}, key=lambda p: (p != "meetings", p)):
        lines += [f"### {part}", "",
                  "| model | turns | rule | anchor | without the rule | with it | recordings harmed / helped "
                  "| errors added / removed |", "|---|---|---|---:|---:|---:|---:|---:|"]
        for p, model, mode, ks in groups(keys):
            if p != part:
                continue
            anchor = pooled(table, ks, "anchor")
            for rule in RULES:
                if getattr(c, rule):
                    without, with_ = c.without(rule), c
                    label = rule
                else:
                    on = getattr(t, rule) or max(getattr(x, rule) for x in candidates)
                    without, with_ = c, replace(c, **{rule: on})
                    label = f"({rule} off; at {on:g})" if isinstance(on, float) else f"({rule} off)"
                if with_.name not in names:
                    continue
                diffs = [table[k + (with_.name,)][0] - table[k + (without.name,)][0] for k in ks]
                lines.append(f"| {model} | {TURNS[mode]} | {label} | {fmt(*anchor)} "
                             f"| {fmt(*pooled(table, ks, without.name))} | {fmt(*pooled(table, ks, with_.name))} "
                             f"| {sum(d > 0 for d in diffs)} / {sum(d < 0 for d in diffs)} of {len(ks)} "
                             f"| +{sum(d for d in diffs if d > 0)} / -{-sum(d for d in diffs if d < 0)} |")
        lines.append("")
    return lines


def without_table(table: dict, keys: list[tuple], c: WordRules) -> list[str]:
    """One row per part, model and turns: the anchor, ``c``, and ``c`` without each of its rules
    (speaker errors; in brackets the recordings where the rule adds errors / removes them)."""
    lines = ["| part | model | turns | words | anchor | with every rule | " + " | ".join(f"without {r}" for r in c.on())
             + " |", "|---|---|---|---:|---:|---:|" + "---:|" * len(c.on())]
    for part, model, mode, ks in groups(keys):
        cells = []
        for rule in c.on():
            diffs = [table[k + (c.name,)][0] - table[k + (c.without(rule).name,)][0] for k in ks]
            cells.append(f"{pooled(table, ks, c.without(rule).name)[0]} ({sum(d > 0 for d in diffs)} / "
                         f"{sum(d < 0 for d in diffs)})")
        anchor, mine = pooled(table, ks, "anchor"), pooled(table, ks, c.name)
        lines.append(f"| {part} | {model} | {TURNS[mode]} | {mine[1]} | {anchor[0]} | {mine[0]} | "
                     + " | ".join(cells) + " |")
    return lines


def clip_table(table: dict, keys: list[tuple], sets: dict[str, WordRules]) -> list[str]:
    """Per meeting clip, with the reference turns: for each rule of each set, the errors it adds
    and removes over the clip's recordings (each recording against the set without the rule)."""
    lines = ["| clip | model | turns | set | " + " | ".join(RULES) + " |",
             "|---|---|---|---|" + "---:|" * len(RULES)]
    for clip in sorted({clip_of({"part": k[2], "file": k[3]}) for k in keys if k[2].startswith("meetings")}):
        for model in sorted({k[0] for k in keys}):
            for mode in REFERENCE:
                ks = [k for k in keys if k[0] == model and k[1] == mode and k[2].startswith("meetings")
                      and clip_of({"part": k[2], "file": k[3]}) == clip]
                if not ks:
                    continue
                for label, c in sets.items():
                    cells = []
                    for rule in RULES:
                        if not getattr(c, rule):
                            cells.append("off")
                            continue
                        diffs = [table[k + (c.name,)][0] - table[k + (c.without(rule).name,)][0] for k in ks]
                        up, down = sum(d for d in diffs if d > 0), -sum(d for d in diffs if d < 0)
                        cells.append(f"**+{up}** / -{down}" if up else f"+0 / -{down}")
                    lines.append(f"| {clip} | {model} | {TURNS[mode]} | {label} | " + " | ".join(cells) + " |")
    return lines


def harm_list(table: dict, keys: list[tuple], c: WordRules, modes: Iterable[str] = REFERENCE) -> list[str]:
    found = harms(table, keys, c, modes)
    if not found:
        return [f"`{c.name}` does no harm with the reference turns on any of these recordings."]
    lines = [f"`{c.name}` does harm with the reference turns on {len({h[1] for h in found})} recording(s):", "",
             "| rule | model | turns | part | recording | errors with | without |", "|---|---|---|---|---|---:|---:|"]
    for rule, k, mine, theirs in found:
        lines.append(f"| {rule} | {k[0]} | {TURNS[k[1]]} | {k[2]} | {k[3]} | {mine} | {theirs} |")
    return lines


def report(rows: list[dict], candidates: list[WordRules], harm_modes: tuple = HARM_MODES) -> tuple[list[str], dict]:
    table = errors(rows)
    keys = sorted({k[:4] for k in table})
    t = today()
    ranked = ranking(table, keys, candidates, harm_modes)
    chosen = ranked[0]
    strict_modes = tuple(m for m in REFERENCE if any(k[1] == m for k in keys))
    strict = choose(table, keys, candidates, strict_modes) if set(strict_modes) - set(harm_modes) else None
    clips = sorted({clip_of({"part": k[2], "file": k[3]}) for k in keys if k[2].startswith("meetings")})

    def clip(k):
        return clip_of({"part": k[2], "file": k[3]})

    held: dict[str, WordRules] = {}
    for c in clips:
        held[c] = choose(table, [k for k in keys if not (k[2].startswith("meetings") and clip(k) == c)],
                         candidates, harm_modes)

    modes_text = " and ".join(TURNS[m] for m in harm_modes)
    lines = ["## The set chosen on every recording", "",
             f"**`{chosen.name}`**: {len(ranked)} of {len(candidates)} candidates do no harm with the "
             f"{modes_text} turns (the criterion); today's defaults: `{t.name}`.", ""]
    if strict is not None:
        lines += [f"Asking the same on {' and '.join(TURNS[m] for m in strict_modes)} too: `{strict.name}`.", ""]
    lines += ["Where today's rules do harm (every mode with the reference turns; "
              "`all`: against no rule at all):", ""] + harm_list(table, keys, t, strict_modes) + [""]
    lines += [f"### The candidates that do no harm ({modes_text}), best first (speaker errors summed over "
              "every part and model)", "", "| set | pipeline turns | reference turns | reference (4) |",
              "|---|---:|---:|---:|"]
    for c in ranked[:12]:
        lines.append(f"| `{c.name}` | {total(table, keys, c, ('pipeline',))} | {total(table, keys, c, ('oracle',))} "
                     f"| {total(table, keys, c, ('oracle4',))} |")
    for c in (t, NO_RULE):
        if c not in ranked[:12]:
            lines.append(f"| `{c.name}`{'' if c in ranked else ' (does harm)'} "
                         f"| {total(table, keys, c, ('pipeline',))} | {total(table, keys, c, ('oracle',))} "
                         f"| {total(table, keys, c, ('oracle4',))} |")
    lines += ["", "### What harm buys: the candidates with the fewest errors with the pipeline's turns, safe or not",
              "", "| set | pipeline turns | reference turns | reference (4) | recordings harmed "
              f"({modes_text}) | errors the rules add there |", "|---|---:|---:|---:|---:|---:|"]
    by_pipeline = sorted(candidates, key=lambda c: (total(table, keys, c, ("pipeline",)),
                                                   total(table, keys, c, REFERENCE), distance(c, t), c.name))
    for c in by_pipeline[:10] + [x for x in (t, chosen) if x not in by_pipeline[:10]]:
        found = harms(table, keys, c, harm_modes)
        lines.append(f"| `{c.name}` | {total(table, keys, c, ('pipeline',))} | {total(table, keys, c, ('oracle',))} "
                     f"| {total(table, keys, c, ('oracle4',))} | {len({h[1] for h in found})} "
                     f"| {sum(h[2] - h[3] for h in found if h[0] != 'all')} |")
    sets = {"today's": t} | ({"chosen": chosen} if chosen != t else {}) | \
        ({"chosen, reference (4) too": strict} if strict not in (None, t, chosen) else {})
    lines += ["", "## Pooled: anchor, no rule, today's rules, the chosen set(s)", "",
              "| part | model | turns | anchor | no rule | " + " | ".join(sets) + " | recordings where chosen < / > today's |",
              "|---|---|---|---:|---:|" + "---:|" * len(sets) + "---:|"]
    for part, model, mode, ks in groups(keys):
        better = sum(table[k + (chosen.name,)][0] < table[k + (t.name,)][0] for k in ks)
        worse = sum(table[k + (chosen.name,)][0] > table[k + (t.name,)][0] for k in ks)
        lines.append(f"| {part} | {model} | {TURNS[mode]} | {fmt(*pooled(table, ks, 'anchor'))} "
                     f"| {fmt(*pooled(table, ks, NO_RULE.name))} | "
                     + " | ".join(fmt(*pooled(table, ks, c.name)) for c in sets.values())
                     + f" | {better} / {worse} of {len(ks)} |")
    lines += ["", f"## Without each of today's rules (speaker errors; in brackets the recordings where the rule "
              "adds errors / removes them)", ""] + without_table(table, keys, t)
    for label, c in sets.items():
        lines += ["", f"## What each rule does: {label} (`{c.name}`)", ""] + rule_tables(table, keys, c, candidates)
    lines += ["## Per meeting clip, reference turns: errors each rule adds / removes (the clip's recordings, "
              "each against the set without the rule)", ""] + clip_table(table, keys, sets) + [""]

    lines += ["## Left out one meeting clip at a time: the set chosen on the rest, scored on the clip", "",
              "| part | model | turns | anchor | today's | chosen on all | held-out choice | recordings harmed |",
              "|---|---|---|---:|---:|---:|---:|---:|"]
    summary = {}
    for part, model, mode, ks in groups(keys):
        if not part.startswith("meetings"):
            continue
        h = [table[k + (held[clip(k)].name,)] for k in ks]
        he, hn = sum(x[0] for x in h), sum(x[1] for x in h)
        harmed = sum(bool(harms(table, [k], held[clip(k)], (mode,))) for k in ks) if mode in REFERENCE else None
        summary[f"{model}/{mode}/{part}"] = {"anchor": pooled(table, ks, "anchor"), "today": pooled(table, ks, t.name),
                                             "chosen": pooled(table, ks, chosen.name), "held": (he, hn),
                                             "harmed": harmed}
        lines.append(f"| {part} | {model} | {TURNS[mode]} | {fmt(*pooled(table, ks, 'anchor'))} "
                     f"| {fmt(*pooled(table, ks, t.name))} | {fmt(*pooled(table, ks, chosen.name))} | {fmt(he, hn)} "
                     f"| {'-' if harmed is None else f'{harmed}/{len(ks)}'} |")
    lines += ["", "Each clip's choice:", ""]
    for c in clips:
        lines.append(f"* {c}: `{held[c].name}`" + (" (the same)" if held[c] == chosen else ""))
    return lines, {"chosen": asdict(chosen), "today": asdict(t), "strict": strict and asdict(strict),
                   "held": {k: asdict(v) for k, v in held.items()}, "safe": [c.name for c in ranked],
                   "loco": summary}


def heldout_table(rows: list[dict], sets: dict[str, WordRules]) -> list[str]:
    """The untouched generated part: anchor, no rule and each set, and each set's harm there."""
    table = errors(rows)
    keys = sorted({k[:4] for k in table})
    lines = ["| model | turns | anchor | no rule | " + " | ".join(sets) + " |", "|---|---|---:|---:|" + "---:|" * len(sets)]
    for _, model, mode, ks in groups(keys):
        lines.append(f"| {model} | {TURNS[mode]} | {fmt(*pooled(table, ks, 'anchor'))} "
                     f"| {fmt(*pooled(table, ks, NO_RULE.name))} | "
                     + " | ".join(fmt(*pooled(table, ks, c.name)) for c in sets.values()) + " |")
    lines.append("")
    t = sets["today's"]
    lines += [f"Without each of today's rules (`{t.name}`; speaker errors; in brackets the recordings where the "
              "rule adds errors / removes them):", ""] + without_table(table, keys, t)
    lines.append("")
    for label, c in sets.items():
        lines += [f"{label}: "] + harm_list(table, keys, c) + [""]
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", default="meetings,meetings-hard,tuning",
                    help="eval/evaluate.py parts to choose on, comma-separated (each run before, for its cache)")
    ap.add_argument("--heldout", default="heldout",
                    help="the part scored only at the end, with today's rules and the chosen set ('' for none)")
    add_part_options(ap)
    ap.add_argument("--modes", default=MODES, help=f"eval/evaluate.py modes (default {MODES})")
    ap.add_argument("--harm-modes", default=",".join(HARM_MODES),
                    help="the modes on which no rule may add an error (default oracle: the reference turns)")
    ap.add_argument("--quick", action="store_true", help="each rule on or off at today's weight (a smoke run)")
    ap.add_argument("--out", default=str(HERE / "results" / "word-rules"))
    args = ap.parse_args(argv)
    candidates = grid(args.quick)
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    rows = score(parts, candidates, args)
    lines, result = report(rows, candidates, tuple(m.strip() for m in args.harm_modes.split(",")))
    chosen, t = WordRules(**result["chosen"]), today()
    held_rows = []
    if args.heldout:
        sets = {"today's": t} | ({"chosen": chosen} if chosen != t else {})
        scored = {NO_RULE} | {x for c in sets.values() for x in [c] + [c.without(r) for r in c.on()]}
        held_rows = score([args.heldout], [c for c in candidates if c in scored], args)
        lines += ["", f"## The untouched part ({args.heldout}): scored once, after the choice", ""] + \
            heldout_table(held_rows, sets)
    text = "\n".join([f"# The word attribution's rules, chosen so that none does harm ({len(candidates)} "
                      f"candidates, parts {args.parts}, modes {args.modes})", "",
                      "Speaker errors (WDER) of the endpoint's attribution with each candidate set of rules, "
                      "the sentences' voices after it. Reference turns: the annotation's, exclusive turns "
                      "derived (as for pyannote 3.x); reference (4): the annotation's with the pipeline's own "
                      "exclusive turns where two people talk at once; pipeline: the kit's diarization.", ""]
                     + lines) + "\n"
    write_results(Path(args.out), "word-rules", text, result, rows + held_rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
