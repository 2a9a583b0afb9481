# gpupool build. `make` builds build/gpupool (the client and the batch
# supervisor; links libc and libjansson only) and build/gpupool-server (the
# server and the simulator, with every library; `gpupool server|simulate`
# exec()s it from gpupool's directory); `make check` runs every test;
# `make SAN=1 check` runs them under ASan+UBSan (in build-asan/).
# Module-specific rules (fake NVML library, fuzzers, ...) live in mk/*.mk.
#
# NOTE for everyone working in parallel (see HACKING.md): do not edit this
# file; put rules in mk/<module>.mk.  Build in your own dir to avoid
# collisions: make BUILD=/tmp/b-<module> /tmp/b-<module>/tests/test-<module>
# Commit only your own files (git add <paths>), never git add -A.

SAN ?= 0
ifeq ($(SAN),1)
BUILD ?= build-asan
SANFLAGS = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
OPT = -O1
else
BUILD ?= build
SANFLAGS =
OPT = -O2
endif

CC ?= cc
CFLAGS ?=
CFLAGS += -std=gnu11 $(OPT) -g -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter \
          -D_GNU_SOURCE -Isrc $(SANFLAGS) -MMD -MP
LDFLAGS += $(SANFLAGS)
LIBS = -lmicrohttpd -ljansson -lsqlite3 -lyaml -lcurl -lpq -lpthread -ldl -lm
# what build/gpupool links: nothing of the server's (https:// dlopen()s libcurl)
CLIENT_LIBS = -ljansson -lpthread -ldl -lm
CFLAGS += -I/usr/include/postgresql

SRC := $(sort $(shell find src -name '*.c' ! -path src/main.c ! -path src/main-server.c))
# the scheduler's files are compiled as one unit, src/core/sched-all.c (see SCHED_PRIVATE in sched-int.h)
SRC := $(filter-out $(filter-out src/core/sched-all.c,$(wildcard src/core/sched.c src/core/sched-*.c)),$(SRC))
OBJ := $(SRC:%.c=$(BUILD)/%.o)
UNIT_SRC := $(sort $(wildcard tests/unit/test-*.c))
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)

.DEFAULT_GOAL := all
# Module rules may add to UNIT_EXTRA, BLACKBOX_EXTRA, CHECK_EXTRA.
-include mk/*.mk

all: $(BUILD)/gpupool $(BUILD)/gpupool-server

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/libgpupool.a: $(OBJ)
	@rm -f $@
	ar rcs $@ $^

# Whoever builds gpupool gets gpupool-server too: `gpupool server` needs it.
$(BUILD)/gpupool: $(BUILD)/src/main.o $(BUILD)/libgpupool.a | $(BUILD)/gpupool-server
	$(CC) $(LDFLAGS) -Wl,--as-needed -o $@ $^ $(CLIENT_LIBS)

$(BUILD)/gpupool-server: $(BUILD)/src/main-server.o $(BUILD)/libgpupool.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

$(BUILD)/tests/%: tests/unit/%.c $(BUILD)/libgpupool.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libgpupool.a $(LDFLAGS) $(LIBS) -lcmocka

deps:
	scripts/install-deps.sh build

run: deps all
	$(BUILD)/gpupool server

unit: $(UNIT_BIN) $(UNIT_EXTRA)
	@set -e; for t in $(UNIT_BIN); do echo "== $$t"; GPUPOOL_BUILD=$(BUILD) $$t; done

blackbox: all $(BLACKBOX_EXTRA)
	GPUPOOL_BIN=$(abspath $(BUILD)/gpupool) GPUPOOL_BUILD=$(abspath $(BUILD)) \
	  /usr/bin/python3 -m pytest -q tests/blackbox

check: all unit blackbox $(CHECK_EXTRA)

# The whole suite (what CI runs): see scripts/test-all.sh.
test:
	scripts/test-all.sh

clean:
	rm -rf build build-asan build-fuzz

.PHONY: all deps run unit blackbox check test clean
.DELETE_ON_ERROR:

-include $(OBJ:.o=.d) $(BUILD)/src/main.d $(BUILD)/src/main-server.d
