// moert: serve Mixture-of-Experts models across MPI ranks.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <boost/program_options/errors.hpp>

#include "launch/bench_plot.h"
#include "launch/commands.h"

namespace {

constexpr const char* kUsage =
    "usage: moert <command> [options]\n"
    "\n"
    "commands:\n"
    "  make-model   write a random-weight Hugging Face checkpoint (any supported architecture)\n"
    "  score        score a prompt and print greedy tokens with the single-rank reference forward\n"
    "  run          serve a JSONL batch of requests (continuous batching, paged KV cache)\n"
    "  bench        offline throughput and latency sweeps over all ranks (JSON, CSV, plot)\n"
    "  plot         the plot of a saved `moert bench --json` document\n"
    "  tokenize     text to token ids and back with a checkpoint's tokenizer\n"
    "  quantize     rewrite a checkpoint with NVFP4, MXFP4 or FP8 weights\n"
    "  eval         KL divergence and top-1 agreement of a model against a reference\n"
    "\n"
    "`moert <command> --help` lists a command's options.\n";

}  // namespace

// The weights are memory-mapped: a shard truncated or replaced under a running job turns the
// next read of a vanished page into SIGBUS. Say so in one line (async-signal-safe writes only)
// and exit; every result line written so far is whole and flushed (docs/outputs.md).
static void on_sigbus(int) {
  static const char kMessage[] =
      "moert: error: a memory-mapped checkpoint file was truncated or replaced while the job was reading it "
      "(SIGBUS); results written so far are kept, rerun with --resume\n";
  [[maybe_unused]] const ssize_t written = write(STDERR_FILENO, kMessage, sizeof(kMessage) - 1);
  _exit(1);
}

int main(int argc, char** argv) {
  struct sigaction bus {};
  bus.sa_handler = on_sigbus;
  sigaction(SIGBUS, &bus, nullptr);
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  try {
    if (command == "make-model") return moert::launch::run_make_model(args);
    if (command == "score") return moert::launch::run_score(args);
    if (command == "run") return moert::launch::run_serve_batch(args);
    if (command == "bench") return moert::launch::run_bench(args);
    if (command == "plot") return moert::launch::run_plot(args);
    if (command == "quantize") return moert::launch::run_quantize(args);
    if (command == "eval") return moert::launch::run_eval(args);
    if (command == "tokenize") return moert::launch::run_tokenize(args);
    if (command == "--version") {
      std::puts("moert 0.1.0");
      return 0;
    }
    std::fprintf(stderr, "moert: error: unknown command '%s' (see moert --help)\n", command.c_str());
    return 2;
  } catch (const boost::program_options::error& e) {
    std::fprintf(stderr, "moert %s: error: %s\n", command.c_str(), e.what());
    return 2;
  } catch (const moert::launch::CommandError& e) {
    std::fprintf(stderr, "moert %s: error: %s\n", command.c_str(), e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moert %s: error: %s\n", command.c_str(), e.what());
    return 1;
  }
}
