// A batch of token windows on the training device, and a source of evaluation batches.
#pragma once
#include <cstdint>

#include <torch/types.h>

namespace inkstone {

// What RL objectives know about a batch of rollouts beyond its tokens (all undefined for token windows). A row
// is a prompt followed by its completion, right-padded; rows of one group are adjacent and a batch holds whole
// groups, so group statistics never cross a batch boundary. Per-token log-probs sit at the position of the token
// they score (log p(tokens[t] | tokens[<t])), 0 off the policy mask.
struct RolloutAnnotations {
  torch::Tensor policy;             // [B, W] bool: tokens the policy generated
  torch::Tensor old_log_probs;      // [B, W] float: the rollout weights, recomputed by the trainer (no grad)
  torch::Tensor ref_log_probs;      // [B, W] float: the reference model; undefined: the reference is pi_old
  torch::Tensor rollout_log_probs;  // [B, W] float: as the sampler reported them
  torch::Tensor rewards;            // [B] float
  torch::Tensor groups;             // [B] int64: rows with the same id answer the same prompt
  // [B] int64: what keys a likelihood estimate's random draws for each row (a diffusion policy's noise levels),
  // so that the current, old and reference policies score a row under the same draws; undefined: no draws.
  torch::Tensor noise_keys;
  // A recorded denoising trajectory, for a diffusion policy scored by its own transitions: the canvas before each
  // of the T transitions and after the last [B, T + 1, W] int64, each transition's time t [B, T] and levels
  // (α_t, μ_t, υ_t, α_s, μ_s, υ_s) [B, T, 6] float64. Undefined otherwise.
  torch::Tensor trajectory;
  torch::Tensor transition_times;
  torch::Tensor transition_levels;
};

struct Batch {
  torch::Tensor tokens;  // [B, W] int64
  torch::Tensor real;    // [B, W] bool: false at padding
  // Where these rows sit in the whole optimizer-step batch (micro-batches of one step share it), so that an
  // objective stratifying over the batch (diffusion time) sees the same strata for any accumulation split.
  int64_t first_row = 0;
  int64_t total_rows = 0;  // 0: these rows are the whole batch
  int64_t step = -1;       // the training step these rows feed (0-based); -1: evaluation
  // [B, W] int64 packed-document index (data.document_mask); undefined: not masked. On the host, where the batch
  // was built: the attention lays its document buckets out there, and a read back from the device would wait for
  // the step's queued work once per forward (docs/backbones.md, "Packed documents"); the model uploads it.
  torch::Tensor documents;
  // [B, W] bool: the tokens the loss trains on (fine-tuning on conversations: the responses, docs/training.md,
  // "Fine-tuning on conversations"); the others are context only. Undefined: every real token.
  torch::Tensor loss_mask;
  // [B] bool, with loss_mask: the rows holding a conversation (the others are plain text of a mixture).
  torch::Tensor conversations;
  RolloutAnnotations rollout;
};

// The tokens a window objective scores: real, and trained on where the batch has a loss mask.
inline torch::Tensor scored_tokens(const Batch& batch) {
  return batch.loss_mask.defined() ? batch.real & batch.loss_mask : batch.real;
}

// How packed windows part into documents (data.document_mask): at each eos. A causal model reads an eos as the
// input that predicts the next document's first token, so the eos opens that document, which then starts as the
// prompt `sample` gives it (chat.prompt_start = eos) and is predicted from nothing of the document before. A
// bidirectional model keeps the eos with the text it ends, which is where it learns that the text has ended.
struct DocumentSplit {
  int64_t eos = -1;  // < 0: documents are not kept apart
  bool eos_opens = false;
  bool active() const { return eos >= 0; }
};

// The document of every token of packed windows [B, W]: the number of eos before it in its row, counting an eos as
// the first token of the document after it when `split.eos_opens`, else as the last of the one it ends.
inline torch::Tensor packed_documents(const torch::Tensor& tokens, const DocumentSplit& split) {
  const auto ends = tokens.eq(split.eos).to(torch::kLong);
  const auto opened = ends.cumsum(1);
  return split.eos_opens ? opened : opened - ends;
}

// The validation split as a fixed sequence of batches, so one checkpoint always gives the same numbers.
class EvalSource {
 public:
  virtual ~EvalSource() = default;
  virtual int64_t num_batches() const = 0;
  virtual Batch batch(int64_t index) const = 0;
  // Which batch of the whole split batch `index` is (a source holding one rank's share of the split numbers its
  // batches from 0); keys what an objective draws for the batch, so it does not depend on the sharding.
  virtual int64_t split_index(int64_t index) const { return index; }
  // Average UTF-8 bytes per token over the split, for bits per byte.
  virtual double bytes_per_token() const = 0;
};

}  // namespace inkstone
