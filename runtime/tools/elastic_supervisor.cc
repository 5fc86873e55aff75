// zero-run's decisions; see elastic_supervisor.h.
#include "runtime/tools/elastic_supervisor.h"

#include <algorithm>
#include <charconv>

#include "core/status.h"
#include "core/strings.h"

namespace zero {

namespace {

// Debian's Abseil has its own string_view, so the splitting here is std's.
std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  for (size_t start = 0;;) {
    const size_t end = s.find(sep, start);
    out.push_back(s.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    if (end == std::string_view::npos) return out;
    start = end + 1;
  }
}

std::string_view strip(std::string_view s) {
  const size_t first = s.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(" \t\r") - first + 1);
}

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }
bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

bool parse_int(std::string_view s, int& out) {
  const auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

absl::Status bad_slots(std::string_view where, std::string_view entry) {
  return absl::InvalidArgumentError(
      cat(where, ": \"", entry, "\" is not host or host:slots with slots a positive integer"));
}

// "01-03" -> 01, 02, 03 (keeping the width), "7" -> 7.
absl::Status expand_range(std::string_view prefix, std::string_view range, std::vector<std::string>& out) {
  const std::vector<std::string_view> ends = split(range, '-');
  int lo = 0, hi = 0;
  if (ends.size() > 2 || !parse_int(ends.front(), lo) || !parse_int(ends.back(), hi) || hi < lo)
    return absl::InvalidArgumentError(cat("SLURM_JOB_NODELIST: \"", range, "\" is not a number or a range a-b"));
  const size_t width = ends.front().size();
  for (int i = lo; i <= hi; ++i) {
    std::string n = std::to_string(i);
    if (n.size() < width) n.insert(0, width - n.size(), '0');
    out.push_back(cat(prefix, n));
  }
  return absl::OkStatus();
}

bool chooses_resume(const std::vector<std::string>& program) {
  for (const std::string& a : program)
    if (a == "--resume" || starts_with(a, "--resume=") || contains(a, "run.resume=")) return true;
  return false;
}

}  // namespace

absl::StatusOr<std::vector<HostSlots>> parse_host_list(std::string_view list) {
  std::vector<HostSlots> out;
  for (std::string_view entry : split(list, ',')) {
    entry = strip(entry);
    if (entry.empty()) continue;
    HostSlots h;
    const size_t colon = entry.rfind(':');
    h.host = std::string(entry.substr(0, colon));
    if (colon != std::string_view::npos && (!parse_int(entry.substr(colon + 1), h.slots) || h.slots < 1))
      return bad_slots("--hosts", entry);
    if (h.host.empty()) return bad_slots("--hosts", entry);
    out.push_back(std::move(h));
  }
  if (out.empty()) return absl::InvalidArgumentError("--hosts: no host given");
  return out;
}

absl::StatusOr<std::vector<HostSlots>> parse_hostfile(std::string_view text, std::string_view path) {
  std::vector<HostSlots> out;
  int line_no = 0;
  for (std::string_view line : split(text, '\n')) {
    ++line_no;
    line = strip(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    std::vector<std::string_view> words;
    for (std::string_view w : split(line, ' '))
      if (!strip(w).empty()) words.push_back(strip(w));
    HostSlots h{std::string(words[0]), 1};
    for (size_t i = 1; i < words.size(); ++i) {
      if (starts_with(words[i], "slots=")) {
        const std::string_view n = words[i].substr(6);
        if (!parse_int(n, h.slots) || h.slots < 1)
          return absl::InvalidArgumentError(cat(path, ":", line_no, ": slots=", n, " is not a positive integer"));
      }  // max_slots= and other Open MPI fields are the launcher's
    }
    out.push_back(std::move(h));
  }
  if (out.empty()) return absl::InvalidArgumentError(cat(path, ": names no host"));
  return out;
}

absl::StatusOr<std::vector<HostSlots>> slurm_hosts(std::string_view nodelist, std::string_view tasks_per_node) {
  // Split the list at the commas outside brackets.
  std::vector<std::string> names;
  size_t start = 0;
  int depth = 0;
  for (size_t i = 0; i <= nodelist.size(); ++i) {
    if (i < nodelist.size() && nodelist[i] == '[') ++depth;
    if (i < nodelist.size() && nodelist[i] == ']') --depth;
    if (i < nodelist.size() && (nodelist[i] != ',' || depth > 0)) continue;
    const std::string_view item = nodelist.substr(start, i - start);
    start = i + 1;
    if (item.empty()) continue;
    const size_t open = item.find('[');
    if (open == std::string_view::npos) {
      names.emplace_back(item);
      continue;
    }
    if (item.back() != ']')
      return absl::InvalidArgumentError(cat("SLURM_JOB_NODELIST: \"", item, "\" has text after its brackets"));
    for (std::string_view range : split(item.substr(open + 1, item.size() - open - 2), ','))
      ZE_RETURN_IF_ERROR(expand_range(item.substr(0, open), range, names));
  }
  if (names.empty()) return absl::InvalidArgumentError("SLURM_JOB_NODELIST names no node");
  // "2(x3),1": 2 tasks on each of 3 nodes, then 1.
  std::vector<int> slots;
  for (std::string_view part : split(tasks_per_node, ',')) {
    part = strip(part);
    if (part.empty()) continue;
    int n = 0, repeat = 1;
    const size_t paren = part.find("(x");
    if (!parse_int(part.substr(0, paren), n) || n < 1 ||
        (paren != std::string_view::npos &&
         (part.back() != ')' || !parse_int(part.substr(paren + 2, part.size() - paren - 3), repeat) || repeat < 1)))
      return absl::InvalidArgumentError(cat("SLURM_TASKS_PER_NODE: \"", part, "\" is not N or N(xR)"));
    slots.insert(slots.end(), repeat, n);
  }
  if (!slots.empty() && slots.size() != names.size())
    return absl::InvalidArgumentError(cat("SLURM_TASKS_PER_NODE gives ", slots.size(), " node(s) and SLURM_JOB_NODELIST ",
                                          names.size()));
  std::vector<HostSlots> out;
  for (size_t i = 0; i < names.size(); ++i) out.push_back({names[i], slots.empty() ? 1 : slots[i]});
  return out;
}

int total_slots(const std::vector<HostSlots>& hosts) {
  int n = 0;
  for (const HostSlots& h : hosts) n += h.slots;
  return n;
}

std::string describe_hosts(const std::vector<HostSlots>& hosts) {
  std::string out;
  for (const HostSlots& h : hosts) out += cat(out.empty() ? "" : ",", h.host, ":", h.slots);
  return out;
}

std::vector<std::string> launch_command(const SupervisorOptions& o, const std::vector<HostSlots>& hosts) {
  std::vector<std::string> cmd = o.mpirun;
  cmd.push_back("-np");
  cmd.push_back(std::to_string(hosts.empty() ? o.np : total_slots(hosts)));
  if (!hosts.empty()) {
    cmd.push_back("--host");
    cmd.push_back(describe_hosts(hosts));
  }
  cmd.insert(cmd.end(), o.program.begin(), o.program.end());
  if (!chooses_resume(o.program)) {
    cmd.push_back("--resume");
    cmd.push_back("auto");
  }
  return cmd;
}

std::vector<std::string> probe_command(const SupervisorOptions& o, const std::string& host) {
  std::vector<std::string> cmd = o.mpirun;
  for (const char* a : {"-np", "1", "--host"}) cmd.push_back(a);
  cmd.push_back(host + ":1");
  cmd.push_back("true");
  return cmd;
}

bool reports_lost_daemon(std::string_view line) {
  return contains(line, "has lost communication with a remote daemon") ||
         contains(line, "was unable to reliably start one or more daemons");
}

FailureCause read_failure(int exit_code, const std::vector<std::string>& last_lines) {
  // mpirun's report sits between lines of dashes; the rest is the program's.
  std::string rank, program_error, program_last;
  // A daemon lost (its host went down, or its processes were killed): ORTE
  // says "has lost communication with a remote daemon" and names the node,
  // or, when the daemon's ssh exits, "unable to reliably start one or more
  // daemons" without a name; a rank's TCP report of the hang-up names the
  // peer's host. The ranks' own last words are then consequences, while
  // ssh's about the host ("ssh: connect to host n2 port 22: No route to
  // host") say more than ORTE's report.
  bool lost_daemon = false;
  std::string lost_host, peer_host, ssh_said;
  bool in_report = false;
  for (const std::string& raw : last_lines) {
    const std::string line(strip(raw));
    if (starts_with(line, "-----")) {
      in_report = !in_report;
      continue;
    }
    if (in_report) {
      if (reports_lost_daemon(line)) lost_daemon = true;
      // "Remote daemon: [[10228,0],2] on node n2"; "Peer host:  n2".
      if (starts_with(line, "Remote daemon:") && contains(line, " on node ") && lost_host.empty())
        lost_host = std::string(strip(line.substr(line.find(" on node ") + 9)));
      if (starts_with(line, "Peer host:") && peer_host.empty()) peer_host = std::string(strip(line.substr(10)));
      // "mpirun noticed that process rank 1 with PID 4242 on node n1 exited on signal 9 (Killed)."
      if (const size_t at = line.find("noticed that process rank "); at != std::string::npos && rank.empty()) {
        const size_t from = at + std::string_view("noticed that process ").size();
        const size_t pid = line.find(" with PID"), on = line.find(" on node "), how = line.find(" exited ");
        rank = line.substr(from, (pid == std::string::npos ? how : pid) - from);
        if (on != std::string::npos) rank += cat(" on ", line.substr(on + 9, line.find(' ', on + 9) - on - 9));
        if (how != std::string::npos) rank += line.substr(how);
        if (!rank.empty() && rank.back() == '.') rank.pop_back();
      }
      // "Process name: [[53011,1],0]" then "Exit code:    1": the first rank to exit non-zero.
      if (const size_t at = line.find("Process name: [["); at != std::string::npos && rank.empty()) {
        const size_t comma = line.rfind(','), close = line.rfind(']');
        if (comma != std::string::npos && close != std::string::npos && close > comma)
          rank = cat("rank ", line.substr(comma + 1, close - comma - 1));
      }
      if (starts_with(line, "Exit code:") && starts_with(rank, "rank ") && rank.find(' ', 5) == std::string::npos)
        rank += cat(" exited with status ", strip(line.substr(10)));
      continue;
    }
    if (line.empty() || starts_with(line, "step ")) continue;
    // Open MPI's note on its aggregated help messages:
    // "[n1:4242] 1 more process has sent help message ...", "[n1:4242] Set MCA parameter ...".
    if (starts_with(line, "[") && (contains(line, " sent help message ") || contains(line, "orte_base_help_aggregate")))
      continue;
    program_last = line;
    if (starts_with(line, "ssh: ")) ssh_said = line;
    if (contains(line, "error") || contains(line, "Error") || starts_with(line, "zero-") || contains(line, "failed") ||
        contains(line, "did not finish"))
      program_error = line;
  }
  const std::string& said = program_error.empty() ? program_last : program_error;
  const std::string status =
      exit_code > 128 ? cat("killed by signal ", exit_code - 128) : cat("exit status ", exit_code);
  // A rank killed by a signal said nothing of its own; the survivors' words are consequences.
  if (!rank.empty() && (contains(rank, "signal") || said.empty())) return {rank, rank};
  if (lost_daemon && !ssh_said.empty()) return {ssh_said, ssh_said};
  if (lost_daemon) {
    const std::string& host = lost_host.empty() ? peer_host : lost_host;
    const std::string lost = cat("mpirun lost ", host.empty() ? std::string("a host's daemon") : cat("its daemon on ", host),
                                 " (the host went down or its processes were killed)");
    return {lost, lost};
  }
  if (!rank.empty()) return {cat(rank, ": ", said), said};
  if (!said.empty()) return {said, said};
  return {status, status};
}

std::string failure_cause(int exit_code, const std::vector<std::string>& last_lines) {
  return read_failure(exit_code, last_lines).text;
}

Decision decide(const SupervisorOptions& o, const std::vector<Attempt>& attempts) {
  const Attempt& last = attempts.back();
  if (last.exit_code == 0) return {NextStep::kFinished, "finished"};
  if (last.exit_code == 2)
    return {NextStep::kStop, cat("exit status 2 (a usage or config error; restarting would fail the same way): ",
                                 last.cause)};
  if (attempts.size() >= 2) {
    const Attempt& before = attempts[attempts.size() - 2];
    if (before.exit_code != 0 && before.signature == last.signature && !last.saved_checkpoint)
      return {NextStep::kStop, cat("failed the same way twice in a row with no checkpoint saved between: ", last.cause)};
  }
  const int restarts = static_cast<int>(attempts.size()) - 1;
  if (restarts >= o.max_restarts)
    return {NextStep::kStop, cat("gave up after ", restarts, " restart", restarts == 1 ? "" : "s", " (--max-restarts ",
                                 o.max_restarts, "); the last failure: ", last.cause)};
  return {NextStep::kRestart, last.cause};
}

}  // namespace zero
