# web.mk - the web dashboard (web/) built into the binary.
#
# scripts/embed-web.py turns every file under web/ into a byte array of
# $(BUILD)/gen/web-assets.inc, which src/server/web.c includes (with its
# URL path, Content-Type and ETag).  No internet access and no build step
# of the page itself: web/ is plain HTML, CSS and JavaScript.
# Builds without the generated file (e.g. the fuzz build) compile an empty
# table through __has_include, and / then answers 404.

WEB_FILES := $(sort $(shell find web -type f ! -name '.*' 2>/dev/null))
WEB_GEN := $(BUILD)/gen/web-assets.inc

$(WEB_GEN): $(WEB_FILES) scripts/embed-web.py mk/web.mk
	@mkdir -p $(dir $@)
	/usr/bin/python3 scripts/embed-web.py web $@

$(BUILD)/src/server/web.o: $(WEB_GEN)
$(BUILD)/src/server/web.o: CFLAGS += -I$(BUILD)/gen
