#!/usr/bin/env python3
"""Loads an `inkstone export hf` folder with the real transformers and compares its logits with inkstone's.

usage: check_with_transformers.py EXPORT_DIR LOGITS.safetensors [--chat-message TEXT]

LOGITS.safetensors is what `inkstone eval --token-ids ... --dump-logits` wrote (input_ids, logits). Prints one
JSON line: the largest absolute logit difference, the model class transformers chose, and with --chat-message the
ids of that message under the exported chat template (add_generation_prompt=True). Exit 0 when it ran.
"""
import argparse
import json

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("export_dir")
    parser.add_argument("logits")
    parser.add_argument("--chat-message")
    args = parser.parse_args()

    expected = load_file(args.logits)
    model = AutoModelForCausalLM.from_pretrained(args.export_dir, dtype=torch.float32)
    model.eval()
    with torch.no_grad():
        logits = model(expected["input_ids"]).logits
    result = {
        "model_class": type(model).__name__,
        "max_abs_diff": (logits - expected["logits"]).abs().max().item(),
    }
    if args.chat_message is not None:
        tokenizer = AutoTokenizer.from_pretrained(args.export_dir)
        messages = [{"role": "user", "content": args.chat_message}]
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
        result["chat_ids"] = list(ids)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
