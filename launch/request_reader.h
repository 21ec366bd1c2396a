// Rank 0's reading of a `moert run` input file (docs/requests.md): each line -> a request line
// the ranks parse (serving/request_io.h keys, text resolved into prompt_token_ids, generation
// defaults applied) or an error line written to the output at once. OpenAI batch lines are
// translated (serving/openai_batch.h); what their results need is kept here, by request id.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "launch/job.h"
#include "launch/serving/output_file.h"
#include "launch/text_io.h"
#include "runtime/engine/engine.h"
#include "runtime/model/generation_config.h"

namespace moert::launch {

// Rank 0's view of the input file.
struct ParsedInput {
  RequestBatch requests;             // to serve (request_io.h keys, text resolved), in input order
  // The "openai" object of each request that came from an OpenAI batch line, by
  // Request::id_json: its result is written in the OpenAI batch shape.
  std::unordered_map<std::string, std::string> openai_by_id;
  int failed_lines = 0;
  int skipped = 0;                   // already in the output file
};

// What rank 0 needs to turn input lines into requests.
struct RequestContext {
  const engine::Engine& engine;
  const CheckpointText* text;        // may be null
  const GenerationDefaults* defaults;  // null: --generation-config none
  std::string model_dir;
  int64_t created = 0;               // Unix time of the job's start, for OpenAI results
  int64_t max_sequence_length = 0;    // Engine::max_sequence_length
};

// Reads `input_path`: requests whose id is in `done` are skipped; a line that cannot be served
// is reported (log and an error line in `writer`) and counted. Throws CommandError when the
// file cannot be read or an error line cannot be written.
ParsedInput read_requests(const std::string& input_path, const std::unordered_set<std::string>& done,
                          const RequestContext& context, serving::OutputFile& writer);

}  // namespace moert::launch
