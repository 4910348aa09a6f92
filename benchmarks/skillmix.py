"""The skill-mixture benchmark: instruction data whose rows each exercise one latent *skill*.

Twelve skills with long-tailed frequencies; every skill is rendered through 4 short templates built on the
same 4 frames ("the {noun} report wants ...", "... for the {noun} team", ...), and every prompt names a
noun of one of 8 topics, so prompt similarity follows the topic and the frame more than the skill.
Operands come last. Word skills act on a 32-word vocabulary (the topic nouns); arithmetic acts on 24
numbers; comparisons on digits.

Two variants:
  short   the response is the answer alone ("14")
  worked  the response is a short worked solution ending in the answer
          ("7 doubled: 7 + 7 = 14. Answer: 14"); scored on the final answer

Writes Alpaca JSONL ({"instruction", "output", "skill"}) that the tool reads as is; `skill` is for evaluation
only (the tool never looks at it). Also writes a held-out test set with the same number of rows per skill
(new instances: no test prompt occurs in the training file) and `labels.json` (skill, template, topic of
every training row, for diagnostics such as NMI).

    python benchmarks/skillmix.py --out DIR [--rows 5000] [--variant short|worked] [--seed 0] [--test-per-skill 100]
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import common

TOPICS = {
    "fruit": ["apple", "pear", "plum", "mango"],
    "clinic": ["nurse", "doctor", "patient", "clinic"],
    "network": ["server", "router", "laptop", "cable"],
    "zoo": ["horse", "tiger", "zebra", "camel"],
    "weather": ["cloud", "storm", "rain", "frost"],
    "music": ["piano", "drum", "violin", "flute"],
    "sport": ["ball", "racket", "goal", "team"],
    "kitchen": ["knife", "spoon", "oven", "kettle"],
}
WORDS = [w for ws in TOPICS.values() for w in ws]  # 32 words
NUMBERS = list(range(1, 25))  # 24 operands of the one-operand arithmetic
DIGITS = list(range(10))

# name, frequency, templates ({n}: a noun of the row's topic; the operands follow the template)
SKILLS = [
    ("upper", 0.30, ["the {n} report wants a word in capitals:", "write it in upper case for the {n} team:",
                     "{n} label, make it loud:", "capitals please, {n} desk:"]),
    ("first_letter", 0.18, ["the {n} report wants the first letter of:", "give the initial for the {n} team:",
                            "{n} index, which letter starts:", "first letter please, {n} desk:"]),
    ("copy_twice", 0.12, ["the {n} report wants a word said twice:", "repeat it twice for the {n} team:",
                          "{n} echo, double the word:", "say it twice please, {n} desk:"]),
    ("compare", 0.09, ["the {n} report compares two counts:", "compare the numbers for the {n} team:",
                       "{n} check, bigger or smaller:", "compare please, {n} desk:"]),
    ("last_letter", 0.07, ["the {n} report wants the last letter of:", "give the final letter for the {n} team:",
                           "{n} index, which letter ends:", "last letter please, {n} desk:"]),
    ("max3", 0.06, ["the {n} report wants the largest of:", "pick the biggest for the {n} team:",
                    "{n} check, which is most:", "maximum please, {n} desk:"]),
    ("length", 0.05, ["the {n} report wants the length of:", "count the letters for the {n} team:",
                      "{n} index, how many letters:", "letter count please, {n} desk:"]),
    ("minus1", 0.04, ["the {n} report wants one less than:", "take one away for the {n} team:",
                      "{n} count, one fewer than:", "minus one please, {n} desk:"]),
    ("reverse", 0.03, ["the {n} report wants a word backwards:", "reverse it for the {n} team:",
                       "{n} mirror, flip the word:", "backwards please, {n} desk:"]),
    ("plus1", 0.024, ["the {n} report wants one more than:", "add one for the {n} team:",
                      "{n} count, one above:", "plus one please, {n} desk:"]),
    ("double", 0.018, ["the {n} report wants twice the number:", "double it for the {n} team:",
                       "{n} count, two times:", "doubled please, {n} desk:"]),
    ("triple", 0.012, ["the {n} report wants three times the number:", "triple it for the {n} team:",
                       "{n} count, three times:", "tripled please, {n} desk:"]),
]
SKILL_NAMES = [s[0] for s in SKILLS]


def _operands(skill: str, rng: random.Random):
    if skill in ("upper", "first_letter", "copy_twice", "last_letter", "length", "reverse"):
        return rng.choice(WORDS)
    if skill == "compare":
        return (rng.choice(DIGITS), rng.choice(DIGITS))
    if skill == "max3":
        return tuple(rng.choice(DIGITS) for _ in range(3))
    return rng.choice(NUMBERS)


def _operand_text(skill: str, x) -> str:
    if skill == "compare":
        return f"{x[0]} and {x[1]}"
    if skill == "max3":
        return ", ".join(str(d) for d in x)
    return str(x)


def _answer(skill: str, x) -> str:
    return {
        "upper": lambda: x.upper(), "first_letter": lambda: x[0], "copy_twice": lambda: f"{x} {x}",
        "compare": lambda: ">" if x[0] > x[1] else "<" if x[0] < x[1] else "=",
        "last_letter": lambda: x[-1], "max3": lambda: str(max(x)), "length": lambda: str(len(x)),
        "minus1": lambda: str(x - 1), "reverse": lambda: x[::-1], "plus1": lambda: str(x + 1),
        "double": lambda: str(2 * x), "triple": lambda: str(3 * x),
    }[skill]()


def _worked(skill: str, x) -> str:
    """A short worked solution that carries the procedure, ending in 'Answer: <answer>'."""
    a = _answer(skill, x)
    spelled = " ".join(x) if isinstance(x, str) else ""
    bodies = {
        "upper": lambda: f"{spelled} in capitals is {a}.",
        "first_letter": lambda: f"{spelled} starts with {a}.",
        "copy_twice": lambda: f"{x} once, {x} again.",
        "compare": lambda: (f"{x[0]} is more than {x[1]}." if a == ">" else f"{x[0]} is less than {x[1]}."
                            if a == "<" else f"{x[0]} is the same as {x[1]}."),
        "last_letter": lambda: f"{spelled} ends with {a}.",
        "max3": lambda: f"{x[0]}, {x[1]}, {x[2]}: the biggest is {a}.",
        "length": lambda: f"{spelled} has {a} letters.",
        "minus1": lambda: f"{x} minus one: {x} - 1 = {a}.",
        "reverse": lambda: f"{spelled} backwards is {' '.join(a)}.",
        "plus1": lambda: f"{x} plus one: {x} + 1 = {a}.",
        "double": lambda: f"{x} doubled: {x} + {x} = {a}.",
        "triple": lambda: f"{x} tripled: {x} + {x} + {x} = {a}.",
    }
    body = bodies[skill]()
    return f"{body} Answer: {a}"


def _row(skill_idx: int, rng: random.Random, variant: str) -> dict:
    name, _, templates = SKILLS[skill_idx]
    topic_idx = rng.randrange(len(TOPICS))
    topic = list(TOPICS)[topic_idx]
    noun = rng.choice(TOPICS[topic])
    template_idx = rng.randrange(len(templates))
    x = _operands(name, rng)
    prompt = f"{templates[template_idx].format(n=noun)} {_operand_text(name, x)}"
    prompt = prompt[0].upper() + prompt[1:]
    response = _answer(name, x) if variant == "short" else _worked(name, x)
    return {"instruction": prompt, "output": response, "skill": name,
            "_template": template_idx, "_topic": topic_idx}


def skill_counts(rows: int, frequencies=None) -> list[int]:
    """Rows per skill: frequencies normalised, rounded by largest remainder so they sum to `rows`."""
    freqs = frequencies or [s[1] for s in SKILLS]
    total = sum(freqs)
    exact = [rows * f / total for f in freqs]
    counts = [int(e) for e in exact]
    for i in sorted(range(len(freqs)), key=lambda i: counts[i] - exact[i])[: rows - sum(counts)]:
        counts[i] += 1
    return counts


def coverage(counts, oracle_counts) -> tuple[float, float]:
    """How a selection covers the skills against the oracle's counts (rows per skill, same order):
    (Σ min(count, oracle count) / Σ oracle count, the worst skill's count ÷ the oracle's)."""
    import numpy as np
    c, o = np.asarray(counts, dtype=float), np.asarray(oracle_counts, dtype=float)
    return float(np.minimum(c, o).sum() / o.sum()), float((c / o).min())


def generate(rows: int = 5000, variant: str = "short", seed: int = 0, test_per_skill: int = 100):
    """(train rows, test rows), each a list of dicts; train rows are shuffled, skills long-tailed."""
    if variant not in ("short", "worked"):
        raise ValueError(f"unknown variant {variant!r}")
    rng = random.Random(seed)
    train = [_row(s, rng, variant) for s, c in enumerate(skill_counts(rows)) for _ in range(c)]
    rng.shuffle(train)
    seen = {r["instruction"] for r in train}
    test_rng = random.Random(seed + 10_007)
    test = []
    for s in range(len(SKILLS)):
        got, tries = 0, 0
        while got < test_per_skill:
            r = _row(s, test_rng, variant)
            tries += 1
            if r["instruction"] in seen and tries < 100_000:
                continue  # new instances only (give up on novelty only if the space is exhausted)
            seen.add(r["instruction"])
            test.append(r)
            got += 1
    return train, test


def write_jsonl(rows: list[dict], path: Path) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps({k: v for k, v in r.items() if not k.startswith("_")}) + "\n")


def write_benchmark(out: str | Path, rows: int = 5000, variant: str = "short", seed: int = 0,
                    test_per_skill: int = 100) -> dict:
    """Writes OUT/train.jsonl, OUT/test.jsonl, OUT/labels.json; returns their paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    train, test = generate(rows, variant, seed, test_per_skill)
    write_jsonl(train, out / "train.jsonl")
    write_jsonl(test, out / "test.jsonl")
    labels = {"skills": SKILL_NAMES, "skill": [SKILL_NAMES.index(r["skill"]) for r in train],
              "template": [r["_template"] for r in train], "topic": [r["_topic"] for r in train],
              "variant": variant, "seed": seed, "rows": rows}
    (out / "labels.json").write_text(json.dumps(labels))
    return {"train": out / "train.jsonl", "test": out / "test.jsonl", "labels": out / "labels.json"}


def main(argv=None):
    ap = common.parser(__doc__)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rows", type=int, default=5000)
    ap.add_argument("--variant", choices=["short", "worked"], default="short")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--test-per-skill", type=int, default=100)
    a = ap.parse_args(argv)
    paths = write_benchmark(a.out, a.rows, a.variant, a.seed, a.test_per_skill)
    counts = skill_counts(a.rows)
    print(" ".join(f"{n}={c}" for n, c in zip(SKILL_NAMES, counts)))
    print(f"wrote {paths['train']} {paths['test']} {paths['labels']}")


if __name__ == "__main__":
    main()
