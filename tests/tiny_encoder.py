"""A tiny BERT encoder built inside the tests (no download): a WordPiece tokenizer trained on GSM8K questions
([CLS] text [SEP], lower-cased), and a 2-layer BertModel from a config, saved with save_pretrained so tests load
them by path as users do; optionally as a sentence-transformers directory (modules.json + Pooling config)."""

from __future__ import annotations

import json
from pathlib import Path

GSM8K = Path(__file__).resolve().parents[1] / "fixtures" / "gsm8k" / "train-300.jsonl"


def gsm8k_rows(n: int = 300) -> list[dict]:
    with open(GSM8K) as f:
        return [json.loads(line) for _, line in zip(range(n), f)]


def build_wordpiece(model_max_length: int = 512, truncation_side: str = "right"):
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=400, special_tokens=specials, show_progress=False)
    rows = gsm8k_rows(200)
    tok.train_from_iterator([r["question"] for r in rows] + [r["answer"] for r in rows], trainer=trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls),
                                                                                             ("[SEP]", sep)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]", model_max_length=model_max_length,
                                   truncation_side=truncation_side)


def build_bert(path: Path, *, hidden: int = 32, layers: int = 2, seed: int = 0, model_max_length: int = 512,
               truncation_side: str = "right", pooling: str | None = None, max_seq_length: int | None = None,
               weights: bool = True, positions: int = 512) -> Path:
    """A BertModel directory. pooling: also write a sentence-transformers configuration with that mode
    ("cls", "mean", ...); max_seq_length: its sentence_bert_config.json. weights=False: the config only.
    positions: the model's position table (its tokenizer may allow more: `model_max_length`)."""
    import torch
    from transformers import BertConfig, BertModel

    tok = build_wordpiece(model_max_length, truncation_side)
    cfg = BertConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                     num_attention_heads=4, max_position_embeddings=positions, pad_token_id=tok.pad_token_id)
    torch.manual_seed(seed)
    model = BertModel(cfg)
    path.mkdir(parents=True, exist_ok=True)
    if weights:
        model.save_pretrained(path)
    else:
        cfg.save_pretrained(path)
    tok.save_pretrained(path)
    if pooling is not None:
        (path / "modules.json").write_text(json.dumps([
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]))
        (path / "1_Pooling").mkdir(exist_ok=True)
        modes = {"cls": "cls_token", "mean": "mean_tokens", "max": "max_tokens", "mean_sqrt_len": "mean_sqrt_len_tokens"}
        (path / "1_Pooling" / "config.json").write_text(json.dumps(
            {"word_embedding_dimension": hidden, **{f"pooling_mode_{m}": k == pooling for k, m in modes.items()}}))
    if max_seq_length is not None:
        (path / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": max_seq_length,
                                                                     "do_lower_case": False}))
    return path
