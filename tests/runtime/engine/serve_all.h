// Test helper: serves every request through an engine until none is left, with an
// optional speculative-decoding proposer. Failures are reported as test failures.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "runtime/engine/engine.h"

namespace moert::testing {

inline std::map<std::string, engine::RequestOutput> serve_all(const TransformerForward& model,
                                                              const engine::EngineConfig& config,
                                                              const std::vector<engine::Request>& requests,
                                                              spec::Proposer* proposer = nullptr,
                                                              engine::EngineStats* stats = nullptr,
                                                              const engine::TokenText* text = nullptr) {
  engine::Engine server(model, config);
  server.set_proposer(proposer);
  server.set_token_text(text);
  for (const engine::Request& request : requests) {
    const Status added = server.add_request(request);
    EXPECT_TRUE(added.is_ok()) << added.to_string();
  }
  std::map<std::string, engine::RequestOutput> outputs;
  while (server.has_unfinished()) {
    Result<std::vector<engine::RequestOutput>> finished = server.step();
    EXPECT_TRUE(finished.is_ok()) << finished.status().to_string();
    if (!finished.is_ok()) break;
    for (engine::RequestOutput& output : *finished) outputs[output.id] = std::move(output);
  }
  if (stats != nullptr) *stats = server.stats();
  return outputs;
}

}  // namespace moert::testing
