#include "tests/runtime/comm/mpi_test_main.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <string>
#include <utility>

#include "runtime/comm/mpi_transport.h"

namespace moert::comm::testing {
namespace {

Transport* g_transport = nullptr;

std::function<RunGate(Transport&)>& run_gate() {
  static std::function<RunGate(Transport&)> gate;
  return gate;
}

// Prints every failed assertion, tagged with the rank, as one write per failure.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}

  // Remembered here: UnitTest::current_test_info() would take the lock that gtest holds
  // while it reports a part result.
  void OnTestStart(const ::testing::TestInfo& test) override {
    test_name_ = std::string(test.test_suite_name()) + "." + test.name();
  }
  void OnTestEnd(const ::testing::TestInfo&) override { test_name_.clear(); }

  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::string line = "[rank " + std::to_string(rank_) + "] FAILED ";
    if (!test_name_.empty()) line += test_name_ + " ";
    line += "at " + std::string(result.file_name() ? result.file_name() : "?") + ":" +
            std::to_string(result.line_number()) + ": " + result.summary() + "\n";
    ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
    (void)ignored;
  }

 private:
  int rank_;
  std::string test_name_;
};

}  // namespace

Transport& mpi_test_transport() { return *g_transport; }

bool set_run_gate(std::function<RunGate(Transport& bootstrap)> gate) {
  run_gate() = std::move(gate);
  return true;
}

}  // namespace moert::comm::testing

int main(int argc, char** argv) {
  moert::comm::MpiSession session(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  int exit_code = 0;
  {
    auto transport = moert::comm::make_mpi_transport();
    if (!transport.is_ok()) {
      std::fprintf(stderr, "[rank %d] make_mpi_transport: %s\n", session.rank(),
                   transport.status().to_string().c_str());
      return 1;
    }
    moert::comm::testing::g_transport = transport->get();
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    if (session.rank() != 0) delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new moert::comm::testing::RankFailurePrinter(session.rank()));

    // The run gate, the same decision on every rank (the strictest); rank 0's filter.
    moert::comm::testing::RunGate gate;
    if (moert::comm::testing::run_gate()) gate = moert::comm::testing::run_gate()(**transport);
    int64_t decision = gate.decision;
    if (!(*transport)->all_reduce(&decision, 1, moert::comm::ReduceOp::kMax).is_ok()) decision = 2;
    if (decision != moert::comm::testing::RunGate::kRun && session.rank() == 0) {
      std::printf("%s: %s\n", decision == moert::comm::testing::RunGate::kSkip ? "skipped" : "FAILED", gate.reason.c_str());
      std::fflush(stdout);
    }
    if (decision == moert::comm::testing::RunGate::kSkip) {
      // The cases that must pass on a machine that cannot run the rest (the same on every rank).
      GTEST_FLAG_SET(filter, gate.filter.empty() ? std::string("-*") : gate.filter);
    }
    int64_t max_code = decision == moert::comm::testing::RunGate::kFail ? 1 : RUN_ALL_TESTS();
    moert::Status status = (*transport)->all_reduce(&max_code, 1, moert::comm::ReduceOp::kMax);
    if (!status.is_ok()) {
      std::fprintf(stderr, "[rank %d] exit code all_reduce: %s\n", session.rank(),
                   status.to_string().c_str());
      max_code = 1;
    }
    exit_code = static_cast<int>(max_code);
    if (decision == moert::comm::testing::RunGate::kSkip && exit_code == 0) exit_code = 77;
    if (session.rank() == 0 && exit_code != 0 && exit_code != 77) {
      std::fprintf(stderr, "[rank 0] largest exit code over %d ranks: %d\n", session.world_size(),
                   exit_code);
    }
    moert::comm::testing::g_transport = nullptr;
  }
  return exit_code;
}
