"""Rows shaped exactly as popular SFT datasets ship them on the Hugging Face Hub (column names, types, nesting,
nulls, extra columns), 24 of each, for the audit in test_popular_datasets.py. The texts are written for these
tests; the shapes follow each dataset's card and viewer, or the preprocessing code that reads it, named per
builder ("checked:")."""

from __future__ import annotations

import json

N = 24
_TOPICS = ["photosynthesis", "the French Revolution", "binary search", "compound interest", "plate tectonics",
           "the immune system", "Shakespeare's sonnets", "recursion", "supply and demand", "black holes",
           "the water cycle", "TCP handshakes", "vaccines", "the Roman Empire", "hash tables", "inflation",
           "volcanoes", "DNA replication", "impressionism", "gradient descent", "the Silk Road", "entropy",
           "coral reefs", "the printing press"]


def _q(i: int) -> str:
    return f"Explain {_TOPICS[i % len(_TOPICS)]} in simple terms, with one example (#{i})."


def _a(i: int) -> str:
    return (f"{_TOPICS[i % len(_TOPICS)].capitalize()} can be understood step by step. First, the basic idea; "
            f"then an example: case {i * 7 + 3} shows how it works in practice.")


def openhermes(n: int = N) -> list[dict]:
    """teknium/OpenHermes-2.5 (checked: the dataset viewer and mathewhe/OpenHermes-2.5-Formatted's card, which
    quotes the original `teknium` rows): ShareGPT `conversations` of {from, value, weight: null}, a system turn in
    some rows, and many metadata columns, mostly null."""
    rows = []
    for i in range(n):
        turns = ([{"from": "system", "value": "You are an AI assistant. Provide a detailed answer.", "weight": None}]
                 if i % 3 == 0 else [])
        turns += [{"from": "human", "value": _q(i), "weight": None}, {"from": "gpt", "value": _a(i), "weight": None}]
        rows.append({"custom_instruction": None, "topic": None, "model_name": None, "model": None,
                     "skip_prompt_formatting": i % 3 == 0, "category": "orca" if i % 3 == 0 else None,
                     "conversations": turns, "views": None, "language": None, "id": None, "title": None,
                     "idx": None, "hash": None, "avatarUrl": None, "system_prompt": None,
                     "source": "airoboros2.2" if i % 2 else "glaive-code-assist"})
    return rows


def slimorca(n: int = N) -> list[dict]:
    """Open-Orca/SlimOrca (checked: its dataset card's example): `conversations` of {from: system|human|gpt, value,
    weight}, weight null on system and human turns, 1.0 on the gpt turn; no other column."""
    return [{"conversations": [
        {"from": "system", "value": "You are an AI assistant that helps people find information.", "weight": None},
        {"from": "human", "value": _q(i), "weight": 0.0 if i % 2 else None},
        {"from": "gpt", "value": _a(i), "weight": 1.0}]} for i in range(n)]


def openorca(n: int = N) -> list[dict]:
    """Open-Orca/OpenOrca (checked: its dataset card, "Data Fields": id, system_prompt, question, response): the
    system prompt in `system_prompt`, empty in some rows."""
    return [{"id": f"{'flan' if i % 2 else 'niv'}.{100000 + i}",
             "system_prompt": "" if i % 4 == 0 else f"You are a helpful assistant (persona {i % 3}). Think step by "
                                                    "step and justify your answer.",
             "question": _q(i), "response": _a(i)} for i in range(n)]


def dolly(n: int = N) -> list[dict]:
    """databricks/databricks-dolly-15k (checked: its card and preprocessing code that reads it): instruction,
    context (a passage for closed_qa / information_extraction / summarization, else ""), response, category."""
    categories = ["closed_qa", "open_qa", "information_extraction", "brainstorming", "summarization",
                  "classification"]
    rows = []
    for i in range(n):
        category = categories[i % len(categories)]
        context = (f"Reference passage {i}: {_TOPICS[i % len(_TOPICS)]} was first described in detail in "
                   f"{1800 + i * 3}, and the description is still taught today."
                   if category in ("closed_qa", "information_extraction", "summarization") else "")
        rows.append({"instruction": f"When was {_TOPICS[i % len(_TOPICS)]} first described? (#{i})",
                     "context": context, "response": _a(i), "category": category})
    return rows


def metamathqa(n: int = N) -> list[dict]:
    """meta-math/MetaMathQA (checked: its dataset viewer): query, response, type (GSM_Rephrased, MATH_AnsAug,
    ...), original_question."""
    kinds = ["GSM_Rephrased", "MATH_AnsAug", "GSM_SV", "MATH_FOBAR"]
    return [{"query": f"Tom buys {i + 3} apples at ${i % 5 + 1} each. How much does he spend?",
             "response": f"He spends {i + 3} * {i % 5 + 1} = {(i + 3) * (i % 5 + 1)} dollars.\n"
                         f"The answer is: {(i + 3) * (i % 5 + 1)}",
             "type": kinds[i % len(kinds)],
             "original_question": f"Tom buys {i + 3} apples at ${i % 5 + 1} each. What does he pay?"}
            for i in range(n)]


def magicoder(n: int = N) -> list[dict]:
    """ise-uiuc/Magicoder-OSS-Instruct-75K (checked: its dataset viewer): lang, raw_index, index, seed (the code
    snippet the problem was made from), openai_fingerprint, problem, solution."""
    langs = ["python", "rust", "typescript", "cpp"]
    return [{"lang": langs[i % len(langs)], "raw_index": 1000 + i, "index": i,
             "seed": f"    def helper_{i}(self, x):\n        return x * {i}\n",
             "openai_fingerprint": "fp_44709d6fcb",
             "problem": f"You are tasked with implementing a function that multiplies a value by {i} and returns "
                        f"the result, handling negative inputs (#{i}).",
             "solution": f"```python\ndef multiply_{i}(x: int) -> int:\n    return x * {i}\n```"}
            for i in range(n)]


def numinamath(n: int = N) -> list[dict]:
    """AI-MO/NuminaMath-CoT (checked: its dataset viewer): source, problem, solution, and `messages` holding the
    same problem and solution as a user and an assistant turn."""
    rows = []
    for i in range(n):
        problem = f"Find the sum of the first {i + 5} positive integers."
        solution = f"The sum is $\\frac{{{i + 5}({i + 6})}}{{2}} = \\boxed{{{(i + 5) * (i + 6) // 2}}}$."
        rows.append({"source": "synthetic_math" if i % 2 else "olympiads", "problem": problem, "solution": solution,
                     "messages": [{"content": problem, "role": "user"},
                                  {"content": solution, "role": "assistant"}]})
    return rows


def no_robots(n: int = N) -> list[dict]:
    """HuggingFaceH4/no_robots (checked: its dataset card, "Data Fields"): prompt, prompt_id, messages (a system
    turn in the Chat category's rows, some of several turns), category."""
    rows = []
    for i in range(n):
        chat = i % 4 == 0
        messages = ([{"content": "You are Lenny, a cheerful chatbot who loves science.", "role": "system"}]
                    if chat else [])
        messages += [{"content": _q(i), "role": "user"}, {"content": _a(i), "role": "assistant"}]
        if chat:
            messages += [{"content": "Can you give me another example?", "role": "user"},
                         {"content": f"Sure! Another case is number {i + 11}.", "role": "assistant"}]
        rows.append({"prompt": _q(i), "prompt_id": f"{i:064x}", "messages": messages,
                     "category": "Chat" if chat else "Open QA"})
    return rows


def ultrachat(n: int = N) -> list[dict]:
    """HuggingFaceH4/ultrachat_200k (checked: its dataset card): prompt, prompt_id, messages of several user and
    assistant turns (the first user turn is the prompt)."""
    return [{"prompt": _q(i), "prompt_id": f"{i + 7:064x}",
             "messages": [{"content": _q(i), "role": "user"}, {"content": _a(i), "role": "assistant"},
                          {"content": "And how is that used today?", "role": "user"},
                          {"content": f"Today it is used in field {i} in many ways.", "role": "assistant"}]}
            for i in range(n)]


def lima(n: int = N) -> list[dict]:
    """GAIR/lima (checked: preprocessing code that reads its train.jsonl, which takes conversations[0] as the
    user's and conversations[1] as the assistant's): `conversations` a list of plain strings, user and assistant
    in turn; source (stackexchange, wikihow, multi_turn, ...)."""
    rows = []
    for i in range(n):
        conversation = [_q(i), _a(i)]
        if i % 6 == 0:
            conversation += ["Thanks! Could you shorten it?", f"In short: {_TOPICS[i % len(_TOPICS)]} matters."]
        rows.append({"conversations": conversation, "source": "multi_turn" if i % 6 == 0 else "stackexchange"})
    return rows


def tulu3(n: int = N) -> list[dict]:
    """allenai/tulu-3-sft-mixture (checked: its dataset card): id, messages, source."""
    return [{"id": f"ai2-adapt-dev/flan_v2_converted_{i}",
             "messages": [{"content": _q(i), "role": "user"}, {"content": _a(i), "role": "assistant"}],
             "source": "ai2-adapt-dev/flan_v2_converted"} for i in range(n)]


def smoltalk(n: int = N) -> list[dict]:
    """HuggingFaceTB/smoltalk (checked: its dataset viewer): messages (a system turn in some subsets), source."""
    return [{"messages": ([{"content": "You are a concise assistant.", "role": "system"}] if i % 2 else [])
             + [{"content": _q(i), "role": "user"}, {"content": _a(i), "role": "assistant"}],
             "source": "smol-magpie-ultra"} for i in range(n)]


def openmathinstruct2(n: int = N) -> list[dict]:
    """nvidia/OpenMathInstruct-2 (checked: its dataset card, "Dataset fields"): problem, generated_solution (the
    solution to train on), expected_answer, problem_source (augmented_math, augmented_gsm8k, math, gsm8k)."""
    return [{"problem": f"What is the remainder when {i * 37 + 101} is divided by 7?",
             "generated_solution": f"We divide: {i * 37 + 101} = 7 * {(i * 37 + 101) // 7} + {(i * 37 + 101) % 7}. "
                                   f"So the remainder is $\\boxed{{{(i * 37 + 101) % 7}}}$.",
             "expected_answer": str((i * 37 + 101) % 7),
             "problem_source": "augmented_math" if i % 2 else "augmented_gsm8k"} for i in range(n)]


def openmathinstruct1(n: int = N) -> list[dict]:
    """nvidia/OpenMathInstruct-1 (checked: its dataset card, "Dataset fields"): question, generated_solution (a
    code-interpreter solution), expected_answer, predicted_answer, error_message, is_correct, dataset."""
    return [{"question": f"What is {i + 12} squared?",
             "generated_solution": f"Let's compute it.\n<llm-code>\nprint({i + 12} ** 2)\n</llm-code>\n"
                                   f"<llm-code-output>\n{(i + 12) ** 2}\n</llm-code-output>\n"
                                   f"The answer is \\boxed{{{(i + 12) ** 2}}}.",
             "expected_answer": str((i + 12) ** 2), "predicted_answer": str((i + 12) ** 2), "error_message": "",
             "is_correct": True, "dataset": "gsm8k" if i % 2 else "math"} for i in range(n)]


def wizardlm(n: int = N) -> list[dict]:
    """WizardLMTeam/WizardLM_evol_instruct_V2_196k (checked: its dataset viewer): idx, conversations of
    {from: human|gpt, value}."""
    return [{"idx": f"alpaca_{i}", "conversations": [{"from": "human", "value": _q(i)},
                                                      {"from": "gpt", "value": _a(i)}]} for i in range(n)]


def xp3(n: int = N) -> list[dict]:
    """bigscience/xP3 (checked: its dataset card, "Data Fields": inputs, targets), as FLAN collections ship their
    rows too (Muennighoff/flan: inputs, targets, task)."""
    return [{"inputs": f"Translate to French: {_q(i)}", "targets": f"Traduction {i}: expliquez simplement."}
            for i in range(n)]


DATASETS = {"OpenHermes-2.5": openhermes, "SlimOrca": slimorca, "OpenOrca": openorca, "dolly-15k": dolly,
            "MetaMathQA": metamathqa, "Magicoder-OSS-Instruct": magicoder, "NuminaMath-CoT": numinamath,
            "no_robots": no_robots, "ultrachat_200k": ultrachat, "LIMA": lima, "tulu-3-sft-mixture": tulu3,
            "smoltalk": smoltalk, "OpenMathInstruct-2": openmathinstruct2, "OpenMathInstruct-1": openmathinstruct1,
            "WizardLM-evol-instruct": wizardlm,
            "xP3": xp3}


def write(path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
