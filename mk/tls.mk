# mk/tls.mk - the server links GnuTLS (src/base/tls.c, the listeners' TLS).
# build/gpupool (the CLI) links with --as-needed and pulls no TLS object, so
# it keeps libc+jansson only (check: ldd build/gpupool).
LIBS += -lgnutls
