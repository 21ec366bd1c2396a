// The coordinator's wire form of finished requests: each rank encodes the RequestOutputs of
// its step into bytes, rank 0 decodes them back (pure; no transport here). This is not a
// user-facing format (launch/serving formats results): it only has to carry every field
// exactly, doubles as their bits, so that what rank 0 formats is what the rank produced.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "runtime/engine/engine.h"

namespace moert::parallel {

// Appends `outputs` to `out`, self-delimited (a count, then each record).
void encode_request_outputs(const std::vector<engine::RequestOutput>& outputs, std::vector<uint8_t>& out);
// Decodes what encode_request_outputs wrote from bytes [*offset, size); advances *offset.
// internal_error naming the field when the bytes end early or hold an impossible count.
Result<std::vector<engine::RequestOutput>> decode_request_outputs(const uint8_t* bytes, size_t size, size_t* offset);

}  // namespace moert::parallel
