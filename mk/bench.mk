# Benchmarks (bench/): built on demand, never part of `make check`.
BENCH_SRC := $(wildcard bench/bench-*.c)
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)

$(BUILD)/bench/%: bench/%.c $(BUILD)/libgpupool.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libgpupool.a $(LDFLAGS) $(LIBS)

bench-build: $(BENCH_BIN)

bench-core: $(BUILD)/bench/bench-core
	$(BUILD)/bench/bench-core

# bench-core with the core's phase marks (GP_SCHED_PHASES, src/core/
# sched-int.h): the scheduler's unit compiled again beside the bench, whose
# symbols the linker then takes before libgpupool.a's.
$(BUILD)/bench/bench-core-phases: bench/bench-core.c $(BUILD)/libgpupool.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DGP_SCHED_PHASES -o $@ bench/bench-core.c src/core/sched-all.c $(BUILD)/libgpupool.a \
		$(LDFLAGS) $(LIBS)

bench-core-phases: $(BUILD)/bench/bench-core-phases

.PHONY: bench-build bench-core bench-core-phases

# bench/exectime: times commands from start to exit, many runs interleaved
# (bench/bench-cli.sh).  libc only and no sanitizers: it is the stopwatch.
EXECTIME = $(BUILD)/bench/exectime

$(EXECTIME): bench/exectime.c mk/bench.mk
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 -O2 -g -Wall -Wextra -Werror -Wshadow -D_GNU_SOURCE -o $@ $<

bench-cli: $(BUILD)/gpupool $(EXECTIME)
	BUILD=$(BUILD) bench/bench-cli.sh

.PHONY: bench-cli

# bench/spawn: fork+exec, vfork+exec and posix_spawn from a process with a
# large heap (bench/bench-spawn.sh).  libc only, like exectime.
SPAWNBENCH = $(BUILD)/bench/spawn

$(SPAWNBENCH): bench/spawn.c mk/bench.mk
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 -O2 -g -Wall -Wextra -Werror -Wshadow -D_GNU_SOURCE -o $@ $<

bench-spawn: $(BUILD)/gpupool $(SPAWNBENCH)
	BUILD=$(BUILD) bench/bench-spawn.sh

.PHONY: bench-spawn
