// `moert bench`'s own options, validated once before anything is loaded, as `moert run`
// validates its options: each outside its range is one line naming the option and its value.
// The engine options (add_engine_options) are checked where they are resolved.
#pragma once

#include <boost/program_options.hpp>

namespace moert::launch {

// The ranges (docs/bench.md): --num-requests in [1, 10^6] when given (left out: 4 x the batch
// size, at least 8); --input-len and --output-len >= 1, and for synthetic prompts the longest
// request they make (input and output at (1 + --len-range) times their means under
// --len-dist uniform) must fit the model's context, max_position_embeddings of the model's
// config.json; --warmup in [0, 1000]; --seed >= 0; --repeats in [1, 1000]; --len-dist fixed or uniform;
// --len-range in [0, 1); --batch-sizes entries in [1, 2^20]; --json, --csv and --plot name
// different files. Throws CommandError. A config.json that cannot be read is left to the
// model load to report.
void validate_bench_options(const boost::program_options::variables_map& vm);

}  // namespace moert::launch
