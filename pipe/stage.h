#pragma once
// One pipeline stage's side of the engine (PyTorch's pipelining/stage.py): its buffers, the activation metadata
// protocol and the transfers to and from its neighbours. The engine (engine.cpp) runs the schedule and the
// module; a PipelineStage moves what they compute. Internal: the engine's alone.

#include <array>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "strata/autograd/engine.h"
#include "strata/distributed/tensor_meta.h"
#include "strata/pipe/layout.h"
#include "strata/pipe/module.h"
#include "strata/pipe/p2p.h"
#include "strata/pipe/schedule.h"
#include "strata/pipe/trace.h"

namespace strata::pipe {

/// The device a stage's transfers use, agreed over WORLD at construction (Note [stage devices]).
Device agree_stage_device(const PipelineModule& module, const PipelineParallelGrid& grid);

/// A stage's buffers, activation metadata and transfers (Note [activation metadata], Note [overlapped transfers],
/// Note [early receives]).
class PipelineStage {
 public:
  /// One instruction of the batch's stream, with the schedule step it belongs to.
  struct Streamed {
    int step;
    PipeInstruction ins;
  };
  using Meta = std::vector<distributed::TensorMeta>;
  using MetaPtr = std::shared_ptr<const Meta>;  ///< shared by the buffers that moved tensors of that description
  using Works = std::vector<std::shared_ptr<distributed::Work>>;

  /// One micro-batch's tensors on one chunk, from its load or receive to its backward.
  struct Buffer {
    tensor_list inputs, outputs, labels, output_grads;
    MetaPtr in_meta, out_meta;  ///< what was received into inputs / sent from outputs
    Works incoming, outgoing;   ///< receives into inputs or output_grads, and sends, not yet waited for
    Tensor header;              ///< received with inputs; checked at their wait while header_unread
    bool header_unread = false;
    Tensor loss;                          ///< last piece, training: this micro-batch's loss until its backward
    autograd::DeferredWeightGrad weight;  ///< after BackwardInput: the weight gradients, until BackwardWeight
    int micro_batch = -1;
  };

  /// Stage grid.get_stage_id() of `layout`, its transfers through `p2p_group` (WORLD when unset) on `device`.
  PipelineStage(const PipelineParallelGrid& grid, StageLayout layout, Device device, bool dynamic_shapes,
                distributed::Group p2p_group);

  /// Starts a batch of `schedule`, with its fresh buffers; training and evaluation keep their own metadata.
  /// With `transfers`, every transfer posted is recorded there (ExecutedInstruction: posted, first seen complete).
  void begin_batch(const PipeSchedule& schedule, std::vector<ExecutedInstruction>* transfers);
  /// The batch's instructions, in the order the engine runs them.
  const std::vector<Streamed>& stream() const { return stream_; }
  /// The engine runs stream()[i] next: posts the receives after it that may go early (Note [early receives]).
  void start(size_t i);
  /// Ends it: finishes every send (every receive was used) and drops the buffers.
  void end_batch();

  Buffer& buffer(const PipeInstruction& ins) { return buffers_.at(ins.chunk).at(ins.buffer_id); }  ///< its buffer
  Device device() const { return device_; }                  ///< where activations and labels live
  const StageLayout& layout() const { return layout_; }      ///< the chunks' placement
  bool first(int c) const { return virtual_stage(c) == 0; }  ///< chunk c holds the model's first piece
  bool last(int c) const { return virtual_stage(c) == layout_.num_virtual_stages() - 1; }  ///< ... its last
  int label_chunk() const { return label_chunk_; }  ///< the chunk holding the model's last piece, -1 for none
  int loaded() const { return loaded_; }            ///< micro-batches loaded in this batch

  /// LoadMicroBatch: the first piece's inputs into the buffer, the labels into the last piece's, on the device.
  void load(const PipeInstruction& ins, tensor_list inputs, tensor_list labels);
  /// ForwardPass: the buffer's inputs, once received, or taken from the chunk before on this stage.
  const tensor_list& forward_inputs(const PipeInstruction& ins);
  /// BackwardPass or BackwardInput of a chunk but the model's last: the outputs that need a gradient, and their
  /// gradients once received (or handed over by the chunk after on this stage).
  std::pair<tensor_list, tensor_list> backward_roots(const PipeInstruction& ins);
  /// After a backward: hands the input gradients to the chunk before on this stage and drops what is done.
  void after_backward(const PipeInstruction& ins);
  void send_activation(const PipeInstruction& ins);  ///< SendActivation: posts header, metadata and outputs
  void recv_activation(const PipeInstruction& ins);  ///< RecvActivation: the inputs' receives, unless posted early
  void send_grad(const PipeInstruction& ins);        ///< SendGrad: posts the input gradients
  void recv_grad(const PipeInstruction& ins);        ///< RecvGrad: the output gradients' receives, unless posted early
  /// Stamps the recorded transfers seen complete (the engine polls after every instruction while recording).
  void poll_transfers();
  /// The seconds spent waiting for each transfer kind since the last call.
  std::array<double, PipeInstruction::kNumKinds> take_waited();

 private:
  int virtual_stage(int c) const { return layout_.virtual_stage(grid_.get_stage_id(), c); }
  int prev_stage(int c) const { return layout_.stage_of(virtual_stage(c) - 1); }
  int next_stage(int c) const { return layout_.stage_of(virtual_stage(c) + 1); }
  // The chunk of this stage holding the neighbouring piece, or -1 when another stage holds it (or none).
  int local_prev(int c) const;
  // Posts the receives of stream_[j], a RecvActivation into ahead_ or a RecvGrad into its buffer, and moves
  // next_recv_ on to the next receive.
  void post_receive(size_t j);
  // Posts the receives of RecvActivation `s` into `buf`.
  void post_recv_activation(Buffer& buf, const Streamed& s);
  // Posts the receives of RecvGrad `s` into its buffer.
  void post_recv_grad(const Streamed& s);
  // Posts the header (and metadata when it changed) for chunk c's `outputs`; returns their description.
  MetaPtr send_meta(const tensor_list& outputs, int chunk, int micro_batch, Works& out);
  // Waits for the inputs' receives and checks a header that was not read yet.
  void finish_recv_activation(Buffer& buf, int chunk);
  // The description of what the previous piece sends to chunk c after a header of n: the last one for 0, else
  // the n words of metadata that follow, received here.
  MetaPtr read_meta(int64_t n, int chunk, int micro_batch);
  // Posts `work` into `works`, first finishing those already complete (which rethrows their errors).
  static void post(Works& works, std::shared_ptr<distributed::Work> work);
  // While recording: `ins` of schedule step `step` on `micro_batch` posted `works` at `posted` (a buffer's Works:
  // all of the instruction's, since it waited for the buffer's earlier ones first).
  void record(const PipeInstruction& ins, int step, int micro_batch, double posted, const Works& works);
  // Waits for every one of `works`; the time counts toward `kind`.
  void await(Works& works, PipeInstruction::Kind kind);

  const PipelineParallelGrid& grid_;
  const bool dynamic_shapes_;
  const Device device_;
  P2P p2p_;
  const StageLayout layout_;
  const bool receives_ahead_;  // Backend::receives_post_ahead() of the transfers' backend
  int label_chunk_ = -1;
  std::vector<MetaPtr> sent_[2], received_[2];  // the last description each way, per mode and chunk
  // Per batch:
  int mode_ = 0;  // 0 training, 1 evaluation
  int loaded_ = 0;
  std::vector<Streamed> stream_;
  std::vector<size_t> earliest_;  // per receive in stream_: the first instruction before which it may be posted
  size_t at_ = 0;                 // the instruction the engine runs
  size_t next_recv_ = 0;          // the first receive in stream_ not yet posted
  std::vector<std::optional<Buffer>> ahead_;  // per chunk: a RecvActivation posted before its instruction
  std::vector<int> received_count_;           // per chunk
  std::vector<std::vector<Buffer>> buffers_;  // [chunk][buffer id]
  std::array<double, PipeInstruction::kNumKinds> waited_{};
  // Recording: where, and the transfers in flight (their index there and their Works).
  std::vector<ExecutedInstruction>* transfers_ = nullptr;
  std::vector<std::pair<size_t, Works>> in_flight_;
};

}  // namespace strata::pipe
