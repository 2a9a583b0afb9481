/* log.c - one line per call to stderr, written with a single write(2). */
#include "base/log.h"
#include "base/util.h"

#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

static int log_level = GP_LOG_INFO;

void gp_log_set_level(int level) {
        log_level = level;
}

void gp_log(int level, const char *fmt, ...) {
        static const char *names[] = {"error", "warn", "info", "debug"};
        if (level > log_level)
                return;
        char line[2048];
        char ts[40];
        gp_time_format(gp_now_ms(), ts, sizeof(ts));
        int n = snprintf(line, sizeof(line), "%s %s ", ts, names[level]);
        va_list ap;
        va_start(ap, fmt);
        int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
        va_end(ap);
        size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
        if (len > sizeof(line) - 2)
                len = sizeof(line) - 2;
        line[len++] = '\n';
        ssize_t w = write(STDERR_FILENO, line, len);
        (void)w;
}
