# mk/lint.mk - static checks: `make lint` runs cppcheck over src/.
#
#   make lint                   cppcheck (Debian 12's 2.10), fails on any finding
#   make lint LINT_JOBS=4       more parallel jobs (default 2)
#
# scripts/test-all.sh runs it as its quick first stage; scripts/install-deps.sh
# installs cppcheck with the test packages.  It reads src/ with the build's
# defines and include path (not the system headers: mk/cppcheck.cfg tells it
# the few library macros it must know), and needs no build.
#
# Checks: every error, plus warning, style, performance, portability, except
#   variableScope   "the scope of 'x' can be reduced": the house style often
#                   declares at the top of a function, beside the goto labels
#                   that clean up;
#   constParameter  "'p' can be pointer to const": left to the author (out
#                   parameters, callback signatures fixed by a typedef).
# A true false positive is silenced where it is, with the reason:
#   // cppcheck-suppress <id> ; <why>
# on the line before.  See HACKING.md.

CPPCHECK ?= cppcheck
LINT_JOBS ?= 2
CPPCHECK_FLAGS = -q -j$(LINT_JOBS) --std=c11 --language=c --platform=unix64 \
        -D_GNU_SOURCE -D__GNUC__ -Isrc -I/usr/include/postgresql \
        --library=posix --library=gnu --library=mk/cppcheck.cfg \
        --enable=warning,style,performance,portability \
        --suppress=variableScope --suppress=constParameter --suppress=usleepCalled \
        --inline-suppr --error-exitcode=1 \
        --template='{file}:{line}: {severity} ({id}): {message}'

lint:
	@command -v $(CPPCHECK) >/dev/null || { echo "cppcheck is not installed (scripts/install-deps.sh test)" >&2; exit 1; }
	$(CPPCHECK) $(CPPCHECK_FLAGS) src

.PHONY: lint
