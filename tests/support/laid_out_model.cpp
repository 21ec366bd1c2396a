#include "tests/support/laid_out_model.h"

#include <gtest/gtest.h>

namespace moert::testing {

std::unique_ptr<LoadedModel> load_laid_out(const std::string& dir, backend::Backend& backend,
                                           const backend::WeightPreparation& how, const LoadOptions& options) {
  Result<std::unique_ptr<LoadedModel>> model = load_model(dir, options);
  if (!model.is_ok()) {
    ADD_FAILURE() << dir << ": " << model.status().to_string();
    return nullptr;
  }
  const Status laid_out = backend.prepare_weights((*model)->weights, *(*model)->checkpoint, how);
  if (!laid_out.is_ok()) {
    ADD_FAILURE() << dir << " on " << backend.name() << ": " << laid_out.to_string();
    return nullptr;
  }
  return std::move(model).value();
}

}  // namespace moert::testing
