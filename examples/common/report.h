#pragma once
// What the examples show a person: a progress bar per epoch, a CSV of metrics and an SVG plot of
// loss and accuracy. Plain C++; nothing here depends on strata.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace report {

/// One epoch's progress on one line: batches done, running loss, samples/s and ETA. On a terminal
/// the line redraws in place; otherwise (a file, CI) it prints a plain line every tenth of the epoch.
class ProgressBar {
 public:
  ProgressBar(int epoch, int epochs, int64_t batches);                        ///< starts the clock
  void update(int64_t batches_done, double mean_loss, int64_t samples_done);  ///< after each batch
  void finish(const std::string& summary);                                    ///< ends the line with `summary`

 private:
  std::string line(int64_t batches_done, double mean_loss, int64_t samples_done) const;
  int epoch_, epochs_;
  int64_t batches_;
  bool tty_;
  int64_t next_plain_ = 0;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

/// One row of metrics.csv.
struct EpochMetrics {
  int epoch = 0;
  double train_loss = 0, test_loss = 0, test_accuracy = 0, samples_per_s = 0, seconds = 0;
};

/// Reads the rows of an existing metrics.csv (to continue it after --resume); none when absent.
std::vector<EpochMetrics> read_csv(const std::string& path);
/// Writes every row to `path` (through a temporary file, so a crash never leaves half a file).
void write_csv(const std::string& path, const std::vector<EpochMetrics>& rows);
/// Draws train/test loss and test accuracy against epoch as a standalone SVG file.
void write_svg(const std::string& path, const std::vector<EpochMetrics>& rows);

}  // namespace report
