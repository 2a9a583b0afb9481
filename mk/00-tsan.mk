# mk/00-tsan.mk - the ThreadSanitizer build: `make TSAN=1 ...`.
#
#   make TSAN=1 all unit blackbox      gcc -fsanitize=thread -O1 into build-tsan/
#   make TSAN=1 BUILD=/tmp/b-tsan all  the same in a build dir of your own
#
# It is the Makefile's SAN=1 switch for TSan (ThreadSanitizer cannot be
# combined with ASan, hence a build of its own).  The Makefile computes OBJ
# and UNIT_BIN from BUILD before it includes mk/*.mk, and the other mk files
# name their targets under $(BUILD) as they are read; so this file is named
# to be included first (make sorts the glob), moves the default BUILD to
# build-tsan/ and computes OBJ and UNIT_BIN again.  CFLAGS and LDFLAGS take
# $(OPT) and $(SANFLAGS) when they are used, so setting those here is enough.
#
# scripts/test-all.sh runs the black-box tests against this build with
# TSAN_OPTIONS=log_path=...; tests/blackbox/conftest.py fails a test during
# which any process wrote a report there (GPUPOOL_SAN_LOG_DIR).

TSAN ?= 0
ifeq ($(TSAN),1)
ifeq ($(SAN),1)
$(error TSAN=1 and SAN=1 exclude each other (ThreadSanitizer cannot run with ASan))
endif
ifeq ($(origin BUILD),file)
BUILD := build-tsan
endif
SANFLAGS = -fsanitize=thread -fno-omit-frame-pointer
OPT = -O1
OBJ := $(SRC:%.c=$(BUILD)/%.o)
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
endif

clean-tsan:
	rm -rf build-tsan

clean: clean-tsan

.PHONY: clean-tsan
