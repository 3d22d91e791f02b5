#pragma once
// What a pipeline stage does: instructions (DeepSpeed's PipeInstruction family) and the steps that group them.
//
//   pipe::PipeStep step;
//   step.push_back({pipe::PipeInstruction::RecvGrad, 0});
//   step.push_back({pipe::PipeInstruction::BackwardPass, 0, /*chunk=*/1});
//   std::cout << step;   // "RecvGrad(0) BackwardPass(0, chunk 1)"

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string_view>
#include <utility>
#include <vector>

namespace strata::pipe {

/// Every instruction kind, in order, as X(kind, names_a_buffer): the one list that PipeInstruction::Kind, its names,
/// has_buffer() and kind-indexed tables come from. The names are DeepSpeed's class names.
#define STRATA_PIPE_INSTRUCTION_KINDS(X)                                                                             \
  X(LoadMicroBatch, true)   /* the next micro-batch's inputs (first stage) or labels (last stage) into the buffer */ \
  X(ForwardPass, true)      /* runs this stage's layers on the buffer's inputs */                                    \
  X(BackwardPass, true)     /* backpropagates the buffer's outputs (loss on the last stage, received grads) */       \
  X(BackwardInput, true)    /* the input-gradient half of BackwardPass (zero-bubble "B"): what SendGrad sends */     \
  X(BackwardWeight, true)   /* the parameter-gradient half (zero-bubble "W"), after the buffer's BackwardInput */    \
  X(SendActivation, true)   /* sends the buffer's outputs to the next stage */                                       \
  X(RecvActivation, true)   /* receives the previous stage's outputs into the buffer */                              \
  X(SendGrad, true)         /* sends the gradient of the buffer's inputs to the previous stage */                    \
  X(RecvGrad, true)         /* receives the gradient of the buffer's outputs from the next stage */                  \
  X(ReduceTiedGrads, false) /* all-reduces tied parameters' grads across the stages that share them */               \
  X(ReduceGrads, false)     /* averages grads across the data-parallel group */                                      \
  X(OptimizerStep, false)   /* one optimizer step, then zeroes the grads */

/// One thing a stage does (DeepSpeed's PipeInstruction subclasses); buffer ops name a pipe buffer.
struct PipeInstruction {
/// X of STRATA_PIPE_INSTRUCTION_KINDS that makes each kind an enumerator of Kind (undefined after use).
#define STRATA_PIPE_KIND_ENUMERATOR(kind, names_a_buffer) kind,
  /// The instruction's type (STRATA_PIPE_INSTRUCTION_KINDS lists and describes them).
  enum Kind : uint8_t { STRATA_PIPE_INSTRUCTION_KINDS(STRATA_PIPE_KIND_ENUMERATOR) };
#undef STRATA_PIPE_KIND_ENUMERATOR
/// X of STRATA_PIPE_INSTRUCTION_KINDS that counts the kinds (undefined after use).
#define STRATA_PIPE_KIND_COUNT(kind, names_a_buffer) +1
  /// The number of kinds: tables indexed by Kind are this long.
  static constexpr size_t kNumKinds = 0 STRATA_PIPE_INSTRUCTION_KINDS(STRATA_PIPE_KIND_COUNT);
#undef STRATA_PIPE_KIND_COUNT
  Kind kind;               ///< what to do
  int32_t buffer_id = -1;  ///< the pipe buffer of a buffer op, -1 for the others
  int16_t chunk = 0;       ///< the stage's model chunk it works on (interleaved and V schedules; 0 otherwise)

  bool has_buffer() const;                                  ///< whether this kind names a buffer
  bool operator==(const PipeInstruction&) const = default;  ///< same kind, buffer and chunk
};
/// The instruction's name, e.g. "RecvGrad".
std::string_view name(PipeInstruction::Kind kind);
/// Whether the kind computes: ForwardPass, BackwardPass, BackwardInput or BackwardWeight.
bool is_compute(PipeInstruction::Kind kind);
/// Whether the kind moves data between stages: SendActivation, RecvActivation, SendGrad or RecvGrad.
bool is_p2p(PipeInstruction::Kind kind);
/// Whether the kind sends: SendActivation or SendGrad.
bool is_send(PipeInstruction::Kind kind);
/// Whether the kind receives: RecvActivation or RecvGrad.
bool is_receive(PipeInstruction::Kind kind);
/// "RecvGrad(0)" for buffer ops, "OptimizerStep()" for the others; "RecvGrad(0, chunk 1)" past chunk 0.
std::ostream& operator<<(std::ostream& os, const PipeInstruction& instruction);

/// The instructions of one step, in order (at most twelve; no allocation).
class PipeStep {
 public:
  static constexpr int kCapacity = 12;          ///< the most instructions any schedule puts in one step
  void push_back(PipeInstruction instruction);  ///< appends; throws past kCapacity
  int size() const { return size_; }            ///< number of instructions
  bool empty() const { return size_ == 0; }     ///< no instructions
  const PipeInstruction* begin() const { return items_.data(); }        ///< first instruction
  const PipeInstruction* end() const { return items_.data() + size_; }  ///< past the last
  const PipeInstruction& operator[](int i) const { return items_[i]; }  ///< instruction i
  bool operator==(const PipeStep& other) const;                         ///< the same instructions in the same order

 private:
  std::array<PipeInstruction, kCapacity> items_{};
  int size_ = 0;
};
/// The instructions separated by single spaces: "RecvGrad(0) SendActivation(2) BackwardPass(0)"; empty when none.
std::ostream& operator<<(std::ostream& os, const PipeStep& step);

/// How early one stage may post its receives (Note [early receives] in pipe/stage.cpp), for the engine and the
/// validator's clock alike: a RecvGrad once its buffer's SendActivation ran, a RecvActivation once its chunk's
/// previous one ran (with static shapes). Fed the stage's instructions in order, each with what its end is to the
/// caller (the engine: the index of the next instruction; the validator: the clock), it keeps those ends.
template <class End>
class ReceiveGates {
 public:
  /// For a stage of `chunks` chunks of `buffers` buffers each (the instructions' ids are in range). With dynamic
  /// shapes a RecvActivation reads its shapes first, so none goes early.
  ReceiveGates(int chunks, int buffers, bool static_shapes = true)
      : buffers_(buffers), static_shapes_(static_shapes), sent_(size_t(chunks) * buffers), received_(chunks) {}
  /// For the stream's next instruction `ins`, ending at `end`: the end of the instruction it may be posted after
  /// when it is a receive that may go early, else nullopt (posted at its turn).
  std::optional<End> next(const PipeInstruction& ins, End end) {
    switch (ins.kind) {
      case PipeInstruction::RecvGrad:
        return sent_.at(slot(ins));
      case PipeInstruction::RecvActivation: {
        std::optional<End> last = std::exchange(received_.at(ins.chunk), end);
        return static_shapes_ ? last : std::nullopt;
      }
      case PipeInstruction::SendActivation:
        sent_.at(slot(ins)) = end;
        return std::nullopt;
      default:
        return std::nullopt;
    }
  }

 private:
  size_t slot(const PipeInstruction& ins) const { return size_t(ins.chunk) * buffers_ + ins.buffer_id; }
  int buffers_;
  bool static_shapes_;
  std::vector<std::optional<End>> sent_;      // per chunk and buffer: the end of its latest SendActivation
  std::vector<std::optional<End>> received_;  // per chunk: the end of its latest RecvActivation
};

}  // namespace strata::pipe
