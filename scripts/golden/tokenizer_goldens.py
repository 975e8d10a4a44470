#!/usr/bin/env python3
"""Writes tokenizer golden fixtures with HF `tokenizers` (run on the GPU host, which has it).

Usage: python3 scripts/golden/tokenizer_goldens.py --assets .assets/tokenizers --out tests/data/tokenizer

One JSONL file per tokenizer (qwen3, gpt2, gpt-oss, llama3). Lines are either encode cases
  {"text": str, "ids": [int], "decoded": str, "decoded_skip": str}
or decode cases
  {"decode_ids": [int], "decoded": str, "decoded_skip": str}
where decoded = decode(ids, skip_special_tokens=False), decoded_skip = skip_special_tokens=True.
Encoding uses add_special_tokens=False. The reference for qwen3/gpt-oss/llama3 is their
tokenizer.json; for GPT-2 it is a `tokenizers` BPE model built from vocab.json + merges.txt with
a byte-level pre-tokenizer and decoder (independent of our converted tokenizer.json).
Deterministic (fixed seeds).
"""
import argparse
import json
import random
from pathlib import Path

HAND_WRITTEN = [
    "", " ", "  ", "   ", "a", "Hello world", "Hello, world!", "hello  world", "a   b",
    "a    b c", " leading space", "trailing space ", "trailing spaces   ", "\n", "\n\n\n",
    "line1\nline2", "line1\r\nline2\r\n", "\ttab\tseparated\t", "  \n  \n", "mixed \t\n whitespace",
    "The quick brown fox jumps over the lazy dog.", "THE QUICK BROWN FOX", "don't I'll we're they've",
    "DON'T I'LL WE'RE THEY'VE", "it's John's", "rock 'n' roll", "\"quoted\" and 'single'",
    "1", "12", "123", "1234", "1234567890", "3.14159", "1,000,000", "-42", "1e-10",
    "12345678901234567890123456789", "v1.2.3", "2026-11-29T13:41:29Z", "0x7fffffff",
    "你好，世界", "我爱自然语言处理。", "日本語のテキストです", "한국어 텍스트", "Привет, мир!",
    "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "สวัสดีชาวโลก", "Γειά σου Κόσμε",
    "👍", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷🇯🇵", "emoji 🎉 in 🚀 text ✨", "❤️", "☃",
    "e\u0301", "\u00e9", "A\u030a", "\u212b", "ﬁ ligature", "ｆｕｌｌｗｉｄｔｈ", "x\u0327\u0301",
    "\u200b zero width", "\ufeffBOM", "\u00a0nbsp\u00a0", "a\u2028b\u2029c", "\x00\x01\x02\x7f",
    "∑∫√∞≠≤≥", "naïve café résumé", "Ⅻ ½ ² ³", "µ Ω Å", "\U0001d400\U0001d401", "\U0010ffff",
    "def f(x):\n    return x ** 2\n", "int main() {\n\treturn 0;\n}\n",
    '{"key": [1, 2, {"nested": null}], "s": "v"}', "<div class=\"a\">x</div>",
    "SELECT * FROM t WHERE id = 1;", "https://example.com/path?q=1&r=2#frag", "user@example.com",
    "    indented code\n        more", "#!/bin/bash\necho $HOME", "a_b-c.d/e\\f",
    "<|endoftext|>", "text<|endoftext|>more", "<|im_start|>user\nhi<|im_end|>\n",
    "<|im_start|>assistant\n<think>\nreasoning\n</think>\n\nanswer<|im_end|>",
    "<think>", "</think>", "<|im_start", "<|endoftext|", "< |im_end| >",
    "<|start|>user<|message|>hi<|end|>", "<|channel|>analysis<|message|>x<|end|>",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
    "<tool_call>\n{\"name\": \"f\"}\n</tool_call>", "<|return|><|call|>",
    "a" * 1000, "ab" * 500, " " * 100, "\n" * 50, "supercalifragilisticexpialidocious" * 20,
    "antidisestablishmentarianism", "pneumonoultramicroscopicsilicovolcanoconiosis",
    "x" * 3000 + " y", "1" * 200, "🎉" * 50, "中" * 300,
]

POOL = (
    list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") * 4
    + list(" " * 30) + list("\n\t\r") + list(".,;:!?'\"()[]{}<>-_/\\|@#$%^&*+=~`")
    + list("你好世界中文字符日本語한국어") + list("éèêëñüöäçÅåø") + ["e\u0301", "\u200b"]
    + ["👍", "🎉", "👨‍👩‍👧", "🇫🇷"] + ["<|endoftext|>", "<think>", "<|im_end|>", "<|end|>"]
)


def random_strings(rng: random.Random, n: int):
    out = []
    for _ in range(n):
        length = rng.choice([1, 2, 3, 5, 8, 13, 21, 40, 80, 160])
        out.append("".join(rng.choice(POOL) for _ in range(length)))
    return out


def load(name: str, assets: Path):
    from tokenizers import Tokenizer
    if name == "gpt2":
        # transformers 5.17's GPT2TokenizerFast(vocab_file=, merges_file=) loads no vocabulary
        # (every text encodes to []), so build the reference from the tokenizers library itself.
        from tokenizers import AddedToken, decoders, models, pre_tokenizers
        d = assets / "gpt2"
        tok = Tokenizer(models.BPE.from_file(str(d / "vocab.json"), str(d / "merges.txt")))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        tok.add_special_tokens([AddedToken("<|endoftext|>", special=True)])
        return tok
    return Tokenizer.from_file(str(assets / name / "tokenizer.json"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--assets", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name in ["qwen3", "gpt2", "gpt-oss", "llama3"]:
        tok = load(name, args.assets)
        rng = random.Random(1234)
        texts = HAND_WRITTEN + random_strings(rng, 200)
        lines = []
        for text in texts:
            ids = tok.encode(text, add_special_tokens=False).ids
            lines.append({"text": text, "ids": ids,
                          "decoded": tok.decode(ids, skip_special_tokens=False),
                          "decoded_skip": tok.decode(ids, skip_special_tokens=True)})
        vocab = tok.get_vocab_size(with_added_tokens=True)
        for _ in range(80):
            ids = [rng.randrange(vocab) for _ in range(rng.choice([1, 2, 3, 5, 10, 20]))]
            lines.append({"decode_ids": ids,
                          "decoded": tok.decode(ids, skip_special_tokens=False),
                          "decoded_skip": tok.decode(ids, skip_special_tokens=True)})
        path = args.out / f"{name}.jsonl"
        with path.open("w", encoding="utf-8") as f:
            for line in lines:
                f.write(json.dumps(line, ensure_ascii=False) + "\n")
        print(f"{path}: {len(lines)} cases")


if __name__ == "__main__":
    main()
