# upstream.mk - the test upstream of the inference gateway, and the example client.
#
# $(BUILD)/tests/fake-openai is an OpenAI-compatible model server (one
# epoll thread; usage at the top of tests/upstream/fake-openai.c) that the
# gateway's black-box and npm tests, and bench/bench-gateway.sh, start as
# the gateway's upstream.  It is not linked with libgpupool and is built
# without sanitizers (it is the world outside the daemon, and the benchmark
# measures through it).

FAKE_OPENAI_CFLAGS = -std=gnu11 -O2 -g -Wall -Wextra -Werror -Wshadow -D_GNU_SOURCE
FAKE_OPENAI = $(BUILD)/tests/fake-openai

$(FAKE_OPENAI): tests/upstream/fake-openai.c mk/upstream.mk
	@mkdir -p $(dir $@)
	$(CC) $(FAKE_OPENAI_CFLAGS) -o $@ $< -ljansson

fake-openai: $(FAKE_OPENAI)

# the upstream's own check (needs python3-pytest, python3-requests)
upstream-check: $(FAKE_OPENAI)
	FAKE_OPENAI_BIN=$(abspath $(FAKE_OPENAI)) DEEPSEEK_CLIENT_BIN=$(abspath $(DEEPSEEK_CLIENT)) /usr/bin/python3 -m pytest -q tests/upstream

BLACKBOX_EXTRA += $(FAKE_OPENAI)
CHECK_EXTRA += upstream-check

.PHONY: fake-openai upstream-check

# examples/deepseek-7b/client.c, the walk-through's C client, built with
# -Werror so it keeps compiling; test_fake_openai.py runs it against
# fake-openai (the walk-through's no-GPU path).
DEEPSEEK_CLIENT = $(BUILD)/examples/deepseek-client

$(DEEPSEEK_CLIENT): examples/deepseek-7b/client.c mk/upstream.mk
	@mkdir -p $(dir $@)
	$(CC) $(FAKE_OPENAI_CFLAGS) -o $@ $< -lcurl -ljansson

upstream-check: $(DEEPSEEK_CLIENT)
BLACKBOX_EXTRA += $(DEEPSEEK_CLIENT)

# The gateway's npm tests (tests/gateway: the official openai client against
# the daemon and fake-openai).  Not in `make check`: npm ci needs the
# registry; scripts/test-all.sh runs tests/gateway/run.sh as its own stage.
gateway-npm-check: $(BUILD)/gpupool $(FAKE_OPENAI)
	GPUPOOL_BIN=$(abspath $(BUILD)/gpupool) FAKE_OPENAI_BIN=$(abspath $(FAKE_OPENAI)) tests/gateway/run.sh

.PHONY: gateway-npm-check
