"""Run one peer in this process: `python -m bench.peers NAME`.

Protocol with the harness (bench.conformance): import the peer, print `ready`; read one line of JSON
(`PeerConfig`), build the client (`prepare`: sessions, TLS contexts, pollwarden's keys and database), print
`armed`; read `go`, run, print one line of JSON (`PeerResult`). Start-up is kept out of the measured time, so
every peer sends its first request the moment its job exists.
"""

from __future__ import annotations

import importlib
import sys
import traceback

from . import PEERS
from .common import PeerConfig, PeerResult, describe


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in PEERS:
        print(f"usage: python -m bench.peers {{{','.join(PEERS)}}}", file=sys.stderr)
        return 2
    module = importlib.import_module(PEERS[argv[0]].module)
    print("ready", flush=True)
    line = sys.stdin.readline()
    if not line:
        return 1
    config = PeerConfig.from_json(line)
    try:
        run = module.prepare(config)
        print("armed", flush=True)
        if sys.stdin.readline().strip() != "go":
            return 1
        result: PeerResult = run()
    except BaseException as exc:  # a crash is a result too: the harness classifies it
        traceback.print_exc()
        result = PeerResult("error", describe(exc))
    print(result.to_json(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
