"""The Python PyTorch peer of inkstone's backbone and objectives, written the way a PyTorch user would: the same
Qwen3-style model (pre-norm blocks, QK-norm, RoPE, SwiGLU, tied head; parameter names as inkstone's, so its
safetensors load as a state dict), next-token cross-entropy, and the uniform-diffusion NELBO."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def sdpa(q, k, v, mask, is_causal):
    if hasattr(F, "scaled_dot_product_attention"):  # torch 2.x
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0, is_causal=is_causal)
    return F._scaled_dot_product_attention(q, k, v, mask, 0.0, False, is_causal)[0]  # torch 1.13


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (normed * self.weight.float()).to(x.dtype)


def rope_table(positions, head_dim, theta):
    j = torch.arange(head_dim // 2, dtype=torch.float64, device=positions.device)
    omega = torch.pow(theta, -2.0 * j / head_dim)
    angles = positions.double().unsqueeze(-1) * omega
    return angles.cos().float().unsqueeze(1), angles.sin().float().unsqueeze(1)


def apply_rope(x, table):
    cos, sin = table
    a, b = x.float().chunk(2, -1)
    return torch.cat([a * cos - b * sin, b * cos + a * sin], -1).to(x.dtype)


class KVCache:
    """Preallocated keys and values per layer, and which key slots hold real tokens."""

    def __init__(self, n_layers, batch, capacity):
        self.batch, self.capacity, self.length = batch, capacity, 0
        self.keys, self.values = [None] * n_layers, [None] * n_layers
        self.key_real = None

    def record_key_real(self, key_padding, num_new):
        end = self.length + num_new
        if key_padding is not None and self.key_real is None:
            self.key_real = torch.ones(self.batch, self.capacity, dtype=torch.bool, device=key_padding.device)
        if self.key_real is None:
            return None
        if key_padding is not None:
            self.key_real[:, self.length:end] = key_padding
        else:
            self.key_real[:, self.length:end] = True
        return self.key_real[:, :end]

    def append(self, layer, k, v):
        if self.keys[layer] is None:
            self.keys[layer] = k.new_empty(self.batch, k.size(1), self.capacity, k.size(3))
            self.values[layer] = v.new_empty(self.batch, v.size(1), self.capacity, v.size(3))
        end = self.length + k.size(2)
        self.keys[layer][:, :, self.length:end] = k
        self.values[layer][:, :, self.length:end] = v
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]


def attention_mask(causal, query_start, num_queries, num_keys, key_real, device):
    """(bool mask [B or 1, 1, Tq, Tk] with True = may attend, or None; is_causal)."""
    if key_real is None:
        if not causal:
            return None, False
        if query_start == 0 and num_queries == num_keys:
            return None, True
        if query_start + num_queries == num_keys and num_queries == 1:
            return None, False
    query_slot = torch.arange(query_start, query_start + num_queries, device=device).unsqueeze(1)
    key_slot = torch.arange(num_keys, device=device).unsqueeze(0)
    allowed = key_slot <= query_slot if causal else torch.ones(num_queries, num_keys, dtype=torch.bool,
                                                              device=device)
    allowed = allowed.unsqueeze(0)
    if key_real is not None:
        allowed = (allowed & key_real.unsqueeze(1)) | (key_slot == query_slot).unsqueeze(0)
    return allowed.unsqueeze(1), False


class Attention(nn.Module):
    def __init__(self, d, n_heads, n_kv_heads, head_dim, eps, layer):
        super().__init__()
        self.layer, self.h, self.h_kv, self.hd = layer, n_heads, n_kv_heads, head_dim
        self.q_proj = nn.Linear(d, n_heads * head_dim, bias=False)
        self.k_proj = nn.Linear(d, n_kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(d, n_kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(n_heads * head_dim, d, bias=False)
        self.q_norm = RMSNorm(head_dim, eps)
        self.k_norm = RMSNorm(head_dim, eps)

    def forward(self, u, rope, mask, is_causal, cache):
        b, t, _ = u.shape
        q = self.q_norm(self.q_proj(u).view(b, t, self.h, self.hd)).transpose(1, 2)
        k = self.k_norm(self.k_proj(u).view(b, t, self.h_kv, self.hd)).transpose(1, 2)
        v = self.v_proj(u).view(b, t, self.h_kv, self.hd).transpose(1, 2)
        q, k = apply_rope(q, rope), apply_rope(k, rope)
        if cache is not None:
            k, v = cache.append(self.layer, k, v)
        if self.h > self.h_kv:
            k = k.repeat_interleave(self.h // self.h_kv, 1)
            v = v.repeat_interleave(self.h // self.h_kv, 1)
        y = sdpa(q, k, v, mask, is_causal)
        return self.o_proj(y.transpose(1, 2).reshape(b, t, self.h * self.hd))


class SwiGLU(nn.Module):
    def __init__(self, d, ffn):
        super().__init__()
        self.gate_proj = nn.Linear(d, ffn, bias=False)
        self.up_proj = nn.Linear(d, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, d, bias=False)

    def forward(self, u):
        return self.down_proj(F.silu(self.gate_proj(u)) * self.up_proj(u))


class Block(nn.Module):
    def __init__(self, dims, layer):
        super().__init__()
        d, eps = dims["d_model"], dims["norm_eps"]
        self.attn_norm = RMSNorm(d, eps)
        self.attn = Attention(d, dims["n_heads"], dims["n_kv_heads"], dims["head_dim"], eps, layer)
        self.mlp_norm = RMSNorm(d, eps)
        self.mlp = SwiGLU(d, dims["ffn_dim"])

    def forward(self, x, rope, mask, is_causal, cache):
        h = x + self.attn(self.attn_norm(x), rope, mask, is_causal, cache)
        return h + self.mlp(self.mlp_norm(h))


class Qwen3(nn.Module):
    """dims: vocab_size, d_model, n_layers, n_heads, n_kv_heads, head_dim, ffn_dim, norm_eps, rope_theta."""

    def __init__(self, dims):
        super().__init__()
        self.dims = dims
        self.embed = nn.Embedding(dims["vocab_size"], dims["d_model"])
        self.blocks = nn.ModuleList(Block(dims, i) for i in range(dims["n_layers"]))
        self.final_norm = RMSNorm(dims["d_model"], dims["norm_eps"])

    def forward(self, tokens, causal=True, positions=None, key_padding=None, cache=None):
        b, t = tokens.shape
        start = cache.length if cache is not None else 0
        if positions is None:
            positions = torch.arange(start, start + t, device=tokens.device).expand(b, t)
        key_real = cache.record_key_real(key_padding, t) if cache is not None else key_padding
        rope = rope_table(positions, self.dims["head_dim"], self.dims["rope_theta"])
        mask, is_causal = attention_mask(causal, start, t, start + t, key_real, tokens.device)
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, rope, mask, is_causal, cache)
        logits = F.linear(self.final_norm(x), self.embed.weight)
        if cache is not None:
            cache.length += t
        return logits.float()


def ar_loss(model, tokens):
    """Mean next-token cross-entropy of packed windows [B, T + 1]."""
    logits = model(tokens[:, :-1], causal=True)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), tokens[:, 1:].reshape(-1))


class UniformDiffusion:
    """Uniform-state diffusion with the log-linear schedule α_t = 1 − (1 − ε) t, its closed-form per-token NELBO,
    stratified t and the ELBO or SNR training weight (inkstone: objectives/uniform_diffusion.cpp)."""

    def __init__(self, support, schedule_eps=1e-3, t_min=1e-3, weighting="elbo"):
        self.support = support  # [V] bool
        self.ids = support.nonzero().squeeze(1)
        self.n = int(support.sum())
        self.eps, self.t_min, self.weighting = schedule_eps, t_min, weighting

    def alpha(self, t):
        return 1.0 - (1.0 - self.eps) * t

    def alpha_prime(self, t):
        return torch.full_like(t, -(1.0 - self.eps))

    def weight(self, t):
        a = self.alpha(t)
        rate = (self.alpha_prime(t) / (a * (1.0 - a))).abs()
        return (torch.ones_like(rate) if self.weighting == "snr" else rate) / rate

    def nelbo(self, logits, x, z, t):
        n = float(self.n)
        log_x_hat = torch.log_softmax(logits.masked_fill(~self.support, -math.inf), -1)
        a, a_prime = self.alpha(t), self.alpha_prime(t)
        log_1ma = torch.log1p(-a)
        log_x_bar = torch.logaddexp(log_x_hat + torch.log(n * a).unsqueeze(-1), log_1ma.unsqueeze(-1))
        s = log_x_bar.sum(-1) - (log_x_hat.size(-1) - self.n) * log_1ma
        log_x_bar_z = log_x_bar.gather(-1, z.unsqueeze(-1)).squeeze(-1)
        log_x_bar_x = log_x_bar.gather(-1, x.unsqueeze(-1)).squeeze(-1)
        same = z.eq(x)
        c_den = n * a + (1.0 - a)
        c = (1.0 - a) / c_den
        log_c = log_1ma - torch.log(c_den)
        t1 = n * (torch.where(same, 1.0 / c_den, 1.0 / (1.0 - a)) - torch.exp(-log_x_bar_z))
        spread = n * log_x_bar_z - s
        t2_same = c * spread + (n - 1.0) * c * log_c
        t2_moved = spread + (n * a / (1.0 - a)) * (log_x_bar_z - log_x_bar_x) - log_c / c
        return a_prime / (n * a) * (t1 - torch.where(same, t2_same, t2_moved))

    def weighted_loss(self, model, x, t, z):
        return (self.nelbo(model(z, causal=False), x, z, t) * self.weight(t)).mean()

    def loss(self, model, x):
        b = x.size(0)
        u = torch.remainder((torch.rand(b, dtype=torch.float64, device=x.device)
                             + torch.arange(b, dtype=torch.float64, device=x.device)) / b, 1.0)
        t = (self.t_min + (1.0 - self.t_min) * u).float().unsqueeze(1)
        replace = torch.rand(x.shape, device=x.device) < 1.0 - self.alpha(t)
        noise = self.ids[torch.randint(self.n, x.shape, device=x.device)]
        return self.weighted_loss(model, x, t, torch.where(replace, noise, x))
