"""Gleaner's node protocol, shared by the runtime agent, the shim and framework hooks.

Standard library only, so that it installs into an inference image beside the framework:
``wire`` is the agent ⇄ shim ⇄ framework frame codec. docs/protocol.md describes it.
"""
