"""`python3 -m cluster.runner --state DIR [--node NAME] [--root DIR]`, or `--self-test`."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
from pathlib import Path

from cluster.runner import deploy, handler, protocol, relay, server


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m cluster.runner")
    parser.add_argument("--state", type=Path, help="the node's state directory")
    parser.add_argument("--node", default=os.uname().nodename, help="this node's name")
    parser.add_argument(
        "--root", type=Path, help="the node root (default: the one this code is deployed under)"
    )
    parser.add_argument("--self-test", action="store_true", help="check this tree and exit")
    args = parser.parse_args(argv)
    if args.self_test:
        return self_test()
    if args.state is None:
        parser.error("--state is required")
    try:
        # sshd's forced command runs us whatever the session asked; a relay is asked by name.
        wanted = relay.parse_command(os.environ.get("SSH_ORIGINAL_COMMAND", ""))
    except ValueError as error:
        print(f"runner: {error}", file=sys.stderr)
        return 2
    requests, answers = server.protocol_streams()
    if wanted is not None:
        relay.serve(args.state, *wanted, requests, answers)
        return 0
    node = handler.Handler(args.state, args.node, args.root or deploy.node_root())
    server.serve(node, requests, answers)
    return 0


def self_test() -> int:
    """Every module imports, a handler answers `hello` and refuses a bad `run` precisely: what
    `install` requires of a new tree before it becomes `current`."""
    with tempfile.TemporaryDirectory(prefix="agentos-runner-self-test-") as state:
        node = handler.Handler(Path(state), "self-test")
        hello = server.respond(
            node, b'{"jsonrpc":"2.0","id":1,"method":"hello"}', threading.Event()
        )
        refused = server.respond(
            node, b'{"jsonrpc":"2.0","id":2,"method":"run","params":{}}', threading.Event()
        )
    if hello.get("result", {}).get("protocol") != protocol.PROTOCOL:
        print(f"self-test: hello answered {hello}", file=sys.stderr)
        return 1
    if refused.get("error", {}).get("code") != protocol.INVALID_PARAMS:
        print(f"self-test: a run without params answered {refused}", file=sys.stderr)
        return 1
    print(f"ok {deploy.running_version()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
