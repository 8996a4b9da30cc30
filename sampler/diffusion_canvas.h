// What a diffusion sample is conditioned on: a prompt prefix, or an infill template whose placeholders mark the
// positions to generate; everything else is clamped at every denoising step.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "dataset/tokenizer.h"
#include "sampler/diffusion_sampler.h"

namespace inkstone {

// One row's layout: ids at fixed positions (ignored at generated ones).
struct CanvasRow {
  std::vector<int32_t> tokens;
  std::vector<bool> fixed;
};

// A prompt followed by `new_tokens` generated positions.
CanvasRow prefix_row(const std::vector<int32_t>& prompt, int64_t new_tokens);

// "To be {{12}} to be." -> the text's tokens fixed and 12 generated positions where {{12}} stood. InputError for
// a template with no placeholder or a malformed one.
CanvasRow infill_row(const std::string& text, const Tokenizer& tokenizer);

// `copies` rows per layout, rows of one length: shorter layouts are extended with generated positions.
DiffusionCanvas make_canvas(const std::vector<CanvasRow>& layouts, int64_t copies);

}  // namespace inkstone
