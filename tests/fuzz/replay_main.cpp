// The driver of a fuzz target where libFuzzer is not available (g++ builds, the sanitizer suite): runs every
// input of the given corpus folders once, then mutates them at random (bit flips, interesting bytes,
// insertions, deletions, duplications, truncations, splices) for --seconds, from a fixed --seed, so a run
// is repeatable. A failing input is whatever makes the process crash: each input is written to
// fuzz-last-input before it runs, so after a crash that file holds the culprit.
//
//   strata_fuzz_read_idx --seconds 10 corpus/read_idx

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

using Bytes = std::vector<uint8_t>;

Bytes read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

constexpr const char* kLastInput = "fuzz-last-input";

// Keeps the input on disk while it runs: a crash leaves it behind.
void run(const Bytes& input) {
  std::ofstream(kLastInput, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(input.data()), static_cast<std::streamsize>(input.size()));
  LLVMFuzzerTestOneInput(input.data(), input.size());
}

Bytes mutate(const std::vector<Bytes>& corpus, std::mt19937_64& rng) {
  Bytes b = corpus[rng() % corpus.size()];
  static constexpr uint8_t kInteresting[] = {0, 1, 0x7F, 0x80, 0xFF, '"', '{', '}', ',', '9'};
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits; ++e) {
    const size_t at = b.empty() ? 0 : rng() % b.size();
    switch (rng() % 7) {
      case 0:
        if (!b.empty()) b[at] ^= static_cast<uint8_t>(1u << (rng() % 8));
        break;
      case 1:
        if (!b.empty()) b[at] = kInteresting[rng() % sizeof(kInteresting)];
        break;
      case 2:
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), 1 + rng() % 8, static_cast<uint8_t>(rng()));
        break;
      case 3:
        if (!b.empty())
          b.erase(b.begin() + static_cast<std::ptrdiff_t>(at),
                  b.begin() + static_cast<std::ptrdiff_t>(std::min(b.size(), at + 1 + rng() % 16)));
        break;
      case 4:
        if (!b.empty()) {
          const size_t len = std::min(b.size() - at, static_cast<size_t>(1 + rng() % 32));
          const Bytes piece(b.begin() + static_cast<std::ptrdiff_t>(at),
                            b.begin() + static_cast<std::ptrdiff_t>(at + len));
          b.insert(b.begin() + static_cast<std::ptrdiff_t>(rng() % (b.size() + 1)), piece.begin(), piece.end());
        }
        break;
      case 5:
        b.resize(at);
        break;
      default: {
        const Bytes& other = corpus[rng() % corpus.size()];
        if (!other.empty())
          b.insert(b.begin() + static_cast<std::ptrdiff_t>(at),
                   other.begin() + static_cast<std::ptrdiff_t>(rng() % other.size()), other.end());
      }
    }
  }
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 5;
  uint64_t seed = 1;
  std::vector<Bytes> corpus;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--seconds" || arg == "--seed") && i + 1 < argc) {
      if (arg == "--seconds")
        seconds = std::strtod(argv[++i], nullptr);
      else
        seed = std::strtoull(argv[++i], nullptr, 10);
      continue;
    }
    if (!std::filesystem::is_directory(arg)) {
      std::cerr << "usage: " << argv[0] << " [--seconds S] [--seed N] CORPUS_DIR...\n";
      return 2;
    }
    for (const auto& entry : std::filesystem::directory_iterator(arg))
      if (entry.is_regular_file()) corpus.push_back(read_file(entry.path()));
  }
  if (corpus.empty()) {
    std::cerr << argv[0] << ": the corpus is empty (tests/fuzz/seeds.py writes one)\n";
    return 2;
  }
  uint64_t runs = 0;
  for (const Bytes& input : corpus) {
    run(input);
    ++runs;
  }
  std::mt19937_64 rng(seed);
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (; std::chrono::steady_clock::now() < end; ++runs) run(mutate(corpus, rng));
  std::filesystem::remove(kLastInput);
  std::cout << argv[0] << ": " << runs << " inputs (" << corpus.size() << " seeds, then mutations for " << seconds
            << " s from seed " << seed << "), no failure\n";
  return 0;
}
