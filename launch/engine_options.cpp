#include "launch/engine_options.h"

#include <algorithm>
#include <cstdio>
#include <initializer_list>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "launch/commands.h"
#include "core/host_memory.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "runtime/backend/factory/backend_factory.h"
#include "runtime/comm/mpi_transport.h"
#include "runtime/runner/model_runner.h"

namespace po = boost::program_options;

namespace moert::launch {

void add_engine_options(po::options_description& options, EngineOptions& v) {
  options.add_options()
      ("block-size", po::value(&v.block_size)->default_value(16), "tokens per KV block")
      ("kv-blocks", po::value(&v.kv_blocks)->default_value(0), "KV blocks in the pool (0: from --kv-cache-mb)")
      ("kv-cache-mb", po::value(&v.kv_cache_mb)->default_value(1024), "KV pool size in MiB when --kv-blocks is 0")
      ("kv-cache-memory-fraction", po::value(&v.kv_cache_memory_fraction)->default_value(0.0),
       "KV pool size as a share in (0, 1] of the node's available memory, split among its ranks (instead of --kv-cache-mb)")
      ("max-batched-tokens", po::value(&v.max_batched_tokens)->default_value(2048),
       "token budget of one step (chunked prefill splits longer prompts)")
      ("max-seqs", po::value(&v.max_seqs)->default_value(64), "sequences running at once")
      ("no-prefix-caching", po::bool_switch(&v.no_prefix_caching), "disable prefix caching")
      ("kv-cache-dtype", po::value(&v.kv_cache_dtype)->default_value("auto"),
       "KV cache elements: auto (the backend's choice: f32 on the CPU, bf16 on CUDA), f32, bf16, fp8_e4m3 "
       "(per-block scale)")
      ("device", po::value(&v.device)->default_value("cpu"),
       "where the model computes: cpu, or cuda (rank r of a node on GPU r % GPUs)")
      ("ep-transport", po::value(&v.ep_transport)->default_value("auto"),
       "what moves the expert-parallel rows: auto (NCCL with --device cuda when built with NCCL, else MPI), nccl, "
       "or mpi (host memory)")
      ("ep-dispatch-dtype", po::value(&v.ep_dispatch_dtype)->default_value("f32"),
       "what the expert-parallel dispatch sends per hidden row: f32 (exact), bf16 (half the bytes) or fp8 (E4M3 "
       "with a scale per 128 values, ~0.26x the bytes); every routed row is rounded alike, local or remote, so "
       "outputs stay the same on any rank count; docs/ep-exchange.md")
      ("ep-combine-dtype", po::value(&v.ep_combine_dtype)->default_value("f32"),
       "what each expert output travels back as: f32 (exact) or bf16 (half the bytes); docs/ep-exchange.md")
      ("micro-batches", po::value(&v.micro_batches)->default_value("auto"),
       "expert-parallel micro-batches per step: 1, 2 (each MoE layer's tokens in two halves: one half's "
       "all-to-all in flight while the other half's experts compute; outputs bit-identical to 1) or auto (2 with "
       "several ranks once each half of a step gives a routed expert >= 8 rows on average); docs/ep-exchange.md")
      ("fp4-activations", po::value(&v.fp4_activations)->default_value("f32"),
       "what NVFP4 / MXFP4 weights are computed with: f32 (exact), int8 (CPU only: activations quantized per 16 "
       "elements, faster decode, logits off by ~1e-3 relative) or fp4 (W4A4: activations rounded per row to the "
       "weight's FP4 format, what block-scaled FP4 tensor cores compute; docs/quant-formats.md)")
      ("fp8-activations", po::value(&v.fp8_activations)->default_value("f32"),
       "what FP8 weights are computed with: f32 (exact) or bf16 (CPU only: activations rounded to BF16, products "
       "on BF16 pairs with per-block scales, fastest with AVX-512 BF16; logits off by ~1e-3 relative; "
       "docs/quant-formats.md)")
      ("bf16-activations", po::value(&v.bf16_activations)->default_value("f32"),
       "what dense BF16 weights (attention, experts, lm_head; not the router) are computed with: f32 (exact) or "
       "bf16 (CPU only: activations rounded to BF16, products on BF16 pairs; faster prefill and batched decode "
       "with AVX-512 BF16, logits off by ~1e-3 relative; docs/quant-formats.md)")
      ("weight-memory", po::value(&v.weight_memory)->default_value("copy"),
       "where the weights the CPU computes with live: copy (read into this process's memory, huge pages: stays "
       "resident whatever the page cache does), mmap (read in place from the checkpoint's page cache: shared by a "
       "node's ranks, nothing copied, but pages the kernel reclaims are re-read, which can slow decode several "
       "times) or mlock (in place, locked in memory; needs `ulimit -l` of the weights' size)")
      ("cuda-graph-max-batch", po::value(&v.cuda_graph_max_batch)->default_value(16),
       "with --device cuda on one rank: decode steps of up to this many sequences (0..16) run as CUDA graphs, "
       "recorded at a batch size's second step (0: none; docs/cuda-backend.md \"Step graphs\")")
      ("enforce-eager", po::bool_switch(&v.enforce_eager), "no CUDA graphs (--cuda-graph-max-batch 0)")
      ("threads", po::value(&v.threads)->default_value("auto"),
       "worker threads per rank, 1..4096 (auto: MOERT_NUM_THREADS, else the CPUs of the process's affinity mask, split "
       "among the ranks on this node when the launcher did not bind them)");
}

std::unique_ptr<backend::Backend> open_device_backend(const std::string& device, ThreadPool& pool) {
  return value_or_throw(backend::open_device(value_or_throw(backend::parse_device(device)), comm::local_rank(), pool));
}

namespace {

// One of `allowed` (a CPU-only value names the device it needs).
quant::ActivationPrecision resolve_activations(const char* option, const std::string& value,
                                               std::initializer_list<quant::ActivationPrecision> allowed,
                                               quant::ActivationPrecision cpu_only, const std::string& device) {
  const Result<quant::ActivationPrecision> parsed = quant::parse_activation_precision(value);
  std::string names;
  for (const quant::ActivationPrecision p : allowed) {
    names += std::string(names.empty() ? "" : ", ") + quant::activation_precision_name(p);
  }
  if (!parsed.is_ok() || std::find(allowed.begin(), allowed.end(), *parsed) == allowed.end()) {
    throw CommandError(std::string(option) + " '" + value + "' is not one of " + names);
  }
  if (*parsed == cpu_only && device != "cpu") {
    throw CommandError(std::string(option) + " " + value + " runs on the CPU only (--device cpu; got --device " +
                       device + ")");
  }
  return *parsed;
}

}  // namespace

ActivationModes resolve_activation_modes(const std::string& fp4_value, const std::string& fp8_value,
                                         const std::string& bf16_value, const std::string& device) {
  using P = quant::ActivationPrecision;
  return {resolve_activations("--fp4-activations", fp4_value, {P::kF32, P::kInt8, P::kFp4}, P::kInt8, device),
          resolve_activations("--fp8-activations", fp8_value, {P::kF32, P::kBf16}, P::kBf16, device),
          resolve_activations("--bf16-activations", bf16_value, {P::kF32, P::kBf16}, P::kBf16, device)};
}

WeightMemory resolve_weight_memory(const std::string& value, const std::string& device) {
  const Result<WeightMemory> parsed = parse_weight_memory(value);
  if (!parsed.is_ok()) throw CommandError("--weight-memory '" + value + "' is not one of copy, mmap, mlock");
  if (*parsed != WeightMemory::kCopy && device != "cpu") {
    throw CommandError("--weight-memory " + value + " runs on the CPU only (--device cpu; got --device " + device + ")");
  }
  return *parsed;
}

std::unique_ptr<LoadedModel> load_model_from(const std::string& model_dir, const ActivationModes& activations,
                                             bool mtp) {
  return value_or_throw(load_model(model_dir, LoadOptions{.fp4_activations = activations.fp4, .mtp = mtp}));
}

void lay_out_model(LoadedModel& model, backend::Backend& backend, const ActivationModes& activations,
                   WeightMemory weight_memory, const std::function<bool(int layer, int expert)>& routed_expert_here) {
  throw_if_error(backend.prepare_weights(model.weights, *model.checkpoint,
                                         backend::WeightPreparation{.fp8_activations = activations.fp8,
                                                                    .bf16_activations = activations.bf16,
                                                                    .memory = weight_memory,
                                                                    .routed_expert_here = routed_expert_here}));
}

std::unique_ptr<LoadedModel> load_model_on(const std::string& model_dir, backend::Backend& backend,
                                           const ActivationModes& activations, WeightMemory weight_memory, bool mtp) {
  std::unique_ptr<LoadedModel> model = load_model_from(model_dir, activations, mtp);
  lay_out_model(*model, backend, activations, weight_memory);
  return model;
}

std::unique_ptr<comm::Transport> open_row_transport(const std::string& ep_transport, const backend::Backend& backend,
                                                    comm::Transport& control) {
  return value_or_throw(
      backend::open_row_transport(value_or_throw(backend::parse_row_transport(ep_transport)), backend, control));
}

int resolve_micro_batches(const EngineOptions& v) {
  if (v.micro_batches == "auto") return 0;
  if (v.micro_batches == "1") return 1;
  if (v.micro_batches == "2") return 2;
  throw CommandError("--micro-batches '" + v.micro_batches + "' is not one of 1, 2, auto");
}

parallel::PayloadDTypes resolve_payload_dtypes(const EngineOptions& v) {
  parallel::PayloadDTypes dtypes;
  dtypes.dispatch = value_or_throw(parallel::parse_payload_dtype(v.ep_dispatch_dtype, true, "--ep-dispatch-dtype"));
  dtypes.combine = value_or_throw(parallel::parse_payload_dtype(v.ep_combine_dtype, false, "--ep-combine-dtype"));
  if (!dtypes.all_f32() && v.ep_transport == "nccl") {
    throw CommandError(std::string("--ep-dispatch-dtype ") + parallel::payload_dtype_name(dtypes.dispatch) +
                       " --ep-combine-dtype " + parallel::payload_dtype_name(dtypes.combine) +
                       " needs --ep-transport mpi (the rows are encoded on the host; NCCL moves device rows)");
  }
  return dtypes;
}

engine::EngineConfig resolve_engine_config(const EngineOptions& v, const ModelConfig& model, DType auto_kv_cache_dtype) {
  engine::EngineConfig c;
  resolve_payload_dtypes(v);  // checked before anything is written
  resolve_micro_batches(v);
  // --ep-transport is checked here, before anything is written; NCCL opens later.
  throw_if_error(backend::check_row_transport(value_or_throw(backend::parse_row_transport(v.ep_transport)),
                                              value_or_throw(backend::parse_device(v.device))));
  const Result<DType> kv_dtype = attention::parse_kv_cache_dtype(v.kv_cache_dtype, auto_kv_cache_dtype);
  if (!kv_dtype.is_ok()) throw CommandError(kv_dtype.status().message());
  c.kv_cache_dtype = *kv_dtype;
  c.block_size = v.block_size;
  c.enable_prefix_caching = !v.no_prefix_caching;
  c.scheduler.max_batched_tokens = v.max_batched_tokens;
  c.scheduler.max_seqs = v.max_seqs;
  if (v.cuda_graph_max_batch < 0 || v.cuda_graph_max_batch > runner::kMaxStepGraphBatch) {
    throw CommandError("--cuda-graph-max-batch = " + std::to_string(v.cuda_graph_max_batch) + " must be in [0, " +
                       std::to_string(runner::kMaxStepGraphBatch) + "]");
  }
  c.step_graph_max_batch = v.device == "cuda" && !v.enforce_eager ? v.cuda_graph_max_batch : 0;
  if (v.block_size < 1) throw CommandError("--block-size = " + std::to_string(v.block_size) + " must be >= 1");
  if (v.kv_blocks < 0) throw CommandError("--kv-blocks = " + std::to_string(v.kv_blocks) + " must be >= 0");
  // One block over every layer: the pool's unit from MiB, and its size for the memory check.
  const Result<int64_t> block_bytes = runner::kv_cache_bytes_per_block(model, c.block_size, c.kv_cache_dtype);
  if (!block_bytes.is_ok()) throw CommandError(block_bytes.status().message());
  if (v.kv_blocks > 0) {
    c.num_kv_blocks = v.kv_blocks;
  } else {
    if (!(v.kv_cache_mb > 0)) throw CommandError("--kv-cache-mb must be > 0");
    const double bytes = v.kv_cache_memory_fraction != 0.0 ? kv_pool_bytes_from_fraction(v.kv_cache_memory_fraction)
                                                           : v.kv_cache_mb * 1024.0 * 1024.0;
    const double blocks = bytes / static_cast<double>(*block_bytes);
    if (!(blocks < 2147483647.0)) {
      throw CommandError("a KV pool of " + std::to_string(bytes / 1048576.0) + " MiB holds more than 2^31 blocks; "
                         "give a smaller pool or a larger --block-size");
    }
    c.num_kv_blocks = static_cast<int>(blocks);
  }
  // The pool against what the node can give each of its ranks, before anything is allocated.
  const std::optional<int64_t> pool_bytes = checked_mul(c.num_kv_blocks, *block_bytes);
  const std::optional<int64_t> available = available_memory_bytes();
  const int ranks = comm::local_rank_count();
  if (!pool_bytes || (available && *pool_bytes > *available / ranks)) {
    char text[256];
    std::snprintf(text, sizeof(text), "the KV pool of %d blocks needs %.0f MiB, more than the %.0f MiB available to "
                  "each of this node's %d rank(s); lower --kv-cache-mb, --kv-blocks or --kv-cache-memory-fraction",
                  c.num_kv_blocks, pool_bytes ? static_cast<double>(*pool_bytes) / 1048576.0 : 1e300,
                  available ? static_cast<double>(*available) / ranks / 1048576.0 : 0.0, ranks);
    throw CommandError(text);
  }
  const Status valid = engine::validate_engine_config(c);
  if (!valid.is_ok()) throw CommandError(valid.message());
  return c;
}

double kv_pool_bytes_from_fraction(double fraction) {
  if (!(fraction > 0.0 && fraction <= 1.0)) {
    throw CommandError("--kv-cache-memory-fraction = " + std::to_string(fraction) + " must be in (0, 1]");
  }
  const std::optional<int64_t> available = available_memory_bytes();
  if (!available) throw CommandError("--kv-cache-memory-fraction: cannot read MemAvailable from /proc/meminfo");
  return fraction * static_cast<double>(*available) / comm::local_rank_count();
}

// --threads, else MOERT_NUM_THREADS, else the affinity mask shared among the node's ranks.
int resolve_threads(const EngineOptions& v) {
  if (v.threads != "auto") {
    char* end = nullptr;
    errno = 0;
    const long count = std::strtol(v.threads.c_str(), &end, 10);
    if (v.threads.empty() || *end != '\0' || errno != 0 || count < 1 || count > 4096) {
      throw CommandError("--threads '" + v.threads + "' must be auto or a count in [1, 4096]");
    }
    return static_cast<int>(count);
  }
  const int machine = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = std::getenv("MOERT_NUM_THREADS") != nullptr
                          ? default_num_threads()
                          : threads_for_rank(affinity_cpu_count(), machine, comm::local_rank_count());
  log_rank_resources(threads);
  return threads;
}

void log_rank_resources(int threads) {
  if (!comm::launched_by_mpi()) return;
  const int machine = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const std::optional<int64_t> available = available_memory_bytes();
  const int local_ranks = comm::local_rank_count();
  char text[320];
  std::snprintf(text, sizeof(text),
                "rank %d on %s: local rank %d of %d on this node, %d thread(s), %d of %d CPUs in its affinity mask, "
                "%.0f MiB available to each local rank",
                process_identity().rank, process_identity().host.c_str(), comm::local_rank(), local_ranks, threads,
                affinity_cpu_count(), machine,
                available ? static_cast<double>(*available) / local_ranks / 1048576.0 : -1.0);
  MOERT_INFO(text);
}

std::string describe_weight_modes(const EngineOptions& v, const backend::Backend& backend) {
  // The bf16 mode's path shows: without AVX-512 BF16 it is slower than f32 (same bits).
  const std::string bf16_path = " (" + backend.kernel_paths().bf16_activations + ")";
  return (v.fp4_activations == "f32" ? "" : ", fp4 activations " + v.fp4_activations) +
         (v.fp8_activations == "f32" ? "" : ", fp8 activations " + v.fp8_activations + bf16_path) +
         (v.bf16_activations == "f32" ? "" : ", bf16 activations " + v.bf16_activations + bf16_path) +
         (v.weight_memory == "copy" ? "" : ", weight memory " + v.weight_memory);
}

std::string describe_engine_config(const engine::EngineConfig& c, int threads) {
  char line[512];
  std::snprintf(line, sizeof(line),
                "engine: %d KV blocks x %d tokens (%s), prefix caching %s, max batched tokens %d, max seqs %d, %d threads",
                c.num_kv_blocks, c.block_size, attention::kv_cache_dtype_name(c.kv_cache_dtype),
                c.enable_prefix_caching ? "on" : "off", c.scheduler.max_batched_tokens,
                c.scheduler.max_seqs, threads);
  std::string text = line;
  if (c.step_graph_max_batch > 0) text += ", CUDA graphs up to batch " + std::to_string(c.step_graph_max_batch);
  return text;
}

std::string engine_summary(const engine::EngineStats& s, const engine::EngineConfig& c, const ModelConfig& model,
                           double wall_s) {
  const Result<int64_t> kv_bytes = runner::kv_cache_bytes_per_token(model, c.kv_cache_dtype);
  const double wall = wall_s > 0 ? wall_s : 1e-9;
  const double hit_rate = s.prefix_query_tokens > 0 ? static_cast<double>(s.prefix_hit_tokens) / s.prefix_query_tokens : 0.0;
  char text[1024];
  std::snprintf(text, sizeof(text),
                "summary: %.2f s, %lld steps, input %.1f tok/s (%lld tokens), output %.1f tok/s (%lld tokens), "
                "computed %lld tokens (forward %.2f s, sampling %.2f s)\n"
                "kv: peak %d of %d blocks used (%d usable), %lld unused reserved slots over %lld running sequences at "
                "the peak, prefix-cache hit rate %.3f (%lld of %lld prompt tokens), %lld copy-on-write copies, "
                "%lld preemptions; %lld KV cache bytes per token (all layers, %s)",
                wall_s, static_cast<long long>(s.steps), s.prompt_tokens / wall, static_cast<long long>(s.prompt_tokens),
                s.output_tokens / wall, static_cast<long long>(s.output_tokens),
                static_cast<long long>(s.computed_tokens), s.forward_s, s.sample_s, s.peak_used_blocks,
                c.num_kv_blocks, c.num_kv_blocks - 1, static_cast<long long>(s.unused_slots_at_peak),
                static_cast<long long>(s.running_at_peak), hit_rate, static_cast<long long>(s.prefix_hit_tokens),
                static_cast<long long>(s.prefix_query_tokens), static_cast<long long>(s.cow_copies),
                static_cast<long long>(s.preemptions),
                static_cast<long long>(kv_bytes.is_ok() ? *kv_bytes : -1),
                attention::kv_cache_dtype_name(c.kv_cache_dtype));
  std::string summary = text;
  const runner::RecurrentStateLayout state = runner::recurrent_state_layout(model);
  if (!state.layers.empty()) {  // docs/gated-deltanet.md: F32 whatever the KV dtype
    summary += "; " + std::to_string(state.bytes_per_slot()) + " recurrent-state bytes per sequence (" +
               std::to_string(state.layers.size()) + " linear-attention layers, f32)";
  }
  if (c.step_graph_max_batch > 0) {
    summary += "\ncuda graphs: " + std::to_string(s.step_graphs.captured) + " captured, " +
               std::to_string(s.step_graphs.replayed) + " decode steps replayed, " +
               std::to_string(s.step_graphs.failed) + " batch sizes eager after a failed capture";
  }
  return summary;
}

}  // namespace moert::launch
