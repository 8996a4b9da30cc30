"""An independent PyTorch check of the bidirectional plateau (docs/diffusion.md, "The bidirectional plateau").

A small pre-norm Transformer (learned positions, SwiGLU, RMSNorm) is trained on an inkstone token-shard folder
either causally (next token) or bidirectionally on masked positions with a mask rate drawn from U(0, 0.5) per
sequence (plain cross-entropy on the masked positions: BERT with a varying rate). Printed: the cross-entropy in
bits per byte every 50 steps, and the unigram entropy of the training split, the bar that using context clears.

    python bench/peers/bidirectional_plateau.py --data data/fortunes-bpe --mode masked
    python bench/peers/bidirectional_plateau.py --data data/fortunes-bpe --mode causal
"""
import argparse
import json
import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


def load_split(folder: Path, split: str, manifest: dict) -> np.ndarray:
    dtype = np.dtype(manifest["dtype"]).newbyteorder("<")
    parts = [np.fromfile(folder / shard["file"], dtype=dtype) for shard in manifest["splits"][split]["shards"]]
    return np.concatenate(parts).astype(np.int64)


class Block(nn.Module):
    def __init__(self, width: int, heads: int, hidden: int, causal: bool):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.attn_norm, self.mlp_norm = nn.RMSNorm(width), nn.RMSNorm(width)
        self.qkv = nn.Linear(width, 3 * width, bias=False)
        self.out = nn.Linear(width, width, bias=False)
        self.gate_up = nn.Linear(width, 2 * hidden, bias=False)
        self.down = nn.Linear(hidden, width, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        x = x + self.out(y.transpose(1, 2).reshape(b, t, d))
        gate, up = self.gate_up(self.mlp_norm(x)).chunk(2, -1)
        return x + self.down(F.silu(gate) * up)


class Model(nn.Module):
    def __init__(self, vocab: int, seq_len: int, width: int, layers: int, heads: int, causal: bool):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.positions = nn.Parameter(torch.zeros(seq_len, width))
        self.blocks = nn.ModuleList(Block(width, heads, 8 * width // 3, causal) for _ in range(layers))
        self.norm = nn.RMSNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        for p in self.parameters():
            nn.init.normal_(p, std=0.02) if p.dim() == 2 else None

    def forward(self, ids):
        x = self.embed(ids) + self.positions[: ids.size(1)]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--mode", choices=["masked", "causal"], required=True)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--tokens-per-step", type=int, default=2048)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    torch.set_num_threads(args.threads)

    manifest = json.loads((args.data / "manifest.json").read_text())
    train = load_split(args.data, "train", manifest)
    stats = manifest["splits"]["train"]
    bytes_per_token = stats["text_bytes"] / stats["tokens"]
    vocab = manifest["tokenizer"]["vocab_size"]
    mask_id = vocab  # one id past the tokenizer's: a row of its own
    counts = np.bincount(train, minlength=vocab) / len(train)
    unigram = -(counts[counts > 0] * np.log2(counts[counts > 0])).sum() / bytes_per_token
    print(f"unigram entropy of the training split: {unigram:.3f} bits/byte ({bytes_per_token:.3f} bytes/token)")

    causal = args.mode == "causal"
    model = Model(vocab + 1, args.seq_len, 192, 4, 6, causal)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    rows = args.tokens_per_step // args.seq_len
    for step in range(1, args.steps + 1):
        starts = rng.integers(0, len(train) - args.seq_len - 1, rows)
        window = torch.from_numpy(np.stack([train[s : s + args.seq_len + 1] for s in starts]))
        if causal:
            loss = F.cross_entropy(model(window[:, :-1]).flatten(0, 1), window[:, 1:].flatten())
        else:
            x = window[:, :-1]
            masked = torch.rand(x.shape) < 0.5 * torch.rand(rows, 1)
            loss = F.cross_entropy(model(torch.where(masked, mask_id, x))[masked], x[masked])
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if step % 50 == 0:
            print(f"step {step}: {loss.item() / math.log(2) / bytes_per_token:.3f} bits/byte", flush=True)


if __name__ == "__main__":
    main()
