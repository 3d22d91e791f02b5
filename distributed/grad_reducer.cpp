#include "strata/distributed/grad_reducer.h"

#include <algorithm>
#include <map>
#include <utility>

#include "strata/autograd/engine.h"
#include "strata/autograd/grad_mode.h"

namespace strata::distributed {

namespace {
constexpr double kFirstBucketCapMb = 1;  // torch's _DEFAULT_FIRST_BUCKET_BYTES
constexpr double kBytesPerMb = 1024.0 * 1024.0;
}  // namespace

std::vector<std::vector<size_t>> GradReducer::make_buckets(const std::vector<Tensor>& params, double cap_mb,
                                                           const std::vector<size_t>& keys) {
  struct Open {
    size_t index;
    int64_t bytes;
    bool first;
  };
  std::map<std::pair<ScalarType, size_t>, Open> open;
  std::vector<std::vector<size_t>> buckets;
  for (size_t i = params.size(); i-- > 0;) {
    const auto key = std::make_pair(params[i].dtype(), keys.empty() ? 0 : keys.at(i));
    const auto bytes = static_cast<int64_t>(params[i].nbytes());
    auto it = open.find(key);
    const bool full =
        it != open.end() && static_cast<double>(it->second.bytes + bytes) >
                                (it->second.first ? std::min(cap_mb, kFirstBucketCapMb) : cap_mb) * kBytesPerMb;
    if (it == open.end() || full) {
      open.insert_or_assign(key, Open{buckets.size(), 0, it == open.end()});
      buckets.emplace_back();
    }
    Open& o = open.at(key);
    buckets[o.index].push_back(i);
    o.bytes += bytes;
  }
  return buckets;
}

GradReducer::GradReducer(std::string who, std::vector<Tensor> params, std::vector<std::string> names,
                         std::vector<std::vector<size_t>> buckets, Callbacks callbacks, std::string create_graph_remedy)
    : who_(std::move(who)),
      create_graph_remedy_(std::move(create_graph_remedy)),
      params_(std::move(params)),
      names_(std::move(names)),
      buckets_(std::move(buckets)),
      callbacks_(std::move(callbacks)),
      bucket_of_(params_.size(), buckets_.size()),
      ready_(params_.size(), false),
      pending_(buckets_.size(), 0),
      works_(buckets_.size()) {
  STRATA_CHECK(names_.size() == params_.size(), who_, ": got ", names_.size(), " names for ", params_.size(),
               " parameters");
  for (size_t b = 0; b < buckets_.size(); ++b)
    for (size_t i : buckets_[b]) {
      STRATA_CHECK(i < params_.size() && bucket_of_[i] == buckets_.size(), who_, ": parameter ", i,
                   " is out of range or in two buckets");
      bucket_of_[i] = b;
    }
  for (size_t i = 0; i < params_.size(); ++i)
    STRATA_CHECK(bucket_of_[i] < buckets_.size(), who_, ": parameter ", names_[i], " is in no bucket");
  for (size_t i = 0; i < params_.size(); ++i)
    hooks_.push_back(params_[i].register_post_accumulate_grad_hook([this, i](const Tensor&) { on_grad(i); }));
}

GradReducer::~GradReducer() {
  for (size_t i = 0; i < hooks_.size(); ++i) params_[i].remove_post_accumulate_grad_hook(hooks_[i]);
}

// The post-accumulate hook of parameter i.
void GradReducer::on_grad(size_t i) {
  if (!sync) return;
  if (pass_alive_.expired()) begin_pass();
  STRATA_CHECK(!ready_[i], who_, ": parameter ", names_[i],
               " got a second gradient in one backward (a backward started from a hook?)");
  ready_[i] = true;
  if (--pending_[bucket_of_[i]] == 0)
    while (launched_ < buckets_.size() && pending_[launched_] == 0) launch_next();
}

// The first gradient of a synchronized backward: resets the counts and queues finish() for the pass's end.
void GradReducer::begin_pass() {
  if (pass_open_) abandon_pass();
  STRATA_CHECK(!GradMode::is_enabled(), who_, ": backward with create_graph is not supported (the ",
               "reduced gradients would have no history); ", create_graph_remedy_);
  ready_.assign(ready_.size(), false);
  for (size_t b = 0; b < buckets_.size(); ++b) pending_[b] = buckets_[b].size();
  launched_ = 0;
  auto alive = std::make_shared<char>();
  pass_alive_ = alive;
  autograd::queue_callback([this, alive] { finish(); });
  pass_open_ = true;
}

// Note [abandoned pass]: a backward that threw part-way, finish() included, left pass_open_ set:
// some collectives may be in flight and grad() holds local gradients. The next backward notices
// (the queued callback died with the pass), waits for the started collectives (ranks that failed alike
// started the same ones) so no buffer is written behind its back, and throws.
void GradReducer::abandon_pass() {
  pass_open_ = false;
  for (size_t b = 0; b < launched_; ++b) works_[b]->wait();
  STRATA_CHECK(false, who_, ": the previous backward stopped (threw) before its gradients were ",
               "reduced, so the gradients are not the average over the ranks; zero the gradients and redo the step ",
               "on every rank");
}

// Starts bucket launched_'s collective. launched_ counts it only once its work exists: abandon_pass() waits
// for exactly those.
void GradReducer::launch_next() {
  NoGradGuard no_grad;
  works_[launched_] = callbacks_.launch(launched_);
  ++launched_;
}

// The queued callback: starts what no gradient started, then waits for every bucket in order. The pass stays
// open until the end, so that a throw here leaves the next backward to abandon it.
void GradReducer::finish() {
  while (launched_ < buckets_.size()) launch_next();
  NoGradGuard no_grad;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    works_[b]->wait();
    callbacks_.complete(b);
  }
  pass_open_ = false;
}

}  // namespace strata::distributed
