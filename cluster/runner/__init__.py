"""The node-side runner: runs sandboxes on a node for the control plane.

Standard library only, imports nothing of the project (it is deployed alone on each node, see
`deploy`). `python3 -m cluster.runner --state DIR [--node NAME]` speaks JSON-RPC over stdio
(`server`); the control plane's own node calls `handler.Handler` in-process. docs/cluster.md
describes the protocol.
"""
