// strata-pipe: plans a pipeline run without starting a process. It prints schedules, partitions and
// topologies in their stable text form, exports schedules as files in PyTorch's action notation, validates
// schedules (named, or read from such a file) and writes Chrome traces of them.
//
//   strata-pipe schedule --schedule train --stages 2 --micro-batches 4 --stage 0
//   0: LoadMicroBatch(0) ForwardPass(0)
//   1: SendActivation(0)
//   ...
//   strata-pipe partition --method parameters --weights 5,1,1,1,4,4 --stages 3
//   0 2 5 6
//   6 6 4
//
// Exit status: 0 on success, 1 when the library rejects the request (the message says why), 2 for a bad
// command line (the message and the usage go to stderr).

#include <strata/pipe/partition.h>
#include <strata/pipe/schedule.h>
#include <strata/pipe/schedule_file.h>
#include <strata/pipe/schedule_validator.h>
#include <strata/pipe/simulate.h>
#include <strata/pipe/trace.h>
#include <strata/pipe/topology.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <limits>
#include <iostream>
#include <map>
#include <optional>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "cli.h"

using namespace strata;

namespace {

const char* kUsage =
    "usage: strata-pipe <command> [options]\n"
    "  schedule  --schedule NAME --stages S --micro-batches M [--chunks v] [--stage s]\n"
    "            the instructions of each step, for stage s or for every stage; NAME is train (1F1B),\n"
    "            inference, dataparallel, gpipe, interleaved (Megatron's, v chunks, default 2), zb-h1,\n"
    "            zb-interleaved (v chunks, default 2), zb-v, dualpipe-v or forward (v chunks, default 1)\n"
    "  export    --schedule NAME --stages S --micro-batches M [--chunks v] [--out FILE]\n"
    "            a training schedule as a file: a line per stage of actions in PyTorch's notation (0F0, 1I0, 1W0,\n"
    "            0SEND_F0, ...), which the --file options and PipelineEngineOptions::schedule_file read\n"
    "  partition --method uniform|parameters|type:REGEX --weights w1,w2,... [--names n1,n2,...] --stages S\n"
    "            the S + 1 stage boundaries, then each stage's weight (--names: the layer type names, for type:)\n"
    "  topology  --axes a1,a2,... --dims d1,d2,...\n"
    "            each rank's coordinate, the last axis varying fastest\n"
    "  validate  --schedule NAME --stages S --micro-batches M [--chunks v]  or  --file F [--max-activations A]\n"
    "            runs every stage in lockstep; prints steps, bubble fraction, simulated time (forward, B and W\n"
    "            1 each) and peak buffers per stage. A file is first checked line by line (missing, repeated\n"
    "            or misordered actions, transfers without a partner, deadlock, more than A stages' worth of\n"
    "            activations on a stage)\n"
    "  simulate  --stages S --micro-batches M [--forward F --backward-input B --backward-weight W --p2p L]\n"
    "            [--bytes N --bandwidth BYTES_PER_S] [--chunks v] [--file F]   predicts every training\n"
    "            schedule's time for one batch, how far it is above the critical-path lower bound of its\n"
    "            layout, idle fraction and peak activations from per-stage times (default 1 each, p2p 0), and\n"
    "            recommends the fastest that stays within 1F1B's activation memory. A transfer of N bytes takes\n"
    "            N / BYTES_PER_S on its link, one at a time, then arrives L later (default: no bytes, latency\n"
    "            only); --file adds the file's schedule (its stages and micro-batches then need not be given)\n"
    "  trace     --schedule NAME --stages S --micro-batches M [--chunks v] --out FILE  or  --file F --out FILE\n"
    "            writes the simulated schedule as a Chrome trace (open it in ui.perfetto.dev)\n"
    "  help      this message (also --help or -h)\n";

// A bad command line: main prints the message and the usage, and exits with 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

bool is_help(std::string_view arg) { return arg == "help" || arg == "--help" || arg == "-h"; }

// The whole of `text` as a T no less than `min`: "2x", "1e3" and "" are errors (std::stoi would take 2 and 1).
template <class T>
T parse_number(const std::string& what, const std::string& text, T min) {
  bool out_of_range = false;
  const std::optional<T> value = cli::parse_number<T>(text, &out_of_range);
  if (out_of_range) throw UsageError(what + " is out of range: '" + text + "'");
  if (!value) throw UsageError(what + " expects an integer, got '" + text + "'");
  if (*value < min) throw UsageError(what + " must be at least " + std::to_string(min) + ", got " + text);
  return *value;
}

// "a,b,c" as {"a", "b", "c"}; an empty entry is an error.
std::vector<std::string> split_list(const std::string& what, const std::string& text) {
  std::vector<std::string> items;
  for (size_t start = 0;;) {
    const size_t comma = std::min(text.find(',', start), text.size());
    items.push_back(text.substr(start, comma - start));
    if (items.back().empty()) throw UsageError(what + " has an empty entry: '" + text + "'");
    if (comma == text.size()) return items;
    start = comma + 1;
  }
}

// One command's options, "--name value" pairs checked against the names the command accepts.
class Options {
 public:
  Options(std::string_view command, const std::vector<std::string_view>& accepted, std::span<const std::string> args) {
    for (size_t i = 0; i < args.size(); ++i) {
      const std::string& arg = args[i];
      if (arg == "--help" || arg == "-h") {
        help_ = true;
        return;
      }
      if (!arg.starts_with("--")) throw UsageError("unexpected argument '" + arg + "'");
      const std::string name = arg.substr(2);
      if (std::ranges::find(accepted, name) == accepted.end())
        throw UsageError(std::string(command) + " has no option " + arg);
      if (i + 1 == args.size() || args[i + 1].starts_with("--")) throw UsageError(arg + " needs a value");
      if (!values_.emplace(name, args[++i]).second) throw UsageError(arg + " is given twice");
    }
  }

  bool help() const { return help_; }  // --help among the options: print the usage instead of running
  std::optional<std::string> get(const std::string& name) const {
    const auto it = values_.find(name);
    return it == values_.end() ? std::nullopt : std::optional(it->second);
  }
  std::string required(const std::string& name) const {
    if (const auto value = get(name)) return *value;
    throw UsageError("missing --" + name);
  }
  int number(const std::string& name, int min) const { return parse_number("--" + name, required(name), min); }
  int chunks() const { return get("chunks") ? number("chunks", 1) : 0; }
  // A finite non-negative number (a time, a size), `fallback` when not given.
  double non_negative(const std::string& name, double fallback) const {
    const auto text = get(name);
    if (!text) return fallback;
    const std::optional<double> value = cli::parse_number<double>(*text);
    if (!value || !(*value >= 0) || *value == std::numeric_limits<double>::infinity())
      throw UsageError("--" + name + " expects a finite non-negative number, got '" + *text + "'");
    return *value;
  }

 private:
  std::map<std::string, std::string> values_;
  bool help_ = false;
};

// Prints `values` separated by single spaces, then a newline.
template <class T>
void print_line(const std::vector<T>& values) {
  for (size_t i = 0; i < values.size(); ++i) std::cout << (i ? " " : "") << values[i];
  std::cout << "\n";
}

void run_schedule(const Options& opt) {
  const std::string name = opt.required("schedule");
  const int stages = opt.number("stages", 1), micro_batches = opt.number("micro-batches", 1);
  if (opt.get("stage")) {
    std::cout << *pipe::make_schedule(name, micro_batches, stages, opt.number("stage", 0), opt.chunks());
    return;
  }
  for (int stage = 0; stage < stages; ++stage) {
    const auto schedule = pipe::make_schedule(name, micro_batches, stages, stage, opt.chunks());
    std::cout << "stage " << stage << "\n" << *schedule;
  }
}

void run_partition(const Options& opt) {
  const std::string method = opt.required("method");
  std::vector<int64_t> weights;
  for (const std::string& w : split_list("--weights", opt.required("weights")))
    weights.push_back(parse_number<int64_t>("--weights", w, 0));
  std::vector<std::string> names;
  if (const auto text = opt.get("names"))
    names = split_list("--names", *text);
  else if (method.starts_with("type:"))
    throw UsageError("--method " + method + " needs --names");
  if (!names.empty() && names.size() != weights.size())
    throw UsageError("expected one --names entry per --weights entry, got " + std::to_string(names.size()) + " and " +
                     std::to_string(weights.size()));
  const int stages = opt.number("stages", 1);
  const std::vector<int> parts = pipe::partition_by_method(method, weights, names, stages);
  print_line(parts);
  print_line(pipe::part_weights(pipe::method_weights(method, weights, names), parts));
}

void run_topology(const Options& opt) {
  const std::vector<std::string> axes = split_list("--axes", opt.required("axes"));
  std::vector<int> dims;
  for (const std::string& d : split_list("--dims", opt.required("dims"))) dims.push_back(parse_number("--dims", d, 1));
  std::cout << pipe::ProcessTopology(axes, dims);
}

// The schedule file --file names, read with --max-activations; nullopt without --file. --file and --schedule
// exclude each other, and a file brings its own stages, micro-batches and chunks.
std::optional<pipe::ScheduleTable> schedule_file(const Options& opt) {
  const auto path = opt.get("file");
  if (!path) {
    if (opt.get("max-activations")) throw UsageError("--max-activations goes with --file");
    return std::nullopt;
  }
  for (const char* other : {"schedule", "chunks"})
    if (opt.get(other)) throw UsageError(std::string("--file and --") + other + " exclude each other");
  const double cap = opt.non_negative("max-activations", 0);
  return pipe::ScheduleTable::load(*path, {.max_activations = cap});
}

// make_stage for a table.
auto stages_of(const pipe::ScheduleTable& table) {
  return [&table](int s) { return table.schedule(s); };
}

void run_export(const Options& opt) {
  const std::string name = opt.required("schedule");
  const int stages = opt.number("stages", 1), micro_batches = opt.number("micro-batches", 1);
  const pipe::ScheduleTable table = pipe::ScheduleTable::from_schedule(name, micro_batches, stages, opt.chunks());
  const auto path = opt.get("out");
  if (!path) {
    std::cout << table;
    return;
  }
  std::ofstream file(*path);
  file << table;
  file.close();
  if (!file) throw std::runtime_error("could not write " + *path);
  std::cout << "wrote the " << name << " schedule (" << stages << " stages, " << micro_batches << " micro-batches) to "
            << *path << "\n";
}

void run_validate(const Options& opt) {
  if (const auto table = schedule_file(opt)) {
    std::cout << pipe::validate_schedule(stages_of(*table), table->stages());
    return;
  }
  const std::string name = opt.required("schedule");
  const int stages = opt.number("stages", 1), micro_batches = opt.number("micro-batches", 1);
  pipe::ValidateOptions options;
  options.chunks = opt.chunks();
  std::cout << pipe::validate_schedule(name, micro_batches, stages, options);
}

void run_simulate(const Options& opt) {
  const auto path = opt.get("file");
  const std::optional<pipe::ScheduleTable> table =
      path ? std::optional(pipe::ScheduleTable::load(*path)) : std::optional<pipe::ScheduleTable>();
  const int stages = table ? table->stages() : opt.number("stages", 1);
  const int micro_batches = table ? table->micro_batches() : opt.number("micro-batches", 1);
  if (table && ((opt.get("stages") && opt.number("stages", 1) != stages) ||
                (opt.get("micro-batches") && opt.number("micro-batches", 1) != micro_batches)))
    throw UsageError(*path + " schedules " + std::to_string(stages) + " stages x " + std::to_string(micro_batches) +
                     " micro-batches; leave out --stages and --micro-batches or give those");
  if (opt.get("bytes").has_value() != opt.get("bandwidth").has_value())
    throw UsageError("--bytes and --bandwidth go together");
  const pipe::ScheduleCosts costs{opt.non_negative("forward", 1),         opt.non_negative("backward-input", 1),
                                  opt.non_negative("backward-weight", 1), opt.non_negative("p2p", 0),
                                  opt.non_negative("bytes", 0),           opt.non_negative("bandwidth", 0)};
  std::vector<pipe::SchedulePrediction> predictions =
      pipe::simulate_schedules(micro_batches, stages, costs, opt.chunks());
  if (table) {
    pipe::ValidateOptions options;
    options.costs = costs;
    predictions.push_back({"file", {}, pipe::validate_schedule(stages_of(*table), stages, options)});
  }
  std::cout << "stages " << stages << "  micro-batches " << micro_batches << "  forward " << costs.forward
            << "  backward input " << costs.backward_input << "  backward weight " << costs.backward_weight << "  p2p "
            << costs.p2p;
  if (opt.get("bytes")) std::cout << "  bytes " << costs.p2p_bytes << "  bandwidth " << costs.bandwidth;
  std::cout << "\n";
  std::cout << "schedule              time  over bound   idle  peak activations (stages)\n";
  for (const pipe::SchedulePrediction& p : predictions) {
    std::ostringstream label;
    label << p.schedule;
    const auto& registry = pipe::schedule_registry();
    const auto entry = std::ranges::find(registry, p.schedule, &pipe::ScheduleEntry::name);
    if (entry != registry.end() && entry->more_chunks && p.why_not.empty()) label << '/' << p.report.chunks;
    std::cout << std::left << std::setw(18) << label.str();
    if (!p.why_not.empty()) {
      std::cout << "  not defined: " << p.why_not << "\n";
      continue;
    }
    std::ostringstream over;
    const double bound = p.report.lower_bound;  // 0 only when every cost is
    over << '+' << std::fixed << std::setprecision(1) << (bound > 0 ? 100 * (p.report.time / bound - 1) : 0.0) << '%';
    std::cout << std::right << std::setw(6) << std::setprecision(4) << p.report.time << std::setw(12) << over.str()
              << "  " << std::fixed << std::setprecision(3) << p.report.idle_fraction << std::defaultfloat << "  "
              << std::setw(6) << p.report.peak_activations() << "\n";
  }
  std::cout << "recommended: " << predictions[pipe::recommend(predictions)].schedule << "\n";
}

void run_trace(const Options& opt) {
  const std::optional<pipe::ScheduleTable> table = schedule_file(opt);
  const std::string name = table ? table->source() : opt.required("schedule");
  const int stages = table ? table->stages() : opt.number("stages", 1);
  const int micro_batches = table ? table->micro_batches() : opt.number("micro-batches", 1);
  const std::string path = opt.required("out");
  std::ofstream file(path);
  if (!file) throw std::runtime_error("cannot open " + path + " for writing");
  try {
    if (table)
      pipe::write_chrome_trace(file, stages_of(*table), stages);
    else
      pipe::write_chrome_trace(file, name, micro_batches, stages, opt.chunks());
    file.close();
    if (!file) throw std::runtime_error("could not write " + path);
  } catch (...) {
    // Leave no half-written trace behind for a viewer to choke on.
    file.close();
    std::error_code ignored;
    std::filesystem::remove(path, ignored);
    throw;
  }
  std::cout << "wrote the " << name << " schedule (" << stages << " stages, " << micro_batches << " micro-batches) to "
            << path << "\n";
}

struct Command {
  std::string_view name;
  std::vector<std::string_view> options;  // the accepted --options, without the dashes
  void (*run)(const Options&);
};

const Command kCommands[] = {
    {"schedule", {"schedule", "stages", "micro-batches", "chunks", "stage"}, run_schedule},
    {"export", {"schedule", "stages", "micro-batches", "chunks", "out"}, run_export},
    {"partition", {"method", "weights", "names", "stages"}, run_partition},
    {"topology", {"axes", "dims"}, run_topology},
    {"validate", {"schedule", "stages", "micro-batches", "chunks", "file", "max-activations"}, run_validate},
    {"simulate",
     {"stages", "micro-batches", "chunks", "forward", "backward-input", "backward-weight", "p2p", "bytes", "bandwidth",
      "file"},
     run_simulate},
    {"trace", {"schedule", "stages", "micro-batches", "chunks", "out", "file"}, run_trace},
};

void run(const std::vector<std::string>& args) {
  if (args.empty()) throw UsageError("no command given");
  if (is_help(args[0])) {
    std::cout << kUsage;
    return;
  }
  const auto command = std::ranges::find(kCommands, args[0], &Command::name);
  if (command == std::end(kCommands)) throw UsageError("unknown command '" + args[0] + "'");
  const Options options(command->name, command->options, std::span(args).subspan(1));
  if (options.help())
    std::cout << kUsage;
  else
    command->run(options);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    run(std::vector<std::string>(argv + 1, argv + argc));
    if (!std::cout.flush()) {
      std::cerr << "strata-pipe: could not write the output\n";
      return 1;
    }
    return 0;
  } catch (const UsageError& e) {
    std::cerr << "strata-pipe: " << e.what() << "\n" << kUsage;
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "strata-pipe: " << e.what() << "\n";
    return 1;
  }
}
