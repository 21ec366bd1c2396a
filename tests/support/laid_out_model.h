// A checkpoint loaded and laid out on a backend, as `moert run` does (load_model, then
// Backend::prepare_weights): for tests of what a backend's own layout computes.
#pragma once

#include <memory>
#include <string>

#include "runtime/backend/backend.h"
#include "runtime/model/weights.h"

namespace moert::testing {

// Fails the calling test (ADD_FAILURE) and returns null when loading or the layout fails.
std::unique_ptr<LoadedModel> load_laid_out(const std::string& dir, backend::Backend& backend,
                                           const backend::WeightPreparation& how = {}, const LoadOptions& options = {});

}  // namespace moert::testing
