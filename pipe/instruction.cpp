#include "strata/pipe/instruction.h"

#include <array>

#include "strata/tensor/error.h"

namespace strata::pipe {

using Instr = PipeInstruction;

std::string_view name(PipeInstruction::Kind kind) {
#define STRATA_PIPE_KIND_NAME(kind, names_a_buffer) #kind,
  static constexpr std::array<std::string_view, Instr::kNumKinds> kNames = {
      STRATA_PIPE_INSTRUCTION_KINDS(STRATA_PIPE_KIND_NAME)};
#undef STRATA_PIPE_KIND_NAME
  STRATA_CHECK(kind < kNames.size(), "PipeInstruction: invalid kind ", static_cast<int>(kind));
  return kNames[kind];
}

bool is_compute(PipeInstruction::Kind kind) {
  return kind == Instr::ForwardPass || kind == Instr::BackwardPass || kind == Instr::BackwardInput ||
         kind == Instr::BackwardWeight;
}

bool is_p2p(PipeInstruction::Kind kind) { return is_send(kind) || is_receive(kind); }

bool is_send(PipeInstruction::Kind kind) { return kind == Instr::SendActivation || kind == Instr::SendGrad; }

bool is_receive(PipeInstruction::Kind kind) { return kind == Instr::RecvActivation || kind == Instr::RecvGrad; }

bool PipeInstruction::has_buffer() const {
#define STRATA_PIPE_KIND_HAS_BUFFER(kind, names_a_buffer) names_a_buffer,
  static constexpr std::array<bool, kNumKinds> kHasBuffer = {
      STRATA_PIPE_INSTRUCTION_KINDS(STRATA_PIPE_KIND_HAS_BUFFER)};
#undef STRATA_PIPE_KIND_HAS_BUFFER
  return kind < kNumKinds && kHasBuffer[kind];
}

std::ostream& operator<<(std::ostream& os, const PipeInstruction& instruction) {
  os << name(instruction.kind) << '(';
  if (instruction.has_buffer()) os << instruction.buffer_id;
  if (instruction.chunk != 0) os << (instruction.has_buffer() ? ", " : "") << "chunk " << instruction.chunk;
  return os << ')';
}

void PipeStep::push_back(PipeInstruction instruction) {
  STRATA_CHECK(size_ < kCapacity, "PipeStep: more than ", kCapacity, " instructions in one step");
  items_[size_++] = instruction;
}

bool PipeStep::operator==(const PipeStep& other) const {
  return std::equal(begin(), end(), other.begin(), other.end());
}

std::ostream& operator<<(std::ostream& os, const PipeStep& step) {
  for (int i = 0; i < step.size(); ++i) os << (i ? " " : "") << step[i];
  return os;
}

}  // namespace strata::pipe
