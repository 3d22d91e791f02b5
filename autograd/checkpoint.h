#pragma once
// Activation checkpointing (torch.utils.checkpoint): runs part of a model without keeping its activations
// and recomputes them during backward, trading compute for memory.
//
//   Tensor x = randn({64, 784}), labels = randint(0, 256, {64});
//   nn::Linear fc1(784, 256), fc2(256, 256);
//   auto block = [&](const tensor_list& in) { return tensor_list{fc2(relu(fc1(in[0])))}; };
//   tensor_list params = fc1->parameters();
//   for (const Tensor& p : fc2->parameters()) params.push_back(p);
//   Tensor h = autograd::checkpoint(block, {x}, params)[0];   // keeps x, not fc1's output
//   cross_entropy(h, labels).backward();                      // runs block again, then its backward

#include <functional>

#include "strata/tensor/tensor.h"

namespace strata::autograd {

/// Runs fn(inputs) without recording history and records one node in its place; the node's backward runs fn
/// again with grad enabled (the default generator replayed, so dropout draws the same mask) and backpropagates
/// through that. `parameters` are the leaves fn uses that need gradients (its modules' trainable parameters):
/// they get them through the normal engine, hooks included. Every other tensor fn uses must need no gradient:
/// one fn reaches by capture is not recomputed, and its gradient would be lost. As in torch's reentrant
/// checkpoint, every floating output requires grad (the forward ran without a graph, so it cannot tell);
/// integer outputs, and inputs handed back unchanged that need none, get no gradient.
tensor_list checkpoint(const std::function<tensor_list(const tensor_list&)>& fn, const tensor_list& inputs,
                       const tensor_list& parameters = {});

}  // namespace strata::autograd
