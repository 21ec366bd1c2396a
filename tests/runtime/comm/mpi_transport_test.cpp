// The Transport contract under a real mpirun (1, 2 and 4 ranks: comm_mpi_test_np*).
#include "runtime/comm/mpi_transport.h"

#include <gtest/gtest.h>

#include "core/log.h"
#include "tests/runtime/comm/comm_checks.h"
#include "tests/runtime/comm/mpi_test_main.h"

namespace moert::comm {
namespace {

using testing::mpi_test_transport;

TEST(MpiTransport, IdentityAndBarrier) { testing::check_identity_and_barrier(mpi_test_transport()); }
TEST(MpiTransport, AllReduce) { testing::check_all_reduce(mpi_test_transport()); }
TEST(MpiTransport, Broadcast) { testing::check_broadcast(mpi_test_transport()); }
TEST(MpiTransport, Gather) { testing::check_gather(mpi_test_transport()); }
TEST(MpiTransport, Gatherv) { testing::check_gatherv(mpi_test_transport()); }

TEST(MpiTransport, AllToAllPayloadsArriveExactly) {
  for (int seed = 0; seed < 5; ++seed) testing::check_all_to_all_payloads(mpi_test_transport(), seed);
}

TEST(MpiTransport, AllToAllOddByteCounts) { testing::check_all_to_all_odd_bytes(mpi_test_transport()); }
TEST(MpiTransport, ZeroSizeExchanges) { testing::check_zero_size_exchanges(mpi_test_transport()); }
TEST(MpiTransport, OverlapAndSeveralExchangesInFlight) {
  testing::check_overlap(mpi_test_transport());
}

TEST(MpiTransport, SessionSetsTheProcessIdentity) {
  Transport& transport = mpi_test_transport();
  EXPECT_EQ(process_identity().rank, transport.rank());
  EXPECT_EQ(process_identity().world_size, transport.world_size());
  EXPECT_FALSE(process_identity().host.empty());
}

TEST(MpiTransport, SecondTransportIsIndependent) {
  auto second = make_mpi_transport();
  ASSERT_TRUE(second.is_ok()) << second.status().to_string();
  EXPECT_EQ((*second)->rank(), mpi_test_transport().rank());
  testing::check_all_to_all_payloads(**second, 2);
}

}  // namespace
}  // namespace moert::comm
