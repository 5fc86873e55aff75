// zero-run: the elastic supervisor. It launches a training command under
// mpirun, and when any rank dies it launches it again from the newest
// checkpoint, on the hosts that still answer (runtime/tools/
// elastic_supervisor.h has the rules). Its own lines start "zero-run:";
// everything the job prints passes through unchanged. An mpirun that reported
// a lost daemon and has not exited --hang-timeout seconds later is killed
// (Open MPI 4.1's can hang there for good), so the restart still comes.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/strings.h"
#include "runtime/tools/cli.h"
#include "runtime/tools/elastic_supervisor.h"

namespace {

using zero::cat;

constexpr char kUsage[] =
    "usage: zero-run [--np N | --hosts H:S,... | --hostfile FILE] [options] -- PROGRAM [ARGS...]\n"
    "\n"
    "Runs PROGRAM (zero-train ...) under mpirun and, when a rank dies, runs it again from the newest checkpoint\n"
    "(--resume auto is added unless ARGS choose --resume), on the hosts that still answer. Inside a Slurm\n"
    "allocation the hosts default to SLURM_JOB_NODELIST with SLURM_TASKS_PER_NODE slots each.";

volatile sig_atomic_t g_signal = 0;
void on_signal(int sig) { g_signal = sig; }

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void say(const std::string& line) {
  std::fflush(stdout);
  std::fprintf(stderr, "zero-run: %s\n", line.c_str());
  std::fflush(stderr);
}

// A finished process: its exit code (128 + N when signal N ended it), and
// what the supervisor read in its output.
struct Finished {
  int exit_code = 0;
  bool timed_out = false;
  bool hung = false;  // killed: the launcher had not exited hang_timeout_s after reporting a lost daemon
  std::deque<std::string> last_lines;  // the last 80 lines, stdout and stderr
  bool saved_checkpoint = false;
  double resumed_at_s = -1, first_step_at_s = -1;  // since the launch
};

// Runs argv in a process group of its own, passing its output through (when
// `echo`) and reading it line by line; kills the group after timeout_s (0:
// none), or hang_timeout_s (0: never) after the launcher reported a lost
// daemon, and forwards the supervisor's SIGINT/SIGTERM/SIGHUP to it.
Finished run_process(const std::vector<std::string>& argv, double timeout_s, bool echo, double hang_timeout_s = 0) {
  Finished f;
  int out_pipe[2], err_pipe[2];
  if (pipe(out_pipe) != 0 || pipe(err_pipe) != 0) {
    f.exit_code = 127;
    f.last_lines.push_back(cat("pipe: ", std::strerror(errno)));
    return f;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) close(fd);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    std::fprintf(stderr, "cannot run %s: %s\n", argv[0].c_str(), std::strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);
  close(out_pipe[1]);
  close(err_pipe[1]);
  struct Stream {
    int fd;
    FILE* to;
    std::string partial;
  } streams[2] = {{out_pipe[0], stdout, {}}, {err_pipe[0], stderr, {}}};
  double lost_daemon_at_s = -1;  // since the launch
  auto take_line = [&](std::string line) {
    if (line.find("saved checkpoint ") != std::string::npos) f.saved_checkpoint = true;
    if (f.resumed_at_s < 0 && line.find("resumed from ") != std::string::npos) f.resumed_at_s = since(t0);
    if (f.first_step_at_s < 0 && line.rfind("step ", 0) == 0) f.first_step_at_s = since(t0);
    if (lost_daemon_at_s < 0 && zero::reports_lost_daemon(line)) lost_daemon_at_s = since(t0);
    f.last_lines.push_back(std::move(line));
    if (f.last_lines.size() > 80) f.last_lines.pop_front();
  };
  int open_streams = 2;
  int forwarded = 0;
  while (open_streams > 0) {
    if (g_signal != 0 && forwarded != g_signal) {
      forwarded = g_signal;
      kill(-pid, forwarded);
    }
    if (timeout_s > 0 && !f.timed_out && since(t0) > timeout_s) {
      f.timed_out = true;
      kill(-pid, SIGKILL);
    }
    if (hang_timeout_s > 0 && lost_daemon_at_s >= 0 && !f.hung && since(t0) - lost_daemon_at_s > hang_timeout_s) {
      f.hung = true;
      kill(-pid, SIGKILL);
    }
    pollfd fds[2];
    for (int i = 0; i < 2; ++i) fds[i] = {streams[i].fd, POLLIN, 0};
    const int n = poll(fds, 2, 200);
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < 2 && n > 0; ++i) {
      if (streams[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      char buf[4096];
      const ssize_t got = read(streams[i].fd, buf, sizeof buf);
      if (got <= 0) {
        if (!streams[i].partial.empty()) take_line(std::move(streams[i].partial));
        close(streams[i].fd);
        streams[i].fd = -1;
        --open_streams;
        continue;
      }
      if (echo) {
        std::fwrite(buf, 1, static_cast<size_t>(got), streams[i].to);
        std::fflush(streams[i].to);
      }
      streams[i].partial.append(buf, static_cast<size_t>(got));
      for (size_t nl; (nl = streams[i].partial.find('\n')) != std::string::npos;) {
        take_line(streams[i].partial.substr(0, nl));
        streams[i].partial.erase(0, nl + 1);
      }
    }
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    if (g_signal != 0 && forwarded != g_signal) {
      forwarded = g_signal;
      kill(-pid, forwarded);
    }
  }
  f.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return f;
}

std::string joined(const std::vector<std::string>& parts, const char* sep) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : sep) + p;
  return out;
}

// The hosts that answer a one-rank probe within the timeout.
std::vector<zero::HostSlots> answering(const zero::SupervisorOptions& o, const std::vector<zero::HostSlots>& hosts,
                                       std::vector<std::string>* lost) {
  std::vector<zero::HostSlots> alive;
  for (const zero::HostSlots& h : hosts) {
    const Finished p = run_process(zero::probe_command(o, h.host), o.probe_timeout_s, false);
    if (p.exit_code == 0) {
      alive.push_back(h);
    } else {
      lost->push_back(cat(h.host, " (", p.timed_out ? cat("no answer within ", o.probe_timeout_s, " s")
                                                      : zero::failure_cause(p.exit_code, {p.last_lines.begin(),
                                                                                          p.last_lines.end()}),
                          ")"));
    }
  }
  return alive;
}

int run(int argc, char** argv) {
  CLI::App app;
  zero::cli::init_app(app, "zero-run", kUsage);
  zero::SupervisorOptions o;
  std::string hosts_arg, hostfile, mpirun = "mpirun";
  double hang_timeout_s = 30;
  app.add_option("--np", o.np)->type_name("N")->description("ranks on this host (when no hosts are given; default 1)");
  app.add_option("--hosts", hosts_arg)->type_name("H:S,...")->description("hosts and their slots (ranks), as mpirun --host");
  app.add_option("--hostfile", hostfile)->type_name("FILE")->description("an Open MPI hostfile (host slots=N per line)");
  app.add_option("--mpirun", mpirun)
      ->type_name("CMD")
      ->description("the launcher with its own arguments, split at spaces (default mpirun), e.g. "
                    "\"mpirun --allow-run-as-root --mca btl_tcp_if_include eth0\"");
  app.add_option("--max-restarts", o.max_restarts)->type_name("K")->description("launch again at most K times (default 3)");
  app.add_option("--min-ranks", o.min_ranks)
      ->type_name("N")
      ->description("stop when fewer ranks than N remain on the hosts that answer (default 1)");
  app.add_option("--restart-delay", o.restart_delay_s)->type_name("S")->description("seconds before a restart (default 1)");
  app.add_option("--probe-timeout", o.probe_timeout_s)
      ->type_name("S")
      ->description("seconds a host has to answer a one-rank probe (default 30)");
  app.add_option("--hang-timeout", hang_timeout_s)
      ->type_name("S")
      ->description("seconds mpirun has to exit after it reports a lost daemon before zero-run kills it "
                    "(default 30; 0: wait for it)");
  // The program is everything after the first "--"; zero-run's own options come before it.
  int own = 1;
  while (own < argc && std::strcmp(argv[own], "--") != 0) ++own;
  for (int i = own + 1; i < argc; ++i) o.program.emplace_back(argv[i]);
  if (std::optional<int> code = zero::cli::parse(app, own, argv)) return *code;
  if (o.program.empty()) return zero::cli::usage_error(app, "no program to run: give it after --");
  if (o.np < 1) return zero::cli::usage_error(app, cat("--np ", o.np, " is below 1"));
  if (o.max_restarts < 0) return zero::cli::usage_error(app, cat("--max-restarts ", o.max_restarts, " is negative"));
  if (hang_timeout_s < 0) return zero::cli::usage_error(app, cat("--hang-timeout ", hang_timeout_s, " is negative"));
  o.mpirun.clear();
  std::istringstream words(mpirun);
  for (std::string w; words >> w;) o.mpirun.push_back(w);
  if (o.mpirun.empty()) return zero::cli::usage_error(app, "--mpirun is empty");

  // Where the ranks go.
  absl::StatusOr<std::vector<zero::HostSlots>> hosts = std::vector<zero::HostSlots>{};
  if (!hosts_arg.empty() && !hostfile.empty()) return zero::cli::usage_error(app, "give --hosts or --hostfile, not both");
  if (!hosts_arg.empty()) {
    hosts = zero::parse_host_list(hosts_arg);
  } else if (!hostfile.empty()) {
    std::ifstream in(hostfile);
    if (!in) return zero::cli::usage_error(app, cat("--hostfile ", hostfile, ": cannot read it: ", std::strerror(errno)));
    std::stringstream text;
    text << in.rdbuf();
    hosts = zero::parse_hostfile(text.str(), hostfile);
  } else if (const char* nodes = std::getenv("SLURM_JOB_NODELIST"); nodes != nullptr && app.count("--np") == 0) {
    const char* tasks = std::getenv("SLURM_TASKS_PER_NODE");
    hosts = zero::slurm_hosts(nodes, tasks == nullptr ? "" : tasks);
  }
  if (!hosts.ok()) return zero::cli::usage_error(app, std::string(hosts.status().message()));

  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigaction(sig, &sa, nullptr);
  }

  // Every host must answer before the first launch.
  if (!hosts->empty()) {
    std::vector<std::string> lost;
    const std::vector<zero::HostSlots> alive = answering(o, *hosts, &lost);
    if (!lost.empty()) {
      std::fprintf(stderr, "zero-run: host%s not reachable, nothing was started: %s\n", lost.size() == 1 ? "" : "s",
                   joined(lost, "; ").c_str());
      return 2;
    }
  }

  std::vector<zero::Attempt> attempts;
  std::vector<zero::HostSlots> current = *hosts;
  for (;;) {
    const std::vector<std::string> cmd = zero::launch_command(o, current);
    const int ranks = current.empty() ? o.np : zero::total_slots(current);
    say(cat("attempt ", attempts.size() + 1, " of at most ", o.max_restarts + 1, ", ", ranks, " rank",
            ranks == 1 ? "" : "s", current.empty() ? "" : cat(" on ", zero::describe_hosts(current)), ": ",
            joined(cmd, " ")));
    const Finished f = run_process(cmd, 0, true, hang_timeout_s);
    if (f.hung) say(cat("mpirun had not exited ", hang_timeout_s, " s after it reported a lost daemon; killed it"));
    zero::Attempt a;
    a.exit_code = f.exit_code;
    a.saved_checkpoint = f.saved_checkpoint;
    a.ranks = ranks;
    if (f.exit_code != 0) {
      const zero::FailureCause why = zero::read_failure(f.exit_code, {f.last_lines.begin(), f.last_lines.end()});
      a.cause = why.text;
      a.signature = why.signature;
    }
    if (!attempts.empty() && f.resumed_at_s >= 0) {
      // The progress line comes every steps_per_print steps, so it is an upper bound on the first step.
      const std::string progress =
          f.first_step_at_s < 0 ? std::string("never") : absl::StrFormat("%.1f s", f.first_step_at_s);
      say(cat("restart ", attempts.size(), ": checkpoint loaded ", absl::StrFormat("%.1f", f.resumed_at_s),
              " s after the launch, first progress line ", progress));
    }
    attempts.push_back(a);
    if (g_signal != 0) {
      say(cat("stopped by signal ", static_cast<int>(g_signal), "; not restarting"));
      return 128 + g_signal;
    }
    const zero::Decision d = zero::decide(o, attempts);
    if (d.next == zero::NextStep::kFinished) {
      say(cat("finished after ", attempts.size() - 1, " restart", attempts.size() == 2 ? "" : "s"));
      return 0;
    }
    if (d.next == zero::NextStep::kStop) {
      say(cat("stopped: ", d.why));
      return f.exit_code == 0 ? 1 : f.exit_code;
    }
    say(cat("attempt ", attempts.size(), " failed (exit ", f.exit_code, "): ", a.cause, "; restarting from the newest "
            "checkpoint in ", o.restart_delay_s, " s"));
    std::this_thread::sleep_for(std::chrono::duration<double>(o.restart_delay_s));
    if (!current.empty()) {
      std::vector<std::string> lost;
      current = answering(o, current, &lost);
      if (!lost.empty()) say(cat("dropping host", lost.size() == 1 ? "" : "s", " that did not answer: ",
                                 joined(lost, "; ")));
      if (zero::total_slots(current) < o.min_ranks) {
        say(cat("stopped: ", zero::total_slots(current), " rank(s) left on the hosts that answer, fewer than --min-ranks ",
                o.min_ranks));
        return 1;
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) { return run(argc, argv); }
