// Liveness of a job's ranks, watched outside MPI: a rank whose peer's process or node is gone
// ends the job within seconds with one line naming that rank, its pid and its host, instead of
// waiting in MPI (behind an unplugged link TCP retransmits for minutes, and Open MPI's own
// messages name the node or the rank, not both). docs/multinode.md has the design.
//
// Star around rank 0: rank 0 listens on a TCP port of its host (any address, a port the kernel
// picks) and every other rank connects to it once at start. From then on a thread on each rank
// sends a heartbeat byte every interval (timeout / 8, at most 0.5 s) and reads its peers'. A peer
// is lost when its connection closes without a goodbye (its process died: the kernel closes the
// socket) or nothing arrives from it for `timeout_s` (its node or link is down, or it stopped).
// Rank 0 watches every rank; the others watch rank 0 (the loss of a third rank reaches them as
// the end of the job). Destroying the watch says goodbye, so a rank that finishes first is not
// taken for lost.
//
// The watch needs every host name to resolve (getaddrinfo) to an address the other ranks can
// reach over TCP. Where rank 0 cannot be reached, the watch is off for the job, with a warning.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "runtime/comm/transport.h"
#include "core/status.h"

namespace moert::comm {

struct PeerWatchOptions {
  // Seconds without a byte from a peer before it counts as lost; 0 turns the watch off.
  // Default 10; MOERT_PEER_TIMEOUT_S sets it (peer_watch_options_from_env). Rank 0's value
  // holds for the whole job.
  double timeout_s = 10.0;
  // Called once, on the watch thread, with the line naming the lost rank. Default: write the
  // line to stderr (one write) and _exit(1), so the launcher ends the job; result lines
  // written so far stay whole (docs/outputs.md). After a silent peer (not a closed connection)
  // the default waits another timeout (at most 30 s) before exiting, so that a launcher that
  // notices the unreachable node itself ends the job without waiting on it.
  std::function<void(const std::string& line)> on_lost;
};

// The options from the environment: MOERT_PEER_TIMEOUT_S (a number >= 0; invalid_argument
// naming the value otherwise).
Result<PeerWatchOptions> peer_watch_options_from_env();

class PeerWatch {
 public:
  virtual ~PeerWatch() = default;
  // The peers this rank watches (world_size - 1 on rank 0, 1 elsewhere).
  virtual int num_watched() const = 0;
  // Closes every connection without a goodbye and stops watching, as a killed process would:
  // the peers report this rank lost. For tests.
  virtual void abandon() = 0;
};

// Collective over `transport` (one broadcast, two all_reduce). Returns null when the watch is
// off: timeout 0 on rank 0, a job of one rank, or rank 0 unreachable from some rank (then rank 0
// logs a warning naming it). Errors of the transport itself come back as a Status.
Result<std::unique_ptr<PeerWatch>> start_peer_watch(Transport& transport, const PeerWatchOptions& options);

}  // namespace moert::comm
