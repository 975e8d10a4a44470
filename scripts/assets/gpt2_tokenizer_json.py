#!/usr/bin/env python3
"""Writes DIR/tokenizer.json (+ tokenizer_config.json) for GPT-2 from DIR/vocab.json and
DIR/merges.txt, with the same structure HF `tokenizers` uses for openai-community/gpt2:
byte-level pre-tokenizer with the GPT-2 regex, BPE with "a b" merges, byte-level decoder,
<|endoftext|> (50256) as the only added token. Standard library only."""
import json
import sys
from pathlib import Path


def main(directory: str) -> None:
    d = Path(directory)
    vocab = json.loads((d / "vocab.json").read_text(encoding="utf-8"))
    lines = (d / "merges.txt").read_text(encoding="utf-8").split("\n")
    merges = [line for line in lines[1:] if line]  # first line is "#version: 0.2"
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                  "use_regex": True}
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": 50256, "content": "<|endoftext|>", "single_word": False,
                          "lstrip": False, "rstrip": False, "normalized": True,
                          "special": True}],
        "normalizer": None,
        "pre_tokenizer": byte_level,
        "post_processor": dict(byte_level, trim_offsets=False),
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "",
                  "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                  "merges": merges},
    }
    (d / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False),
                                      encoding="utf-8")
    config = {"model_max_length": 1024, "bos_token": "<|endoftext|>",
              "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>",
              "tokenizer_class": "GPT2Tokenizer"}
    (d / "tokenizer_config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1])
