/* notice.c - parsing and showing a task's notice ("[B:]SIG@SECS", notice.h).
 *
 * Invariant: every gp_notice this file hands out has a signal a process
 * can catch (1..31, not SIGKILL/SIGSTOP) and 1..GP_NOTICE_MAX_S seconds.
 */
#include "base/notice.h"

#include "base/units.h"
#include "base/util.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static int fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...) {
        if (errlen) {
                va_list ap;
                va_start(ap, fmt);
                vsnprintf(err, errlen, fmt, ap);
                va_end(ap);
        }
        return -EINVAL;
}

static bool catchable(int sig) {
        return sig >= 1 && sig <= 31 && sig != SIGKILL && sig != SIGSTOP;
}

int gp_notice_signal_parse(const char *name, int *ret) {
        if (!name || !*name || strlen(name) > 16)
                return -EINVAL;
        int64_t n;
        if (name[0] >= '0' && name[0] <= '9') {
                if (gp_parse_i64(name, 1, 31, &n) < 0 || !catchable((int)n))
                        return -EINVAL;
                *ret = (int)n;
                return 0;
        }
        const char *bare = strncasecmp(name, "SIG", 3) == 0 ? name + 3 : name;
        for (int s = 1; s <= 31; s++) {
                const char *ab = sigabbrev_np(s);
                if (ab && catchable(s) && strcasecmp(ab, bare) == 0) {
                        *ret = s;
                        return 0;
                }
        }
        return -EINVAL;
}

static int check_seconds(int64_t secs, char *err, size_t errlen) {
        if (secs < 1 || secs > GP_NOTICE_MAX_S)
                return fail(err, errlen, "signal: the notice must be 1..%d seconds, got %lld", GP_NOTICE_MAX_S,
                            (long long)secs);
        return 0;
}

#define SIG_HELP "a signal a task can catch (e.g. SIGUSR1, USR1 or 10; not SIGKILL or SIGSTOP)"

int gp_notice_parse(const char *s, gp_notice *ret, char *err, size_t errlen) {
        if (!s || strlen(s) > 64)
                return fail(err, errlen, "signal: expected [B:]SIG@SECS, e.g. SIGUSR1@120");
        gp_notice n = {0};
        if (strncasecmp(s, "B:", 2) == 0) {
                n.batch_only = true;
                s += 2;
        }
        const char *at = strchr(s, '@');
        if (!at || at == s || !at[1])
                return fail(err, errlen, "signal: expected [B:]SIG@SECS (e.g. SIGUSR1@120), got '%.64s'", s);
        char name[32];
        size_t nl = (size_t)(at - s);
        if (nl >= sizeof(name) || (memcpy(name, s, nl), name[nl] = '\0', gp_notice_signal_parse(name, &n.signo) < 0))
                return fail(err, errlen, "signal: '%.*s' is not %s", (int)(nl > 32 ? 32 : nl), s, SIG_HELP);
        int64_t secs = 0; /* seconds as sbatch's, or a duration as everywhere else (2m) */
        int rc = gp_duration_parse(at + 1, GP_DUR_PLAIN_SECONDS, INT64_MAX, &secs);
        if (rc == -EINVAL)
                return fail(err, errlen, "signal: '%.16s' is not a number of seconds or a duration (120, 2m)", at + 1);
        if (rc < 0 || check_seconds(secs, err, errlen) < 0)
                return rc < 0 ? fail(err, errlen, "signal: the notice must be 1..%d seconds", GP_NOTICE_MAX_S)
                              : -EINVAL;
        n.seconds = (int)secs;
        *ret = n;
        return 0;
}

int gp_notice_from_json(const struct json_t *cv, gp_notice *ret, char *err, size_t errlen) {
        json_t *v = (json_t *)cv;
        if (json_is_string(v)) {
                if (memchr(json_string_value(v), '\0', json_string_length(v)))
                        return fail(err, errlen, "signal: contains NUL");
                return gp_notice_parse(json_string_value(v), ret, err, errlen);
        }
        if (!json_is_object(v))
                return fail(err, errlen,
                            "signal: must be \"[B:]SIG@SECS\" or {\"signal\": \"SIGUSR1\", "
                            "\"seconds\": 120, \"batch_only\": false}");
        const char *k;
        json_t *x;
        json_object_foreach(v, k, x) {
                if (strcmp(k, "signal") && strcmp(k, "seconds") && strcmp(k, "batch_only"))
                        return fail(err, errlen, "signal: unknown field '%.32s'", k);
        }
        gp_notice n = {0};
        json_t *sig = json_object_get(v, "signal"), *secs = json_object_get(v, "seconds"),
               *b = json_object_get(v, "batch_only");
        if (json_is_integer(sig)) {
                json_int_t i = json_integer_value(sig);
                if (!catchable(i < 0 || i > 31 ? 0 : (int)i))
                        return fail(err, errlen, "signal.signal: %lld is not %s", (long long)i, SIG_HELP);
                n.signo = (int)i;
        } else if (!json_is_string(sig) || gp_notice_signal_parse(json_string_value(sig), &n.signo) < 0) {
                return fail(err, errlen, "signal.signal: must be %s", SIG_HELP);
        }
        if (!json_is_integer(secs))
                return fail(err, errlen, "signal.seconds: must be an integer 1..%d", GP_NOTICE_MAX_S);
        if (check_seconds(json_integer_value(secs), err, errlen) < 0)
                return -EINVAL;
        n.seconds = (int)json_integer_value(secs);
        if (b && !json_is_boolean(b))
                return fail(err, errlen, "signal.batch_only: must be true or false");
        n.batch_only = json_is_true(b);
        *ret = n;
        return 0;
}

int gp_notice_format(const gp_notice *n, char *buf, size_t size) {
        if (!n || !catchable(n->signo) || n->seconds < 1 || n->seconds > GP_NOTICE_MAX_S)
                return -EINVAL;
        const char *ab = sigabbrev_np(n->signo);
        int m = ab ? snprintf(buf, size, "%sSIG%s@%d", n->batch_only ? "B:" : "", ab, n->seconds)
                   : snprintf(buf, size, "%s%d@%d", n->batch_only ? "B:" : "", n->signo, n->seconds);
        return m < 0 || (size_t)m >= size ? -EINVAL : 0;
}

bool gp_notice_catches(pid_t pid, int sig) {
        char path[64], buf[4096];
        snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return false;
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n <= 0)
                return false;
        buf[n] = '\0';
        const char *p = strstr(buf, "\nSigCgt:");
        if (!p)
                return false;
        unsigned long long mask = strtoull(p + 8, NULL, 16);
        return sig >= 1 && sig <= 64 && (mask >> (sig - 1)) & 1;
}

int gp_notice_spec_set(struct json_t *o, const gp_notice *n) {
        if (!n || n->signo == 0)
                return 0;
        if (!catchable(n->signo) || n->seconds < 1 || n->seconds > GP_NOTICE_MAX_S)
                return -EINVAL;
        json_t *v = json_pack("{s:i,s:i,s:b}", "signal", n->signo, "seconds", n->seconds, "batch_only", n->batch_only);
        return v && json_object_set_new((json_t *)o, "notice", v) == 0 ? 0 : -ENOMEM;
}

int gp_notice_spec_get(const struct json_t *o, gp_notice *ret) {
        json_t *v = json_object_get((json_t *)o, "notice");
        gp_notice n = {0};
        if (v) {
                json_t *sig = json_object_get(v, "signal"), *secs = json_object_get(v, "seconds");
                if (!json_is_integer(sig) || !json_is_integer(secs) || json_integer_value(sig) > 31 ||
                    !catchable((int)json_integer_value(sig)) || json_integer_value(secs) < 1 ||
                    json_integer_value(secs) > GP_NOTICE_MAX_S)
                        return -EINVAL;
                n.signo = (int)json_integer_value(sig);
                n.seconds = (int)json_integer_value(secs);
                n.batch_only = json_is_true(json_object_get(v, "batch_only"));
        }
        *ret = n;
        return 0;
}

gp_notice gp_notice_of_spec(const struct json_t *spec, int max_s) {
        gp_notice n = {0};
        const char *v = json_string_value(json_object_get((json_t *)spec, "signal"));
        if (!v || max_s <= 0 || gp_notice_parse(v, &n, NULL, 0) < 0)
                return (gp_notice){0};
        if (n.seconds > max_s)
                n.seconds = max_s > GP_NOTICE_MAX_S ? GP_NOTICE_MAX_S : max_s;
        return n;
}

void gp_notice_describe(const char *spec, int max_s, int grace_s, char *buf, size_t size) {
        gp_notice n = {0};
        if (spec && strstr(spec, "\"signal\"")) { /* most specs: no parse */
                json_t *o = json_loads(spec, 0, NULL);
                n = gp_notice_of_spec(o, max_s);
                json_decref(o);
        }
        if (n.signo)
                snprintf(buf, size, "SIG%s sent, SIGTERM after %d s (its notice), SIGKILL %d s later",
                         sigabbrev_np(n.signo), n.seconds, grace_s);
        else
                snprintf(buf, size, "SIGTERM sent, SIGKILL after %d s", grace_s);
}
