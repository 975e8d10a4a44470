#!/usr/bin/env python3
"""Writes chat-template golden fixtures with transformers' apply_chat_template (GPU host).

Usage: python3 scripts/golden/chat_template_goldens.py --assets .assets/tokenizers \
           --templates tests/data/chat_templates --out tests/data/chat_template

One JSONL file per template (qwen3, qwen3-old, gpt-oss, llama3); each line:
  {"template": file, "messages": [...], "tools": [...]|null, "add_generation_prompt": bool,
   "kwargs": {...}, "special_tokens": {...}, "date": "YYYY-MM-DD", "prompt": str}
with "error": str instead of "prompt" where transformers raised. "special_tokens" is the
tokenizer's special_tokens_map, which transformers passes to the template as variables;
"date" is what strftime_now("%Y-%m-%d") returned during the run.
"""
import argparse
import copy
import datetime
import json
from pathlib import Path

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}
SEARCH_TOOL = {"type": "function", "function": {
    "name": "search", "description": "Search the web.",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string"}, "top_k": {"type": "integer", "default": 3}},
        "required": ["query"]}}}

U = lambda c: {"role": "user", "content": c}          # noqa: E731
A = lambda c: {"role": "assistant", "content": c}     # noqa: E731
S = lambda c: {"role": "system", "content": c}        # noqa: E731

CALL = {"role": "assistant", "content": "", "tool_calls": [
    {"id": "call_1", "type": "function",
     "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]}
CALL_STR_ARGS = {"role": "assistant", "content": "Let me check.", "tool_calls": [
    {"id": "call_2", "type": "function",
     "function": {"name": "search", "arguments": "{\"query\": \"xserv\"}"}},
    {"id": "call_3", "type": "function",
     "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]}
TOOL_RESULT = {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 18}"}

CONVERSATIONS = {
    "single": ([U("Hello!")], None),
    "system": ([S("You are a helpful assistant."), U("What is 2+2?")], None),
    "multi_turn": ([S("Be brief."), U("Hi"), A("Hello! How can I help?"), U("Tell me a joke.")], None),
    "unicode": ([U("你好 👋 naïve café\n\nline two"), A("Bonjour — ça va ?"), U("Ещё раз")], None),
    "empty_content": ([U(""), A(""), U("again")], None),
    "think_in_content": ([U("Q1"), A("<think>\nstep one\n</think>\n\nAnswer one."), U("Q2")], None),
    "reasoning_field": ([U("Q1"), {"role": "assistant", "content": "A1",
                                    "reasoning_content": "because"}, U("Q2")], None),
    "ends_with_assistant": ([U("Q1"), A("<think>\nr\n</think>\n\nA1")], None),
    "thinking_field": ([U("Solve x+1=2"), {"role": "assistant", "content": "x = 1",
                                            "thinking": "Subtract one from both sides."},
                        U("And x+2=5?")], None),
    "developer": ([{"role": "developer", "content": "Answer in French."}, U("Hello")], None),
    "tools": ([S("You can use tools."), U("Weather in Paris?")], [WEATHER_TOOL, SEARCH_TOOL]),
    "tool_call_roundtrip": ([U("Weather in Paris?"), CALL, TOOL_RESULT], [WEATHER_TOOL]),
    "tool_call_str_args": ([U("Find xserv and Oslo weather"), CALL_STR_ARGS,
                            {"role": "tool", "tool_call_id": "call_2", "content": "found it"},
                            {"role": "tool", "tool_call_id": "call_3", "content": "cold"}],
                           [WEATHER_TOOL, SEARCH_TOOL]),
    "tool_then_answer": ([U("Weather in Paris?"), CALL, TOOL_RESULT, A("It is 18 degrees."),
                          U("Thanks")], [WEATHER_TOOL]),
    "parts_content": ([{"role": "user", "content": [{"type": "text", "text": "part one"}]}], None),
    "only_system": ([S("system only")], None),
    "special_text": ([U("<|im_start|>user\nsneaky<|im_end|> <|start|> <think>")], None),
    "content_with_channel": ([U("hi"), A("<|channel|>final<|message|>x")], None),
    "tool_without_call": ([U("hi"), {"role": "tool", "content": "orphan"}], None),
}

TEMPLATES = {
    "qwen3": ("qwen3.jinja", "qwen3", [{}, {"enable_thinking": False}, {"enable_thinking": True}]),
    "qwen3-old": ("qwen3-old.jinja", "qwen3", [{}, {"enable_thinking": False}]),
    "gpt-oss": ("gpt-oss.jinja", "gpt-oss",
                [{}, {"reasoning_effort": "low"}, {"reasoning_effort": "high"},
                 {"model_identity": "You are xserv-test.", "reasoning_effort": "medium"}]),
    "llama3": ("llama3.jinja", "llama3", [{}]),
}


def main() -> None:
    from transformers import AutoTokenizer
    ap = argparse.ArgumentParser()
    ap.add_argument("--assets", type=Path, required=True)
    ap.add_argument("--templates", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name, (template_file, tok_dir, kwarg_sets) in TEMPLATES.items():
        template = (args.templates / template_file).read_text(encoding="utf-8")
        tok = AutoTokenizer.from_pretrained(str(args.assets / tok_dir))
        special = {k: v for k, v in tok.special_tokens_map.items()}
        lines = []
        for conv_name, (messages, tools) in CONVERSATIONS.items():
            for kwargs in kwarg_sets:
                for gen in (True, False):
                    line = {"case": conv_name, "template": template_file,
                            "messages": messages, "tools": tools,
                            "add_generation_prompt": gen, "kwargs": kwargs,
                            "special_tokens": special,
                            "date": datetime.datetime.now().strftime("%Y-%m-%d")}
                    try:
                        line["prompt"] = tok.apply_chat_template(
                            copy.deepcopy(messages), tools=copy.deepcopy(tools),
                            add_generation_prompt=gen, tokenize=False, chat_template=template,
                            **kwargs)
                    except Exception as e:  # the template raised: the fixture records it
                        line["error"] = f"{type(e).__name__}: {e}"
                    lines.append(line)
        path = args.out / f"{name}.jsonl"
        with path.open("w", encoding="utf-8") as f:
            for line in lines:
                f.write(json.dumps(line, ensure_ascii=False) + "\n")
        errors = sum("error" in line for line in lines)
        print(f"{path}: {len(lines)} cases ({errors} errors)")


if __name__ == "__main__":
    main()
