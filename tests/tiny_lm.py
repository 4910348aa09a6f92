"""Tiny causal LMs built inside the tests (no download): a byte-level BPE tokenizer trained on a few
sentences, wrapped as a transformers PreTrainedTokenizerFast (optionally with a ChatML chat template), and a
2-layer Llama from a config, saved with save_pretrained so tests load them by path as users do."""

from __future__ import annotations

from pathlib import Path

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

SENTENCES = [
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May.",
    "How many clips did Natalia sell altogether in April and May?",
    "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting.",
    "Write a function that returns the sum of two numbers.",
    "def add(a, b):\n    return a + b",
    "The answer is 72. #### 72",
    "You are a helpful assistant.",
]


def build_tokenizer(chat_template: bool = True, vocab_size: int = 300):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<pad>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(SENTENCES * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|im_end|>"
                                   if chat_template else "<|endoftext|>", pad_token="<pad>")
    if chat_template:
        fast.chat_template = CHATML
    return fast


def build_llama(path: Path, *, chat_template: bool = True, layers: int = 2, hidden: int = 64,
                seed: int = 0, tie: bool = False) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = build_tokenizer(chat_template)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=512, tie_word_embeddings=tie,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():  # larger weights than the default init, so gradients are far from trivial
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.08)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path
