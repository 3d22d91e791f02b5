#include "strata/pipe/layout.h"

#include "strata/tensor/error.h"

namespace strata::pipe {

int StageLayout::virtual_stage(int stage, int chunk) const {
  STRATA_CHECK(0 <= stage && stage < stages && 0 <= chunk && chunk < chunks, "StageLayout: stage ", stage, " chunk ",
               chunk, " is out of range for ", stages, " stages of ", chunks, " chunks");
  if (v_shape && chunk == 1) return 2 * stages - 1 - stage;
  return chunk * stages + stage;
}

int StageLayout::stage_of(int virtual_stage) const {
  STRATA_CHECK(0 <= virtual_stage && virtual_stage < num_virtual_stages(), "StageLayout: virtual stage ", virtual_stage,
               " is out of range for ", num_virtual_stages());
  if (v_shape && virtual_stage >= stages) return 2 * stages - 1 - virtual_stage;
  return virtual_stage % stages;
}

int StageLayout::chunk_of(int virtual_stage) const {
  STRATA_CHECK(0 <= virtual_stage && virtual_stage < num_virtual_stages(), "StageLayout: virtual stage ", virtual_stage,
               " is out of range for ", num_virtual_stages());
  return virtual_stage / stages;
}

}  // namespace strata::pipe
