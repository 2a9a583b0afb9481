# mk/fuzz.mk - libFuzzer targets (see fuzz/README.md).
#
# Every fuzz/fuzz-<name>.c becomes $(FUZZ_BUILD)/fuzz-<name>, linked against
# all of src/**/*.c except src/main.c, compiled with clang under
# ASan+UBSan+fuzzer coverage into $(FUZZ_BUILD)/obj/.
#
#   make fuzz                          build every target
#   make fuzz-replay                   run each target once over each file of
#                                      fuzz/corpus/<name>/; fails on any crash,
#                                      leak, UB report or timeout (part of
#                                      `make check` through CHECK_EXTRA)
#   make fuzz-run FUZZ_SECONDS=60      fuzz each target that long; new inputs go
#                                      to a temp dir, crashes to
#                                      $(FUZZ_BUILD)/artifacts/<name>/
#   make fuzz-run FUZZ_TARGETS=config  only some targets (also for fuzz-replay)
#   make fuzz-run FUZZ_SECONDS=10 FUZZ_KEEP_NEW=0
#                                      what CI runs (scripts/test-all.sh): the
#                                      new inputs are deleted after a clean
#                                      run; a failing run prints the input
#                                      that failed (base64 and a dump)

FUZZ_BUILD ?= build-fuzz
FUZZ_CC ?= clang
FUZZ_SECONDS ?= 60
FUZZ_KEEP_NEW ?= 1
FUZZ_SAN := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
# The project's flags, minus the ones that belong to the gcc build: its
# optimisation and sanitizer choice, and -Werror (clang 14 warns about other
# things than gcc 12; a clang-only warning in someone's file must not break
# `make check` - the gcc build is where -Werror is enforced).
FUZZ_CFLAGS := $(filter-out -Werror -O0 -O1 -O2 -O3 -fsanitize=% -fno-sanitize-recover=% \
                 -fno-omit-frame-pointer,$(CFLAGS)) \
               -O1 -Wno-unknown-warning-option $(FUZZ_SAN)

FUZZ_SRC := $(sort $(wildcard fuzz/fuzz-*.c))
FUZZ_NAMES := $(FUZZ_SRC:fuzz/fuzz-%.c=%)
FUZZ_TARGETS ?= $(FUZZ_NAMES)
FUZZ_BIN := $(FUZZ_NAMES:%=$(FUZZ_BUILD)/fuzz-%)
FUZZ_OBJ := $(SRC:%.c=$(FUZZ_BUILD)/obj/%.o)
FUZZ_LIB := $(FUZZ_BUILD)/libgpupool-fuzz.a

# Each input runs once; a hang, a leak or an RSS blow-up is a failure too.
FUZZ_REPLAY_OPTS ?= -timeout=10 -rss_limit_mb=2048
FUZZ_RUN_OPTS ?= -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1
FUZZ_ENV := ASAN_OPTIONS=abort_on_error=1:detect_leaks=1:allocator_may_return_null=1 \
            UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

CHECK_EXTRA += fuzz-replay

$(FUZZ_BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_LIB): $(FUZZ_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(FUZZ_BUILD)/fuzz-%: fuzz/fuzz-%.c $(FUZZ_LIB)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_LIB) $(LIBS)

fuzz: $(FUZZ_BIN)

# libFuzzer runs inputs given as files once each (directories would be fuzzed).
fuzz-replay: $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/fuzz-%)
	@set -e; for n in $(FUZZ_TARGETS); do \
	  files=$$(find fuzz/corpus/$$n -type f ! -name '.*' 2>/dev/null | sort); \
	  if [ -z "$$files" ]; then echo "== fuzz-$$n: no corpus in fuzz/corpus/$$n/ (skipped)"; continue; fi; \
	  echo "== fuzz-$$n: replaying $$(echo "$$files" | wc -l) inputs"; \
	  log=$(FUZZ_BUILD)/replay-$$n.log; \
	  if ! $(FUZZ_ENV) $(FUZZ_BUILD)/fuzz-$$n $(FUZZ_REPLAY_OPTS) $$files >$$log 2>&1; then \
	    tail -n 60 $$log; echo "fuzz-$$n: FAILED on its corpus (full log: $$log)"; exit 1; \
	  fi; \
	done

# A failure prints every input the run left in artifacts/ (crash-, leak-,
# timeout-, oom-...): base64 (to reproduce anywhere: base64 -d > f) and the
# first bytes as text.
fuzz-run: $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/fuzz-%)
	@set -e; for n in $(FUZZ_TARGETS); do \
	  out=$$(mktemp -d /tmp/gpupool-fuzz-$$n.XXXXXX); \
	  mkdir -p $(FUZZ_BUILD)/artifacts/$$n fuzz/corpus/$$n; \
	  stamp=$(FUZZ_BUILD)/artifacts/$$n/.started; touch $$stamp; \
	  dict=""; [ -f fuzz/fuzz-$$n.dict ] && dict="-dict=fuzz/fuzz-$$n.dict"; \
	  echo "== fuzz-$$n for $(FUZZ_SECONDS)s; new inputs in $$out"; \
	  $(FUZZ_ENV) $(FUZZ_BUILD)/fuzz-$$n $(FUZZ_RUN_OPTS) $$dict -max_total_time=$(FUZZ_SECONDS) \
	    -artifact_prefix=$(FUZZ_BUILD)/artifacts/$$n/ $$out fuzz/corpus/$$n >$$out.log 2>&1 || { \
	    tail -n 80 $$out.log; \
	    for f in $$(find $(FUZZ_BUILD)/artifacts/$$n -type f -newer $$stamp ! -name '.*'); do \
	      echo "---- input $$f ($$(wc -c <$$f) bytes), base64:"; base64 $$f; \
	      echo "---- its first 512 bytes:"; head -c 512 $$f | od -A d -c | head -n 40; \
	    done; \
	    echo "fuzz-$$n failed (log: $$out.log); the input is in $(FUZZ_BUILD)/artifacts/$$n/ - fix the bug, then add the input to fuzz/corpus/$$n/"; \
	    exit 1; }; \
	  grep -E '^(stat::number_of_executed_units|Done )' $$out.log || true; \
	  if [ "$(FUZZ_KEEP_NEW)" = 1 ]; then \
	    echo "fuzz-$$n: $$(ls $$out | wc -l) new inputs in $$out (merge the interesting ones: see fuzz/README.md)"; \
	  else rm -rf $$out $$out.log; fi; \
	done

.PHONY: fuzz fuzz-replay fuzz-run

-include $(FUZZ_OBJ:.o=.d)
