// main() of the distributed tests: every rank runs every test; rank 0 prints the usual
// report, the other ranks print only their failures, tagged with their rank.

#include <gtest/gtest.h>

#include <iostream>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

#include <strata/distributed/collectives.h>

namespace {

class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed())
      std::cerr << "[rank " << rank_ << "] " << (r.file_name() ? r.file_name() : "") << ":" << r.line_number()
                << ": Failure\n"
                << r.summary() << std::endl;
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed())
      std::cerr << "[rank " << rank_ << "] FAILED " << info.test_suite_name() << "." << info.name() << std::endl;
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
#if defined(__SANITIZE_ADDRESS__)
  __lsan_disable();  // what MPI_Init allocates is Open MPI's to keep (and partly unattributable)
#endif
  strata::distributed::init();
#if defined(__SANITIZE_ADDRESS__)
  __lsan_enable();
#endif
  const int rank = strata::distributed::get_rank();
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(rank));
  }
  const int rc = RUN_ALL_TESTS();
#if defined(__SANITIZE_ADDRESS__)
  // Leaks are checked now, while MPI is still up: MPI_Finalize unloads Open MPI's components and
  // leaves blocks LeakSanitizer can neither attribute nor suppress. This is the only leak check.
  __lsan_do_leak_check();
#endif
  strata::distributed::finalize();
  return rc;
}
