"""The `cluster-curate` command: parses options and calls pipeline functions. No logic of its own.

Each subcommand lives in its own section below (edit only your section). Shared option groups are
defined once here as decorators: `dataset_options` (how to read a raw dataset), `output_options`
(--overwrite/--force), and every command gets --quiet/--json through `command()`.
"""

from __future__ import annotations

import functools
import os
import sys
import traceback

import click

from cluster_curate import __version__, console
from cluster_curate.clustering import GROUP_CUTS
from cluster_curate.errors import CurateError
from cluster_curate.features.text import TEXT_FIELDS, TEXT_WEIGHTINGS
from cluster_curate.io.datasets import ReadOptions, reads_through_hf_datasets


def _let_pyarrow_skip_pandas(*sources: str) -> None:
    """pyarrow imports pandas (0.3-0.4 s, a third of a short command) the first time it converts any array, only
    to ask whether that array is a pandas object; the commands never hand it one. So pyarrow's one probe is made to
    find no pandas. pandas still imports, and pyarrow's to_pandas/from_pandas import it when called; only pa.array
    no longer recognises a pandas object in this process. Hence not when a source is read through Hugging Face
    `datasets` (which hands pyarrow pandas objects), and not once pandas is imported (nothing left to save)."""
    if "pandas" in sys.modules or any(reads_through_hf_datasets(s) for s in sources):
        return

    class _RefusePandas:
        @staticmethod
        def find_spec(name, path=None, target=None):
            if name.partition(".")[0] == "pandas":
                raise ModuleNotFoundError("pandas is not imported by cluster-curate's commands", name=name)

    sys.meta_path.insert(0, _RefusePandas)
    try:
        import pyarrow as pa
        pa.array([0])  # pyarrow tries the import once and remembers the answer
    finally:
        sys.meta_path.remove(_RefusePandas)


class _Group(click.Group):
    """Turns CurateError into `ERROR: ...` + exit 2, and any other exception into exit 1 with one line."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except CurateError as e:
            click.echo(f"ERROR: {e}", err=True)
            sys.exit(e.exit_code)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException, SystemExit):
            raise
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)
        except Exception as e:  # noqa: BLE001 - the last line of defence: never a bare traceback
            if os.environ.get("CLUSTER_CURATE_DEBUG"):
                traceback.print_exc()
            click.echo(f"INTERNAL ERROR: {type(e).__name__}: {e} (set CLUSTER_CURATE_DEBUG=1 for the traceback; "
                       "please report it)", err=True)
            sys.exit(1)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", "-V", prog_name="cluster-curate")
def main():
    """Curate a fine-tuning dataset and allocate it across data-parallel GPUs.

    \b
    The pipeline, each stage reading and writing Parquet artifacts:
      embed DATA --out E          one learning-effect feature vector per example
      cluster E --out C           k-means (faiss) over the features
      select C --out S            a balanced, budgeted subset of every cluster
      shard S --data DATA --out D N equal, stratified, token-balanced Parquet shards
    `run` does all four; `inspect` looks at a dataset first; `report` explains any artifact.
    """


def command(*args, **kwargs):
    """`@command(...)`: a subcommand with --quiet and --json that configures the console before running."""

    def deco(fn):
        @main.command(*args, **kwargs)
        @click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors (and the --json summary).")
        @click.option("--json", "json_mode", is_flag=True, help="Print the end-of-command summary as one JSON object.")
        @functools.wraps(fn)
        def wrapper(*a, quiet=False, json_mode=False, **kw):
            console.configure(quiet=quiet or json_mode, json_mode=json_mode)
            _let_pyarrow_skip_pandas(*([kw["data"]] if "data" in kw else []))
            return fn(*a, **kw)

        return wrapper

    return deco


def dataset_options(fn):
    """Options that say how to read a raw dataset; shared by inspect, embed, shard and run.
    The decorated function receives them folded into one `read_options: ReadOptions` argument."""

    @click.option("--format", "fmt", default=None,
                  type=click.Choice(["auto", "alpaca", "prompt-completion", "qa", "messages", "sharegpt"]),
                  help="Record format (default: detected from the fields).")
    @click.option("--prompt-field", default=None, help="Field holding the prompt (overrides the format's).")
    @click.option("--response-field", default=None, help="Field holding the response (overrides the format's).")
    @click.option("--on-bad-row", type=click.Choice(["error", "skip"]), default="error", show_default=True,
                  help="Stop at the first bad row, or skip bad rows (counted, and written to a rejects JSONL).")
    @functools.wraps(fn)
    def wrapper(*a, fmt=None, prompt_field=None, response_field=None, on_bad_row="error", **kw):
        kw["read_options"] = ReadOptions(format=None if fmt in (None, "auto") else fmt, prompt_field=prompt_field,
                                         response_field=response_field, on_bad_row=on_bad_row)
        return fn(*a, **kw)

    return wrapper


def output_options(fn):
    """--overwrite and --force, shared by every command that writes an artifact."""
    fn = click.option("--force", is_flag=True,
                      help="Use inputs even if they come from different datasets or are of an unexpected kind.")(fn)
    fn = click.option("--overwrite", is_flag=True, help="Replace the output if it exists.")(fn)
    return fn


# ============================================================================================ inspect

@command("inspect", short_help="Describe a dataset: format, rows, bad rows, lengths, duplicates.")
@click.argument("data")
@dataset_options
@click.option("--tokenizer", metavar="PATH", default=None,
              help="A local Hugging Face tokenizer (or model) directory: also report lengths in tokens.")
@click.option("--rejects", "rejects_path", metavar="PATH", default=None,
              help="Write every rejected row with its reason to this JSONL file.")
@click.option("--overwrite", is_flag=True, help="Replace the --rejects file if it exists.")
def inspect_cmd(data, read_options, tokenizer, rejects_path, overwrite):
    """Read DATA once and describe it, before a long job.

    \b
    DATA is a .jsonl, .json (a list of records or a mapping id -> record), .parquet (file or directory),
    .csv, a datasets.save_to_disk directory, or a Hugging Face dataset id NAME[@CONFIG][:SPLIT].
    Reports the detected format and field mapping, rows, rejected rows with reasons, prompt/response
    length distributions (characters; tokens with --tokenizer), and exact duplicate examples.

    \b
    Bad rows are all listed. With the default --on-bad-row error the command then exits with status 2
    (like embed/shard/run, which would stop at the first one); with --on-bad-row skip it exits 0.
    """
    from cluster_curate.pipeline import inspect_dataset

    r = inspect_dataset(data, read_options, tokenizer=tokenizer, rejects_path=rejects_path, overwrite=overwrite)
    if console.JSON_MODE:
        console.summary("inspect", {k: v for k, v in r.items() if k != "first_reject"})
    else:
        for rej in r["rejects"] if not console.QUIET else []:  # click.echo: one unwrapped line per row
            field = f"field '{rej['field']}': " if rej["field"] else ""
            click.echo(f"rejected id {rej['id']}: {rej['location']}: {field}{rej['reason']}", err=True)
        if r["rejected"] > len(r["rejects"]) and not console.QUIET:
            click.echo(f"... and {r['rejected'] - len(r['rejects'])} more rejected rows"
                       + ("" if r["rejects_file"] else " (pass --rejects PATH to write them all)"), err=True)
        fields = ", ".join(f"{k}={v}" for k, v in r["fields"].items())
        data_rows = {"source": r["source"], "container": r["container"], "format": r["format"],
                     "fields": fields, "rows": r["rows"], "examples": r["examples"], "rejected": r["rejected"]}
        if r["rejects_file"]:
            data_rows["rejects file"] = r["rejects_file"]
        data_rows.update({"exact duplicate examples": r["duplicates"], "duplicate prompts": r["duplicate_prompts"],
                          "with a system prompt": r["with_system_prompt"],
                          "multi-turn (context turns)": r["multi_turn"], "fingerprint": r["fingerprint"]})
        table = [{"length": name.replace("_", " "), **stats} for name, stats in r["lengths"].items()]
        console.summary(f"inspect {r['source']}", data_rows, table)
    if r["rejected"] and read_options.on_bad_row == "error":
        more = f"; {r['rejected']} bad rows in all" if r["rejected"] > 1 else ""
        raise CurateError(f"{r['first_reject']} (pass --on-bad-row skip to skip bad rows{more})")

# ============================================================================================ embed

@command("embed")
@click.argument("data")
@click.option("--out", "-o", required=True, help="Embeddings artifact to write (a .parquet file; a directory of "
              "parts when run under torchrun or with --num-shards).")
@click.option("--model", default="proxy", show_default=True,
              help="proxy (built in: trained briefly on the data, no download), a saved proxy (OUT.proxy), a local "
                   "model directory, a .gguf file, or a Hugging Face id (from the local cache when offline).")
@click.option("--features", default=None,
              help="text | gradient | lora-gradient | hidden | loss-trajectory, or a comma list (concatenated "
                   "L2-normalised blocks).  [default: text, chosen by the evidence benchmark; gradient is the "
                   "paper's]")
@click.option("--feature-weights", default=None, help="Comma list, one weight per feature block (default: 1 each).")
@click.option("--dim", type=int, default=None,
              help="Output dimension per block: random projection for gradient/hidden (default: hidden size), "
                   "lora-gradient (default 8192), SVD width for text (default 256).")
@click.option("--pool", type=click.Choice(["all", "response"]), default="all", show_default=True,
              help="hidden: mean over all tokens, or over the positions that predict response tokens.")
@click.option("--layers", default=None, help="lora-gradient: comma list of linear-layer name patterns (default: all).")
@click.option("--checkpoints", default=None,
              help="loss-trajectory: comma list of proxy warm-up steps or model paths/ids "
                   "(default: the proxy's own warm-up checkpoints).")
@click.option("--text-field", type=click.Choice(TEXT_FIELDS), default="prompt", show_default=True,
              help="text: which text the feature looks at.")
@click.option("--text-weighting", type=click.Choice(TEXT_WEIGHTINGS), default="tf", show_default=True,
              help="text: tf weighs words by their (sublinear) count alone, so the words that say what the task is "
                   "are not outweighed by rare topic words; tfidf weighs rare words (topics, names) most.")
@click.option("--text-sample", type=int, default=20000, show_default=True,
              help="text: rows (seeded sample) the vocabulary, IDF and SVD are fitted on.")
@click.option("--max-length", type=int, default=None,
              help="Tokens per example; the prompt is truncated from the left first.  [default: 1024]")
@click.option("--batch-tokens", type=int, default=None,
              help="Padded tokens per batch (length-sorted buckets); does not change the features.  [default: 16384]")
@click.option("--device", default="auto", show_default=True, help="auto | cpu | cuda | cuda:N.")
@click.option("--dtype", default="auto", show_default=True,
              help="auto (bfloat16 on GPU, float32 on CPU) | float32 | bfloat16 | float16.")
@click.option("--trust-remote-code", is_flag=True, help="Allow model code from the model's repository (off by default).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seeds the proxy, samples and projections.")
@click.option("--num-shards", type=int, default=1, show_default=True,
              help="Job-array pieces: this run is piece --shard-index of K, writing its part into --out.")
@click.option("--shard-index", type=int, default=0, show_default=True)
@click.option("--commit-every", type=int, default=None,
              help="Rows per committed chunk (what --resume keeps after a crash).  [default: 2048]")
@click.option("--resume", is_flag=True, help="Continue an interrupted run (same command) from its committed chunks.")
@click.option("--proxy-size", type=click.Choice(["tiny", "small", "base"]), default=None,
              help="Proxy width/depth: tiny 2x64, small 3x128, base 4x256 (layers x width).  [default: small]")
@click.option("--proxy-sample", type=float, default=None,
              help="Fraction of rows the proxy warms up on (at least 128, at most 20000 rows).  [default: 0.05]")
@click.option("--proxy-epochs", type=float, default=None, help="Passes over the warm-up sample.  [default: 1]")
@click.option("--proxy-steps", type=int, default=None, help="Exact warm-up steps (overrides --proxy-epochs).")
@click.option("--proxy-tokenizer", type=click.Choice(["bpe", "word"]), default=None,
              help="Tokenizer trained on the sample: byte-level BPE or words.  [default: bpe]")
@click.option("--proxy-vocab", type=int, default=None, help="Proxy tokenizer vocabulary size.  [default: 4096]")
@click.option("--proxy-checkpoints", type=int, default=None,
              help="Warm-up checkpoints kept (loss-trajectory uses them).  [default: 3]")
@click.option("--proxy-budget", type=float, default=None,
              help="Cap on the warm-up's cost as a share of the feature pass (caps the steps on small data; "
                   "--proxy-steps is not capped).  [default: 0.15]")
@dataset_options
@output_options
def embed_cmd(data, out, read_options, overwrite, force, proxy_size, proxy_sample, proxy_epochs, proxy_steps,
              proxy_tokenizer, proxy_vocab, proxy_checkpoints, proxy_budget, **opts):
    """One feature vector per example of DATA (prompt TF-IDF by default; the paper's gradient feature and
    other model features with --features).

    \b
    Examples:
      cluster-curate embed train.jsonl --out emb.parquet
      cluster-curate embed train.jsonl --out emb.parquet --features text,gradient --feature-weights 1,0.5
      cluster-curate embed train.jsonl --out emb.parquet --model Qwen/Qwen2.5-0.5B-Instruct --dim 1024
      torchrun --nproc-per-node 8 -m cluster_curate embed train.jsonl --out emb/
    """
    from cluster_curate import pipeline
    from cluster_curate.features.proxy import ProxyOptions

    proxy = ProxyOptions()
    for name, value in (("size", proxy_size), ("sample", proxy_sample), ("epochs", proxy_epochs),
                        ("steps", proxy_steps), ("tokenizer", proxy_tokenizer), ("vocab_size", proxy_vocab),
                        ("checkpoints", proxy_checkpoints), ("budget", proxy_budget)):
        if value is not None:
            setattr(proxy, name, value)
    cfg = pipeline.EmbedConfig(proxy=proxy, **opts)
    result = pipeline.embed(data, out, cfg, read_options, overwrite=overwrite, force=force)
    console.summary("embed", result)


# ============================================================================================ cluster

class _CountOrWord(click.ParamType):
    """A positive count (of `what`), or one of a few words: --k N|auto, --groups G|auto|none."""

    def __init__(self, what: str, words: tuple[str, ...]):
        self.what, self.words = what, words
        self.name = "|".join(("N",) + words)

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        if str(value).lower() in self.words:
            return str(value).lower()
        try:
            n = int(value)
        except ValueError:
            quoted = [repr(w) for w in self.words]
            choices = ", ".join(quoted[:-1]) + " or " + quoted[-1] if len(quoted) > 1 else quoted[0]
            self.fail(f"expected a number of {self.what}{',' if len(quoted) > 1 else ' or'} {choices}, "
                      f"got {value!r}", param, ctx)
        if n < 1:
            self.fail(f"must be >= 1, got {n}", param, ctx)
        return n


@command("cluster")
@click.argument("embeddings", type=click.Path())
@click.option("--out", "-o", required=True, type=click.Path(),
              help="Clusters artifact to write (.parquet); the centroids go beside it (OUT.centroids.npy).")
@click.option("--k", "k", type=_CountOrWord("clusters", ("auto",)), default="auto", show_default=True,
              help="Number of clusters, or auto: ceil(sqrt(n)) capped at n/2 (deliberately more clusters than "
                   "natural groups, so rare groups get clusters of their own). The paper uses k = number of GPUs.")
@click.option("--iters", type=click.IntRange(min=1), default=20, show_default=True, help="k-means iterations.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Seeds the training sample and the initial centroids.")
@click.option("--center", is_flag=True, help="Subtract the mean feature before L2-normalising (default: L2 only).")
@click.option("--max-size-factor", type=click.FloatRange(min=1.0), default=None,
              help="Soft cap: no cluster above ceil(A·n/k) rows; rows over it move to the nearest of their 8 "
                   "closest centroids with room (the paper uses 1.5).  [default: no cap]")
@click.option("--sample-size", type=click.IntRange(min=1), default=None,
              help="Rows k-means trains on before every row is assigned.  [default: min(n, max(128·k, 2^24/k))]")
@click.option("--gpus", type=click.IntRange(min=0), default=None,
              help="GPUs for faiss: all it sees by default, 0 = CPU (choose devices with CUDA_VISIBLE_DEVICES).")
@click.option("--batch-rows", type=click.IntRange(min=1), default=65536, show_default=True,
              help="Rows per assignment batch (memory: the feature matrix plus one batch).")
@click.option("--groups", type=_CountOrWord("groups", ("auto", "none")), default="auto", show_default=True,
              help="Group the k clusters into coarse groups (average linkage of the centroids); `select` then "
                   "water-fills the budget over groups first, then over the clusters inside each, so the many "
                   "clusters of one dominant kind share one quota. auto: cut where --group-cut says; G: cut "
                   "into G groups; none: flat quotas over clusters.")
@click.option("--group-cut", type=click.Choice(list(GROUP_CUTS)), default="row", show_default=True,
              help="Where --groups auto cuts: row: clusters whose centroids are as similar as a row is to its own "
                   "centroid share a group; pair: as similar as two rows of one cluster are (fewer, larger groups; "
                   "on real data it can join a rare kind into a dominant one).")
@click.option("--split-mixed/--no-split-mixed", default=None,
              help="After k-means, cut in two every cluster whose 2-means halves are less similar than two rows of "
                   "one cluster typically are, again inside each half (halves of at least 16 rows): two rare kinds "
                   "that k-means put in one cluster get a quota each.  [default: with --k auto; a given --k is kept]")
@output_options
def cluster_cmd(embeddings, out, k, iters, seed, center, max_size_factor, sample_size, gpus, batch_rows,
                groups, group_cut, split_mixed, overwrite, force):
    """k-means (faiss, spherical: cosine on L2-normalised features) over an embeddings artifact.

    \b
    Writes `id`, `cluster`, `similarity` (cosine to its centroid) and OUT.centroids.npy.
    Examples:
      cluster-curate cluster emb.parquet --out clusters.parquet
      cluster-curate cluster emb.parquet --out clusters.parquet --k 4 --max-size-factor 1.5 --groups none  # paper
    """
    from cluster_curate import pipeline
    summary, rows = pipeline.cluster_embeddings(embeddings, out, k=k, iters=iters, seed=seed, center=center,
                                                max_size_factor=max_size_factor, sample_size=sample_size,
                                                gpus=gpus, batch_rows=batch_rows, groups=groups,
                                                group_cut=group_cut, split_mixed=split_mixed, overwrite=overwrite,
                                                force=force)
    console.summary(f"cluster → {out}", summary, rows)


# ============================================================================================ select

@command("select")
@click.argument("clusters", type=click.Path())
@click.option("--out", "-o", required=True, type=click.Path(), help="Selection artifact to write (.parquet).")
@click.option("--fraction", type=float, default=None, help="Budget as a fraction of all rows, in (0, 1].")
@click.option("--budget", type=int, default=None, help="Budget as a number of rows (met exactly).")
@click.option("--per-cluster-ratio", type=float, default=None,
              help="The paper's rule: every cluster keeps floor(R × smallest cluster size) rows, R in (0, 1].")
@click.option("--balance-power", type=float, default=0.0, show_default=True,
              help="Quota ∝ size^p under the cluster sizes: 0 = balanced (water-filling), 1 = proportional.")
@click.option("--within", type=click.Choice(["random", "far", "near", "diverse", "hard"]), default="random",
              show_default=True, help="Order inside a cluster: random | far (peripheral first, the paper) | near "
              "(typical first) | diverse (k-center greedy; needs embeddings) | hard (highest loss first).")
@click.option("--embeddings", type=click.Path(), default=None,
              help="Embeddings artifact (features for diverse / --dedup, loss for hard, n_tokens for shard). "
                   "Default: the one the clusters were made from, when it is still there.")
@click.option("--dedup", type=float, default=None, metavar="COSINE",
              help="Drop a row whose cosine similarity to an already kept row of its cluster exceeds COSINE "
                   "(before quotas are filled).")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seeds the random order.")
@output_options
def select_cmd(clusters, out, fraction, budget, per_cluster_ratio, balance_power, within, embeddings, dedup, seed,
               overwrite, force):
    """A balanced, budgeted subset of every cluster: --fraction F | --budget N | --per-cluster-ratio R.

    \b
    Quotas by water-filling: small clusters are taken whole, the rest of the budget is spread evenly.
    Writes `id`, `cluster`, `rank_in_cluster` (+ `n_tokens` when the embeddings are reachable).
    Examples:
      cluster-curate select clusters.parquet --out sel.parquet --fraction 0.31
      cluster-curate select clusters.parquet --out sel.parquet --per-cluster-ratio 0.5 --within far   # the paper
      cluster-curate select clusters.parquet --out sel.parquet --budget 20000 --dedup 0.95 --embeddings emb.parquet
    """
    from cluster_curate import pipeline
    summary, rows = pipeline.select_from_clusters(
        clusters, out, fraction=fraction, budget=budget, per_cluster_ratio=per_cluster_ratio,
        balance_power=balance_power, within=within, embeddings=embeddings, dedup=dedup, seed=seed,
        summary_limit=None if console.JSON_MODE else 32, overwrite=overwrite, force=force)
    console.summary(f"select → {out}", summary, rows)


# ============================================================================================ shard

@command("shard")
@click.argument("selection", type=click.Path())
@click.option("--data", required=True, help="The raw dataset the selection was made from (every source column is kept).")
@click.option("--out", "out", required=True, type=click.Path(), help="Output directory for the shards and manifest.json.")
@click.option("--num-shards", "-n", type=int, required=True, help="Number of data-parallel ranks (one shard each).")
@click.option("--micro-batch-size", "-m", type=int, default=1, show_default=True,
              help="Rows per rank per step; a global step is num-shards × micro-batch-size rows.")
@click.option("--allocation", type=click.Choice(["stratified", "paper", "random"]), default="stratified",
              show_default=True, help="stratified: every step holds every cluster's share, token-balanced across "
              "ranks; paper: rank r gets only cluster r (needs k = num-shards); random: a plain shuffle (baseline).")
@click.option("--balance", type=click.Choice(["tokens", "padded"]), default="tokens", show_default=True,
              help="Rank load to balance: sum of tokens, or micro-batch size × longest row (trainers that pad).")
@click.option("--length-window", type=int, default=None,
              help="Group rows of similar length into steps inside windows of this many steps (0 = off; "
                   "default 64).")
@click.option("--remainder", type=click.Choice(["drop", "wrap"]), default="drop", show_default=True,
              help="Rows beyond a whole number of steps: drop (listed in the manifest and leftover_ids.txt) or "
                   "wrap (fill the last step's worth with repeats of the stream's first rows, marked in column "
                   "`wrapped`, never in the same step as their original).")
@click.option("--weights", type=click.Choice(["cluster", "none"]), default="cluster", show_default=True,
              help="Column `weight`: (n_c/n) ÷ (s_c/s), restoring the data's cluster proportions; none: 1.")
@click.option("--tokenizer", default=None, help="Local tokenizer directory: count tokens with it (one extra pass "
              "over the data). Default: the selection's n_tokens, else its embeddings', else whitespace words.")
@click.option("--embeddings", default=None, help="Embeddings artifact to take n_tokens from (default: the "
              "selection's own n_tokens, or its lineage's embeddings when reachable).")
@click.option("--seed", type=int, default=0, show_default=True)
@dataset_options
@output_options
def shard_cmd(selection, data, out, num_shards, micro_batch_size, allocation, balance, length_window, remainder,
              weights, tokenizer, embeddings, seed, read_options, overwrite, force):
    """Allocate a selection across N data-parallel ranks: N equal Parquet shards (full source rows plus `id`,
    `cluster`, `step`, `weight`, `wrapped`) in the order each rank consumes them, and manifest.json.

    \b
    Load a shard with datasets.load_dataset("parquet", data_files=...) or cluster_curate.loader.load_shard.
    """
    from cluster_curate import pipeline
    m = pipeline.shard_selection(selection, data, out, num_shards, micro_batch_size, read_options=read_options,
                                 allocation=allocation, balance=balance, remainder=remainder, weights=weights,
                                 length_window=length_window, seed=seed, tokenizer=tokenizer, embeddings=embeddings,
                                 overwrite=overwrite, force=force)
    b = m["balance"]
    console.summary(f"shard → {out}", {
        "out": out,
        "shards": m["num_shards"],
        "rows per shard": m["rows_per_shard"],
        "steps": m["steps"],
        "micro-batch size": m["micro_batch_size"],
        "selected rows": m["selected_rows"],
        "left over (dropped)": m["leftover_rows"],
        "wrapped (repeats)": m["wrapped_rows"],
        "allocation": m["params"]["allocation"],
        "token source": m["tokens"]["source"],
        "token imbalance mean / p95": f"{b['token_imbalance']['mean']:.4f} / {b['token_imbalance']['p95']:.4f}",
        "padded imbalance mean": round(b["padded_imbalance"]["mean"], 4),
        "padding efficiency": round(b["padding_efficiency"], 4),
        "cluster spread mean / min": f"{b['cluster_spread']['mean']:.4f} / {b['cluster_spread']['min']:.4f}",
        "rank mix TV max": round(b["rank_mix_tv"]["max"], 4),
        "seconds": m["seconds"],
        "manifest": str(os.path.join(out, "manifest.json")),
    })


# ============================================================================================ run

# `run` takes the options of the four stage commands (defined once, on those commands); these are the
# ones it sets itself. Its --num-shards is shard's (ranks), not embed's job-array pieces.
_RUN_OWN = {"data", "out", "embeddings", "clusters", "selection", "overwrite", "force", "quiet", "json_mode",
            "resume", "num_shards@embed", "shard_index"}
_RUN_STAGES = ("embed", "cluster", "select", "shard")


def _run_stage_params() -> tuple[list[click.Parameter], dict[str, list[str]]]:
    params, seen, by_stage = [], set(), {}
    for stage in _RUN_STAGES:
        by_stage[stage] = []
        for p in main.commands[stage].params:
            if p.name in _RUN_OWN or f"{p.name}@{stage}" in _RUN_OWN or not isinstance(p, click.Option):
                continue
            by_stage[stage].append(p.name)
            if p.name not in seen:
                seen.add(p.name)
                params.append(p)
    return params, by_stage


def _run_cmd(data, out, overwrite, force, quiet, json_mode, **options):
    """The whole pipeline in one command: embed, cluster, select, shard, with artifacts kept in OUT.

    \b
    OUT/embeddings.parquet  OUT/clusters.parquet  OUT/selection.parquet  OUT/shards/
    Re-running skips every stage whose output is up to date with its inputs and options (recorded in
    OUT/run-state.json); after an interruption it continues where it stopped (embed resumes its committed
    chunks). Options are those of the four subcommands; --seed seeds them all.

    \b
    Example:
      cluster-curate run train.jsonl --out curated/ --fraction 0.31 --num-shards 8 --micro-batch-size 4
    """
    import time
    from pathlib import Path

    from cluster_curate import pipeline
    from cluster_curate.io.datasets import ReadOptions, open_dataset

    console.configure(quiet=quiet or json_mode, json_mode=json_mode)
    _let_pyarrow_skip_pandas(data)
    _, by_stage = _run_stage_params()
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    state = pipeline.RunState(d)
    paths = {stage: d / name for stage, name in pipeline.RUN_OUTPUTS.items()}
    read = ReadOptions(format=None if options.get("fmt") in (None, "auto") else options.get("fmt"),
                       prompt_field=options.get("prompt_field"), response_field=options.get("response_field"),
                       on_bad_row=options.get("on_bad_row", "error"))
    upstream = open_dataset(data, read).fingerprint()
    inputs = {"embed": {"data": data}, "cluster": {"embeddings": str(paths["embed"])},
              "select": {"clusters": str(paths["cluster"])},
              "shard": {"selection": str(paths["select"]), "data": data}}
    ctx = click.get_current_context()
    done = []
    with console.capture() as captured:
        for stage in _RUN_STAGES:
            stage_opts = {name: options[name] for name in by_stage[stage]}
            request = state.request(stage, stage_opts, upstream)
            output = paths[stage]
            t0 = time.monotonic()
            if not overwrite and state.is_current(stage, request, output):
                done.append({"stage": stage, "status": "up to date", "seconds": 0.0, "output": str(output)})
            else:
                extra = {"resume": True} if stage == "embed" else {}
                ctx.invoke(main.commands[stage], **inputs[stage], out=str(output), overwrite=True, force=force,
                           quiet=quiet, json_mode=json_mode, **stage_opts, **extra)
                state.record(stage, request, output)
                done.append({"stage": stage, "status": "ran", "seconds": round(time.monotonic() - t0, 2),
                             "output": str(output)})
            upstream = pipeline.output_fingerprint(stage, output)
    if json_mode:
        console.summary("run", {"out": str(d), "stages": done,
                                "summaries": {title: data for title, data, _ in captured}})
        return
    for title, data_, rows in captured:
        console.summary(title, data_, rows)
    console.summary("run", {"out": str(d)} | {s["stage"]: f"{s['status']} ({s['seconds']} s)" for s in done})


def _make_run_command() -> click.Command:
    params, _ = _run_stage_params()
    own = [click.Argument(["data"]),
           click.Option(["--out", "-o"], required=True, type=click.Path(file_okay=False),
                        help="Directory for the artifacts of every stage."),
           click.Option(["--overwrite"], is_flag=True, help="Redo every stage even when up to date."),
           click.Option(["--force"], is_flag=True, help="Passed to every stage (use mismatched inputs anyway)."),
           click.Option(["--quiet", "-q"], is_flag=True, help="Print nothing but errors (and the --json summary)."),
           click.Option(["--json", "json_mode"], is_flag=True, help="Print one JSON object summarising every stage.")]
    return click.Command("run", callback=_run_cmd, params=own + params, help=_run_cmd.__doc__,
                         short_help="The whole pipeline in one command, resumable.")


main.add_command(_make_run_command())


# ============================================================================================ report

@command("report")
@click.argument("artifacts", nargs=-1, required=True, type=click.Path())
@click.option("--out", "-o", "out", default=None, type=click.Path(file_okay=False),
              help="Directory for the PNG plots (cluster sizes, features PCA, per-rank token loads).")
@click.option("--seed", default=0, show_default=True, help="Seeds the random allocation drawn for comparison.")
def report_cmd(artifacts, out, seed):
    """Tables (and with --out, PNG plots) for artifacts or a whole `run` directory.

    \b
    Examples:
      cluster-curate report out/                       # every artifact of a pipeline directory
      cluster-curate report selection.parquet --out report/
    Upstream artifacts are found through the lineage in the metadata when they are still where they were.
    """
    from cluster_curate.report import report

    sections, plots = report(list(artifacts), out, seed)
    for i, (title, data, rows) in enumerate(sections):
        if console.JSON_MODE:
            continue
        console.summary(title, data, rows)
    if console.JSON_MODE:
        console.summary("report", {t: d for t, d, _ in sections} | {"plots": [str(p) for p in plots]})
    elif plots:
        console.summary("plots", {p.name: str(p) for p in plots})


if __name__ == "__main__":
    main()
