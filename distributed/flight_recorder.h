#pragma once
// The flight recorder (PyTorch's, for every backend): each rank keeps its last STRATA_FLIGHT_RECORDER_SIZE
// (default 1024, 0 turns it off) collective and p2p calls: op, group, call number, dtype, shape, root or
// peer, state and times, and the label of what the caller was doing (the pipeline engine labels its
// instructions: stage, step, instruction, micro-batch). With STRATA_FLIGHT_RECORDER_DIR set, every rank
// writes them to DIR/rank<r>.json when the watchdog ends the job, on an uncaught exception and on a fatal
// signal (including the SIGTERM with which mpirun ends the other ranks). `strata-flight DIR` merges the
// files and names the first call where the ranks diverge or a rank never arrived, and what each was doing.
//
//   strata::Tensor grads = strata::ones({4});
//   {
//     strata::distributed::FlightContext label("warm-up exchange");
//     strata::distributed::all_reduce(grads);             // recorded with that label
//   }
//   strata::distributed::dump_flight_recorder("rank0.json", "asked by hand");

#include <string>

namespace strata::distributed {

/// Labels the calls this thread makes during its scope in the flight recorder; scopes nest, the innermost
/// label wins. Labels longer than 95 bytes are cut.
class FlightContext {
 public:
  explicit FlightContext(const std::string& label);  ///< labels this thread's calls with `label`
  ~FlightContext();                                  ///< puts the enclosing label back
  FlightContext(const FlightContext&) = delete;
  FlightContext& operator=(const FlightContext&) = delete;

 private:
  std::string outer_;
};

/// Writes this rank's recorded calls, oldest first, to `path` as JSON (format "strata-flight-1", which
/// strata-flight reads) with `reason`; throws strata::Error when the file cannot be written.
void dump_flight_recorder(const std::string& path, const std::string& reason);

}  // namespace strata::distributed
