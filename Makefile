# inkstone: `make demo` runs the main job on the default data; `make test` runs the tests.
BUILD_DIR ?= build
JOBS ?= 2
CMAKE_FLAGS ?=

.PHONY: setup setup-python configure build test demo clean

setup:
	@bash tools/setup.sh

# The reference packages (transformers, tokenizers, torch) tests compare against when present; see the README.
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

demo: build
	@bash tools/demo.sh $(BUILD_DIR)/inkstone

clean:
	@rm -rf $(BUILD_DIR) $(BUILD_DIR).configure.log
