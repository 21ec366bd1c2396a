// Placement tests: contiguous slices, replicas and their round-robin choice, the JSON
// placement file and its error messages.
// Shapes: E experts, S slots, R ranks.
#include "experts/placement/placement.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace moert::experts {
namespace {

std::vector<int32_t> vec(std::span<const int32_t> s) { return {s.begin(), s.end()}; }

TEST(ContiguousPlacement, EarlierRanksGetOneMore) {
  Result<ExpertPlacement> p = contiguous_placement(10, 4, 2);
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_EQ(p->num_layers(), 2);
  const LayerPlacement& l = p->layer(1);
  EXPECT_EQ(l.num_slots(), 10);
  EXPECT_EQ(l.cu_rank_slots(), (std::vector<int32_t>{0, 3, 6, 8, 10}));
  EXPECT_EQ(vec(l.rank_experts(0)), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(vec(l.rank_experts(2)), (std::vector<int32_t>{6, 7}));
  EXPECT_EQ(l.slot_to_rank(), (std::vector<int32_t>{0, 0, 0, 1, 1, 1, 2, 2, 3, 3}));
  for (int e = 0; e < 10; ++e) {
    EXPECT_EQ(vec(l.replicas(e)), (std::vector<int32_t>{e}));
    EXPECT_EQ(l.replica_choice(e, 12345), e);
  }
  EXPECT_TRUE(l.rank_hosts(3, 9));
  EXPECT_FALSE(l.rank_hosts(2, 9));
}

TEST(ContiguousPlacement, MoreRanksThanExpertsLeavesEmptyRanks) {
  Result<ExpertPlacement> p = contiguous_placement(2, 3);
  ASSERT_TRUE(p.is_ok());
  EXPECT_EQ(p->layer(0).cu_rank_slots(), (std::vector<int32_t>{0, 1, 2, 2}));
  EXPECT_TRUE(p->layer(0).rank_experts(2).empty());
}

TEST(ContiguousPlacement, RejectsBadCounts) {
  EXPECT_EQ(contiguous_placement(0, 2).status().message(), "num_experts = 0 must be >= 1");
  EXPECT_EQ(contiguous_placement(4, 0).status().message(), "num_ranks = 0 must be >= 1");
}

TEST(LayerPlacement, ReplicasAndRoundRobinChoice) {
  // Rank 0: slots 0-2 = experts 0 1 2; rank 1: slots 3-6 = experts 3 0 1 0.
  Result<LayerPlacement> l = LayerPlacement::create(4, {{0, 1, 2}, {3, 0, 1, 0}});
  ASSERT_TRUE(l.is_ok()) << l.status().to_string();
  EXPECT_EQ(vec(l->replicas(0)), (std::vector<int32_t>{0, 4, 6}));
  EXPECT_EQ(vec(l->replicas(1)), (std::vector<int32_t>{1, 5}));
  EXPECT_EQ(l->num_replicas(3), 1);
  std::vector<int32_t> chosen;
  for (int64_t key = 0; key < 5; ++key) chosen.push_back(l->replica_choice(0, key));
  EXPECT_EQ(chosen, (std::vector<int32_t>{0, 4, 6, 0, 4}));
  EXPECT_EQ(l->replica_rank(1, 0), 0);
  EXPECT_EQ(l->replica_rank(1, 1), 1);
}

TEST(LayerPlacement, RejectsOutOfRangeAndMissingExperts) {
  EXPECT_EQ(LayerPlacement::create(4, {{0, 1}, {2, 4}}).status().message(), "rank_experts[1][1] = 4 must be in [0, 4)");
  EXPECT_EQ(LayerPlacement::create(4, {{0, 1}, {3, 0}}).status().message(),
            "expert 2 has no slot: every expert in [0, 4) must be placed at least once");
}

const char* kPlacementJson = R"({
  "num_ranks": 2,
  "layers": [
    {"rank_experts": [[0, 1, 2], [3, 4, 5, 0]]},
    {"rank_experts": [[5, 4], [3, 2, 1, 0]]}
  ]
})";

TEST(PlacementJson, ParsesLayersAndReplicas) {
  Result<ExpertPlacement> p = parse_placement_json(kPlacementJson, 6);
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_EQ(p->num_layers(), 2);
  EXPECT_EQ(p->num_ranks(), 2);
  EXPECT_EQ(p->num_experts(), 6);
  EXPECT_EQ(p->layer(0).slot_to_expert(), (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 0}));
  EXPECT_EQ(vec(p->layer(0).replicas(0)), (std::vector<int32_t>{0, 6}));
  EXPECT_EQ(p->layer(1).cu_rank_slots(), (std::vector<int32_t>{0, 2, 6}));
  EXPECT_EQ(p->layer(1).slot_rank(1), 0);

  // to_json round-trips.
  const std::string text = p->to_json();
  Result<ExpertPlacement> again = parse_placement_json(text, 6);
  ASSERT_TRUE(again.is_ok()) << again.status().to_string();
  EXPECT_EQ(again->to_json(), text);
  EXPECT_EQ(again->layer(1).slot_to_expert(), p->layer(1).slot_to_expert());
}

struct BadCase {
  std::string json;
  StatusCode code;
  std::string message;
};

TEST(PlacementJson, ErrorsNameTheOffendingValue) {
  const std::vector<BadCase> cases = {
      {"{not json", StatusCode::kCorrupt, "placement file is not valid JSON ([json.exception.parse_error.101] parse error at line 1, column 3: syntax error while parsing object key - invalid literal; last read: '{no'; expected string literal)"},
      {"[1, 2]", StatusCode::kCorrupt, "placement file must be a JSON object, got [1,2]"},
      {R"({"layers": []})", StatusCode::kCorrupt, "placement file has no \"num_ranks\""},
      {R"({"num_ranks": 0, "layers": []})", StatusCode::kInvalidArgument, "num_ranks = 0 must be >= 1"},
      {R"({"num_ranks": "2", "layers": []})", StatusCode::kCorrupt, "num_ranks = \"2\" must be an integer"},
      {R"({"num_ranks": 2, "layers": []})", StatusCode::kInvalidArgument,
       "layers is empty: at least one layer is needed"},
      {R"({"num_ranks": 2, "num_experts": 8, "layers": []})", StatusCode::kInvalidArgument,
       "num_experts = 8 does not match the model's 12"},
      {R"({"num_ranks": 2, "layers": [{"rank_experts": [[0,1,2,3,4,5],[6,7,8,9,10,11]]},
                                       {"rank_experts": [[0,1,12],[3,4,5,6,7,8,9,10,11]]}]})",
       StatusCode::kInvalidArgument, "layers[1].rank_experts[0][2] = 12 must be in [0, 12)"},
      {R"({"num_ranks": 2, "layers": [{"rank_experts": [[0,1,2,3,4,5],[6,-1,8,9,10,11]]}]})",
       StatusCode::kInvalidArgument, "layers[0].rank_experts[1][1] = -1 must be in [0, 12)"},
      {R"({"num_ranks": 2, "layers": [{"rank_experts": [[0,1,2,3,4,5],[6,1.5,8,9,10,11]]}]})",
       StatusCode::kCorrupt, "layers[0].rank_experts[1][1] = 1.5 must be an integer"},
      {R"({"num_ranks": 2, "layers": [{"rank_experts": [[0,1,2,3,4,5],[6,18446744073709551615,8,9,10,11]]}]})",
       StatusCode::kInvalidArgument,
       "layers[0].rank_experts[1][1] = 18446744073709551615 is outside [-2147483648, 2147483647]"},  // not -1
      {R"({"num_ranks": 2, "layers": [{"rank_experts": [[0,1,2,3,4,5],[6,8,9,10,11]]}]})",
       StatusCode::kInvalidArgument,
       "layers[0]: expert 7 has no slot: every expert in [0, 12) must be placed at least once"},
      {R"({"num_ranks": 3, "layers": [{"rank_experts": [[0,1,2,3,4,5],[6,7,8,9,10,11]]}]})",
       StatusCode::kInvalidArgument, "layers[0].rank_experts has 2 ranks, num_ranks = 3"},
      {R"({"num_ranks": 2, "layers": [{"experts": []}]})", StatusCode::kCorrupt,
       "layers[0] = {\"experts\":[]} must be an object with \"rank_experts\""},
  };
  for (const BadCase& c : cases) {
    Result<ExpertPlacement> p = parse_placement_json(c.json, 12);
    ASSERT_FALSE(p.is_ok()) << c.json;
    EXPECT_EQ(p.status().code(), c.code) << c.json;
    EXPECT_EQ(p.status().message(), c.message) << c.json;
  }
}

TEST(PlacementJson, LoadsFileAndReportsMissingFile) {
  const std::string path = ::testing::TempDir() + "moert_placement_test.json";
  {
    std::ofstream out(path);
    out << kPlacementJson;
  }
  Result<ExpertPlacement> p = load_placement_json(path, 6);
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_EQ(p->layer(0).num_slots(), 7);
  Result<ExpertPlacement> bad = load_placement_json(path, 7);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().message(),
            path + ": layers[0]: expert 6 has no slot: every expert in [0, 7) must be placed at least once");
  std::remove(path.c_str());
  EXPECT_EQ(load_placement_json(path, 6).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace moert::experts
