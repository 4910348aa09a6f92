"""The schema of every command's `--json` object (README, "JSON output"), and a small checker for it.

One JSON object on stdout per command: the common keys (COMMON), then the command's own (SCHEMAS). A type is
a Python type (NUMBER: an int or a float, never a bool), a tuple of alternatives (None: null), [T] (a list of
T), a dict (an object with these keys; a key ending in "?" may be absent; "...": other keys allowed, with
values of that type) or Map(T) (an object with any keys, values T). Keys are never renamed within a release;
a new key may be added (optional, then documented).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["COMMON", "SCHEMAS", "NUMBER", "Map", "check", "schema_of"]

NUMBER = (int, float)
ANY = object


@dataclass(frozen=True)
class Map:
    values: object


COMMON = {"command": str, "version": str, "output": (str, None), "seconds": NUMBER, "warnings": [str]}

_MIN_MEDIAN_MAX = {"min": NUMBER, "median": NUMBER, "max": NUMBER}
_LENGTH = {"min": NUMBER, "p50": NUMBER, "p90": NUMBER, "p99": NUMBER, "max": NUMBER, "mean": NUMBER,
           "total": NUMBER}

_EMBED = {
    "process": str, "rows": int, "artifact_rows": int, "parts": int, "complete": bool, "rows_in_data": int,
    "skipped_no_response": int, "bad_rows": int, "rejects": (str, None), "model": str, "features": [str],
    "dims": Map(int), "dim": int, "device": str, "chunks_computed": int, "chunks_resumed": int,
    "scan_seconds": NUMBER, "warmup_seconds": NUMBER, "prepare_seconds": NUMBER, "feature_seconds": NUMBER,
    "rows_per_s": NUMBER, "tokens_per_s": NUMBER, "exact_duplicates_dropped": int, "proxy?": str, "encoder?": str, "semantic?": str,
    "n_tokens?": ANY, "sources?": [{"source": str, "rows_in_data": int, "bad_rows": int,
                                    "exact_duplicates_dropped": int, "skipped_no_response": int, "rows": int}],
}
_CLUSTER = {
    "rows": int, "dim": int, "k": int, "k_rule": str, "mixed_clusters_cut": int, "normalisation": str,
    "trained_on_rows": int, "iterations": int, "seed": int, "device": str, "objective": NUMBER,
    "cluster_size": _MIN_MEDIAN_MAX, "max_over_min_size": NUMBER, "empty_clusters": int, "groups?": int,
    "groups_rule?": str, "rows_per_group?": _MIN_MEDIAN_MAX, "kinds?": int, "groups_joined?": int,
    "kinds_why_not?": str, "size_cap?": int, "moved_by_the_cap?": int, "objective_before_the_cap?": NUMBER,
    "centroids": str,
    "size_bands": [{"size_band": str, "clusters": int, "rows": int}],
}
_EVAL_SET = {"path": str, "fingerprint": str, "questions": int, "questions_in_pool": int, "rows": int, "ids": [int],
             "copies?": int, "ngram_rows?": int, "ngram?": int, "boilerplate_ngrams?": int}
_DECONTAMINATED = {"rows_left_out": int, "sets": [_EVAL_SET]}
_SELECT = {
    "rows": int, "clusters": int,
    "budget": {"mode": str, "value": (NUMBER, str), "rows": (int, None), "tokens?": int},
    "selected": int, "kept": NUMBER, "exact_duplicates_left_out": (int, None),
    "clusters_covered": {"covered": int, "nonempty": int}, "per_cluster_quota": _MIN_MEDIAN_MAX, "within": str,
    "within_auto?": {"order": str, "why": str, "short_answers?": int, "rows?": int},
    "rule?": str, "balance_power?": (NUMBER, None), "quotas?": str, "near_duplicates_dropped?": int,
    "n_tokens_column": bool, "n_tokens_why_not?": str, "tokens_selected?": {"selected": int, "total": int}, "tokens_counted_by?": str,
    "sources?": [Map(ANY)], "notes?": [str],
    "target?": {"path": (str, None), "rows": int, "served": int, "far": int},
    "target_weight?": {"weight": NUMBER, "relevant_rows": int},
    "selected_nearest_each_target_row?": _MIN_MEDIAN_MAX, "clusters_the_target_pulled_from?": [int],
    "target_copies?": {"checked": bool, "why_not?": str, "target_questions?": int, "target_questions_in_pool?": int,
                       "pool_rows?": int, "selected?": int, "ids?": [int]},
    "decontaminated?": _DECONTAMINATED,
    # per cluster, by size (with --target: how the target drew on each cluster)
    "per_cluster": [{"cluster": int, "size?": int, "after_dedup?": int, "selected": int, "kept?": (NUMBER, None),
                     "...": ANY}],
}
_SHARD = {
    "shards": int, "rows_per_shard": int, "steps": int, "micro_batch_size": int, "selected_rows": int,
    "leftover_rows": int, "wrapped_rows": int, "allocation": str, "token_source": str,
    "token_imbalance": {"mean": NUMBER, "p95": NUMBER}, "padded_imbalance_mean": NUMBER,
    "padding_efficiency": NUMBER, "cluster_spread": {"mean": NUMBER, "min": NUMBER}, "rank_mix_tv_max": NUMBER,
    "input_mix?": {"steps_mixing": NUMBER, "random": NUMBER},  # a mixture's
    "manifest": str,
}
_ARTIFACT = {"path": str, "kind": str, "rows": int, "version": str,
             "dataset": {"source": (str, None), "fingerprint": (str, None)}, "fingerprint": str}
_STATS = Map(NUMBER)
_FIELDS = Map((str, None))  # inspect's field mapping of one input: {prompt, response, ...: column}
_CHOSEN_FROM = Map(int)  # labelled pairs: {answer column: pairs whose chosen answer it holds}

SCHEMAS = {
    "inspect": {
        # a mixture's fields: per input name, each as one input's (and in `inputs`)
        "source": str, "container": str, "format": str, "fields": (_FIELDS, Map(_FIELDS)), "rows": int,
        "examples": int, "bad_rows": int, "rejected": int,  # rejected: bad_rows' former name, kept for one release
        "rejects": [{"id": int, "location": str, "field": (str, None), "reason": str}],
        "duplicates": int, "duplicate_prompts": int, "with_system_prompt": int, "with_tools": int, "multi_turn": int,
        "tokenizer": (str, None), "lengths": Map(_LENGTH), "fingerprint": str, "same_answer_pairs?": int,
        "same_answer_ids?": [int], "chosen_from?": _CHOSEN_FROM, "split?": str,
        "inputs?": [{"input": str, "source": str, "format": str, "rows": int, "bad_rows": int, "rejected": int,
                     "first_id": int, "fields": _FIELDS, "chosen_from?": _CHOSEN_FROM, "split?": str}],
        "decontamination?": [_EVAL_SET],
    },
    "embed": _EMBED,
    "cluster": _CLUSTER,
    "select": _SELECT,
    "shard": _SHARD,
    "run": {
        "stages": [{"stage": str, "status": str, "seconds": NUMBER, "output": str, "reason?": str}],
        # per stage that ran: the object that command prints with --json
        "summaries": {"embed?": {**COMMON, **_EMBED}, "cluster?": {**COMMON, **_CLUSTER},
                      "select?": {**COMMON, **_SELECT}, "shard?": {**COMMON, **_SHARD}},
    },
    "report": {
        "embeddings?": {**_ARTIFACT, "features": [str], "dims": Map(int), "dim_total?": int, "seed?": int,
                        "max_length?": (int, None), "model": (str, None),
                        "encoder?": Map(ANY),  # the semantic encoder's record (embed's params["semantic"])
                        # where the data's rows went (embed's keys; a complete artifact that records them)
                        "rows_in_data?": int, "bad_rows?": int, "skipped_no_response?": int, "rejects?": str,
                        "rows_not_embedded?": int, "exact_duplicates_dropped?": int, "n_tokens?": _STATS,
                        "n_response_tokens?": _STATS, "loss?": _STATS},
        "clusters?": {**_ARTIFACT, "k": int, "k_rule": (str, None), "mixed_clusters_cut": int,
                      "cluster_size": _MIN_MEDIAN_MAX, "max_over_min_size": NUMBER, "empty_clusters": int,
                      "groups?": int, "objective": (NUMBER, None), "moved_by_the_cap": (int, None)},
        "selection?": {**_ARTIFACT, "budget": {"mode": (str, None), "value": ANY, "rows": (int, None)},
                       "selected": int, "kept": NUMBER, "exact_duplicates_left_out": (int, None),
                       "within": (str, None), "within_auto?": _SELECT["within_auto?"],
                       # select's keys; `clusters` (every cluster, empty ones too): report's former figure, kept
                       # for one release
                       "clusters_covered": {"covered": (int, None), "nonempty": int, "clusters": int},
                       "rule?": str, "near_duplicates_dropped?": int, "notes?": [str],
                       "tokens_selected?": {"selected": int, "total": int, "counted_by": str},
                       "decontaminated?": _DECONTAMINATED,
                       "table?": [{"cluster": int, "size": int, "after_dedup?": int, "selected": int,
                                   "kept": (NUMBER, None)}]},
        "target?": {"...": ANY},
        "sources?": {"inputs": int, "table": [Map(ANY)]},
        "shards?": {"path": str, "shards": int, "micro_batch_size": int, "rows_per_shard": int, "steps": int,
                    "allocation": (str, None), "leftover_rows": int, "wrapped_rows": int, "token_source": (str, None),
                    "token_imbalance?": _STATS, "padded_imbalance?": _STATS, "cluster_spread?": _STATS,
                    "rank_mix_tv?": _STATS, "input_mix?": _STATS, "table?": [Map(ANY)]},
        "plots": [str],
    },
    "export": {
        "for": str, "layout": str, "rows": int, "selected_rows": int, "leftover_rows": int, "wrapped_rows": int,
        "columns": [str], "ranks": int, "micro_batch_size": int,
        "steps": int, "loss_weights_applied": bool, "files": [str], "readme": str,
    },
    "verify": {
        "ok": bool, "shards": str, "log": str, "steps": int,
        "ranks": [{"rank": int, "steps": int, "rows": int, "in_plan": int, "...": int}],
        "problem_count": int, "problems": [str], "causes": [str], "report": str,
    },
}


def schema_of(command: str) -> dict:
    """The whole object's schema of `command`: the common keys, then its own."""
    return {**COMMON, **SCHEMAS[command]}


def check(obj, schema, where: str = "$") -> list[str]:
    """Every way `obj` departs from `schema`, as 'path: problem' lines (none: it conforms)."""
    if schema is ANY:
        return []
    if isinstance(schema, tuple):
        for alternative in schema:
            if not check(obj, alternative, where):
                return []
        return [f"{where}: {obj!r} is none of {schema!r}"]
    if schema is None:
        return [] if obj is None else [f"{where}: {obj!r} is not null"]
    if isinstance(schema, type):
        if schema in (int, float) and isinstance(obj, bool) or not isinstance(obj, schema):
            return [f"{where}: {obj!r} is not {schema.__name__}"]
        return []
    if isinstance(schema, list):
        if not isinstance(obj, list):
            return [f"{where}: {type(obj).__name__}, not a list"]
        return [p for i, v in enumerate(obj) for p in check(v, schema[0], f"{where}[{i}]")]
    if not isinstance(obj, dict):
        return [f"{where}: {type(obj).__name__}, not an object"]
    problems = [] if isinstance(schema, Map) else [f"{where}: key {k!r} is not snake_case" for k in obj
                                                    if not re.fullmatch(r"[a-z][a-z0-9_]*", k)]
    if isinstance(schema, Map):
        return problems + [p for k, v in obj.items() for p in check(v, schema.values, f"{where}.{k}")]
    keys = {k.rstrip("?"): k.endswith("?") for k in schema if k != "..."}
    for k, optional in keys.items():
        if k not in obj and not optional:
            problems.append(f"{where}: missing key {k!r}")
    for k, v in obj.items():
        if k in keys:
            problems += check(v, schema[k + "?" if keys[k] else k], f"{where}.{k}")
        elif "..." in schema:
            problems += check(v, schema["..."], f"{where}.{k}")
        else:
            problems.append(f"{where}: key {k!r} is not in the schema")
    return problems
