#pragma once
// Where a model cut into stages x chunks pieces (virtual stages) lives: Megatron's loop or the V.
//
//   pipe::StageLayout v{/*stages=*/4, /*chunks=*/2, /*v_shape=*/true};
//   std::cout << v.virtual_stage(0, 1);   // 7: chunk 1 of stage 0 holds the model's last piece
//   std::cout << v.stage_of(4);           // 3

namespace strata::pipe {

/// Where a model cut into stages x chunks pieces (virtual stages, in model order) lives. Without chunks,
/// virtual stage s is stage s. Megatron's interleaving loops: virtual stage c * stages + s is chunk c of
/// stage s. The V goes down and back up: chunk 0 of stage s is virtual stage s, chunk 1 is 2 * stages - 1 - s,
/// so the first and the last virtual stage share stage 0 and the turn is local to the last stage.
struct StageLayout {
  int stages = 1;                                             ///< pipeline stages (ranks along the pipe axis)
  int chunks = 1;                                             ///< model chunks per stage
  bool v_shape = false;                                       ///< the V placement (two chunks) instead of the loop
  int num_virtual_stages() const { return stages * chunks; }  ///< stages x chunks
  int virtual_stage(int stage, int chunk) const;              ///< where chunk `chunk` of `stage` is in the model
  int stage_of(int virtual_stage) const;                      ///< the stage holding a virtual stage
  int chunk_of(int virtual_stage) const;                      ///< its chunk there
  bool operator==(const StageLayout&) const = default;        ///< same stages, chunks and placement
};

}  // namespace strata::pipe
