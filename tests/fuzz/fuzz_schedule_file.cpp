// libFuzzer target: pipe::ScheduleTable::parse of arbitrary text returns a table or throws strata::Error; anything
// else (a crash, a sanitizer report, another exception escaping, a hang) is a bug. A table it returns is
// planned, so every stage's schedule is made and validated too, and written back it parses to the same actions.

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string_view>

#include "strata/pipe/schedule_file.h"
#include "strata/pipe/schedule_validator.h"
#include "strata/tensor/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1u << 16)) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const strata::pipe::ScheduleTable table = strata::pipe::ScheduleTable::parse(text, "fuzz", {.max_activations = 8});
    strata::pipe::ValidateOptions options;
    options.max_stage_steps = int64_t{1} << 16;
    strata::pipe::validate_schedule([&](int s) { return table.schedule(s); }, table.stages(), options);
    std::ostringstream written;
    written << table;
    if (strata::pipe::ScheduleTable::parse(written.str(), "written").actions() != table.actions()) __builtin_trap();
  } catch (const strata::Error&) {
  }
  return 0;
}
