// The branch node as a custom autograd function whose backward runs its own nested backward (the reentrant form:
// the nested backward accumulates the weights' gradients directly, so the data-parallel gradient hooks on the
// weights fire as in an ordinary backward). With recompute, the nested backward goes through a rerun of the
// branch; without, through the graph the forward built from detached copies of the inputs.
#include "models/branch_node.h"

#include <map>
#include <string>

#include <torch/autograd.h>

#include "core/torch_compat.h"

namespace inkstone {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What the forward leaves for backward besides the saved inputs.
struct Replay {
  ResidualBranch branch;
  std::shared_ptr<torch::nn::Module> owner;
  BranchNodePlan plan;
  bool autocast = false;
  std::map<std::string, torch::Tensor> metrics;  // the owner's auxiliary metrics of the forward
  // Which of x, the modulation's shift, scale and gate each input is: autograd takes defined tensors only.
  std::vector<size_t> slots;
  // Without recompute: the forward's graph, from `kept_inputs` (detached copies of the inputs) to `kept_outputs`
  // (the branch's output, then its auxiliary loss if any).
  std::vector<torch::Tensor> kept_inputs, kept_outputs;

  torch::Tensor run(const std::vector<torch::Tensor>& inputs) const {
    std::vector<torch::Tensor> args(4);
    for (size_t k = 0; k < slots.size(); ++k) args[slots[k]] = inputs[k];
    return branch(args[0], {args[1], args[2], args[3]});
  }
  ResidentUnits weights() const {
    return ResidentUnits(plan.residency, plan.residency ? std::vector<int64_t>{plan.unit} : std::vector<int64_t>{});
  }
};

// saved_data holds IValues: the replay travels in a capsule.
struct ReplayHolder : torch::CustomClassHolder {
  explicit ReplayHolder(std::shared_ptr<Replay> r) : replay(std::move(r)) {}
  std::shared_ptr<Replay> replay;
};

class ForwardPassScope {
 public:
  explicit ForwardPassScope(ForwardPass pass) : previous_(current_forward_pass) { current_forward_pass = pass; }
  ~ForwardPassScope() { current_forward_pass = previous_; }
  ForwardPassScope(const ForwardPassScope&) = delete;
  ForwardPassScope& operator=(const ForwardPassScope&) = delete;

 private:
  ForwardPass previous_;
};

std::vector<torch::Tensor> detached_leaves(const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> leaves;
  for (const auto& t : tensors) leaves.push_back(t.detach().requires_grad_(t.requires_grad()));
  return leaves;
}

struct BranchFunction : torch::autograd::Function<BranchFunction> {
  // Runs with gradient off (autograd's rule for a custom function's forward). Outputs: the branch's output and,
  // when the owner recorded one, its auxiliary loss.
  static variable_list forward(AutogradContext* ctx, std::shared_ptr<Replay> replay, at::TensorList inputs) {
    ctx->saved_data["replay"] = c10::IValue::make_capsule(c10::make_intrusive<ReplayHolder>(replay));
    const ResidentUnits weights = replay->weights();
    variable_list outputs;
    if (replay->plan.recompute) {
      ctx->save_for_backward(inputs.vec());
      ForwardPassScope pass(ForwardPass::checkpointed);
      outputs.push_back(replay->run(inputs.vec()));
    } else {
      torch::AutoGradMode grad(true);
      replay->kept_inputs = detached_leaves(inputs.vec());
      replay->kept_outputs.push_back(replay->run(replay->kept_inputs));
      outputs.push_back(replay->kept_outputs.back().detach());
    }
    AuxiliaryOutputs aux = take_auxiliary(*replay->owner);
    replay->metrics = std::move(aux.metrics);
    if (aux.loss.defined()) {
      if (!replay->plan.recompute) replay->kept_outputs.push_back(aux.loss);
      outputs.push_back(aux.loss.detach());
    }
    return outputs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list output_grads) {
    const auto replay = static_cast<ReplayHolder*>(ctx->saved_data["replay"].toCapsule().get())->replay;
    const ResidentUnits weights = replay->weights();
    std::vector<torch::Tensor> inputs, outputs;
    if (replay->plan.recompute) {
      inputs = detached_leaves(ctx->get_saved_variables());
      torch::AutoGradMode grad(true);
      ForwardPassScope pass(ForwardPass::recomputed);
      compat::CudaAutocastScope autocast(replay->autocast);
      outputs.push_back(replay->run(inputs));
      const AuxiliaryOutputs aux = take_auxiliary(*replay->owner);
      if (aux.loss.defined()) outputs.push_back(aux.loss);
    } else {
      inputs = std::move(replay->kept_inputs);
      outputs = std::move(replay->kept_outputs);
    }
    variable_list grads(output_grads.begin(), output_grads.begin() + static_cast<std::ptrdiff_t>(outputs.size()));
    torch::autograd::backward(outputs, grads);
    variable_list input_grads{torch::Tensor()};  // the replay argument
    for (const auto& input : inputs) input_grads.push_back(input.grad());
    return input_grads;
  }
};

}  // namespace

torch::Tensor branch_node(ResidualBranch branch, const torch::Tensor& x, const Modulation& m,
                          std::shared_ptr<torch::nn::Module> owner, AuxiliaryOutputs& auxiliary,
                          const BranchNodePlan& plan) {
  auto replay = std::make_shared<Replay>();
  replay->branch = std::move(branch);
  replay->owner = std::move(owner);
  replay->plan = plan;
  replay->autocast = compat::cuda_autocast_enabled();
  std::vector<torch::Tensor> inputs;
  const std::vector<torch::Tensor> candidates{x, m.shift, m.scale, m.gate};
  for (size_t slot = 0; slot < candidates.size(); ++slot)
    if (candidates[slot].defined()) {
      replay->slots.push_back(slot);
      inputs.push_back(candidates[slot]);
    }
  // An empty leaf that needs a gradient: autograd records the node even when neither x nor m needs one (the
  // branch's weights, which the nested backward reaches directly, are not inputs). Not a weight, whose gradient
  // hooks would see the node's empty gradient for it.
  inputs.push_back(torch::empty({0}, torch::dtype(torch::kFloat).device(x.device())).requires_grad_());
  const variable_list outputs = BranchFunction::apply(replay, at::TensorList(inputs));
  add_auxiliary(auxiliary, {outputs.size() > 1 ? outputs[1] : torch::Tensor(), replay->metrics});
  return outputs[0];
}

}  // namespace inkstone
