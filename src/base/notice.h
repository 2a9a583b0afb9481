/* notice.h - a task's notice before it is stopped: "[B:]SIG@SECS".
 *
 * A batch task may ask (as sbatch's --signal) to be sent a signal some
 * seconds before it is stopped for a preemption, a cancel or the GPU memory
 * watchdog: its supervisor sends the signal, waits up to SECS (clamped by
 * the server's scheduler.preemption.max_notice_s) for the command to exit,
 * and only then escalates to SIGTERM and SIGKILL as before (exec.h).
 * "B:" sends it to the command's own process only (the batch shell of a
 * script), not to its whole process group.
 *
 * Pure parsing and formatting, plus one /proc reader for the supervisor;
 * no state, any thread.
 */
#ifndef GP_BASE_NOTICE_H
#define GP_BASE_NOTICE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct json_t;

#define GP_NOTICE_MAX_S 86400        /* most seconds a task may ask for (a day) */
#define GP_NOTICE_TEXT_MAX 32        /* "B:SIGWINCH@86400" and its NUL fit */

typedef struct gp_notice {
        int signo;                   /* 0 = no notice; else a catchable signal 1..31 (not KILL/STOP) */
        int seconds;                 /* 1..GP_NOTICE_MAX_S when signo */
        bool batch_only;             /* "B:": the command's own process, not its process group */
} gp_notice;

/* A signal by name ("USR1", "SIGUSR1", case-insensitive) or number
 * ("10"): one a task can catch (1..31, not SIGKILL or SIGSTOP).
 * 0 or -EINVAL. */
int gp_notice_signal_parse(const char *name, int *ret);

/* Parse "[B:]SIG@SECS" (s NUL-terminated, at most 64 bytes).  0, or
 * -EINVAL with a message in err naming what is wrong; *ret written only
 * on success. */
int gp_notice_parse(const char *s, gp_notice *ret, char *err, size_t errlen);

/* The API's "signal": a string as gp_notice_parse, or an object
 * {"signal": "SIGUSR1" | 10, "seconds": 120, "batch_only": false}.
 * 0 or -EINVAL with a message in err. */
int gp_notice_from_json(const struct json_t *v, gp_notice *ret, char *err, size_t errlen);

/* The canonical text of n ("B:SIGUSR1@120"), what is stored and shown.
 * 0, or -EINVAL (no notice, or size too small). */
int gp_notice_format(const gp_notice *n, char *buf, size_t size);

/* spec.json's "notice" (exec.h): set {"signal", "seconds", "batch_only"}
 * in object o, nothing when n has no signal.  0, -EINVAL (a bad notice),
 * -ENOMEM. */
int gp_notice_spec_set(struct json_t *o, const gp_notice *n);
/* Read it back: no "notice" = none.  0, or -EINVAL (wrong type or range);
 * *ret written only on success. */
int gp_notice_spec_get(const struct json_t *o, gp_notice *ret);

/* The notice a run of a task gets: the "signal" of its stored spec (a
 * JSON object, gp_submit's), its seconds clamped to max_s (the server's
 * scheduler.preemption.max_notice_s); none (signo 0) without one, with
 * max_s <= 0, or with a value that does not parse.  Never fails. */
gp_notice gp_notice_of_spec(const struct json_t *spec, int max_s);

/* How a run of a task with that stored spec (JSON text, NULL = a lease)
 * is stopped, for its reason: "SIGTERM sent, SIGKILL after 10 s", or with a
 * notice "SIGUSR1 sent, SIGTERM after 120 s (its notice), SIGKILL 10 s
 * later" (seconds clamped to max_s as gp_notice_of_spec).  Always writes a
 * NUL-terminated string (cut to size). */
void gp_notice_describe(const char *spec, int max_s, int grace_s, char *buf, size_t size);

/* Does process pid catch signal sig (a handler installed: SigCgt in
 * /proc/PID/status)?  false when it cannot be read. */
bool gp_notice_catches(pid_t pid, int sig);

#endif
