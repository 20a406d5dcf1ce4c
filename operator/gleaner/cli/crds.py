"""``gleaner crds`` (placeholder until the CRD generator lands, issue 2)."""

from gleaner.cli.common import not_built

command = not_built("crds", "issue 2 (CRD generator)")
