// strata-flight: reads the flight recorder files of a failed job (STRATA_FLIGHT_RECORDER_DIR/rank<r>.json,
// distributed/flight_recorder.h) and says on one screen where the ranks parted: the first collective that
// the ranks called differently or that a rank never arrived at, the point-to-point transfer a rank waits for
// in vain, which ranks left no record, and what each rank was doing when it wrote its file.
//
//   STRATA_FLIGHT_RECORDER_DIR=fr mpirun -np 4 ./train ...   # the job fails
//   strata-flight fr
//   first problem: rank 1 never arrived at all_reduce #2 on WORLD (Float [4], SUM); ranks 0, 2, 3 waited ...
//
// Exit status: 0 when the files were read (whatever they show), 1 when none could be, 2 for a bad command line.

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

using Json = nlohmann::json;

struct Call {
  int64_t group = -1;
  uint64_t seq = 0;
  std::string op, dtype, reduce_op, state, label;
  std::vector<int64_t> shape;
  int root = -1, peer = -1, tag = 0;
  int64_t start_ns = 0, end_ns = 0;
  bool p2p() const { return peer >= 0; }
  bool done() const { return state == "completed"; }
  bool sends() const { return op == "send" || op == "isend"; }
};

struct GroupInfo {
  std::string name;
  std::vector<int> ranks;
};

struct RankFile {
  int rank = -1, world_size = 0;
  std::string reason, host;
  int64_t dumped_ns = 0;
  size_t size = 0;  // the ring's capacity: a file with this many calls lost older ones
  std::map<int64_t, GroupInfo> groups;
  std::vector<Call> calls;
};

struct Records {
  std::map<int, RankFile> ranks;  // by rank
  int world_size = 0;
  std::map<int64_t, GroupInfo> groups;
};

RankFile read_rank_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  const Json j = Json::parse(in);
  if (j.value("format", "") != "strata-flight-1") throw std::runtime_error(path.string() + " is not a flight record");
  RankFile f;
  f.rank = j.at("rank").get<int>();
  f.world_size = j.at("world_size").get<int>();
  f.reason = j.at("reason").get<std::string>();
  f.host = j.at("host").get<std::string>();
  f.dumped_ns = j.at("dumped_ns").get<int64_t>();
  f.size = j.at("size").get<size_t>();
  for (const Json& g : j.at("groups"))
    f.groups[g.at("id").get<int64_t>()] = {g.at("name").get<std::string>(), g.at("ranks").get<std::vector<int>>()};
  for (const Json& c : j.at("calls")) {
    Call call;
    call.group = c.at("group").get<int64_t>();
    call.seq = c.at("seq").get<uint64_t>();
    call.op = c.at("op").get<std::string>();
    call.dtype = c.at("dtype").get<std::string>();
    call.shape = c.at("shape").get<std::vector<int64_t>>();
    call.root = c.at("root").get<int>();
    call.peer = c.at("peer").get<int>();
    call.tag = c.at("tag").get<int>();
    call.reduce_op = c.at("reduce_op").is_null() ? "" : c.at("reduce_op").get<std::string>();
    call.state = c.at("state").get<std::string>();
    call.start_ns = c.at("start_ns").get<int64_t>();
    call.end_ns = c.at("end_ns").get<int64_t>();
    call.label = c.at("label").get<std::string>();
    f.calls.push_back(std::move(call));
  }
  return f;
}

Records read_records(const std::filesystem::path& dir) {
  Records r;
  std::vector<std::string> errors;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with("rank") || !name.ends_with(".json")) continue;
    try {
      RankFile f = read_rank_file(entry.path());
      r.world_size = std::max(r.world_size, f.world_size);
      for (const auto& [id, g] : f.groups) r.groups[id] = g;
      r.ranks[f.rank] = std::move(f);
    } catch (const std::exception& e) {
      errors.push_back(name + ": " + e.what());
    }
  }
  for (const std::string& e : errors) std::cerr << "strata-flight: skipping " << e << "\n";
  if (r.ranks.empty()) throw std::runtime_error("no flight record (rank<r>.json) could be read in " + dir.string());
  return r;
}

std::string list(const std::vector<int>& ranks) {
  std::ostringstream os;
  os << (ranks.size() == 1 ? "rank " : "ranks ");
  for (size_t i = 0; i < ranks.size(); ++i) os << (i ? ", " : "") << ranks[i];
  return os.str();
}

std::string group_name(const Records& r, int64_t id) {
  const auto it = r.groups.find(id);
  return it == r.groups.end() ? "group " + std::to_string(id) : it->second.name;
}

// "all_reduce #2 on WORLD (Float [4], SUM)", "recv from rank 1, tag 0 (Float [4])".
std::string describe(const Records& r, const Call& c) {
  std::ostringstream os;
  if (c.p2p())
    os << c.op << (c.sends() ? " to rank " : " from rank ") << c.peer << ", tag " << c.tag;
  else
    os << c.op << " #" << c.seq << " on " << group_name(r, c.group);
  os << " (" << c.dtype << " [";
  for (size_t d = 0; d < c.shape.size(); ++d) os << (d ? ", " : "") << c.shape[d];
  os << "]";
  if (!c.reduce_op.empty()) os << ", " << c.reduce_op;
  if (c.root >= 0) os << ", root " << c.root;
  os << ")";
  if (!c.label.empty()) os << " [" << c.label << "]";
  return os.str();
}

std::string seconds(int64_t ns) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(1) << static_cast<double>(ns) / 1e9 << " s";
  return os.str();
}

// The same call as far as ranks must agree (all_to_all's shapes may differ, and labels are the caller's).
bool same_call(const Call& a, const Call& b) {
  const bool shapes_may_differ = a.op.starts_with("all_to_all");
  return a.op == b.op && a.dtype == b.dtype && a.root == b.root && a.reduce_op == b.reduce_op &&
         (shapes_may_differ || a.shape == b.shape);
}

struct Finding {
  int64_t when_ns;
  std::string text;
};

// The first call number on `group` where its ranks' calls differ, a rank never arrived, or all arrived
// and the call never finished.
std::optional<Finding> check_group(const Records& r, int64_t id, const GroupInfo& g) {
  std::map<int, std::map<uint64_t, const Call*>> by_rank;  // member -> seq -> call
  uint64_t first = 1, last = 0;
  for (int member : g.ranks) {
    const auto file = r.ranks.find(member);
    if (file == r.ranks.end()) continue;
    auto& calls = by_rank[member];
    for (const Call& c : file->second.calls)
      if (!c.p2p() && c.group == id) calls[c.seq] = &c;
    // A full ring lost its oldest calls: compare only what every rank still holds.
    if (!calls.empty() && file->second.calls.size() >= file->second.size) first = std::max(first, calls.begin()->first);
    if (!calls.empty()) last = std::max(last, calls.rbegin()->first);
  }
  std::vector<int> no_record;
  for (int member : g.ranks)
    if (!r.ranks.count(member)) no_record.push_back(member);
  for (uint64_t seq = first; seq <= last; ++seq) {
    std::vector<int> arrived, absent;
    std::vector<const Call*> calls;
    for (const auto& [member, rank_calls] : by_rank) {
      const auto it = rank_calls.find(seq);
      if (it == rank_calls.end()) {
        absent.push_back(member);
      } else {
        arrived.push_back(member);
        calls.push_back(it->second);
      }
    }
    if (calls.empty()) continue;
    const int64_t when = (*std::min_element(calls.begin(), calls.end(), [](const Call* a, const Call* b) {
                           return a->start_ns < b->start_ns;
                         }))->start_ns;
    // Ranks that made the same call share one entry.
    std::vector<std::pair<const Call*, std::vector<int>>> variants;
    for (size_t i = 0; i < calls.size(); ++i) {
      auto v =
          std::find_if(variants.begin(), variants.end(), [&](const auto& x) { return same_call(*x.first, *calls[i]); });
      if (v == variants.end())
        variants.push_back({calls[i], {arrived[i]}});
      else
        v->second.push_back(arrived[i]);
    }
    if (variants.size() > 1) {
      std::ostringstream os;
      os << "the ranks of " << group_name(r, id) << " diverge at call #" << seq << ": ";
      for (size_t i = 0; i < variants.size(); ++i)
        os << (i ? "; " : "") << list(variants[i].second) << " called " << describe(r, *variants[i].first);
      return Finding{when, os.str()};
    }
    const bool unfinished = std::any_of(calls.begin(), calls.end(), [](const Call* c) { return !c->done(); });
    if (!absent.empty() || (!no_record.empty() && unfinished)) {
      std::ostringstream os;
      std::vector<int> missing = absent;
      missing.insert(missing.end(), no_record.begin(), no_record.end());
      std::sort(missing.begin(), missing.end());
      os << list(missing) << " never arrived at " << describe(r, *calls.front()) << ", which " << list(arrived)
         << " entered";
      for (int m : absent) {
        const auto& mine = by_rank.at(m);
        os << "; rank " << m << "'s last call on " << group_name(r, id) << " was ";
        if (mine.empty())
          os << "none";
        else
          os << "#" << mine.rbegin()->first << " (" << mine.rbegin()->second->state << ")";
      }
      for (int m : no_record) os << "; rank " << m << " left no record";
      return Finding{when, os.str()};
    }
    if (unfinished) {
      std::vector<int> waiting;
      for (size_t i = 0; i < calls.size(); ++i)
        if (!calls[i]->done()) waiting.push_back(arrived[i]);
      std::ostringstream os;
      os << "every rank of " << group_name(r, id) << " arrived at " << describe(r, *calls.front())
         << ", but it never finished on " << list(waiting)
         << " (a rank died in it, or the network between them failed)";
      return Finding{when, os.str()};
    }
  }
  return std::nullopt;
}

// Point-to-point calls still waiting: is the other side waiting for the matching one?
std::vector<Finding> check_p2p(const Records& r) {
  std::vector<Finding> out;
  for (const auto& [rank, file] : r.ranks)
    for (const Call& c : file.calls) {
      if (!c.p2p() || c.done()) continue;
      std::ostringstream os;
      os << "rank " << rank << " waits in " << describe(r, c) << "; ";
      const auto peer = r.ranks.find(c.peer);
      if (peer == r.ranks.end()) {
        os << "rank " << c.peer << " left no record";
      } else {
        const auto& calls = peer->second.calls;
        // rank = rank: clang before 16 cannot capture a structured binding.
        const bool partner = std::any_of(calls.begin(), calls.end(), [&, rank = rank](const Call& p) {
          return p.p2p() && !p.done() && p.peer == rank && p.tag == c.tag && p.sends() != c.sends();
        });
        os << "rank " << c.peer
           << (partner ? " has posted the matching call too, and the transfer never finished"
                       : (c.sends() ? " never posted the matching receive" : " never posted the matching send"));
      }
      out.push_back({c.start_ns, os.str()});
    }
  return out;
}

// "blocked for 3.0 s in all_reduce #2 on WORLD (...)" or "not in communication; its last call ...".
std::string doing(const Records& r, const RankFile& f) {
  const Call* blocked = nullptr;
  for (const Call& c : f.calls)
    if (!c.done()) blocked = &c;
  std::ostringstream os;
  if (blocked) {
    os << "waiting for " << seconds(f.dumped_ns - blocked->start_ns) << " in " << describe(r, *blocked);
  } else if (!f.calls.empty()) {
    const Call& c = f.calls.back();
    os << "not in communication; its last call, " << describe(r, c) << ", finished " << seconds(f.dumped_ns - c.end_ns)
       << " before";
  } else {
    os << "no communication recorded";
  }
  return os.str();
}

void analyse(const Records& r, const std::string& dir) {
  std::vector<int> have, missing;
  for (int rank = 0; rank < r.world_size; ++rank) (r.ranks.count(rank) ? have : missing).push_back(rank);
  std::cout << "strata-flight: " << r.world_size << " ranks; records from " << list(have) << " in " << dir;
  if (!missing.empty())
    std::cout << "; none from " << list(missing) << " (killed before it could write, or never started)";
  std::cout << "\n";
  std::vector<Finding> findings = check_p2p(r);
  for (const auto& [id, g] : r.groups)
    if (auto f = check_group(r, id, g)) findings.push_back(*f);
  std::stable_sort(findings.begin(), findings.end(),
                   [](const Finding& a, const Finding& b) { return a.when_ns < b.when_ns; });
  if (findings.empty())
    std::cout << "no problem found: every recorded call was made alike and finished\n";
  else
    std::cout << "first problem: " << findings.front().text << "\n";
  for (size_t i = 1; i < findings.size() && i < 4; ++i) std::cout << "then: " << findings[i].text << "\n";
  for (const auto& [rank, f] : r.ranks)
    std::cout << "rank " << rank << " (" << f.host << "): wrote its record on: " << f.reason << "; " << doing(r, f)
              << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  const std::string usage = "usage: strata-flight DIR   (the STRATA_FLIGHT_RECORDER_DIR of a failed job)\n";
  if (argc != 2 || std::string(argv[1]) == "-h" || std::string(argv[1]) == "--help") {
    (argc == 2 ? std::cout : std::cerr) << usage;
    return argc == 2 ? 0 : 2;
  }
  try {
    analyse(read_records(argv[1]), argv[1]);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "strata-flight: " << e.what() << "\n";
    return 1;
  }
}
