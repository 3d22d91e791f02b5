#include "strata/tensor/dispatch_log.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <utility>

namespace strata {

namespace {

bool env_turns_logging_on() {
  const char* value = std::getenv("STRATA_DISPATCH_LOG");
  return value != nullptr && std::strcmp(value, "1") == 0;
}

std::atomic<bool> logging_on{env_turns_logging_on()};

std::map<std::string, std::string, std::less<>>& last_paths() {
  thread_local std::map<std::string, std::string, std::less<>> paths;
  return paths;
}

}  // namespace

void set_dispatch_logging(bool on) { logging_on.store(on, std::memory_order_relaxed); }

bool dispatch_logging() { return logging_on.load(std::memory_order_relaxed); }

void log_dispatch(std::string_view op, std::string_view path) {
  auto& paths = last_paths();
  auto it = paths.find(op);
  if (it == paths.end()) it = paths.emplace(std::string(op), std::string()).first;
  if (it->second != path) it->second.assign(path);
  if (!dispatch_logging()) return;
  static std::mutex mutex;
  static std::set<std::pair<std::string, std::string>> printed;
  const std::lock_guard<std::mutex> lock(mutex);
  if (printed.emplace(std::string(op), std::string(path)).second)
    std::cerr << "strata dispatch: " + std::string(op) + ": " + std::string(path) + "\n" << std::flush;
}

std::string last_dispatch(std::string_view op) {
  const auto& paths = last_paths();
  const auto it = paths.find(op);
  return it == paths.end() ? std::string() : it->second;
}

}  // namespace strata
