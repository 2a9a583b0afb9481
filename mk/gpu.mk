# gpu.mk - build rules of the GPU module's tests: the fake NVML library.
#
# $(BUILD)/fakenvml/libnvidia-ml.so.1 is a stand-in for NVIDIA's NVML that
# tests/unit/test-gpu.c (and black-box tests) hand to gpupool by path; the
# notopo/ variant lacks nvmlDeviceGetTopologyCommonAncestor, the nomig/ one
# every MIG call (an old driver).  gpupool is
# never linked against either: its NVML backend dlopen()s them.  They are
# built without sanitizers (an ASan test binary may dlopen them).

FAKENVML_CFLAGS = -std=gnu11 -O2 -g -Wall -Wextra -Werror -Wshadow -fPIC -fvisibility=hidden \
                  -D_GNU_SOURCE
FAKENVML = $(BUILD)/fakenvml/libnvidia-ml.so.1
FAKENVML_NOTOPO = $(BUILD)/fakenvml/notopo/libnvidia-ml.so.1
FAKENVML_NOMIG = $(BUILD)/fakenvml/nomig/libnvidia-ml.so.1

$(FAKENVML): tests/fakenvml/fake_nvml.c mk/gpu.mk
	@mkdir -p $(dir $@)
	$(CC) $(FAKENVML_CFLAGS) -shared -Wl,-soname,libnvidia-ml.so.1 -o $@ $< -lpthread

$(FAKENVML_NOTOPO): tests/fakenvml/fake_nvml.c mk/gpu.mk
	@mkdir -p $(dir $@)
	$(CC) $(FAKENVML_CFLAGS) -DFAKE_NVML_NO_TOPOLOGY -shared -Wl,-soname,libnvidia-ml.so.1 \
	  -o $@ $< -lpthread

$(FAKENVML_NOMIG): tests/fakenvml/fake_nvml.c mk/gpu.mk
	@mkdir -p $(dir $@)
	$(CC) $(FAKENVML_CFLAGS) -DFAKE_NVML_NO_MIG -shared -Wl,-soname,libnvidia-ml.so.1 \
	  -o $@ $< -lpthread

UNIT_EXTRA += $(FAKENVML) $(FAKENVML_NOTOPO) $(FAKENVML_NOMIG)
BLACKBOX_EXTRA += $(FAKENVML) $(FAKENVML_NOTOPO) $(FAKENVML_NOMIG)
