#!/usr/bin/env python3
"""The Python PyTorch peer of inkstone_bench: the same modes and options, one JSON line per run. It starts from the
weights and inputs inkstone_bench wrote to <work>/share.safetensors (run that first), and in train mode refuses to
time anything unless its loss on the shared batch matches inkstone's."""
import argparse
import json
import math
import os
import resource
import sys
import time

import torch

sys.dont_write_bytecode = True  # keep the source tree clean
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qwen3_peer import KVCache, Qwen3, UniformDiffusion, ar_loss  # noqa: E402
from safetensors_reader import read_safetensors  # noqa: E402

EOS = 257  # the byte tokenizer's <|eos|>
LOSS_TOLERANCE = 1e-4  # relative; fp32 sums in another order differ by ~1e-7


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def load_shared(args, device):
    tensors, meta = read_safetensors(os.path.join(args.work, "share.safetensors"))
    dims = {k: int(meta[k]) for k in ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim",
                                      "ffn_dim")}
    dims.update(norm_eps=float(meta["norm_eps"]), rope_theta=float(meta["rope_theta"]))
    model = Qwen3(dims)
    weights = {k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")}
    model.load_state_dict(weights, strict=True)
    return model.to(device), tensors, meta


def maybe_compile(model, args, dynamic=False):
    return torch.compile(model, dynamic=dynamic) if args.compile else model


def adamw(model, lr=1e-3):
    """inkstone's defaults: betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on matrices only (not norms, embeddings)."""
    decay = [p for n, p in model.named_parameters() if "norm" not in n and "embed" not in n]
    no_decay = [p for n, p in model.named_parameters() if "norm" in n or "embed" in n]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95), eps=1e-8)


def run_train(args, device):
    model, tensors, meta = load_shared(args, device)
    batches = tensors["batches"].to(device)
    diffusion = UniformDiffusion(tensors["support"].to(device)) if args.objective == "uniform_diffusion" else None
    loss_fn = (lambda m, x: diffusion.loss(m, x)) if diffusion else ar_loss

    with torch.no_grad():
        x = batches[0]
        if diffusion:
            check = diffusion.weighted_loss(model, x, tensors["check.t"].to(device), tensors["check.z"].to(device))
        else:
            check = ar_loss(model, x)
    check, expected = check.item(), float(meta["check_loss"])
    if not abs(check - expected) <= LOSS_TOLERANCE * abs(expected):
        sys.exit(f"error: loss mismatch on the shared weights and batch: peer {check:.9g}, inkstone {expected:.9g} "
                 f"(relative tolerance {LOSS_TOLERANCE})")

    amp = torch.autocast("cuda", dtype=torch.bfloat16) if args.precision == "bf16" else None
    step_model = maybe_compile(model, args)
    optimizer = adamw(model)
    params = list(model.parameters())
    losses, done_at = [], []
    for step in range(args.warmup + args.steps):
        for group in optimizer.param_groups:
            group["lr"] = 1e-3
        optimizer.zero_grad()
        if amp:
            with amp:
                loss = loss_fn(step_model, batches[step])
        else:
            loss = loss_fn(step_model, batches[step])
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        loss_value, norm_value = loss.item(), norm.item()
        if math.isfinite(loss_value) and math.isfinite(norm_value):
            optimizer.step()
        losses.append(loss_value)
        done_at.append(time.perf_counter())
    seconds = done_at[-1] - done_at[args.warmup - 1]
    return {"tokens_per_s": args.steps * args.batch * args.seq_len / seconds, "seconds": seconds,
            "check_loss": check, "check_loss_inkstone": expected, "losses": losses,
            "params": sum(p.numel() for p in params)}


def exponential_race(probs, generator):
    u = torch.empty(probs.shape, dtype=torch.float64, device=probs.device).uniform_(0.0, 1.0, generator=generator)
    return (probs.double() / (-(u + 1e-10).log() + 1e-10)).argmax(-1)


def uniform_posterior(x_hat, z, alpha_t, alpha_s, support, n):
    at_z = torch.zeros_like(x_hat).scatter_(-1, z.unsqueeze(-1), 1.0)
    x_hat_z = x_hat.gather(-1, z.unsqueeze(-1))
    uniform = support.to(x_hat.dtype) * ((1.0 - alpha_t / alpha_s) * (1.0 - alpha_s) / n)
    num = (n * alpha_t * x_hat * at_z + (alpha_t / alpha_s - alpha_t) * at_z + (alpha_s - alpha_t) * x_hat
           + uniform)
    return num / (n * alpha_t * x_hat_z + (1.0 - alpha_t))


def sample_diffusion(model, support, batch, length, steps, seed, device, t_end=1e-5):
    """Ancestral sampling of uniform diffusion from the uniform prior, x̂ in float64, x̂ reused while z is unchanged
    (a model without time input), final draw from q(x | z, x̂)."""
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    ids = support.nonzero().squeeze(1)
    n = float(support.sum())
    alpha = lambda t: 1.0 - (1.0 - 1e-3) * t  # noqa: E731
    z = ids[torch.randint(len(ids), (batch, length), generator=generator, device=device)]
    x_hat, x_hat_input = None, None
    with torch.inference_mode():
        def denoise():
            nonlocal x_hat, x_hat_input
            if x_hat is not None and torch.equal(z, x_hat_input):
                return x_hat
            logits = model(z, causal=False).double().masked_fill(~support, -math.inf)
            x_hat, x_hat_input = logits.softmax(-1), z.clone()
            return x_hat

        for k in range(steps):
            t = 1.0 - (1.0 - t_end) * k / steps
            s = 1.0 - (1.0 - t_end) * (k + 1) / steps
            z = exponential_race(uniform_posterior(denoise(), z, alpha(t), alpha(s), support, n), generator)
        z = exponential_race(uniform_posterior(denoise(), z, alpha(t_end), 1.0, support, n), generator)
    return z.cpu()


def run_diffusion_sample(args, device):
    model, tensors, _ = load_shared(args, device)
    model.eval()
    model = maybe_compile(model, args)
    support = tensors["support"].to(device)
    sample_diffusion(model, support, args.batch, args.seq_len, 2, args.seed, device)
    start = time.perf_counter()
    sample_diffusion(model, support, args.batch, args.seq_len, args.denoise_steps, args.seed, device)
    seconds = time.perf_counter() - start
    return {"sequences_per_s": args.batch / seconds, "seconds": seconds}


def sample_autoregressive(model, prompts, num_samples, max_new, seed, use_cache, eos_id, device):
    """Left-padded prompts, prefill, then one token per step (with the cache) or the whole sequence again;
    temperature-1 multinomial draws. Returns (tokens [rows, steps] on the host, steps)."""
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    rows = len(prompts) * num_samples
    width = max(len(p) for p in prompts)
    tokens = torch.zeros(rows, width, dtype=torch.long)
    lengths = torch.empty(rows, dtype=torch.long)
    for r in range(rows):
        p = prompts[r // num_samples]
        tokens[r, width - len(p):] = torch.tensor(p)
        lengths[r] = len(p)
    slot = torch.arange(width).unsqueeze(0)
    first_real = (width - lengths).unsqueeze(1)
    tokens, real = tokens.to(device), (slot >= first_real).to(device)
    positions, lengths = (slot - first_real).clamp_min(0).to(device), lengths.to(device)
    with torch.inference_mode():
        drawn = torch.empty(rows, max_new, dtype=torch.long, device=device)
        drawn_log_probs = torch.empty(rows, max_new, device=device)
        finished = torch.zeros(rows, dtype=torch.bool, device=device)
        cache = KVCache(model.dims["n_layers"], rows, width + max_new) if use_cache else None
        sequence, key_padding = tokens, real
        logits = model(sequence, positions=positions, key_padding=key_padding, cache=cache)[:, -1]
        steps = 0
        while steps < max_new:
            log_probs = logits.float().log_softmax(-1)
            token = torch.multinomial(log_probs.exp(), 1, generator=generator).squeeze(-1)
            drawn[:, steps] = token
            drawn_log_probs[:, steps] = log_probs.gather(-1, token.unsqueeze(-1)).squeeze(-1)
            steps += 1
            if eos_id >= 0:
                finished |= token == eos_id
                if finished.all().item():
                    break
            if steps == max_new:
                break
            position = (lengths + (steps - 1)).unsqueeze(1)
            if use_cache:
                logits = model(token.unsqueeze(1), positions=position, cache=cache)[:, -1]
            else:
                sequence = torch.cat([sequence, token.unsqueeze(1)], 1)
                positions = torch.cat([positions, position], 1)
                key_padding = torch.cat([key_padding, torch.ones_like(token.unsqueeze(1), dtype=torch.bool)], 1)
                logits = model(sequence, positions=positions, key_padding=key_padding)[:, -1]
    return drawn[:, :steps].cpu(), drawn_log_probs[:, :steps].cpu(), steps


def run_decode(args, device):
    model, _, _ = load_shared(args, device)
    model.eval()
    model = maybe_compile(model, args, dynamic=True)
    use_cache = bool(args.kv_cache)
    sample_autoregressive(model, [[EOS]], args.batch, 8, args.seed, use_cache, -1, device)
    start = time.perf_counter()
    drawn, _, _ = sample_autoregressive(model, [[EOS]], args.batch, args.new_tokens, args.seed, use_cache, -1,
                                        device)
    seconds = time.perf_counter() - start
    return {"tokens_per_s": drawn.numel() / seconds, "seconds": seconds, "generated_tokens": drawn.numel()}


def rollouts(model, prompts, group, max_new, seed, device):
    """G completions per prompt ending at eos, laid out as right-padded prompt + completion rows with the policy
    mask and per-token log-probs, and decoded to text."""
    drawn, log_probs, steps = sample_autoregressive(model, prompts, group, max_new, seed, True, EOS, device)
    rows = drawn.size(0)
    completions = []
    for r in range(rows):
        row = drawn[r].tolist()
        completions.append(row[:row.index(EOS) + 1] if EOS in row else row)
    width = max(len(prompts[r // group]) + len(c) for r, c in enumerate(completions))
    tokens = torch.zeros(rows, width, dtype=torch.long)
    policy = torch.zeros(rows, width, dtype=torch.bool)
    token_log_probs = torch.zeros(rows, width)
    texts = []
    for r, c in enumerate(completions):
        p = prompts[r // group]
        tokens[r, :len(p)] = torch.tensor(p)
        tokens[r, len(p):len(p) + len(c)] = torch.tensor(c, dtype=torch.long)
        policy[r, len(p):len(p) + len(c)] = True
        token_log_probs[r, len(p):len(p) + len(c)] = log_probs[r, :len(c)]
        texts.append(bytes(t for t in c if t < 256).decode("utf-8", errors="replace"))
    batch = (tokens.to(device), policy.to(device), token_log_probs.to(device))
    return batch, texts, sum(len(c) for c in completions), steps


def run_rollout(args, device):
    model, tensors, _ = load_shared(args, device)
    model.eval()
    model = maybe_compile(model, args, dynamic=True)
    prompts = [[t for t in row.tolist() if t >= 0] for row in tensors["prompts"]]
    rollouts(model, prompts, args.group, 8, args.seed, device)
    start = time.perf_counter()
    _, _, generated, steps = rollouts(model, prompts, args.group, args.new_tokens, args.seed, device)
    seconds = time.perf_counter() - start
    return {"tokens_per_s": steps * len(prompts) * args.group / seconds, "generated_tokens_per_s": generated / seconds,
            "prompts_per_s": len(prompts) / seconds, "seconds": seconds, "decode_steps": steps}


def hf_model(tensors, meta, device, dtype):
    """The shared weights as transformers' Qwen3ForCausalLM (inkstone's parameter names mapped to the HF ones, as
    `inkstone export hf` writes them); the head is tied to the embedding."""
    from transformers import Qwen3Config, Qwen3ForCausalLM
    config = Qwen3Config(vocab_size=int(meta["vocab_size"]), hidden_size=int(meta["d_model"]),
                         intermediate_size=int(meta["ffn_dim"]), num_hidden_layers=int(meta["n_layers"]),
                         num_attention_heads=int(meta["n_heads"]), num_key_value_heads=int(meta["n_kv_heads"]),
                         head_dim=int(meta["head_dim"]), rms_norm_eps=float(meta["norm_eps"]),
                         rope_theta=float(meta["rope_theta"]), tie_word_embeddings=True,
                         max_position_embeddings=4096, attention_bias=False)
    renames = [("embed.", "model.embed_tokens."), ("final_norm.", "model.norm."), ("blocks.", "model.layers."),
               ("attn_norm.", "input_layernorm."), ("mlp_norm.", "post_attention_layernorm."), ("attn.", "self_attn.")]
    weights = {}
    for name, value in tensors.items():
        if not name.startswith("model."):
            continue
        name = name[len("model."):]
        for old, new in renames:
            name = name.replace(old, new)
        weights[name] = value
    model = Qwen3ForCausalLM(config)
    missing, unexpected = model.load_state_dict(weights, strict=False)
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise SystemExit(f"error: HF weights do not match: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    return model.to(device=device, dtype=dtype).eval()


def run_hf_generate(args, device):
    """Rollouts with transformers' `generate`: G samples per prompt (left-padded), temperature 1, every row made to
    run all new tokens (min_new_tokens), KV cache on, in the precision asked."""
    tensors, meta = read_safetensors(os.path.join(args.work, "share.safetensors"))
    dtype = torch.bfloat16 if "bf16" in (args.precision, args.param_dtype) else torch.float32
    model = hf_model(tensors, meta, device, dtype)
    prompts = [[t for t in row.tolist() if t >= 0] for row in tensors["prompts"]]
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts], device=device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)

    def generate(new_tokens):
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0,
                                 top_p=1.0, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                 num_return_sequences=args.group, pad_token_id=0, eos_token_id=EOS)
        sync(device)
        return out

    generate(8)
    start = time.perf_counter()
    out = generate(args.new_tokens)
    seconds = time.perf_counter() - start
    steps = out.size(1) - width
    return {"tokens_per_s": steps * out.size(0) / seconds, "prompts_per_s": len(prompts) / seconds, "seconds": seconds,
            "decode_steps": steps}


def run_peak(args, device):
    """Measured dense bf16 matmul throughput (FLOP/s), the denominator of MFU."""
    n = 8192
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    sync(device)
    reps = 20
    start = time.perf_counter()
    for _ in range(reps):
        a @ b
    sync(device)
    return {"bf16_flops_per_s": 2 * n ** 3 * reps / (time.perf_counter() - start)}


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("mode", choices=["train", "diffusion-sample", "decode", "rollout", "peak"])
    p.add_argument("--work", default="bench-work")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--param-dtype", default="fp32", choices=["fp32", "bf16"],
                   help="--hf-generate: the model's dtype (inkstone_bench: its weights' dtype while sampling)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--compile", action="store_true", help="torch.compile the model (torch 2.x)")
    p.add_argument("--hf-generate", action="store_true",
                   help="rollout: Hugging Face transformers' generate on the same weights instead of the eager loop")
    for name, default in [("d-model", 64), ("layers", 2), ("heads", 4), ("kv-heads", 4), ("seq-len", 64),
                          ("batch", 8), ("steps", 10), ("warmup", 3), ("denoise-steps", 64), ("new-tokens", 512),
                          ("kv-cache", 1), ("group", 8), ("prompts", 4), ("fused", 1), ("vocab", 0),
                          ("prompt-tokens", 0)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--objective", default="ar", choices=["ar", "uniform_diffusion"])
    p.add_argument("--decode", default="auto", choices=["auto", "growing", "fixed", "graph"])
    # --fused and --decode select inkstone's diffusion step and decode step; the peer's loops are always the eager
    # ones. --vocab sizes inkstone's model; the peer reads the vocabulary (and --prompt-tokens' prompts) from the
    # shared weights.
    args = p.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    run = {"train": run_train, "diffusion-sample": run_diffusion_sample, "decode": run_decode,
           "rollout": run_hf_generate if args.hf_generate else run_rollout, "peak": run_peak}[args.mode]
    result = run(args, device)
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    result["threads"] = torch.get_num_threads()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
