# Benchmarks (bench/): built on demand, never part of `make check`.
BENCH_SRC := $(wildcard bench/bench-*.c)
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)

$(BUILD)/bench/%: bench/%.c $(BUILD)/libgpupool.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libgpupool.a $(LDFLAGS) $(LIBS)

bench-build: $(BENCH_BIN)

bench-core: $(BUILD)/bench/bench-core
	$(BUILD)/bench/bench-core

.PHONY: bench-build bench-core
