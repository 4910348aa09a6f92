"""A family of skill-mixture benchmark *instances*: one seed, one instance, none of them tuned to.

benchmarks/skillmix.py is one fixed instance (12 skills, 4 templates each). An instance of this family draws:
- 8-20 skills from a pool of 48 skill primitives (letter and word operations, one-operand arithmetic with a
  parameter, comparisons of two or three numbers, yes/no classification rules, formatting, counting);
- 2-8 templates per skill from a template grammar: a frame (16 of them, each naming a topic noun), one of the
  skill's synonym phrases, and the operand before or after the request;
- a Zipf frequency profile, exponent 0.8-1.5, every skill at >= 40 rows (rows 3,000-6,000);
- 5-9 topics of 4 nouns from 16, shared by every skill (the frames name them; the word skills act on them);
- at least one pair of **near twins**: two members of one parametric family ("add two" / "add ten", "the
  second letter" / "the third letter") whose templates are the same but for that one word or number, one of
  them frequent and the other rare;
- at least one skill with **very diverse surface forms** (8 templates, distinct frames and phrasings).
Both response styles on every instance (`short`: the answer alone; `worked`: a short worked solution ending in
"Answer: <answer>"; the prompts are the same). Alpaca JSONL ({"instruction", "output", "skill"}); `skill` is for
evaluation only. A test prompt is a new wording of an operand its skill has in the training rows
(`test_operands="seen"`; "new" draws any operand, which the small word-level GPT cannot answer even on the full
data: it never saw that word spelled or those two numbers added).

Seed ranges (fixed, disjoint; see SPLITS): dev = 1000-1999 (tune and choose defaults here), test = 2000-2999
(evaluate once per round after the defaults are frozen). Instances are taken in seed order from the start of a
range, never picked by how the tool does on them.

    python benchmarks/skillfamily.py --seed 1000 --out DIR [--variant short|worked] [--describe]
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

SPLITS = {"dev": range(1000, 2000), "test": range(2000, 3000)}
TEST_OPERANDS = ("seen", "new")
VARIANTS = ("short", "worked")  # response styles: one-word answers, worked solutions

TOPIC_POOL = {
    "fruit": ["apple", "pear", "plum", "mango"], "clinic": ["nurse", "doctor", "patient", "ward"],
    "network": ["server", "router", "laptop", "cable"], "zoo": ["horse", "tiger", "zebra", "camel"],
    "weather": ["cloud", "storm", "rain", "frost"], "music": ["piano", "drum", "violin", "flute"],
    "sport": ["ball", "racket", "goal", "coach"], "kitchen": ["knife", "spoon", "oven", "kettle"],
    "garden": ["rose", "tulip", "hedge", "shovel"], "school": ["pupil", "chalk", "desk", "lesson"],
    "harbor": ["ship", "anchor", "dock", "sailor"], "office": ["stapler", "folder", "memo", "printer"],
    "forest": ["pine", "moss", "badger", "trail"], "city": ["tram", "bridge", "tower", "street"],
    "bakery": ["bread", "flour", "bagel", "crust"], "space": ["comet", "rocket", "planet", "orbit"],
}
# frames: {n} a topic noun, {p} the skill's request phrase
FRAMES = [
    "the {n} report wants {p}", "{p} for the {n} team", "{n} desk, {p}", "please {p}, {n} office",
    "for the {n} file, {p}", "{p} ({n} log)", "quick {n} task: {p}", "{n} request: {p}",
    "our {n} sheet needs {p}", "{p}, says the {n} clerk", "in the {n} ledger, {p}", "help the {n} crew: {p}",
    "{n} memo. {p}", "a {n} question: {p}", "{p} on the {n} form", "the {n} board asks {p}",
]
NUM_WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 10: "ten"}
ORD_WORDS = {1: "first", 2: "second", 3: "third", 4: "fourth"}


@dataclass
class Primitive:
    name: str
    operand: str  # word | number | number2 | digits3 | words3
    phrases: list[str]  # request phrases ({p}: the parameter, rendered per template as a word or a digit)
    answer: object  # fn(x) -> str
    worked: object  # fn(x, a) -> str: the body of the worked solution
    family: str | None = None  # parametric family: its members are near twins of one another
    param: int | None = None


def _nth(w, i):
    return w[i - 1] if len(w) >= i else "none"


def _pool() -> list[Primitive]:
    P = []
    sp = lambda w: " ".join(w)  # noqa: E731 - spelled out letter by letter
    P += [
        Primitive("upper", "word", ["the word in capitals", "it in upper case", "a loud version of the word",
                                    "all caps of the word", "the word shouted"], lambda x: x.upper(),
                  lambda x, a: f"{sp(x)} in capitals is {a}."),
        Primitive("capitalise", "word", ["the word with a capital first letter", "it capitalised",
                                         "a title-case form of the word"], lambda x: x[0].upper() + x[1:],
                  lambda x, a: f"{x[0]} becomes {x[0].upper()}: {a}."),
        Primitive("reverse", "word", ["the word backwards", "it reversed", "the word mirrored",
                                      "the letters in reverse order"], lambda x: x[::-1],
                  lambda x, a: f"{sp(x)} backwards is {sp(a)}."),
        Primitive("length", "word", ["the number of letters in", "how many letters are in", "the letter count of",
                                     "the length of the word"], lambda x: str(len(x)),
                  lambda x, a: f"{sp(x)} has {a} letters."),
        Primitive("copy_twice", "word", ["the word said twice", "it repeated two times", "an echo of the word"],
                  lambda x: f"{x} {x}", lambda x, a: f"{x} once, {x} again."),
        Primitive("vowels", "word", ["the number of vowels in", "how many vowels are in", "a vowel count of"],
                  lambda x: str(sum(c in "aeiou" for c in x)),
                  lambda x, a: f"the vowels of {sp(x)} are {sp([c for c in x if c in 'aeiou']) or 'none'}: {a}."),
        Primitive("no_vowels", "word", ["the word without its vowels", "it with the vowels removed",
                                        "only the consonants of"], lambda x: "".join(c for c in x if c not in "aeiou"),
                  lambda x, a: f"{sp(x)} without a e i o u is {sp(a)}."),
        Primitive("sort_letters", "word", ["the letters in alphabetical order", "its letters sorted",
                                           "the word's letters from a to z"], lambda x: "".join(sorted(x)),
                  lambda x, a: f"{sp(x)} sorted is {sp(a)}."),
        Primitive("first_two", "word", ["the first two letters of", "the opening pair of letters of"],
                  lambda x: x[:2], lambda x, a: f"{sp(x)} starts with {sp(a)}."),
        Primitive("last_two", "word", ["the last two letters of", "the closing pair of letters of"],
                  lambda x: x[-2:], lambda x, a: f"{sp(x)} ends with {sp(a)}."),
        Primitive("spell", "word", ["the word spelled with dashes", "it spelled out with hyphens"],
                  lambda x: "-".join(x), lambda x, a: f"{sp(x)} joined by dashes is {a}."),
        Primitive("plural", "word", ["the plural of", "more than one", "the word in plural form"],
                  lambda x: x + "s", lambda x, a: f"{x} plus s is {a}."),
        Primitive("vowel_start", "word", ["whether it starts with a vowel", "if the first letter is a vowel"],
                  lambda x: "yes" if x[0] in "aeiou" else "no",
                  lambda x, a: f"{sp(x)} starts with {x[0]}, {'a vowel' if a == 'yes' else 'not a vowel'}."),
        Primitive("long_word", "word", ["whether the word has more than five letters", "if it is a long word"],
                  lambda x: "yes" if len(x) > 5 else "no", lambda x, a: f"{sp(x)} has {len(x)} letters."),
        Primitive("square", "number", ["the square of", "the number times itself", "it squared"],
                  lambda x: str(x * x), lambda x, a: f"{x} squared: {x} * {x} = {a}."),
        Primitive("digit_sum", "number", ["the sum of the digits of", "its digits added up", "a digit total of"],
                  lambda x: str(sum(map(int, str(x)))),
                  lambda x, a: f"the digits of {x} are {' '.join(str(x))}: {' + '.join(str(x))} = {a}."),
        Primitive("units", "number", ["the units digit of", "the last digit of", "the ones place of"],
                  lambda x: str(x % 10), lambda x, a: f"{x} ends in {a}."),
        Primitive("is_even", "number", ["whether the number is even", "if it is even", "an even or odd check of"],
                  lambda x: "yes" if x % 2 == 0 else "no",
                  lambda x, a: f"{x} divided by 2 leaves {x % 2}."),
        Primitive("half_round", "number", ["half of the number, rounded down", "the number halved"],
                  lambda x: str(x // 2), lambda x, a: f"{x} halved: {x} // 2 = {a}."),
        Primitive("compare", "number2", ["a comparison of two numbers", "which is bigger, first or second",
                                         "the sign between"], lambda x: ">" if x[0] > x[1] else "<" if x[0] < x[1]
                  else "=", lambda x, a: f"{x[0]} {a} {x[1]}."),
        Primitive("sum2", "number2", ["the sum of the two numbers", "both numbers added", "the total of"],
                  lambda x: str(x[0] + x[1]), lambda x, a: f"{x[0]} + {x[1]} = {a}."),
        Primitive("diff2", "number2", ["the difference of the two numbers", "the gap between"],
                  lambda x: str(abs(x[0] - x[1])), lambda x, a: f"{max(x)} - {min(x)} = {a}."),
        Primitive("max3", "digits3", ["the largest of", "the biggest number among", "the maximum of"],
                  lambda x: str(max(x)), lambda x, a: f"{x[0]}, {x[1]}, {x[2]}: the biggest is {a}."),
        Primitive("min3", "digits3", ["the smallest of", "the lowest number among", "the minimum of"],
                  lambda x: str(min(x)), lambda x, a: f"{x[0]}, {x[1]}, {x[2]}: the smallest is {a}."),
        Primitive("sort3", "digits3", ["the numbers in increasing order", "these sorted from low to high"],
                  lambda x: " ".join(map(str, sorted(x))), lambda x, a: f"low to high: {a}."),
        Primitive("count_items", "words3", ["how many items are listed", "the count of the list"],
                  lambda x: str(len(x)), lambda x, a: f"{', '.join(x)}: {a} items."),
        Primitive("first_item", "words3", ["the first item of the list", "what comes first in"],
                  lambda x: x[0], lambda x, a: f"{', '.join(x)}: first is {a}."),
        Primitive("last_item", "words3", ["the last item of the list", "what comes last in"],
                  lambda x: x[-1], lambda x, a: f"{', '.join(x)}: last is {a}."),
    ]
    # parametric families: same phrases, one word or number apart
    for p in (1, 2, 3, 10):
        P.append(Primitive(f"plus{p}", "number", ["{p} more than", "the number plus {p}", "add {p} to",
                                                   "it increased by {p}"], lambda x, p=p: str(x + p),
                           lambda x, a, p=p: f"{x} plus {p}: {x} + {p} = {a}.", "plus", p))
    for p in (1, 2, 10):
        P.append(Primitive(f"minus{p}", "number", ["{p} less than", "the number minus {p}", "take {p} from",
                                                    "it reduced by {p}"], lambda x, p=p: str(x - p),
                           lambda x, a, p=p: f"{x} minus {p}: {x} - {p} = {a}.", "minus", p))
    for p in (2, 3, 4, 10):
        P.append(Primitive(f"times{p}", "number", ["{p} times the number", "the number multiplied by {p}",
                                                    "it scaled by {p}"], lambda x, p=p: str(x * p),
                           lambda x, a, p=p: f"{x} times {p}: {x} * {p} = {a}.", "times", p))
    for p in (1, 2, 3):
        P.append(Primitive(f"letter{p}", "word", ["the {p!o} letter of", "letter number {p} of",
                                                  "which letter is {p!o} in"], lambda x, p=p: _nth(x, p),
                           lambda x, a, p=p: f"{sp(x)}: letter {p} is {a}.", "letter", p))
    for p in (2, 3):
        P.append(Primitive(f"repeat{p}", "word", ["the word {p} times", "it repeated {p} times"],
                           lambda x, p=p: " ".join([x] * p), lambda x, a, p=p: f"{x}, {p} times: {a}.", "repeat", p))
    for p in (5, 10):
        P.append(Primitive(f"above{p}", "number", ["whether the number is above {p}", "if it is more than {p}"],
                           lambda x, p=p: "yes" if x > p else "no",
                           lambda x, a, p=p: f"{x} {'>' if x > p else '<='} {p}.", "above", p))
    return P


POOL = _pool()
POOL_BY_NAME = {p.name: p for p in POOL}


def _render_phrase(phrase: str, param, as_digit: bool) -> str:
    if param is None:
        return phrase
    word = str(param) if as_digit else NUM_WORDS.get(param, str(param))
    if "{p!o}" in phrase:
        phrase = phrase.replace("{p!o}", str(param) + "th" if as_digit else ORD_WORDS[param]).replace("1th", "1st") \
            .replace("2th", "2nd").replace("3th", "3rd")
    return phrase.replace("{p}", word)


@dataclass
class Skill:
    name: str
    primitive: Primitive
    templates: list[tuple[int, int, bool, bool]]  # (frame, phrase, operand first, parameter as a digit)
    rows: int = 0
    role: str = ""  # "", "twin-frequent", "twin-rare", "diverse"


@dataclass
class Instance:
    seed: int
    rows: int
    zipf: float
    topics: list[str]
    skills: list[Skill] = field(default_factory=list)

    @property
    def nouns(self) -> list[str]:
        return [w for t in self.topics for w in TOPIC_POOL[t]]

    def describe(self) -> dict:
        return {"seed": self.seed, "rows": self.rows, "zipf": round(self.zipf, 3), "topics": self.topics,
                "skills": [{"name": s.name, "rows": s.rows, "templates": len(s.templates), "role": s.role}
                           for s in self.skills],
                "twins": self.twin_pairs()}

    def twin_pairs(self) -> list[tuple[int, int]]:
        """(frequent, rare) skill indices of each near-twin pair made on purpose."""
        freq = {s.primitive.family: i for i, s in enumerate(self.skills) if s.role == "twin-frequent"}
        return [(freq[s.primitive.family], i) for i, s in enumerate(self.skills) if s.role == "twin-rare"]


def zipf_counts(n_skills: int, rows: int, exponent: float, floor: int = 40) -> list[int]:
    """Rows per skill ∝ rank^-exponent (largest first), every skill at >= floor rows, summing to `rows`
    (largest remainder)."""
    w = [(r + 1) ** -exponent for r in range(n_skills)]
    counts = [floor] * n_skills
    rest = rows - floor * n_skills
    extra = [rest * (x - w[-1]) / sum(y - w[-1] for y in w) for x in w]
    counts = [c + int(e) for c, e in zip(counts, extra)]
    for i in sorted(range(n_skills), key=lambda i: int(extra[i]) - extra[i])[: rows - sum(counts)]:
        counts[i] += 1
    return counts


def draw_instance(seed: int) -> Instance:
    """The instance of a seed: which skills, templates, topics and frequencies (deterministic)."""
    rng = random.Random(seed * 7919 + 17)
    n_skills = rng.randint(8, 20)
    zipf = rng.uniform(0.8, 1.5)
    rows = rng.randint(3000, 6000)
    topics = rng.sample(sorted(TOPIC_POOL), rng.randint(5, 9))
    families = sorted({p.family for p in POOL if p.family})
    # near twins: 1-2 families, two members each; the rest drawn from the other primitives (one member per
    # family at most, so that every twin pair is one made on purpose)
    twin_fams = rng.sample(families, rng.randint(1, 2))
    chosen: list[tuple[Primitive, str]] = []
    for fam in twin_fams:
        a, b = rng.sample([p for p in POOL if p.family == fam], 2)
        chosen += [(a, "twin-frequent"), (b, "twin-rare")]
    others = [p for p in POOL if p.family is None or p.family not in twin_fams]
    rng.shuffle(others)
    seen_fams = set(twin_fams)
    for p in others:
        if len(chosen) == n_skills:
            break
        if p.family and p.family in seen_fams:
            continue
        seen_fams.add(p.family)
        chosen.append((p, ""))
    # frequency ranks: frequent twins in the top third, rare twins in the bottom third, others anywhere
    counts = zipf_counts(n_skills, rows, zipf)
    ranks = list(range(n_skills))
    top, bottom = ranks[: max(2, n_skills // 3)], ranks[-max(2, n_skills // 3):]
    assigned: dict[int, int] = {}
    for i, (_, role) in enumerate(chosen):
        pool = top if role == "twin-frequent" else bottom if role == "twin-rare" else None
        if pool:
            free = [r for r in pool if r not in assigned.values()]
            assigned[i] = rng.choice(free)
    free = [r for r in ranks if r not in assigned.values()]
    rng.shuffle(free)
    for i in range(n_skills):
        if i not in assigned:
            assigned[i] = free.pop()
    plain = [i for i, (_, role) in enumerate(chosen) if not role]
    diverse = set(rng.sample(plain, min(len(plain), rng.randint(1, 2))))
    skills = []
    twin_templates: dict[str, list] = {}
    for i, (p, role) in enumerate(chosen):
        if role == "twin-rare":
            templates = twin_templates[p.family]  # the frequent twin's templates, but for the parameter
        else:
            n_t = 8 if i in diverse else rng.randint(2, 6)
            frames = rng.sample(range(len(FRAMES)), n_t)
            templates = [(f, rng.randrange(len(p.phrases)), rng.random() < 0.3, rng.random() < 0.5) for f in frames]
            if role == "twin-frequent":
                twin_templates[p.family] = templates
        skills.append(Skill(p.name, p, templates, counts[assigned[i]],
                            "diverse" if i in diverse else role))
    skills.sort(key=lambda s: -s.rows)
    return Instance(seed, rows, zipf, topics, skills)


def _operand(kind: str, nouns: list[str], rng: random.Random):
    if kind == "word":
        return rng.choice(nouns)
    if kind == "number":  # few enough values that every answer of a skill is seen in training
        return rng.randint(1, 30)
    if kind == "number2":
        return (rng.randint(1, 30), rng.randint(1, 30))
    if kind == "digits3":
        return tuple(rng.randint(0, 9) for _ in range(3))
    return tuple(rng.sample(nouns, rng.randint(2, 5)))


def _operand_text(kind: str, x) -> str:
    if kind == "number2":
        return f"{x[0]} and {x[1]}"
    if kind in ("digits3", "words3"):
        return ", ".join(map(str, x))
    return str(x)


def make_row(inst: Instance, s: int, rng: random.Random, variant: str) -> dict:
    skill = inst.skills[s]
    p = skill.primitive
    t = rng.randrange(len(skill.templates))
    frame, phrase, operand_first, digit = skill.templates[t]
    noun = rng.choice(inst.nouns)
    x = _operand(p.operand, inst.nouns, rng)
    request = FRAMES[frame].format(n=noun, p=_render_phrase(p.phrases[phrase], p.param, digit))
    prompt = f"{_operand_text(p.operand, x)}: {request}" if operand_first else f"{request}: {_operand_text(p.operand, x)}"
    prompt = prompt[0].upper() + prompt[1:]
    a = p.answer(x)
    out = a if variant == "short" else f"{p.worked(x, a)} Answer: {a}"
    return {"instruction": prompt, "output": out, "skill": skill.name, "_template": t,
            "_operand": _operand_text(p.operand, x)}


def generate(inst: Instance, variant: str = "short", test_per_skill: int = 100, test_operands: str = "seen"):
    """(train rows, test rows): train shuffled, test has `test_per_skill` new prompts per skill. With
    test_operands "seen" a test prompt's operand is one its skill has in the training rows (new wording of a
    lesson the full data holds: the small word-level GPT cannot spell or pluralise a word it never saw done);
    "new" draws operands freely."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}")
    if test_operands not in TEST_OPERANDS:
        raise ValueError(f"unknown test_operands {test_operands!r}")
    rng = random.Random(inst.seed)  # the same prompts for both variants
    train = [make_row(inst, s, rng, variant) for s, sk in enumerate(inst.skills) for _ in range(sk.rows)]
    rng.shuffle(train)
    seen = {r["instruction"] for r in train}
    operands = {(r["skill"], r["_operand"]) for r in train}
    test_rng = random.Random(inst.seed + 10_007)
    test = []
    for s in range(len(inst.skills)):
        got, tries = 0, 0
        while got < test_per_skill:
            r = make_row(inst, s, test_rng, variant)
            tries += 1
            if tries < 20_000 and (r["instruction"] in seen or (
                    test_operands == "seen" and (r["skill"], r["_operand"]) not in operands)):
                continue
            seen.add(r["instruction"])
            test.append(r)
            got += 1
    return train, test


def worst_gap_passed(got: dict) -> bool | None:
    """Whether the oracle beats random on worst-skill accuracy by >= 0.20 and by more than the seed spread (the
    std over seeds); None until random has a run and the oracle two. got: contender -> its runs' results."""
    if not got.get("random") or len(got.get("oracle") or []) < 2:
        return None
    worst = {n: [r["worst"] for r in got[n]] for n in ("random", "oracle")}
    # accuracies are counts over the test prompts: 0.30 - 0.10 is 20 points, not 19.999...
    adv = round(float(np.mean(worst["oracle"]) - np.mean(worst["random"])), 9)
    return bool(adv >= 0.20 and adv > max(np.std(worst["oracle"]), np.std(worst["random"])))


def validity(got: dict) -> str:
    """An instance's validity check, yes / no / ? (not known yet): full >= 0.85 macro and the worst-skill gap
    (worst_gap_passed). "no" as soon as random and the oracle fail it, without full. got: as worst_gap_passed."""
    gap = worst_gap_passed(got)
    if gap is None or (gap and not got.get("full")):
        return "?"
    if not gap:
        return "no"
    return "yes" if np.mean([r["macro"] for r in got["full"]]) >= 0.85 else "no"


def write_instance(out: str | Path, seed: int, variant: str = "short", test_per_skill: int = 100,
                   test_operands: str = "seen") -> dict:
    """OUT/train.jsonl, OUT/test.jsonl, OUT/labels.json (skill and template of every training row, the
    instance's description); returns the paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    inst = draw_instance(seed)
    train, test = generate(inst, variant, test_per_skill, test_operands)
    for name, rows in (("train", train), ("test", test)):
        with open(out / f"{name}.jsonl", "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps({k: v for k, v in r.items() if not k.startswith("_")}) + "\n")
    names = [s.name for s in inst.skills]
    labels = {"skills": names, "skill": [names.index(r["skill"]) for r in train],
              "template": [r["_template"] for r in train], "variant": variant, **inst.describe()}
    (out / "labels.json").write_text(json.dumps(labels))
    return {"train": out / "train.jsonl", "test": out / "test.jsonl", "labels": out / "labels.json"}


def main(argv=None):
    import common
    ap = common.parser(__doc__)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--out", default=None)
    ap.add_argument("--variant", choices=VARIANTS, default="short")
    ap.add_argument("--test-per-skill", type=int, default=100)
    ap.add_argument("--test-operands", choices=TEST_OPERANDS, default="seen")
    ap.add_argument("--describe", action="store_true", help="print the instance, write nothing")
    a = ap.parse_args(argv)
    inst = draw_instance(a.seed)
    print(json.dumps(inst.describe(), indent=1))
    if a.out and not a.describe:
        paths = write_instance(a.out, a.seed, a.variant, a.test_per_skill, a.test_operands)
        print(f"wrote {paths['train']} {paths['test']} {paths['labels']}")


if __name__ == "__main__":
    main()
