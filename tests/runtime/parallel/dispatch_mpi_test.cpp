// DeepEP-style dispatch/combine check over the real MPI transport (run under mpirun -np
// 2 and 4): every token's hidden row carries (source rank, token index); each destination
// checks exactly which rows and ids arrive, in which order and how many, and returns
// contributions that encode (computing rank, source, token, expert), which the source
// checks row by row after the combine exchange. Placements: contiguous and with replicas.
#include <gtest/gtest.h>

#include <random>

#include "experts/placement/dispatch_plan.h"
#include "runtime/comm/transport.h"
#include "tests/runtime/comm/mpi_test_main.h"

namespace moert::parallel {
namespace {

constexpr int kHidden = 4;
constexpr int kTopK = 3;
constexpr int kExperts = 10;

struct Tokens {
  std::vector<int32_t> ids;   // [T, K]
  std::vector<float> weights;  // [T, K]
};

// Rank s's routing at `step`, reproducible on every rank (so peers can predict it).
Tokens tokens_of(int source, int step) {
  std::mt19937 rng(static_cast<uint32_t>(1000 * step + source));
  const int64_t num_tokens = (source + step) % 4 == 0 ? 0 : 1 + static_cast<int64_t>(rng() % 9);
  Tokens tokens;
  std::vector<int32_t> all(kExperts);
  for (int e = 0; e < kExperts; ++e) all[static_cast<size_t>(e)] = e;
  for (int64_t t = 0; t < num_tokens; ++t) {
    std::shuffle(all.begin(), all.end(), rng);
    for (int k = 0; k < kTopK; ++k) {
      tokens.ids.push_back(all[static_cast<size_t>(k)]);
      tokens.weights.push_back(0.5f);
    }
  }
  return tokens;
}

int64_t num_tokens(const Tokens& t) { return static_cast<int64_t>(t.ids.size()) / kTopK; }

experts::LayerPlacement make_placement(bool replicas, int num_ranks) {
  std::vector<std::vector<int32_t>> rank_experts(static_cast<size_t>(num_ranks));
  for (int e = 0; e < kExperts; ++e) rank_experts[static_cast<size_t>(e * num_ranks / kExperts)].push_back(e);
  if (replicas) {
    for (int e = 0; e < kExperts; e += 3) rank_experts[static_cast<size_t>((e + 1) % num_ranks)].push_back(e);
  }
  return experts::LayerPlacement::create(kExperts, rank_experts).value();
}

std::vector<int64_t> scaled(const std::vector<int64_t>& rows, int64_t bytes) {
  std::vector<int64_t> out;
  for (int64_t r : rows) out.push_back(r * bytes);
  return out;
}

void check_step(comm::Transport& transport, const experts::LayerPlacement& placement, int step) {
  const int me = transport.rank();
  const int world = transport.world_size();
  const Tokens mine = tokens_of(me, step);
  const int64_t t_count = num_tokens(mine);
  std::vector<float> hidden(static_cast<size_t>(t_count * kHidden), 0.0f);
  for (int64_t t = 0; t < t_count; ++t) {
    hidden[static_cast<size_t>(t * kHidden)] = static_cast<float>(me);
    hidden[static_cast<size_t>(t * kHidden + 1)] = static_cast<float>(t);
  }
  const experts::DispatchPlan plan =
      experts::build_dispatch_plan(placement, me, mine.ids, mine.weights, t_count, kTopK).value();
  std::vector<float> send(static_cast<size_t>(plan.num_send_rows() * kHidden));
  experts::gather_send_rows(plan, hidden, kHidden, send);

  // Dispatch: counts, rows and ids.
  const std::vector<int64_t> recv_counts = transport.all_to_all_counts(plan.send_row_counts).value();
  int64_t num_recv = 0;
  for (int64_t c : recv_counts) num_recv += c;
  std::vector<float> recv(static_cast<size_t>(num_recv * kHidden));
  std::vector<int32_t> recv_ids(static_cast<size_t>(num_recv * kTopK));
  const int64_t row_bytes = kHidden * sizeof(float), id_bytes = kTopK * sizeof(int32_t);
  ASSERT_TRUE(transport.start_all_to_all_v(send.data(), scaled(plan.send_row_counts, row_bytes), recv.data(),
                                           scaled(recv_counts, row_bytes))->wait().is_ok());
  ASSERT_TRUE(transport.start_all_to_all_v(plan.send_expert_ids.data(), scaled(plan.send_row_counts, id_bytes),
                                           recv_ids.data(), scaled(recv_counts, id_bytes))->wait().is_ok());

  // Expected arrivals from the routing rule alone: (s, t) once, sources then tokens ascending.
  std::vector<int64_t> expected_counts(static_cast<size_t>(world), 0);
  std::vector<std::pair<int, int64_t>> expected_rows;
  std::vector<int32_t> expected_ids;
  for (int s = 0; s < world; ++s) {
    const Tokens theirs = tokens_of(s, step);
    for (int64_t t = 0; t < num_tokens(theirs); ++t) {
      std::vector<int32_t> row(kTopK, -1);
      bool any = false;
      for (int k = 0; k < kTopK; ++k) {
        const int32_t e = theirs.ids[static_cast<size_t>(t * kTopK + k)];
        if (placement.replica_rank(e, s + t) == me) {
          row[static_cast<size_t>(k)] = e;
          any = true;
        }
      }
      if (!any) continue;
      ++expected_counts[static_cast<size_t>(s)];
      expected_rows.emplace_back(s, t);
      expected_ids.insert(expected_ids.end(), row.begin(), row.end());
    }
  }
  EXPECT_EQ(recv_counts, expected_counts) << "rank " << me << " step " << step;
  EXPECT_EQ(recv_ids, expected_ids) << "rank " << me << " step " << step;
  ASSERT_EQ(static_cast<size_t>(num_recv), expected_rows.size());
  for (size_t i = 0; i < expected_rows.size(); ++i) {
    EXPECT_EQ(recv[i * kHidden], static_cast<float>(expected_rows[i].first)) << "row " << i;
    EXPECT_EQ(recv[i * kHidden + 1], static_cast<float>(expected_rows[i].second)) << "row " << i;
  }

  // Combine: contribution = (computing rank, source, token, expert).
  std::vector<float> recv_w(recv_ids.size(), 1.0f);
  const experts::ExpertComputePlan compute =
      experts::build_expert_compute_plan(placement, me, recv_counts, recv_ids, recv_w, kTopK).value();
  std::vector<float> contributions(static_cast<size_t>(compute.num_contribs() * kHidden));
  for (int64_t c = 0; c < compute.num_contribs(); ++c) {
    const float* x = recv.data() + compute.layout.entry_row[static_cast<size_t>(c)] * kHidden;
    float* y = contributions.data() + c * kHidden;
    y[0] = static_cast<float>(me);
    y[1] = x[0];
    y[2] = x[1];
    y[3] = static_cast<float>(compute.layout.entry_expert[static_cast<size_t>(c)]);
  }
  std::vector<float> returned(static_cast<size_t>(plan.num_return_rows() * kHidden));
  ASSERT_TRUE(transport.start_all_to_all_v(contributions.data(), scaled(compute.return_row_counts, row_bytes),
                                           returned.data(), scaled(plan.return_row_counts, row_bytes))->wait().is_ok());
  for (int64_t t = 0; t < t_count; ++t) {
    std::vector<std::pair<int32_t, int>> by_expert;  // (expert, k), the combine order
    for (int k = 0; k < kTopK; ++k) by_expert.emplace_back(mine.ids[static_cast<size_t>(t * kTopK + k)], k);
    std::sort(by_expert.begin(), by_expert.end());
    for (int j = 0; j < kTopK; ++j) {
      const float* row = returned.data() + plan.combine_src_rows[static_cast<size_t>(t * kTopK + j)] * kHidden;
      const int32_t e = by_expert[static_cast<size_t>(j)].first;
      EXPECT_EQ(row[0], static_cast<float>(placement.replica_rank(e, me + t))) << "token " << t << " expert " << e;
      EXPECT_EQ(row[1], static_cast<float>(me));
      EXPECT_EQ(row[2], static_cast<float>(t));
      EXPECT_EQ(row[3], static_cast<float>(e));
    }
  }
}

TEST(DispatchOverMpi, EveryRowReachesItsExpertsRankAndComesBack) {
  comm::Transport& transport = comm::testing::mpi_test_transport();
  for (const bool replicas : {false, true}) {
    const experts::LayerPlacement placement = make_placement(replicas, transport.world_size());
    for (int step = 0; step < 12; ++step) check_step(transport, placement, step);
  }
}

}  // namespace
}  // namespace moert::parallel
