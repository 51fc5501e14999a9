"""A PyTorch TCPStore server for tests/distributed/tcp_store_client_test.cpp.

    torch_store_server.py PORT_FILE libuv|classic

Hosts a store on a free port (written to PORT_FILE), puts "from_python",
waits for the C++ client's "from_cpp" and answers, through its own client,
whether it read the value the C++ side wrote ("verdict"), then waits for
"done". Under torch 1.x (no libuv, no handshake) it only hosts the store, so
that the C++ side can check that it refuses an older protocol clearly.
"""
import datetime
import os
import sys
import time

import torch.distributed as dist

port_file, kind = sys.argv[1], sys.argv[2]
timeout = datetime.timedelta(seconds=60)
extra = {"use_libuv": kind == "libuv"} if kind in ("libuv", "classic") else {}
store = dist.TCPStore("127.0.0.1", 0, None, True, timeout=timeout, wait_for_workers=False, **extra)
with open(port_file + ".tmp", "w") as out:
    out.write(str(store.port))
os.rename(port_file + ".tmp", port_file)
if kind == "old":
    time.sleep(30)
    sys.exit(0)
store.set("from_python", "hello")
store.wait(["from_cpp"])
value = store.get("from_cpp")
store.set("verdict", "ok" if value == b"cpp-value" else "read " + repr(value))
store.wait(["done"])
