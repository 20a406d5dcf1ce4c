# Gleaner developer entry points. `make help` lists them.
.PHONY: help simulate test lint bootstrap crds proto shim image bench clean

help:  ## List targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

simulate:  ## The embedded default: simulate a harvested cluster, write out/report.html
	@scripts/bootstrap.sh --no-apt
	.venv/bin/gleaner simulate --out out

test:  ## Install what is missing, then ruff check and format, mypy, import-linter, every test
	scripts/test.sh

lint:  ## ruff check and format --check, mypy and import-linter only
	@scripts/bootstrap.sh --no-apt
	.venv/bin/ruff check . && .venv/bin/ruff format --check . && .venv/bin/mypy && .venv/bin/lint-imports

bootstrap:  ## Create .venv and install Gleaner with its dev dependencies
	scripts/bootstrap.sh

crds:  ## Regenerate crds/*.yaml from the pydantic models
	@scripts/bootstrap.sh --no-apt
	.venv/bin/python -m gleaner.api.crdgen --write

proto:  ## Regenerate the shim's gleaner_proto.h and the Python messages from the protocol table (gleaner.protocol.spec)
	@scripts/bootstrap.sh --no-apt
	.venv/bin/python -m gleaner.protocol.cheader --write
	.venv/bin/python -m gleaner.protocol.pygen --write

shim:  ## Build the C LD_PRELOAD shim and the native compute gate library
	$(MAKE) -C runtime-agent/shim

image:  ## Build the Gleaner image without a Docker daemon: build/image (OCI layout) and build/gleaner-image.tar (docs/image.md)
	@scripts/bootstrap.sh --no-apt
	.venv/bin/python scripts/image_build.py --archive build/gleaner-image.tar

bench:  ## Run the benchmarks in bench/ (see docs/benchmarks.md)
	@scripts/bootstrap.sh --no-apt
	.venv/bin/python -m bench

clean:  ## Remove build outputs (keeps .venv)
	rm -rf out build dist .mypy_cache .ruff_cache .pytest_cache
