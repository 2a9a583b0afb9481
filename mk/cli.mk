# mk/cli.mk - rules of the command-line client (src/cli/).
# $(BUILD)/tests/gpupool-cli: a stand-alone client binary (tests/unit/cli-main.c)
# for trying the client before src/main.c dispatches to gp_cli_main.
$(BUILD)/tests/gpupool-cli: tests/unit/cli-main.c $(BUILD)/libgpupool.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libgpupool.a $(LDFLAGS) $(LIBS)

UNIT_EXTRA += $(BUILD)/tests/gpupool-cli
