// Engine options shared by `moert run` and `moert bench`, and the summary both print.
#pragma once

#include <boost/program_options.hpp>
#include <string>

#include <functional>
#include <memory>

#include "core/thread_pool.h"

#include "experts/placement/placement.h"
#include "runtime/backend/backend.h"
#include "runtime/comm/transport.h"
#include "runtime/engine/engine.h"
#include "runtime/model/config.h"
#include "runtime/model/weights.h"
#include "runtime/parallel/payload_codec.h"

namespace moert::launch {

struct EngineOptions {
  int block_size = 16;
  int kv_blocks = 0;           // 0: derived from kv_cache_mb
  double kv_cache_mb = 1024;   // KV pool size when kv_blocks is 0
  double kv_cache_memory_fraction = 0.0;  // > 0: the pool is this share of the node's available memory
  int max_batched_tokens = 2048;
  int max_seqs = 64;
  bool no_prefix_caching = false;
  std::string threads = "auto";  // a count >= 1, or auto
  std::string kv_cache_dtype = "auto";  // auto, f32, bf16, fp8_e4m3
  std::string device = "cpu";           // cpu, cuda
  std::string ep_transport = "auto";    // auto, nccl, mpi: what moves the expert-parallel rows
  std::string ep_dispatch_dtype = "f32";  // f32, bf16, fp8: what the dispatched rows travel as
  std::string ep_combine_dtype = "f32";   // f32, bf16: what the expert outputs travel back as
  std::string micro_batches = "auto";     // 1, 2, auto: MoE micro-batches per step (parallel::BatchJobConfig)
  std::string fp4_activations = "f32";  // f32, int8, fp4: what NVFP4 / MXFP4 weights are computed with
  std::string fp8_activations = "f32";  // f32, bf16: what the CPU computes FP8 weights with
  std::string bf16_activations = "f32";  // f32, bf16: what the CPU computes dense BF16 weights with
  std::string weight_memory = "copy";    // copy, mmap, mlock: where the CPU's weights live
  int cuda_graph_max_batch = 16;  // decode steps of up to this many sequences as CUDA graphs (--device cuda)
  bool enforce_eager = false;     // no CUDA graphs (vLLM's spelling of --cuda-graph-max-batch 0)
};

void add_engine_options(boost::program_options::options_description& options, EngineOptions& values);
// Validates and resolves the pool size for `config`; throws CommandError naming the option.
// `--kv-cache-dtype auto` becomes `auto_kv_cache_dtype`, the preference of the backend the
// model runs on (Backend::preferred_kv_cache_dtype; F32 for the CPU backend).
engine::EngineConfig resolve_engine_config(const EngineOptions& values, const ModelConfig& config,
                                           DType auto_kv_cache_dtype = DType::kF32);
int resolve_threads(const EngineOptions& values);
// `--ep-dispatch-dtype` and `--ep-combine-dtype` (runtime/parallel/payload_codec.h). Throws
// CommandError with one line naming the option; narrower than f32 needs a host row transport
// (the rows are encoded on the host): refused here with --ep-transport nccl, and by
// RankWorker::start when auto picks NCCL.
parallel::PayloadDTypes resolve_payload_dtypes(const EngineOptions& values);
// `--micro-batches`: 1, 2, or 0 for auto (parallel::BatchJobConfig::micro_batches). Throws
// CommandError with one line naming the value.
int resolve_micro_batches(const EngineOptions& values);
// Under an MPI launcher, one info line per rank with what it derived from its node: local rank
// and ranks per node (launcher environment), threads, CPUs in its affinity mask, memory per local
// rank (what the KV pool check divides). resolve_threads calls it.
void log_rank_resources(int threads);
// The backend of `--device` (cpu or cuda) for this rank, never null: the CPU backend over
// `pool` (which must outlive it) for cpu, the CUDA backend on GPU local_rank % devices for
// cuda. Throws CommandError with one line naming the problem (no CUDA in this build, no GPU,
// a bad value).
std::unique_ptr<backend::Backend> open_device_backend(const std::string& device, ThreadPool& pool);
// `--fp4-activations` (f32, int8: the CPU backend only, quant/cpu/int8_linear.h; fp4) and
// `--fp8-activations` (f32, bf16: the CPU backend only, quant/cpu/bf16_linear.h) for `--device`.
// Throws CommandError with one line naming the problem.
// `--bf16-activations` (f32, bf16: the CPU backend only, the same mode for dense BF16 weights).
struct ActivationModes {
  quant::ActivationPrecision fp4 = quant::ActivationPrecision::kF32;
  quant::ActivationPrecision fp8 = quant::ActivationPrecision::kF32;
  quant::ActivationPrecision bf16 = quant::ActivationPrecision::kF32;
};
ActivationModes resolve_activation_modes(const std::string& fp4_value, const std::string& fp8_value,
                                         const std::string& bf16_value, const std::string& device);
// `--weight-memory` (copy, mmap, mlock; runtime/model/weight_memory.h): where the weights the
// CPU backend computes with live. Only copy (which a device ignores) with --device cuda.
// Throws CommandError with one line naming the problem.
WeightMemory resolve_weight_memory(const std::string& value, const std::string& device);
// The model at `model_dir` in the checkpoint's layout, its FP4 weights computed with
// `activations.fp4`. Throws CommandError with one line naming the problem.
std::unique_ptr<LoadedModel> load_model_from(const std::string& model_dir, const ActivationModes& activations,
                                             bool mtp = false);
// Lays `model` out on `backend` (Backend::prepare_weights): the CPU-only activation modes of
// `activations`, `weight_memory`, and only the routed experts routed_expert_here(layer,
// expert) accepts (empty: every expert; an expert-parallel rank passes its placement's).
// Throws CommandError with one line naming the problem.
void lay_out_model(LoadedModel& model, backend::Backend& backend, const ActivationModes& activations,
                   WeightMemory weight_memory, const std::function<bool(int layer, int expert)>& routed_expert_here = {});
// Both, for a rank that computes every expert.
// `mtp`: with the multi-token prediction layers (LoadOptions::mtp).
std::unique_ptr<LoadedModel> load_model_on(const std::string& model_dir, backend::Backend& backend,
                                           const ActivationModes& activations, WeightMemory weight_memory,
                                           bool mtp = false);
// The transport that moves the expert-parallel rows under `--ep-transport` (null: `control`
// does; backend::open_row_transport). Collective over `control`. Throws CommandError with one
// line naming the problem.
std::unique_ptr<comm::Transport> open_row_transport(const std::string& ep_transport, const backend::Backend& backend,
                                                    comm::Transport& control);
// The KV pool's bytes for --kv-cache-memory-fraction: fraction x MemAvailable (/proc/meminfo)
// / ranks on this node. Throws CommandError when the fraction is outside (0, 1] or the
// available memory cannot be read.
double kv_pool_bytes_from_fraction(double fraction);
// ", fp4 activations int8" under --fp4-activations int8 (likewise --fp8-activations and
// --bf16-activations, with the bf16 mode's CPU path; ", weight memory mmap" for a
// --weight-memory other than copy), else nothing (for the start-up line).
std::string describe_weight_modes(const EngineOptions& values, const backend::Backend& backend);
// One line with the effective configuration (printed at start-up).
std::string describe_engine_config(const engine::EngineConfig& config, int threads);
// The end-of-run summary lines.
// `model` gives the KV cache bytes per token at the engine's KV dtype.
std::string engine_summary(const engine::EngineStats& stats, const engine::EngineConfig& config,
                           const ModelConfig& model, double wall_s);

}  // namespace moert::launch
