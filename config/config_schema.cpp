// The one place where every config key is declared, with its default, documentation and allowed values.
// Keys whose values a registry above this library owns (objective.name, model.mixer_pattern and ffn_pattern,
// sample.diffusion_sampler and noise_removal) keep only their default here, as data: the registries check the
// values, document them (tools/config_reference.cpp), and a test keeps each default a registered name.
#include "config/config_schema.h"

namespace inkstone {
namespace {

struct FieldBuilder {
  FieldSpec spec;
  FieldBuilder& range(double lo, double hi) {
    spec.min = lo;
    spec.max = hi;
    return *this;
  }
  // (0, hi]: zero would silently do nothing (a learning rate) or divide by zero deep in a run (an init std).
  FieldBuilder& positive_up_to(double hi) {
    spec.min = 0;
    spec.min_exclusive = true;
    spec.max = hi;
    return *this;
  }
  FieldBuilder& at_least(double lo) {
    spec.min = lo;
    return *this;
  }
  FieldBuilder& one_of(std::vector<std::string> values) {
    spec.choices = std::move(values);
    return *this;
  }
  FieldBuilder& no_empty_entries() {
    spec.no_empty_entries = true;
    return *this;
  }
};

template <typename Section, typename T, typename D>
FieldBuilder field(const char* section, const char* key, Section Config::*sec, T Section::*member, D def,
                   const char* doc) {
  FieldSpec s;
  s.section = section;
  s.key = key;
  s.default_value = T(def);
  s.doc = doc;
  s.slot = [sec, member](Config& c) -> FieldSlot { return &((c.*sec).*member); };
  return FieldBuilder{std::move(s)};
}

// A key parsed into an enum: its allowed values are the enum's names (config.h, ChoiceNames).
template <typename Section, typename Choice>
FieldBuilder choice(const char* section, const char* key, Section Config::*sec, Choice Section::*member, Choice def,
                    const char* doc) {
  FieldSpec s;
  s.section = section;
  s.key = key;
  s.default_value = std::string(choice_name(def));
  s.doc = doc;
  const auto& names = ChoiceNames<Choice>::names;
  s.choices.assign(names.begin(), names.end());
  s.slot = [sec, member](Config& c) -> FieldSlot {
    Choice* value = &((c.*sec).*member);
    return ChoiceSlot{[value] { return static_cast<size_t>(*value); },
                      [value](size_t index) { *value = static_cast<Choice>(index); }};
  };
  return FieldBuilder{std::move(s)};
}

#define INKSTONE_FIELD(sec, key, def, doc) \
  field(#sec, #key, &Config::sec, &decltype(Config::sec)::key, def, doc)
#define INKSTONE_CHOICE_FIELD(sec, key, def, doc) \
  choice(#sec, #key, &Config::sec, &decltype(Config::sec)::key, def, doc)

std::vector<FieldSpec> build_schema() {
  using Strings = std::vector<std::string>;
  const double inf = 1e300;
  std::vector<FieldBuilder> f = {
      INKSTONE_FIELD(run, name, "run", "Run name; the default run folder is runs/<name>."),
      INKSTONE_FIELD(run, seed, int64_t{1234}, "Seed for weights, sampling and (unless data.seed) data order.")
          .at_least(0),
      INKSTONE_FIELD(run, run_dir, "", "Run folder (metrics, checkpoints, resolved config); empty: runs/<name>."),
      INKSTONE_CHOICE_FIELD(run, device, DeviceChoice::automatic, "auto picks CUDA when present."),
      INKSTONE_CHOICE_FIELD(run, precision, FloatFormat::fp32,
                            "bf16: the forward runs under bf16 autocast on CUDA (matmuls in bf16, softmax and norms "
                            "in fp32); CPU runs ignore it."),
      INKSTONE_CHOICE_FIELD(run, param_dtype, FloatFormat::fp32,
                            "bf16: weights, gradients and activations are stored in bf16 on any device and AdamW "
                            "steps fp32 master copies with fp32 moments (sharded with distributed.zero_stage >= 1)."),
      INKSTONE_FIELD(run, threads, int64_t{1},
                     "libtorch intra-op threads; 1 is fastest for small models on 2 cores (measured).")
          .range(1, 1024),
      INKSTONE_FIELD(run, tf32, false,
                     "CUDA: fp32 matmuls and convolutions run on TF32 tensor cores (inputs rounded to a 10-bit "
                     "mantissa, fp32 accumulation; several times faster on Ampere and later). Off: exact fp32."),

      INKSTONE_CHOICE_FIELD(model, arch, Architecture::qwen3,
                            "Backbone family, the Hugging Face architecture an export writes: qwen3 (q/k norm), qwen2 "
                            "(q/k/v biases), llama, mistral. The blocks follow the keys below, not this name."),
      INKSTONE_FIELD(model, vocab_size, int64_t{0}, "0: the tokenizer's vocabulary size.").at_least(0),
      INKSTONE_FIELD(model, d_model, int64_t{256}, "Residual stream width.").range(8, 65536),
      INKSTONE_FIELD(model, n_layers, int64_t{4}, "Number of blocks.").range(1, 1024),
      INKSTONE_FIELD(model, n_heads, int64_t{4}, "Query heads.").range(1, 1024),
      INKSTONE_FIELD(model, n_kv_heads, int64_t{2}, "Key/value heads (GQA); must divide n_heads.").range(1, 1024),
      INKSTONE_FIELD(model, head_dim, int64_t{0}, "0: d_model / n_heads.").range(0, 4096),
      INKSTONE_FIELD(model, ffn_dim, int64_t{0}, "SwiGLU width; 0: 8/3 d_model rounded up to a multiple of 64.")
          .range(0, 1 << 20),
      INKSTONE_FIELD(model, max_seq_len, int64_t{256}, "Longest sequence (RoPE table, KV cache).")
          .range(1, 1 << 20),
      INKSTONE_FIELD(model, rope_theta, 10000.0, "RoPE base (Qwen3 uses 1e6 at long context).").range(1, inf),
      INKSTONE_FIELD(model, norm_eps, 1e-6, "RMSNorm epsilon.").positive_up_to(1),
      INKSTONE_FIELD(model, qk_norm, true, "Per-head RMSNorm of q and k before RoPE (Qwen3; Llama and Qwen2 have none)."),
      INKSTONE_FIELD(model, attention_sink, false,
                     "Off-by-one softmax in every attention layer: exp(s_j) / (1 + sum_i exp(s_i)) (Sumi). On "
                     "libtorch 2.x a zero key and value through the fused SDPA kernels; 1.13 the explicit path."),
      INKSTONE_CHOICE_FIELD(model, attention_bias, AttentionBias::none,
                            "Attention projection biases: none, qkv (Qwen2) or all (q, k, v and o; Llama's "
                            "attention_bias)."),
      INKSTONE_CHOICE_FIELD(model, rope_scaling, RopeScalingKind::none,
                            "RoPE frequency scaling: none, linear (positions / factor) or llama3 (long wavelengths / factor, "
                            "short ones kept, a smooth blend between)."),
      INKSTONE_FIELD(model, rope_scaling_factor, 1.0, "linear, llama3: the scaling factor.").range(1, 1e6),
      INKSTONE_FIELD(model, rope_low_freq_factor, 1.0, "llama3: wavelengths above original_max_len / this are scaled.")
          .range(1e-6, 1e6),
      INKSTONE_FIELD(model, rope_high_freq_factor, 4.0, "llama3: wavelengths below original_max_len / this are kept.")
          .range(1e-6, 1e6),
      INKSTONE_FIELD(model, rope_original_max_len, int64_t{8192}, "llama3: the context the base frequencies served.")
          .range(1, 1 << 24),
      INKSTONE_FIELD(model, tie_embeddings, true, "Share the token embedding with the output head."),
      INKSTONE_FIELD(model, init, "normal", "Weight init scheme by its registered name (models/init.cpp), e.g. normal "
                     "(fixed init_std) or gamma (std = fan_in^-gamma)."),
      INKSTONE_FIELD(model, init_std, 0.02, "Std of the normal init.").positive_up_to(1),
      INKSTONE_FIELD(model, init_gamma, 1.0, "init = gamma: every matrix N(0, fan_in^(-2 gamma)); 0.5 is LeCun.")
          .range(0, 4),
      INKSTONE_FIELD(model, init_gamma_embedding, -1.0, "init = gamma: gamma of the token embedding; < 0: init_gamma.")
          .range(-1, 4),
      INKSTONE_FIELD(model, init_gamma_attention, -1.0, "init = gamma: gamma of W_q, W_k, W_v, W_o; < 0: init_gamma.")
          .range(-1, 4),
      INKSTONE_FIELD(model, init_gamma_mlp, -1.0, "init = gamma: gamma of the feed-forward; < 0: init_gamma.")
          .range(-1, 4),
      INKSTONE_CHOICE_FIELD(model, residual, ResidualMode::plain,
                            "Residual routing: plain sum; attnres / mhar: depth softmax over all earlier sublayer outputs "
                            "(1 / residual_heads heads); block_attnres: over block sums; delta: plain plus a zero-gated "
                            "routed term (identity at init)."),
      INKSTONE_FIELD(model, residual_heads, int64_t{1}, "Routing heads H (mhar, block_attnres, delta); divides d_model.")
          .range(1, 4096),
      INKSTONE_FIELD(model, residual_blocks, int64_t{4},
                     "Blocks of layers N_b (block_attnres; delta with residual_delta = block).")
          .range(1, 1024),
      INKSTONE_CHOICE_FIELD(model, residual_delta, DeltaSources::sublayer,
                            "delta sources: every sublayer output, or one per block."),
      INKSTONE_CHOICE_FIELD(model, residual_delta_gate, DeltaGate::zero,
                            "delta gate: zero (learned scalar from 0, the exact identity at init), sigmoid (sigma(a - 2)), "
                            "sigmoid_token (sigma(<w, p_t> + a - 2) per token), none (1)."),
      INKSTONE_CHOICE_FIELD(model, width_profile, WidthProfile::uniform,
                            "Layer widths: uniform d_model, or geometric x-shape with the same parameter count."),
      INKSTONE_FIELD(model, width_bottleneck_ratio, 0.3, "geometric: narrowest width / d_model.").range(0.01, 1),
      INKSTONE_FIELD(model, width_bottleneck_layer, int64_t{0}, "geometric: the narrowest layer (1-based); 0: 3/4 of the depth.")
          .range(0, 1024),
      INKSTONE_FIELD(model, width_quantum, int64_t{32}, "geometric: widths are multiples of this.").range(1, 4096),
      INKSTONE_CHOICE_FIELD(model, width_expand, WidthExpand::carry_forward,
                            "geometric: widening fills new coordinates from earlier hidden states, else zeros."),
      INKSTONE_FIELD(model, time_conditioning, false, "adaLN-Zero conditioning on the noise level (diffusion)."),
      INKSTONE_FIELD(model, cond_dim, int64_t{128}, "Width of the time-conditioning vector.").range(1, 65536),
      INKSTONE_FIELD(model, mixer_pattern, "A",
                     "Token mixer per layer, tiled over n_layers: A attention, C gated short conv (LFM2); "
                     "spaces ignored, e.g. \"CCA\" with 18 layers gives 6 attention + 12 conv."),
      INKSTONE_FIELD(model, conv_kernel, int64_t{3}, "Short conv taps (causal; centred under a bidirectional mask).")
          .range(1, 64),
      INKSTONE_FIELD(model, qkv_conv, false, "Depthwise residual conv over time on [q | k | v] before RoPE."),
      INKSTONE_FIELD(model, qkv_conv_kernel, int64_t{3}, "QKV conv taps.").range(1, 64),
      INKSTONE_CHOICE_FIELD(model, qkv_conv_position, QkvConvPosition::before_norm,
                            "QKV conv before or after the per-head QK-norm (Canon-B normalises first)."),
      INKSTONE_FIELD(model, qkv_conv_zero_init, true, "Zero QKV conv taps: the model starts as the base model."),
      INKSTONE_FIELD(model, ffn_pattern, "D",
                     "Feed-forward per layer, tiled over n_layers: D dense SwiGLU, M mixture of experts."),
      INKSTONE_FIELD(model, moe_experts, int64_t{8}, "Routed experts per MoE layer.").range(1, 4096),
      INKSTONE_FIELD(model, moe_top_k, int64_t{2}, "Experts per token.").range(1, 4096),
      INKSTONE_FIELD(model, moe_expert_ffn_dim, int64_t{0}, "SwiGLU width of one expert; 0: the dense width.")
          .range(0, 1 << 20),
      INKSTONE_FIELD(model, moe_shared_experts, int64_t{0}, "Always-on experts beside the routed ones.")
          .range(0, 64),
      INKSTONE_CHOICE_FIELD(model, moe_router, MoeRouter::softmax,
                            "softmax: over all experts, top-k renormalised (Qwen3-MoE); sigmoid: DeepSeek-V3."),
      INKSTONE_FIELD(model, moe_route_scale, 1.0, "Factor on the routing weights (DeepSeek-V3: 2.5).")
          .range(0, 100),
      INKSTONE_FIELD(model, moe_aux_loss_coef, 1e-2, "Switch balance loss alpha E sum_i f_i P_i; 0: off.")
          .range(0, 10),
      INKSTONE_FIELD(model, moe_z_loss_coef, 1e-3, "Router z-loss coefficient; 0: off.").range(0, 10),
      INKSTONE_FIELD(model, moe_bias_update_rate, 0.0,
                     "Aux-loss-free balancing: selection bias step per optimizer step (DeepSeek-V3: 1e-3); 0: off.")
          .range(0, 1),
      INKSTONE_FIELD(model, hidden_streams, int64_t{1},
                     "Hidden decoding: n embedding tables encode each token n times, interleaved; the loss reads "
                     "the last copy. 1: off.")
          .range(1, 64),
      INKSTONE_CHOICE_FIELD(model, hidden_positions, HiddenPositions::interleaved,
                            "Hidden decoding RoPE positions: consecutive over the n·T slots, or one per token."),
      INKSTONE_FIELD(model, hidden_attention, "X",
                     "Hidden decoding attention per layer, tiled over n_layers: X cross-stream (causal over the "
                     "interleaved order, the model cards' plain Transformer), L stream-local (each copy attends to "
                     "its own stream only), e.g. \"LLLX\"."),
      INKSTONE_FIELD(model, hidden_local_sees_token, false,
                     "Hidden decoding: stream-local layers also see the earlier copies of their own token."),
      INKSTONE_FIELD(model, lora_rank, int64_t{0},
                     "LoRA: adapters of this rank on the projections of model.lora_targets train while every other "
                     "weight stays frozen (usually with train.init_checkpoint); 0: off.")
          .range(0, 4096),
      INKSTONE_FIELD(model, lora_alpha, 16.0, "LoRA: the adapters' output is scaled by lora_alpha / lora_rank.")
          .positive_up_to(1e6),
      INKSTONE_FIELD(model, lora_targets, Strings{},
                     "LoRA: the projections that get adapters, by name (attention: q_proj, k_proj, v_proj, o_proj; "
                     "SwiGLU and MoE experts: gate_proj, up_proj, down_proj); empty: all of them.")
          .no_empty_entries(),

      INKSTONE_FIELD(objective, name, "ar",
                     "Training objective by its registered name (an unknown name is refused with the known ones)."),
      INKSTONE_FIELD(objective, z_loss, 0.0,
                     "ar, diffusion: add this times (log sum exp logits)^2 per token to the loss (PaLM's z-loss; "
                     "Sumi: 1e-5).")
          .range(0, 1),
      INKSTONE_FIELD(objective, logit_chunk_mib, int64_t{0},
                     "MiB of float32 logits per row chunk of the vocabulary loss: the head and the loss run chunk by "
                     "chunk, so no more than one chunk's [rows, vocab] logits is ever alive. 0: 256 on CUDA, 16 on "
                     "the CPU (measured fastest there).")
          .range(0, 1 << 20),

      INKSTONE_CHOICE_FIELD(diffusion, schedule, NoiseScheduleKind::log_linear,
                            "Noise schedule alpha_t shared by noising, loss and sampler."),
      INKSTONE_FIELD(diffusion, schedule_eps, 1e-3, "log_linear, cosine: alpha at t = 1.").range(1e-9, 0.5),
      INKSTONE_FIELD(diffusion, log_snr_min, -9.0, "log_snr: log-SNR at t = 1 (alpha = sigmoid(lambda)).")
          .range(-50, 50),
      INKSTONE_FIELD(diffusion, log_snr_max, 9.0, "log_snr: log-SNR at t = 0.").range(-50, 50),
      INKSTONE_FIELD(diffusion, t_min, 1e-3, "Smallest time drawn for training and eval (never t = 0).")
          .range(1e-6, 0.5),
      INKSTONE_CHOICE_FIELD(diffusion, time_sampling, TimeSampling::stratified,
                            "stratified: one t per stratum of the global batch."),
      INKSTONE_FIELD(diffusion, time_mix, 0.0,
                     "Fraction of sequences with an independent t per token, the rest one t per sequence (Sumi: "
                     "0.5; needs no time conditioning).")
          .range(0, 1),
      INKSTONE_CHOICE_FIELD(diffusion, weighting, LossWeighting::elbo,
                            "Training loss: elbo, or snr (the ELBO without |dlambda/dt|)."),
      INKSTONE_FIELD(diffusion, max_weight, 0.0, "Clip the small-t loss weight |dlambda/dt| to this; 0: none.")
          .at_least(0),
      INKSTONE_FIELD(diffusion, is_weight, 1.0,
                     "Uniform and mixture noise: weight of the IS-divergence term next to the KL term in the "
                     "training loss (1: the ELBO's; GIDD's beta_IS).")
          .range(0, 100),
      INKSTONE_FIELD(diffusion, mixture_uniform, 0.1,
                     "Mixture noise (GIDD): the fraction p_u of tokens that are uniform draws when half the signal "
                     "is gone; the rest of the noise is the mask.")
          .positive_up_to(0.99),
      INKSTONE_FIELD(diffusion, mixture_gamma, 1.0,
                     "Mixture noise (GIDD): the exponent gamma of the uniform share's bump c = B (a (1 - a))^(gamma/2).")
          .positive_up_to(8),
      INKSTONE_FIELD(diffusion, attention_anneal_steps, int64_t{0},
                     "AR -> diffusion adaptation (DiffuLLaMA): over the first N steps each query also sees a random "
                     "share s/N of the later keys, so attention opens from causal to bidirectional; 0: off.")
          .at_least(0),
      INKSTONE_FIELD(diffusion, shifted_outputs, false,
                     "AR -> diffusion adaptation (Dream): the output at position i predicts token i + 1, as the AR "
                     "head the model starts from did; position 0 and a packed document's first token read their "
                     "own."),
      INKSTONE_FIELD(diffusion, block_size, int64_t{0},
                     "Block diffusion (BD3-LM): > 0 trains each block of this many tokens on noise of its own t, "
                     "seeing the clean blocks before it (a block-causal mask over [x_0 | x_t]); 0: off.")
          .at_least(0),
      INKSTONE_FIELD(diffusion, noise_specials, false,
                     "Uniform noise also emits special ids (never pad or mask); default: text ids and eos."),

      INKSTONE_FIELD(data, path, "", "Folder made by `inkstone data prepare` (manifest.json, shards)."),
      INKSTONE_FIELD(data, mixture, Strings{},
                     "Several prepared folders as \"folder=weight\", training windows drawn by weight, validation "
                     "reported per folder (docs/training.md, \"Data mixtures\"); replaces data.path."),
      INKSTONE_FIELD(data, tokenizer, "", "Tokenizer spec; empty: the one stored with the data."),
      INKSTONE_FIELD(data, seq_len, int64_t{256}, "Tokens per training window.").range(2, 1 << 20),
      INKSTONE_CHOICE_FIELD(data, mode, WindowMode::pack,
                            "pack: windows across documents; pad: one document per window."),
      INKSTONE_FIELD(data, document_mask, false,
                     "pack: a token attends to (and convolves over) its own document only; documents part at eos "
                     "(AR: the eos opens the next one, diffusion: it ends its own)."),
      INKSTONE_FIELD(data, seed, int64_t{-1},
                     "Seed of the training windows' order; -1: run.seed (which also seeds the weights).")
          .at_least(-1),
      INKSTONE_FIELD(data, inject_text, "",
                     "Twin runs: the text whose tokens replace the start of one training row at data.inject_step."),
      INKSTONE_FIELD(data, inject_step, int64_t{0},
                     "Twin runs: the update (1-based) whose batch carries data.inject_text; 0: never.")
          .at_least(0),
      INKSTONE_FIELD(data, inject_row, int64_t{0}, "Twin runs: the row of that global batch that carries it.")
          .at_least(0),

      INKSTONE_FIELD(optim, learning_rate, 1e-3, "Peak AdamW learning rate.").positive_up_to(10),
      INKSTONE_FIELD(optim, beta1, 0.9, "AdamW beta1.").range(0, 1),
      INKSTONE_FIELD(optim, beta2, 0.95, "AdamW beta2.").range(0, 1),
      INKSTONE_FIELD(optim, eps, 1e-8, "AdamW epsilon.").range(0, 1),
      INKSTONE_FIELD(optim, weight_decay, 0.1, "Decoupled weight decay.").range(0, 10),
      INKSTONE_FIELD(optim, no_decay, (Strings{"norm", "bias", "embedding"}),
                     "Parameter groups without weight decay (norm, bias, embedding)."),
      INKSTONE_FIELD(optim, grad_clip, 1.0, "Clip the global gradient norm to this; 0: no clipping.")
          .range(0, inf),

      INKSTONE_CHOICE_FIELD(schedule, kind, LrScheduleKind::cosine, "Learning-rate schedule after warmup."),
      INKSTONE_FIELD(schedule, warmup_steps, int64_t{100}, "Linear warmup steps.").at_least(0),
      INKSTONE_FIELD(schedule, min_lr_ratio, 0.1, "Final learning rate / peak (cosine and wsd).").range(0, 1),
      INKSTONE_FIELD(schedule, decay_fraction, 0.2, "wsd: fraction of all steps spent in the final decay.")
          .range(0, 1),

      INKSTONE_FIELD(train, init_checkpoint, "",
                     "Run, checkpoint or `import hf` folder whose weights a run on token windows starts from, with a "
                     "fresh optimizer and schedule; [model] keys left out take the checkpoint's values "
                     "(docs/training.md, \"Starting from a checkpoint\"). Empty: fresh weights."),
      INKSTONE_FIELD(train, steps, int64_t{1000}, "Optimizer steps.").at_least(1),
      INKSTONE_FIELD(train, batch_size, int64_t{16}, "Sequences per optimizer step (all micro-batches).")
          .at_least(1),
      INKSTONE_FIELD(train, grad_accum, int64_t{1}, "Micro-batches per step; must divide batch_size.")
          .at_least(1),
      INKSTONE_FIELD(train, log_interval, int64_t{10}, "Steps between training metric lines.").at_least(1),
      INKSTONE_FIELD(train, eval_interval, int64_t{200}, "Steps between validations; 0: only at the end.")
          .at_least(0),
      INKSTONE_FIELD(train, eval_batches, int64_t{0}, "Validation batches; 0: the whole validation split.")
          .at_least(0),
      INKSTONE_FIELD(train, checkpoint_interval, int64_t{500}, "Steps between checkpoints; 0: only at the end.")
          .at_least(0),
      INKSTONE_FIELD(train, keep_checkpoints, int64_t{3}, "Checkpoints kept (oldest pruned).").at_least(1),
      INKSTONE_FIELD(train, max_bad_steps, int64_t{5},
                     "Consecutive skipped updates (non-finite, or spikes) that stop the run.")
          .at_least(1),
      INKSTONE_FIELD(train, spike_window, int64_t{100},
                     "Updates the spike guard compares an update's loss and gradient norm with.")
          .range(2, 100000),
      INKSTONE_FIELD(train, spike_loss_z, 0.0,
                     "Skip an update whose loss is more than this many standard deviations above the window's mean "
                     "(0: off).")
          .range(0, 1e6),
      INKSTONE_FIELD(train, spike_grad_z, 0.0,
                     "Skip an update whose gradient norm is more than this many standard deviations above the "
                     "window's mean (0: off).")
          .range(0, 1e6),
      INKSTONE_FIELD(train, activation_checkpointing, int64_t{0},
                     "Recompute every k-th block's forward in backward (1: every block); 0: keep all activations.")
          .at_least(0),

      INKSTONE_FIELD(distributed, timeout_s, 300.0,
                     "Seconds a rank waits for the others (rendezvous, any collective) before failing.")
          .range(1, 86400),
      INKSTONE_FIELD(distributed, bucket_mb, 25.0, "Gradient all-reduce bucket size in MiB.").range(0.001, 4096),
      INKSTONE_FIELD(distributed, zero_stage, int64_t{0},
                     "ZeRO: 0 none; 1 AdamW state sharded over the ranks; 2 gradients reduced to their owner too; "
                     "3 block weights gathered per use too.")
          .range(0, 3),

      INKSTONE_FIELD(sample, num, int64_t{4}, "Samples per prompt.").at_least(1),
      INKSTONE_FIELD(sample, max_new_tokens, int64_t{128}, "Tokens to generate.").at_least(1),
      INKSTONE_FIELD(sample, temperature, 1.0, "Softmax temperature; 0: greedy.").range(0, 100),
      INKSTONE_FIELD(sample, top_k, int64_t{0}, "Keep the k most likely tokens; 0: all.").at_least(0),
      INKSTONE_FIELD(sample, top_p, 1.0, "Nucleus mass; 1: all.").positive_up_to(1),
      INKSTONE_FIELD(sample, seed, int64_t{0}, "Sampling seed.").at_least(0),
      INKSTONE_FIELD(sample, prompt, "", "Default prompt text."),
      INKSTONE_FIELD(sample, steps, int64_t{64}, "Diffusion: denoising steps.").at_least(1),
      INKSTONE_FIELD(sample, block_size, int64_t{0},
                     "Diffusion: generate block by block (semi-autoregressive), each block conditioned on the "
                     "committed ones and the text ending at the first end of text; 0: the run's "
                     "diffusion.block_size, and the whole window at once when that is 0 too.")
          .at_least(0),
      INKSTONE_FIELD(sample, diffusion_sampler, "ancestral",
                     "Diffusion sampler: posterior steps on the time grid, steps that commit the surest positions, "
                     "or those with an end-of-text anchor after the window (Sumi's); docs/diffusion.md, "
                     "\"Samplers\"."),
      INKSTONE_FIELD(sample, noise_removal, "ancestral",
                     "Diffusion final step: a posterior draw, the argmax, or none; docs/diffusion.md, \"Final "
                     "step\"."),
      INKSTONE_FIELD(sample, min_p, 0.0,
                     "Keep tokens at least min_p times as likely as the most likely one (diffusion: on x̂); 0: off.")
          .range(0, 0.999),
      INKSTONE_FIELD(sample, confidence_threshold, 0.0,
                     "Diffusion confidence and adaptive samplers: each step also commits every open position whose "
                     "score reaches this (parallel decoding, docs/diffusion.md, \"Threshold decoding\"); 0: off.")
          .range(0, 1),
      INKSTONE_FIELD(sample, approximate_cache, false,
                     "Diffusion in blocks with a model trained on whole windows: compute the context's keys and "
                     "values once per block (docs/diffusion.md, \"Approximate prefix cache\")."),
      INKSTONE_FIELD(sample, noisy_suffix, false,
                     "Diffusion in blocks with a model trained on whole windows: the blocks still to come are present "
                     "as noise while a block is denoised (LLaDA's canvas); with the approximate cache their keys and "
                     "values are cached too (docs/diffusion.md, \"Noisy suffix and the dual cache\")."),
      INKSTONE_FIELD(sample, batch_size, int64_t{256},
                     "Sequences decoded at once: AR rows, each refilled with the next waiting sequence as it "
                     "finishes; diffusion sequences per denoiser call.")
          .range(1, 1 << 20),
      INKSTONE_FIELD(sample, fused, true,
                     "Diffusion: the fused sampling step (keyed draws, no float64 [B, L, V]); false: the eager "
                     "float64 reference."),
      INKSTONE_CHOICE_FIELD(sample, posterior, PosteriorPrecision::float64,
                            "Diffusion: the precision of x̂, the posterior and the draw, in the fused step's registers or "
                            "the eager step's [B, L, V] tensors (float32 halves the eager step's memory and runs the "
                            "fused step at a GPU's float rate)."),
      INKSTONE_CHOICE_FIELD(sample, cache_dtype, CacheFormat::weights,
                            "AR decoding: the KV cache as the layers compute it, or bf16 (half the memory and memory "
                            "traffic of an fp32 model's cache; attention then runs in bf16, docs/sampling.md)."),
      INKSTONE_FIELD(sample, cuda_graphs, true,
                     "AR decoding on CUDA: replay one captured decode step (attention + dense models); false: "
                     "eager steps."),

      INKSTONE_FIELD(metrics, tensorboard, false,
                     "Write a TensorBoard event file into the run folder (scalars under <split>/<metric>, samples "
                     "and the config as text)."),
      INKSTONE_FIELD(metrics, sample_interval, int64_t{0},
                     "Every k steps, sample each of sample_prompts with the [sample] settings and fixed seed into "
                     "the metrics; 0: never.")
          .at_least(0),
      INKSTONE_FIELD(metrics, sample_prompts, Strings{},
                     "Prompts sampled during training; empty: the [sample] prompt."),
      INKSTONE_FIELD(metrics, peak_tflops, 0.0,
                     "Peak bf16 TFLOP/s of one device, the denominator of mfu; 0: the datasheet value of a known "
                     "CUDA device, and no mfu elsewhere.")
          .range(0, 1e6),
      INKSTONE_FIELD(metrics, watch_text, "",
                     "A text the objective scores at every evaluation, logged as watch_loss_nats (twin runs: the "
                     "injected text's loss in both arms); empty: none."),

      INKSTONE_CHOICE_FIELD(chat, format, ChatFormat::raw,
                            "Prompt rendering for sample and RL: raw text, chatml (<|im_start|>user ... "
                            "<|im_start|>assistant, Qwen) or llama3 (<|start_header_id|>user<|end_header_id|> ...)."),
      INKSTONE_FIELD(chat, system, "", "System message of the chat formats; empty: none."),
      INKSTONE_CHOICE_FIELD(chat, prompt_start, PromptStart::eos,
                            "The token before a prompt: eos (models pretrained here on eos-separated documents), bos "
                            "(Llama), or none (Qwen)."),
      INKSTONE_FIELD(chat, stop_tokens, Strings{},
                     "Texts of tokens that end a completion besides eos, e.g. [\"<|im_end|>\"]."),

      INKSTONE_FIELD(rl, init_checkpoint, "", "Checkpoint or run folder the policy and the reference start from."),
      INKSTONE_FIELD(rl, task, "arithmetic", "Prompt source and verifier by its registered name (rl/task_registry.cpp)."),
      INKSTONE_FIELD(rl, task_path, "", "gsm8k: a jsonl file; math: a json array file (training problems)."),
      INKSTONE_FIELD(rl, eval_path, "", "gsm8k, math: the held-out problems."),
      INKSTONE_FIELD(rl, task_size, int64_t{10000}, "Procedural tasks: distinct problems.").at_least(1),
      INKSTONE_FIELD(rl, difficulty, int64_t{1}, "Procedural tasks: terms, digits or numbers.").range(1, 100),
      INKSTONE_FIELD(rl, task_seed, int64_t{0}, "Procedural tasks: seed of the training problems.").at_least(0),
      INKSTONE_FIELD(rl, eval_seed, int64_t{1}, "Procedural tasks: seed of the held-out problems.").at_least(0),
      INKSTONE_FIELD(rl, prompt_template, "{question}\n", "How a problem is shown; {question} is replaced."),
      INKSTONE_FIELD(rl, rewards, (Strings{"correct"}), "Rewards summed, each \"name\" or \"name=weight\"."),
      INKSTONE_FIELD(rl, prompts_per_step, int64_t{8}, "Prompts per rollout batch.").at_least(1),
      INKSTONE_FIELD(rl, group_size, int64_t{8}, "Rollouts per prompt (G).").at_least(2),
      INKSTONE_FIELD(rl, epochs, int64_t{1}, "Optimisation passes over each rollout batch.").at_least(1),
      INKSTONE_FIELD(rl, mini_batches, int64_t{1}, "Optimizer steps per epoch; must divide prompts_per_step.")
          .at_least(1),
      INKSTONE_FIELD(rl, max_new_tokens, int64_t{64}, "Longest completion (also Dr.GRPO's normaliser).")
          .at_least(1),
      INKSTONE_FIELD(rl, temperature, 1.0, "Rollout temperature; the trainer's log-probs use it too.")
          .range(1e-3, 100),
      INKSTONE_FIELD(rl, top_p, 1.0, "Rollout nucleus mass.").positive_up_to(1),
      INKSTONE_FIELD(rl, stop, Strings{}, "A completion ends after the first of these strings (and at eos).")
          .no_empty_entries(),
      INKSTONE_CHOICE_FIELD(rl, reference, ReferencePolicy::initial,
                            "initial: a frozen copy of the initial policy; old: the rollout policy (drift d = 0)."),
      INKSTONE_FIELD(rl, keep_decoder, true,
                     "Causal policies: keep the rollouts' KV cache, and on CUDA their captured decode graphs, from one "
                     "step to the next instead of making them every step; the cache then stays allocated through the "
                     "update too (the dry run counts it; docs/sampling.md, \"Decoders kept across calls\")."),
      INKSTONE_FIELD(rl, policy, "",
                     "The objective that trained the policy, read from rl.init_checkpoint: ar (decoded left to "
                     "right) or a diffusion objective (denoised with [sample]'s diffusion sampler and steps)."),
      INKSTONE_CHOICE_FIELD(rl, likelihood, SequenceLikelihood::elbo,
                            "Diffusion policies: elbo (K coupled noise levels), one_step (d1's fully noised "
                            "completion) or transitions (the sampler's own steps, exact; docs/rl.md)."),
      INKSTONE_FIELD(rl, elbo_samples, int64_t{4}, "elbo: noise levels per completion (stratified).").range(1, 1024),
      INKSTONE_FIELD(rl, prompt_mask, 0.15, "one_step: share of prompt tokens noised, as d1 does.").range(0, 0.99),
      INKSTONE_FIELD(rl, eval_prompts, int64_t{64}, "Held-out problems per evaluation.").at_least(1),
      INKSTONE_FIELD(rl, eval_samples, int64_t{8}, "Samples per held-out problem (pass@1 is their mean).")
          .at_least(1),
      INKSTONE_FIELD(rl, eval_temperature, 1.0, "Evaluation sampling temperature.").range(1e-3, 100),

      INKSTONE_FIELD(gflowrl, beta, 8.0, "Inverse temperature of the reward in the target pi_ref exp(beta r).")
          .range(0, 1e6),
      INKSTONE_FIELD(gflowrl, push_up, 0.28, "Flow-gap clip bound where gradient descent raises log pi (g < 0).")
          .range(0, inf),
      INKSTONE_FIELD(gflowrl, push_down, 0.2, "Flow-gap clip bound where it lowers log pi (g > 0).")
          .range(0, inf),
      INKSTONE_FIELD(gflowrl, is_eps, 0.2, "IS weight cap: w = min(ratio, 1 + is_eps).").range(0, inf),
      INKSTONE_CHOICE_FIELD(gflowrl, is_ratio, ImportanceRatio::geometric,
                            "raw: exp(rho); geometric: exp(rho / |y|)."),
      INKSTONE_CHOICE_FIELD(gflowrl, norm, LengthNorm::none, "Length normalisation of the drift and ratio terms."),
      INKSTONE_FIELD(gflowrl, filter_degenerate, true, "Drop groups whose rewards are all equal."),
      INKSTONE_FIELD(gflowrl, tis_cap, 0.0, "Truncated IS cap against rollout/trainer drift; 0: off.")
          .range(0, inf),

      INKSTONE_FIELD(grpo, eps_low, 0.2, "PPO ratio clip below 1.").range(0, 1),
      INKSTONE_FIELD(grpo, eps_high, 0.2, "PPO ratio clip above 1 (DAPO clip-higher: 0.28).").range(0, inf),
      INKSTONE_CHOICE_FIELD(grpo, scale_rewards, RewardScale::group,
                            "group: divide advantages by the group std; none: Dr.GRPO."),
      INKSTONE_FIELD(grpo, adv_eps, 1e-4, "Added to the group std.").range(0, 1),
      INKSTONE_CHOICE_FIELD(grpo, aggregation, LossAggregation::token_mean,
                            "How per-token losses become the batch loss."),
      INKSTONE_FIELD(grpo, kl_coef, 0.0, "k3 KL penalty to the reference per token; 0: off.").range(0, inf),

      INKSTONE_FIELD(flowrl, beta, 15.0, "Scale of the z-scored reward in the residual (FlowRL's code: 15).")
          .range(0, 1e6),
      INKSTONE_FIELD(flowrl, is_cap, 10.0, "IS weight cap: w = min(exp(rho), is_cap).").range(1, inf),
      INKSTONE_FIELD(flowrl, head_dropout, 0.1, "Dropout in the learned log Z head.").range(0, 1),
  };
  std::vector<FieldSpec> specs;
  for (auto& b : f) specs.push_back(std::move(b.spec));
  return specs;
}

#undef INKSTONE_FIELD
#undef INKSTONE_CHOICE_FIELD

}  // namespace

std::string FieldSpec::type_name() const {
  static const char* names[] = {"integer", "number", "boolean", "string", "list of strings"};
  return names[default_value.index()];
}

const std::vector<FieldSpec>& config_schema() {
  static const std::vector<FieldSpec> schema = build_schema();
  return schema;
}

const std::vector<std::string>& config_sections() {
  static const std::vector<std::string> sections = [] {
    std::vector<std::string> out;
    for (const auto& f : config_schema())
      if (out.empty() || out.back() != f.section) out.push_back(f.section);
    return out;
  }();
  return sections;
}

}  // namespace inkstone
