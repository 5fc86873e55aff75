// What SIGINT and SIGTERM do in a ZeroEngine process (Ctrl-C, `kill`, or
// mpirun ending a job whose rank died).
//
//  * Nothing needs removing, whatever the signal: the NVMe swap files have
//    no name on disk (offload/swap_file.h), so even SIGKILL (mpirun's second
//    Ctrl-C, the OOM killer), which no handler sees, leaves none behind.
//  * Without graceful stop (programs other than zero-train, and zero-train
//    during set-up, where a call may block for ever: an open() of a FIFO): the process
//    says which collective it was in and exits 128 + signal at once.
//  * With graceful stop (enable_graceful_stop(); zero-train's training loop): the first
//    signal only asks the training loop to stop at its next step boundary
//    (stop_requested()), printing that it will; the loop then says what was
//    saved last and how to resume, and exits 128 + signal. A second signal
//    exits at once as above; so does a collective that stays in flight for
//    ZE_STOP_GRACE_S seconds (default 30) after the request (a peer that died
//    leaves collectives that never finish). A long step or save is waited for.
// Inside the handler only async-signal-safe calls are made (write, sem_post,
// _exit); messages are built by hand, and the operation probe
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

// Ends the process at once with exit code 1, for an error found where no
// Status can travel (an allocation that failed inside an op): prints
// "ZeroEngine rank R: <message>" and exits without
// unwinding (other threads may still be running; under mpirun the launcher
// then ends the other ranks).
[[noreturn]] void exit_on_fatal_error(const std::string& message);

// What this process is doing, for the messages: "" or e.g. "all_reduce of
// 1.0 MiB fp32 (collective #22)". Set by the communicator.
void set_operation_probe(const char* (*probe)());

}  // namespace zero
