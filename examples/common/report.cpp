#include "report.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <stdexcept>

namespace report {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

std::string duration(double s) {
  std::ostringstream os;
  const auto total = static_cast<int64_t>(std::lround(s));
  if (total >= 60)
    os << total / 60 << "m" << std::setw(2) << std::setfill('0') << total % 60 << "s";
  else
    os << total << "s";
  return os.str();
}

// Writes through a temporary file and a rename, so readers never see a half-written file.
void write_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    if (!out.flush()) throw std::runtime_error("cannot write " + tmp);
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace

ProgressBar::ProgressBar(int epoch, int epochs, int64_t batches)
    : epoch_(epoch),
      epochs_(epochs),
      batches_(batches),
      tty_(isatty(STDOUT_FILENO) != 0),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

std::string ProgressBar::line(int64_t done, double loss, int64_t samples) const {
  const double elapsed = seconds_since(start_);
  const double rate = elapsed > 0 ? samples / elapsed : 0;
  const double eta = done > 0 ? elapsed * (batches_ - done) / done : 0;
  std::ostringstream os;
  os << "epoch " << epoch_ << "/" << epochs_ << " ";
  if (tty_) {
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(kWidth * done / std::max<int64_t>(batches_, 1));
    os << "[" << std::string(filled, '=') << (filled < kWidth ? ">" : "")
       << std::string(std::max(kWidth - filled - 1, 0), ' ') << "] ";
  }
  os << done << "/" << batches_ << " loss " << std::fixed << std::setprecision(4) << loss << " " << std::setprecision(0)
     << rate << " samples/s ETA " << duration(eta);
  return os.str();
}

void ProgressBar::update(int64_t done, double loss, int64_t samples) {
  if (tty_) {
    // Redrawing costs a write per call; ten times a second is plenty for the eye.
    if (done < batches_ && seconds_since(last_draw_) < 0.1) return;
    last_draw_ = std::chrono::steady_clock::now();
    std::cout << "\r" << line(done, loss, samples) << "\033[K" << std::flush;
  } else if (done >= next_plain_) {
    std::cout << line(done, loss, samples) << "\n" << std::flush;
    next_plain_ = done + std::max<int64_t>(batches_ / 10, 1);
  }
}

void ProgressBar::finish(const std::string& summary) {
  if (tty_) std::cout << "\r\033[K";
  std::cout << "epoch " << epoch_ << "/" << epochs_ << " " << summary << " (" << duration(seconds_since(start_))
            << ")\n"
            << std::flush;
}

std::vector<EpochMetrics> read_csv(const std::string& path) {
  std::vector<EpochMetrics> rows;
  std::ifstream in(path);
  std::string line;
  if (!std::getline(in, line)) return rows;  // absent, or no header
  while (std::getline(in, line)) {
    EpochMetrics m;
    char c;
    std::istringstream is(line);
    if (is >> m.epoch >> c >> m.train_loss >> c >> m.test_loss >> c >> m.test_accuracy >> c >> m.samples_per_s >> c >>
        m.seconds)
      rows.push_back(m);
  }
  return rows;
}

void write_csv(const std::string& path, const std::vector<EpochMetrics>& rows) {
  std::ostringstream os;
  os << "epoch,train_loss,test_loss,test_accuracy,samples_per_s,seconds\n" << std::setprecision(6);
  for (const auto& m : rows)
    os << m.epoch << "," << m.train_loss << "," << m.test_loss << "," << m.test_accuracy << "," << m.samples_per_s
       << "," << m.seconds << "\n";
  write_atomically(path, os.str());
}

namespace {

// One chart: series of (epoch, value) in a box at (x0, y0) of size w x h, with axis labels.
struct Series {
  std::string label, colour;
  std::vector<double> values;
};

void chart(std::ostringstream& os, double x0, double y0, double w, double h, const std::string& title,
           const std::vector<int>& epochs, const std::vector<Series>& series) {
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& s : series)
    for (double v : s.values) lo = std::min(lo, v), hi = std::max(hi, v);
  if (!(hi > lo)) lo -= 0.5, hi += 0.5;  // one point, or a flat line
  const double pad = 0.05 * (hi - lo);
  lo -= pad, hi += pad;
  const int e0 = epochs.front(), e1 = std::max(epochs.back(), e0 + 1);
  auto x = [&](double e) { return x0 + w * (e - e0) / (e1 - e0); };
  auto y = [&](double v) { return y0 + h * (hi - v) / (hi - lo); };

  os << "<text x='" << x0 + w / 2 << "' y='" << y0 - 12 << "' text-anchor='middle' font-size='15'>" << title
     << "</text>\n<rect x='" << x0 << "' y='" << y0 << "' width='" << w << "' height='" << h
     << "' fill='none' stroke='#444'/>\n";
  for (int i = 0; i <= 4; ++i) {  // horizontal grid with value labels
    const double v = lo + (hi - lo) * i / 4;
    os << "<line x1='" << x0 << "' x2='" << x0 + w << "' y1='" << y(v) << "' y2='" << y(v)
       << "' stroke='#ddd'/>\n<text x='" << x0 - 6 << "' y='" << y(v) + 4 << "' text-anchor='end' font-size='11'>"
       << std::fixed << std::setprecision(3) << v << "</text>\n";
  }
  const int step = std::max(1, (e1 - e0) / 10);
  for (int e = e0; e <= e1; e += step)
    os << "<text x='" << x(e) << "' y='" << y0 + h + 16 << "' text-anchor='middle' font-size='11'>" << e << "</text>\n";
  os << "<text x='" << x0 + w / 2 << "' y='" << y0 + h + 34 << "' text-anchor='middle' font-size='12'>epoch</text>\n";
  for (size_t k = 0; k < series.size(); ++k) {
    const auto& s = series[k];
    os << "<polyline fill='none' stroke-width='2' stroke='" << s.colour << "' points='";
    for (size_t i = 0; i < s.values.size(); ++i) os << x(epochs[i]) << "," << y(s.values[i]) << " ";
    os << "'/>\n";
    for (size_t i = 0; i < s.values.size(); ++i)
      os << "<circle r='3' fill='" << s.colour << "' cx='" << x(epochs[i]) << "' cy='" << y(s.values[i]) << "'/>\n";
    const double ly = y0 + 16 + 16.0 * k;
    os << "<line x1='" << x0 + w - 110 << "' x2='" << x0 + w - 90 << "' y1='" << ly - 4 << "' y2='" << ly - 4
       << "' stroke-width='2' stroke='" << s.colour << "'/>\n<text x='" << x0 + w - 84 << "' y='" << ly
       << "' font-size='12'>" << s.label << "</text>\n";
  }
}

}  // namespace

void write_svg(const std::string& path, const std::vector<EpochMetrics>& rows) {
  if (rows.empty()) return;
  std::vector<int> epochs;
  Series train{"train loss", "#1f77b4", {}}, test{"test loss", "#ff7f0e", {}}, acc{"test accuracy", "#2ca02c", {}};
  for (const auto& m : rows) {
    epochs.push_back(m.epoch);
    train.values.push_back(m.train_loss);
    test.values.push_back(m.test_loss);
    acc.values.push_back(m.test_accuracy);
  }
  std::ostringstream os;
  os << "<svg xmlns='http://www.w3.org/2000/svg' width='900' height='380' font-family='sans-serif'>\n"
     << "<rect width='900' height='380' fill='white'/>\n";
  chart(os, 70, 40, 350, 280, "Loss", epochs, {train, test});
  chart(os, 520, 40, 350, 280, "Test accuracy", epochs, {acc});
  os << "</svg>\n";
  write_atomically(path, os.str());
}

}  // namespace report
