// The rendezvous port on machine rank 0. Checking it before the ranks start
// turns "address already in use" deep inside rank 0 (and a hang in the
// others) into one line that names the port and the flag to change.
#pragma once

namespace accelerate::launcher {

// True when a TCP socket can bind `port` on every IPv4 address of this
// machine, the way rank 0's store will listen.
bool port_is_free(int port);

// Throws LaunchFailure naming the port and --main_process_port when it is taken.
void ensure_port_free(int port);

// A port the kernel reports free right now (bind to port 0, read, close).
// Another process could take it before rank 0 does; that is rare on one
// machine and is still reported by rank 0. Throws LaunchFailure.
int pick_free_port();

}  // namespace accelerate::launcher
