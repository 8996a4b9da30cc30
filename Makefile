# inkstone: `make demo` runs the main job on the default data; `make test` runs the tests.
BUILD_DIR ?= build
JOBS ?= 2
CMAKE_FLAGS ?=

TORCH2_BUILD_DIR ?= build-torch2
# GPU architectures the .cu files are compiled for in the torch 2.x build (9.0: H100 / H200).
TORCH_CUDA_ARCH_LIST ?= 9.0

.PHONY: setup setup-python configure build test demo clean configure-torch2 build-torch2 test-torch2

setup:
	@bash tools/setup.sh

# The reference packages (transformers, tokenizers, torch) tests compare against when present; see docs/building.md.
setup-python:
	@bash tools/setup_python.sh

configure: setup
	@cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS) > $(BUILD_DIR).configure.log 2>&1 \
	  || { cat $(BUILD_DIR).configure.log; exit 1; }
	@grep -E "WARNING|inkstone:" -A2 $(BUILD_DIR).configure.log || true

build: configure
	@cmake --build $(BUILD_DIR) -j$(JOBS)

test: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -j$(JOBS)

# The second toolchain: the libtorch inside the pinned pip wheel (torch 2.x with CUDA, in .venv from setup-python),
# with every .cu file; its CPU tests run here and its `cuda`-labelled tests wherever a GPU is.
configure-torch2: setup setup-python
	@TORCH_CUDA_ARCH_LIST="$(TORCH_CUDA_ARCH_LIST)" cmake -S . -B $(TORCH2_BUILD_DIR) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_PREFIX_PATH="$$(.venv/bin/python -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')" \
	  $(CMAKE_FLAGS) > $(TORCH2_BUILD_DIR).configure.log 2>&1 || { cat $(TORCH2_BUILD_DIR).configure.log; exit 1; }
	@grep -E "WARNING|inkstone:" -A2 $(TORCH2_BUILD_DIR).configure.log || true

build-torch2: configure-torch2
	@cmake --build $(TORCH2_BUILD_DIR) -j$(JOBS)

test-torch2: build-torch2
	@cd $(TORCH2_BUILD_DIR) && ctest --output-on-failure -j$(JOBS)

demo: build
	@bash tools/demo.sh $(BUILD_DIR)/inkstone

clean:
	@rm -rf $(BUILD_DIR) $(BUILD_DIR).configure.log $(TORCH2_BUILD_DIR) $(TORCH2_BUILD_DIR).configure.log
