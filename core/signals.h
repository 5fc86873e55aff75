// What SIGINT and SIGTERM do in a ZeroEngine process (Ctrl-C, `kill`, or
// mpirun ending a job whose rank died).
//
//  * Always, on the first signal: every file registered with
//    register_cleanup_file() (the NVMe swap files) is unlinked at once. An
//    open file survives its unlink, so a run that goes on to a clean stop
//    still reads and writes it, and a run killed a moment later (mpirun sends
//    SIGKILL about a second after SIGTERM) leaves nothing behind.
//  * Without graceful stop (programs other than zero-train): the process
//    says which collective it was in and exits 128 + signal at once.
//  * With graceful stop (enable_graceful_stop(); zero-train): the first
//    signal only asks the training loop to stop at its next step boundary
//    (stop_requested()), printing that it will; the loop then says what was
//    saved last and how to resume, and exits 128 + signal. A second signal
//    exits at once as above; so does a collective that stays in flight for
//    ZE_STOP_GRACE_S seconds (default 30) after the request (a peer that died
//    leaves collectives that never finish). A long step or save is waited for.
// Inside the handler only async-signal-safe calls are made (unlink, write,
// sem_post, _exit); messages are built by hand, and the operation probe
// reads fixed buffers. SA_RESTART keeps a graceful run's blocking calls going.
#pragma once

#include <string>

namespace zero {

// Installs the SIGINT and SIGTERM handlers (idempotent); `rank` goes into the
// messages.
void install_signal_handlers(int rank);
// The handler's first signal becomes a request to stop (see above); starts the
// grace-period watchdog.
void enable_graceful_stop();
// 0, or the signal that asked the run to stop.
int stop_requested();

// Files to unlink when a signal ends the run (at most 32 at once).
void register_cleanup_file(const std::string& path);
void unregister_cleanup_file(const std::string& path);
// Unlinks the registered files now (async-signal-safe): for a path that ends
// the process without unwinding (a signal, a collective given up on).
void remove_cleanup_files();

// What this process is doing, for the messages: "" or e.g. "all_reduce of
// 1.0 MiB fp32 (collective #22)". Set by the communicator.
void set_operation_probe(const char* (*probe)());

}  // namespace zero
