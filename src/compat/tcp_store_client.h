// A client of a rendezvous store served by PyTorch 2.x: torchrun's agent
// hosts one on MASTER_PORT and tells its workers to join it
// (TORCHELASTIC_USE_AGENT_STORE=True). LibTorch 1.13's TCPStore client
// cannot: 2.x servers expect a validation handshake first and number their
// queries differently, so a 1.13 client's first request is misread and it
// waits forever (seen against torch 2.15's server). This client speaks the
// 2.x protocol itself, from any LibTorch, so that one code path joins
// torchrun's store whatever LibTorch the program was built against.
//
// The protocol (little-endian; strings and byte strings as a u64 length,
// then the bytes; every key gets TCPStore's "/" prefix):
//   on connect   VALIDATE u32 magic, then PING u32 nonce -> u32 nonce back
//   SET          key, value                     -> nothing
//   GET          (after a WAIT for the key) key -> value
//   ADD          key, i64 delta                 -> i64 new value
//   COMPARE_SET  key, expected, desired         -> value now held
//   CHECK        u64 n, n keys                  -> u8 0 ready, 1 not ready
//   WAIT         u64 n, n keys                  -> u8 0 once all are set;
//                on the client's timeout it sends CANCEL_WAIT and reads
//                u8 1 (preceded by the 0 when the keys arrived meanwhile)
//   GETNUMKEYS                                  -> i64
//   DELETE_KEY   key                            -> i64 keys deleted
// Checked against torch 2.15's own client and server
// (tests/distributed/tcp_store_client_test.cpp).
#pragma once

#include <chrono>
#include <string>

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace accelerate {
namespace compat {

// Connects to the PyTorch 2.x store at host:port, retrying a refused
// connection until `timeout`; every later operation waits at most `timeout`
// (the store's own setTimeout changes it). Throws c10::Error with a one-line
// reason when nothing answers, or when the server does not answer the 2.x
// handshake (an older PyTorch's store, or not a store at all).
c10::intrusive_ptr<c10d::Store> connect_torch2_store(const std::string& host, int port,
                                                     std::chrono::milliseconds timeout);

}  // namespace compat
}  // namespace accelerate
