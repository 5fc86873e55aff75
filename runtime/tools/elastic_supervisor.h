// zero-run's decisions, apart from its processes (runtime/tools/zero_run.cc
// runs them): where the ranks go, the command that launches them, what a
// failed attempt died of, and whether to launch again.
//
// The supervisor launches the training program under mpirun on the hosts it
// was given (--np on this host, --hosts, an Open MPI hostfile, or Slurm's
// allocation), with --resume auto so that every attempt continues from the
// newest checkpoint. When an attempt fails it probes the hosts again, drops
// those that do not answer (the world shrinks; the checkpoint loads at any
// layout and the elasticity section keeps the global batch), and launches
// again, up to max_restarts times. It stops, with the cause, when:
//  * the program exits 2 (a usage or config error: restarting changes nothing);
//  * two attempts in a row fail with the same cause and the second saved no
//    checkpoint (the run is not getting anywhere);
//  * max_restarts restarts are spent, or fewer than min_ranks ranks remain.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace zero {

struct HostSlots {
  std::string host;
  int slots = 1;
  bool operator==(const HostSlots&) const = default;
};

// "a:2,b:2" or "a,b" (one slot each).
absl::StatusOr<std::vector<HostSlots>> parse_host_list(std::string_view list);
// An Open MPI hostfile: one host per line, "host slots=N" (slots 1 when left
// out); '#' starts a comment.
absl::StatusOr<std::vector<HostSlots>> parse_hostfile(std::string_view text, std::string_view path);
// Slurm's SLURM_JOB_NODELIST ("n[01-03,07],gpu5") and
// SLURM_TASKS_PER_NODE ("2(x3),1"), as scontrol show hostnames expands them.
absl::StatusOr<std::vector<HostSlots>> slurm_hosts(std::string_view nodelist, std::string_view tasks_per_node);

int total_slots(const std::vector<HostSlots>& hosts);
// "a:2,b:2".
std::string describe_hosts(const std::vector<HostSlots>& hosts);

struct SupervisorOptions {
  std::vector<std::string> mpirun = {"mpirun"};  // the launcher and its own arguments
  std::vector<HostSlots> hosts;                  // empty: np ranks on this host
  int np = 1;
  int max_restarts = 3;
  int min_ranks = 1;
  double restart_delay_s = 1;
  double probe_timeout_s = 30;
  std::vector<std::string> program;  // the training command (zero-train ...)
};

// mpirun [-np W] [--host a:2,b:2] PROGRAM... [--resume auto], the last only
// when the program's arguments do not choose --resume (or run.resume).
std::vector<std::string> launch_command(const SupervisorOptions& o, const std::vector<HostSlots>& hosts);
// mpirun -np 1 --host HOST:1 true: the probe of one host.
std::vector<std::string> probe_command(const SupervisorOptions& o, const std::string& host);

// One finished attempt.
struct Attempt {
  int exit_code = 0;  // 128 + N when killed by signal N
  std::string cause;
  std::string signature;  // what two attempts failing "the same way" share (FailureCause::signature)
  bool saved_checkpoint = false;  // it printed "saved checkpoint"
  int ranks = 0;
};

// What an attempt died of, from its exit status and the last lines of its
// output: mpirun's line about the rank that died first ("rank 1 exited on
// signal 9 (Killed)"), else the program's last error line, else the status.
std::string failure_cause(int exit_code, const std::vector<std::string>& last_lines);
struct FailureCause {
  std::string text;       // failure_cause's
  std::string signature;  // the program's own words when it said any, else the rank's end (mpirun's
                          // report is not always printed, so the words are what repeats)
};
// Whether mpirun's line says it lost a host's daemon (the host went down, or
// the daemon was killed): ORTE's words (Open MPI 4) and PRRTE's (Open MPI 5).
// Open MPI 4.1's mpirun can hang for good after such a line, once the job's
// processes are gone, so zero-run gives it --hang-timeout to exit.
bool reports_lost_daemon(std::string_view line);
FailureCause read_failure(int exit_code, const std::vector<std::string>& last_lines);

enum class NextStep { kFinished, kRestart, kStop };
struct Decision {
  NextStep next;
  std::string why;
};
// After the attempts so far (the newest last).
Decision decide(const SupervisorOptions& o, const std::vector<Attempt>& attempts);

}  // namespace zero
