"""Batch work for Gleaner: OpenAI batch files run resumably, and deadlines turned into SLAs.

- :mod:`gleaner.batch.records`: the OpenAI batch input and output line formats (pure);
- :mod:`gleaner.batch.store`: the progress directory on the job's volume (exactly once);
- :mod:`gleaner.batch.runner`: the runner beside the engine (``python -m gleaner.batch.runner``);
- :mod:`gleaner.batch.deadline`: the deadline → throughput SLA rule (pure).

These four use the standard library only (an import-linter contract holds it), so the runner
starts fast and carries nothing the engine's Pod does not need. docs/batch.md describes them.
"""
