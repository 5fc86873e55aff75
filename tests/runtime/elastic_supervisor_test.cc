// zero-run's decisions (runtime/tools/elastic_supervisor.h): host lists in
// each form a user or Slurm gives them, the launch command, the cause read
// from mpirun's own report of a dead rank, and when to restart or stop.
#include "runtime/tools/elastic_supervisor.h"

#include <gtest/gtest.h>

namespace zero {
namespace {

TEST(ElasticSupervisorTest, HostListsParseAsMpirunReadsThem) {
  absl::StatusOr<std::vector<HostSlots>> h = parse_host_list("a:2, b:4,c");
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(*h, (std::vector<HostSlots>{{"a", 2}, {"b", 4}, {"c", 1}}));
  EXPECT_EQ(total_slots(*h), 7);
  EXPECT_EQ(describe_hosts(*h), "a:2,b:4,c:1");
  EXPECT_NE(parse_host_list("a:0").status().message().find("\"a:0\""), std::string::npos);
  EXPECT_NE(parse_host_list("a:x").status().message().find("--hosts"), std::string::npos);
  EXPECT_FALSE(parse_host_list(" , ").ok());

  h = parse_hostfile("# the cluster\nnode1 slots=2\nnode2 slots=2 max_slots=4  # spare\n\nnode3\n", "hosts.txt");
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(*h, (std::vector<HostSlots>{{"node1", 2}, {"node2", 2}, {"node3", 1}}));
  h = parse_hostfile("node1 slots=two\n", "hosts.txt");
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("hosts.txt:1: slots=two"), std::string::npos) << h.status();
}

TEST(ElasticSupervisorTest, SlurmNodeListsExpandAsScontrolDoes) {
  absl::StatusOr<std::vector<HostSlots>> h = slurm_hosts("n[01-03,07],gpu5", "2(x3),1,4");
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(*h, (std::vector<HostSlots>{{"n01", 2}, {"n02", 2}, {"n03", 2}, {"n07", 1}, {"gpu5", 4}}));
  h = slurm_hosts("host", "");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(*h, (std::vector<HostSlots>{{"host", 1}}));
  EXPECT_NE(slurm_hosts("n[1-2]", "1").status().message().find("gives 1 node(s) and SLURM_JOB_NODELIST 2"),
            std::string::npos);
  EXPECT_NE(slurm_hosts("n[3-1]", "").status().message().find("\"3-1\""), std::string::npos);
  EXPECT_NE(slurm_hosts("n1", "2(x").status().message().find("SLURM_TASKS_PER_NODE"), std::string::npos);
}

TEST(ElasticSupervisorTest, EveryLaunchResumesFromTheNewestCheckpoint) {
  SupervisorOptions o;
  o.mpirun = {"mpirun", "--allow-run-as-root"};
  o.np = 2;
  o.program = {"zero-train", "--config", "run.json"};
  EXPECT_EQ(launch_command(o, {}), (std::vector<std::string>{"mpirun", "--allow-run-as-root", "-np", "2", "zero-train",
                                                             "--config", "run.json", "--resume", "auto"}));
  EXPECT_EQ(launch_command(o, {{"a", 2}, {"b", 1}}),
            (std::vector<std::string>{"mpirun", "--allow-run-as-root", "-np", "3", "--host", "a:2,b:1", "zero-train",
                                      "--config", "run.json", "--resume", "auto"}));
  o.program = {"zero-train", "--resume", "ckpt"};
  EXPECT_EQ(launch_command(o, {}).back(), "ckpt");  // the user's choice stands
  o.program = {"zero-train", "--set", "run.resume=ckpt"};
  EXPECT_EQ(launch_command(o, {}).back(), "run.resume=ckpt");
  EXPECT_EQ(probe_command(o, "b"),
            (std::vector<std::string>{"mpirun", "--allow-run-as-root", "-np", "1", "--host", "b:1", "true"}));
}

TEST(ElasticSupervisorTest, TheCauseIsTheRankThatDiedFirst) {
  // Open MPI 4.1's report, after the survivors' own messages.
  const std::vector<std::string> out = {
      "zero-train (rank 0): rank 0: all_reduce of 471.0 KiB fp32 did not finish within 60 s",
      "--------------------------------------------------------------------------",
      "mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed).",
      "--------------------------------------------------------------------------"};
  EXPECT_EQ(failure_cause(137, out), "rank 1 on vm exited on signal 9 (Killed)");
  const std::string dashes(74, '-');
  EXPECT_EQ(failure_cause(1, {dashes, "mpirun noticed that process rank 3 with PID 77 on node n2 exited with status 1.",
                              dashes}),
            "rank 3 on n2 exited with status 1");
  EXPECT_EQ(failure_cause(1, {"step 3/9 | loss 2.0", "zero-train: resuming: checkpoint ck/x: manifest missing",
                              "step 4/9 | loss 1.9"}),
            "zero-train: resuming: checkpoint ck/x: manifest missing");
  EXPECT_EQ(failure_cause(1, {"disk on fire", ""}), "disk on fire");
  // Open MPI 4.1's report of a rank that exited non-zero, after its own last words.
  const std::vector<std::string> status_out = {
      "disk on fire",
      "--------------------------------------------------------------------------",
      "Primary job  terminated normally, but 1 process returned",
      "a non-zero exit code. Per user-direction, the job has been aborted.",
      "--------------------------------------------------------------------------",
      "--------------------------------------------------------------------------",
      "mpirun detected that one or more processes exited with non-zero status, thus causing",
      "the job to be terminated. The first process to do so was:",
      "",
      "  Process name: [[53011,1],0]",
      "  Exit code:    1",
      "--------------------------------------------------------------------------"};
  EXPECT_EQ(failure_cause(1, status_out), "rank 0 exited with status 1: disk on fire");
  EXPECT_EQ(read_failure(1, status_out).signature, "disk on fire");  // the same with or without mpirun's report
  EXPECT_EQ(read_failure(1, {"disk on fire"}).signature, "disk on fire");
  EXPECT_EQ(failure_cause(137, {}), "killed by signal 9");
}

TEST(ElasticSupervisorTest, ALostHostIsTheCauseNotOpenMpisHelpNotes) {
  // Open MPI 4.1 when a host's daemon and ranks were killed: ORTE's report
  // naming the node, after the survivors' TCP complaints and the notes on
  // aggregated help messages.
  const std::string dashes(74, '-');
  std::vector<std::string> out = {
      "zero-train (rank 0): all_gather of 9.0 MiB fp32 failed: peer hung up",
      "[vm:28359] 1 more process has sent help message help-mpi-btl-tcp.txt / peer hung up",
      "[vm:28359] Set MCA parameter \"orte_base_help_aggregate\" to 0 to see all help / error messages",
      dashes,
      "ORTE has lost communication with a remote daemon.",
      "",
      "  HNP daemon   : [[10228,0],0] on node vm",
      "  Remote daemon: [[10228,0],2] on node 10.77.3.2",
      "",
      "This is usually due to either a failure of the TCP network",
      dashes};
  EXPECT_TRUE(reports_lost_daemon(out[4]));
  EXPECT_FALSE(reports_lost_daemon(out[0]));
  const std::string lost = "mpirun lost its daemon on 10.77.3.2 (the host went down or its processes were killed)";
  EXPECT_EQ(failure_cause(1, out), lost);
  EXPECT_EQ(read_failure(1, out).signature, lost);
  // Without the node's name ("unable to reliably start"), a rank's TCP report names the peer.
  std::vector<std::string> unnamed = {dashes, "ORTE was unable to reliably start one or more daemons.", dashes,
                                      dashes, "  Local host: vm", "  Peer host:  n2", dashes};
  EXPECT_EQ(failure_cause(1, unnamed),
            "mpirun lost its daemon on n2 (the host went down or its processes were killed)");
  EXPECT_EQ(failure_cause(1, {dashes, "ORTE was unable to reliably start one or more daemons.", dashes}),
            "mpirun lost a host's daemon (the host went down or its processes were killed)");
  // ssh's own words about the host say more than ORTE's report.
  unnamed.insert(unnamed.begin(), "ssh: connect to host n2 port 22: No route to host");
  EXPECT_EQ(failure_cause(255, unnamed), "ssh: connect to host n2 port 22: No route to host");
}

TEST(ElasticSupervisorTest, RestartsUntilFinishedRepeatedOrSpent) {
  SupervisorOptions o;
  o.max_restarts = 3;
  const std::string killed = "rank 1 exited on signal 9";
  std::vector<Attempt> a = {{137, killed, killed, true, 2}};
  EXPECT_EQ(decide(o, a).next, NextStep::kRestart);
  a.push_back({137, killed, killed, true, 2});  // same cause, but it got further
  EXPECT_EQ(decide(o, a).next, NextStep::kRestart);
  a.push_back({137, killed, killed, false, 2});  // same cause, nothing saved: stuck
  Decision d = decide(o, a);
  EXPECT_EQ(d.next, NextStep::kStop);
  EXPECT_NE(d.why.find("failed the same way twice in a row"), std::string::npos) << d.why;

  a = {{1, "x", "x", true, 2}, {1, "y", "y", true, 2}, {1, "z", "z", true, 2}, {1, "w", "w", true, 2}};
  d = decide(o, a);
  EXPECT_EQ(d.next, NextStep::kStop);
  EXPECT_NE(d.why.find("gave up after 3 restarts (--max-restarts 3); the last failure: w"), std::string::npos) << d.why;

  d = decide(o, {{2, "zero-train: unknown key", "zero-train: unknown key", false, 2}});
  EXPECT_EQ(d.next, NextStep::kStop);
  EXPECT_NE(d.why.find("config error"), std::string::npos) << d.why;
  EXPECT_EQ(decide(o, {{1, "x", "x", false, 2}, {0, "", "", true, 2}}).next, NextStep::kFinished);
}

}  // namespace
}  // namespace zero
